# SPDX-License-Identifier: Apache-2.0
# Builds and runs one of the consumer projects in examples/, the way a user of tutti would.
#
#   cmake -DMODE=fetchcontent|find_package|component -DTUTTI_SOURCE_DIR=<checkout>
#         -DWORK_DIR=<scratch> [-DCOMPONENT=<c>] [-DLAUNCHER=<words joined by |>]
#         [-DEXPECT_TARGETS=<targets joined by |>] [-DGENERATOR=<g>] [-DMAKE_PROGRAM=<p>]
#         [-DCXX_COMPILER=<c>] [-DBUILD_TYPE=<t>] [-DCCCL_INCLUDE_DIR=<d>] [-DJOBS=<n>]
#         -P run_consumer.cmake
#
# fetchcontent: configures examples/consumer-fetchcontent against the checkout, checks that none
#   of tutti's own tests, examples or benchmarks were configured, builds and runs it.
# find_package: configures tutti alone (tests, examples, benchmarks OFF), installs it into a
#   scratch prefix, then configures examples/consumer-find-package against that prefix only,
#   builds and runs it.
# component: installs tutti the same way, then configures examples/consumer-components with
#   -DCOMPONENT=<c> (find_package(tutti COMPONENTS <c>), linking tutti::<c>), builds it and runs
#   it, through LAUNCHER when given (mpiexec for mpi). A program that exits 77 was built but could
#   not run here (no GPU): the script then prints "tutti consumer skipped".
# fetchcontent also checks that each of EXPECT_TARGETS (the components the parent build found)
#   exists in the consumer.
# Every step prints what it runs; the first failure stops with the step's name.
cmake_minimum_required(VERSION 3.25)

foreach(required IN ITEMS MODE TUTTI_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${required} OR "${${required}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${required}=... is required")
  endif()
endforeach()
if(NOT BUILD_TYPE)
  set(BUILD_TYPE Release)
endif()
if(NOT JOBS)
  set(JOBS 2)
endif()

# Options every configure step shares, so the scratch builds use the parent build's toolchain.
set(common_args -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
if(GENERATOR)
  list(APPEND common_args -G ${GENERATOR})
endif()
if(MAKE_PROGRAM)
  list(APPEND common_args -DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM})
endif()
if(CXX_COMPILER)
  list(APPEND common_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(CCCL_INCLUDE_DIR)
  list(APPEND common_args -DTUTTI_CCCL_INCLUDE_DIR=${CCCL_INCLUDE_DIR})
endif()

function(step name)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "[${MODE}] ${name}: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${MODE}] step '${name}' failed (exit status ${rc})")
  endif()
endfunction()

# Reads VAR from a CMakeCache.txt into out (empty when absent).
function(cache_value cache var out)
  file(STRINGS "${cache}" line REGEX "^${var}:[A-Z]+=")
  string(REGEX REPLACE "^${var}:[A-Z]+=" "" value "${line}")
  set(${out} "${value}" PARENT_SCOPE)
endfunction()

# Configures tutti alone (tests, examples, benchmarks OFF) and installs it into prefix.
function(install_tutti prefix)
  set(tutti_build "${WORK_DIR}/tutti-build")
  step("configure tutti" ${CMAKE_COMMAND} -S ${TUTTI_SOURCE_DIR} -B ${tutti_build} ${common_args}
       -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=OFF -DTUTTI_BUILD_BENCHMARKS=OFF
       -DCMAKE_INSTALL_PREFIX=${prefix} -DCMAKE_INSTALL_MESSAGE=NEVER)
  step("install tutti" ${CMAKE_COMMAND} --install ${tutti_build} --config ${BUILD_TYPE})
endfunction()

if(MODE STREQUAL "component" AND NOT COMPONENT)
  message(FATAL_ERROR "run_consumer.cmake: MODE component needs -DCOMPONENT=...")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer_build "${WORK_DIR}/consumer-build")

if(MODE STREQUAL "fetchcontent")
  step("configure consumer" ${CMAKE_COMMAND} -S ${TUTTI_SOURCE_DIR}/examples/consumer-fetchcontent
       -B ${consumer_build} ${common_args} -DTUTTI_SOURCE_DIR=${TUTTI_SOURCE_DIR})

  # A subproject must not drag in tutti's tests, examples or benchmarks.
  foreach(option IN ITEMS TUTTI_BUILD_TESTS TUTTI_BUILD_EXAMPLES TUTTI_BUILD_BENCHMARKS)
    cache_value("${consumer_build}/CMakeCache.txt" ${option} value)
    if(value)
      message(FATAL_ERROR "[${MODE}] ${option} is '${value}' in the consumer; expected OFF "
                          "because tutti is not the top-level project there")
    endif()
  endforeach()
  foreach(dir IN ITEMS tests examples benchmarks)
    if(EXISTS "${consumer_build}/_deps/tutti-build/${dir}")
      message(FATAL_ERROR "[${MODE}] tutti's ${dir}/ was configured inside the consumer "
                          "(${consumer_build}/_deps/tutti-build/${dir}); expected none")
    endif()
  endforeach()
  message(STATUS "[${MODE}] tutti's tests, examples and benchmarks are off in the consumer")
  # The package's component targets the parent build found must reach the consumer too.
  string(REPLACE "|" ";" expected_targets "${EXPECT_TARGETS}")
  file(STRINGS "${consumer_build}/tutti-targets-seen.txt" seen_targets)
  foreach(target IN LISTS expected_targets)
    if(NOT target IN_LIST seen_targets)
      message(FATAL_ERROR "[${MODE}] ${target} is not defined in the consumer; expected it, as "
                          "in the build that runs this test")
    endif()
  endforeach()
  message(STATUS "[${MODE}] component targets in the consumer: ${expected_targets}")

elseif(MODE STREQUAL "find_package" OR MODE STREQUAL "component")
  set(prefix "${WORK_DIR}/prefix")
  install_tutti("${prefix}")
  if(MODE STREQUAL "component")
    set(consumer_source ${TUTTI_SOURCE_DIR}/examples/consumer-components)
    set(consumer_args -DCOMPONENT=${COMPONENT})
  else()
    set(consumer_source ${TUTTI_SOURCE_DIR}/examples/consumer-find-package)
    set(consumer_args)
  endif()
  # Only the scratch prefix may satisfy find_package: no package registry, no checkout.
  step("configure consumer" ${CMAKE_COMMAND} -S ${consumer_source} -B ${consumer_build}
       ${common_args} ${consumer_args} -DCMAKE_PREFIX_PATH=${prefix}
       -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
  cache_value("${consumer_build}/CMakeCache.txt" tutti_DIR found_dir)
  file(REAL_PATH "${prefix}" real_prefix)
  file(REAL_PATH "${found_dir}" real_found_dir)
  string(FIND "${real_found_dir}" "${real_prefix}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "[${MODE}] find_package found tutti at '${found_dir}'; expected the "
                        "scratch install prefix '${prefix}'")
  endif()
  message(STATUS "[${MODE}] tutti found at ${found_dir}")

  if(MODE STREQUAL "find_package")
    # A component the package does not have fails the call, naming it and the ones it has.
    set(bad "${WORK_DIR}/unknown-component")
    file(WRITE "${bad}/CMakeLists.txt"
         "cmake_minimum_required(VERSION 3.25)\nproject(bad LANGUAGES CXX)\n"
         "find_package(tutti CONFIG REQUIRED COMPONENTS mpi gpus)\n")
    execute_process(COMMAND ${CMAKE_COMMAND} -S ${bad} -B ${bad}/build ${common_args}
                    -DCMAKE_PREFIX_PATH=${prefix} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                    ERROR_VARIABLE out)
    string(REGEX REPLACE "[ \n]+" " " out "${out}")
    if(rc EQUAL 0 OR NOT out MATCHES "tutti has no component 'gpus'; its components are mpi, nccl, cuda, sodium, blas")
      message(FATAL_ERROR "[${MODE}] find_package(tutti COMPONENTS gpus): expected a failure "
                          "naming the unknown component; got exit status ${rc}:\n${out}")
    endif()
    message(STATUS "[${MODE}] an unknown component is refused by name")
  endif()

else()
  message(FATAL_ERROR "run_consumer.cmake: MODE is '${MODE}'; expected fetchcontent, "
                      "find_package or component")
endif()

step("build consumer" ${CMAKE_COMMAND} --build ${consumer_build} --config ${BUILD_TYPE}
     --parallel ${JOBS})

# Multi-config generators put the executable in a folder named after the configuration.
set(consumer_exe "${consumer_build}/consumer")
if(NOT EXISTS "${consumer_exe}")
  set(consumer_exe "${consumer_build}/${BUILD_TYPE}/consumer")
endif()
if(NOT EXISTS "${consumer_exe}")
  message(FATAL_ERROR "[${MODE}] the consumer executable was not found under ${consumer_build}")
endif()
string(REPLACE "|" ";" launcher "${LAUNCHER}")
string(REPLACE ";" " " shown_launcher "${launcher}")
message(STATUS "[${MODE}] run consumer: ${shown_launcher} ${consumer_exe}")
execute_process(COMMAND ${launcher} ${consumer_exe} RESULT_VARIABLE rc)
if(rc EQUAL 77)
  message(STATUS "[${MODE}] consumer built; tutti consumer skipped: it cannot run on this machine")
  return()
elseif(NOT rc EQUAL 0)
  message(FATAL_ERROR "[${MODE}] step 'run consumer' failed (exit status ${rc})")
endif()
message(STATUS "[${MODE}] consumer built and ran successfully")
