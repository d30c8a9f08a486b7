# SPDX-License-Identifier: Apache-2.0
# Reading `tutti train --json` reports in cmake -P test drivers (tests/cli, tests/mpi).

# A non-negative decimal JSON number as an integer count of 1e-9 units (CMake has no floats).
function(to_nano out value)
  if(NOT value MATCHES "^([0-9]+)(\\.([0-9]*))?$")
    message(FATAL_ERROR "expected a plain non-negative decimal, got '${value}'")
  endif()
  set(frac "${CMAKE_MATCH_3}000000000")
  string(SUBSTRING "${frac}" 0 9 frac)
  math(EXPR n "${CMAKE_MATCH_1} * 1000000000 + 1${frac} - 1000000000")
  set(${out} ${n} PARENT_SCOPE)
endfunction()

# The last epoch's train loss of a report.
function(final_loss out json)
  string(JSON n LENGTH "${json}" epochs)
  math(EXPR last "${n} - 1")
  string(JSON v GET "${json}" epochs ${last} train_loss)
  set(${out} ${v} PARENT_SCOPE)
endfunction()
