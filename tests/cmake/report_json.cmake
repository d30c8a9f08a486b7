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

# Fails unless the decimal numbers `a` and `b` agree within `parts_per_million` relative to `b`
# (at the 1e-9 resolution of to_nano, rounded up); `what` names the comparison.
function(expect_close what a b parts_per_million)
  to_nano(na ${a})
  to_nano(nb ${b})
  math(EXPR diff "${na} - ${nb}")
  if(diff LESS 0)
    math(EXPR diff "-${diff}")
  endif()
  math(EXPR bound "${nb} * ${parts_per_million} / 1000000 + 1")
  if(diff GREATER bound)
    message(FATAL_ERROR "${what}: ${a} and ${b}; expected equal within ${parts_per_million} ppm")
  endif()
  message(STATUS "${what}: ${a} and ${b}")
endfunction()

# Writes a ratings CSV (userId,movieId,rating) of `rows` rows: 60 users, 45 items, every
# (user, item) pair at most once while rows <= 2700.
function(write_ratings_csv path rows)
  set(text "userId,movieId,rating\n")
  math(EXPR last "${rows} - 1")
  foreach(i RANGE ${last})
    math(EXPR u "${i} % 60 + 1")
    math(EXPR v "(${i} / 60 + ${i} * 7) % 45 + 1")
    math(EXPR y "(${i} * 13 + ${i} / 7) % 5 + 1")
    string(APPEND text "${u},${v},${y}\n")
  endforeach()
  file(WRITE ${path} "${text}")
endfunction()

# Seals `csv` into `shards` shards under `dir` with a new master key `dir`/m.key and exports
# each shard's key alone to `dir`/keys/shard-I.key.
function(seal_with_shard_keys tutti csv shards dir)
  file(REMOVE_RECURSE ${dir})
  file(MAKE_DIRECTORY ${dir}/keys)
  execute_process(COMMAND ${tutti} seal --gen-key ${dir}/m.key RESULT_VARIABLE rc OUTPUT_QUIET)
  execute_process(COMMAND ${tutti} seal --data ${csv} --shards ${shards} --key-file ${dir}/m.key
                          --out ${dir}/sealed RESULT_VARIABLE rc2 OUTPUT_QUIET)
  if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0)
    message(FATAL_ERROR "tutti seal failed: ${rc} ${rc2}")
  endif()
  math(EXPR last "${shards} - 1")
  foreach(s RANGE ${last})
    execute_process(COMMAND ${tutti} seal --key-file ${dir}/m.key --export-shard-key ${s}
                            --out ${dir}/keys/shard-${s}.key RESULT_VARIABLE rc OUTPUT_QUIET
                            ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "tutti seal --export-shard-key ${s} failed: ${rc} ${err}")
    endif()
  endforeach()
endfunction()
