# SPDX-License-Identifier: Apache-2.0
# Consumer projects (labels consumer and build_check: scripts/build-check.sh runs them),
# included from tests/CMakeLists.txt after mpi.cmake:
#   consumer.fetchcontent        examples/consumer-fetchcontent: tutti as a subproject, with every
#                                component target this build found linked from the consumer
#   consumer.find_package        examples/consumer-find-package against an installed tutti
#   consumer.component.<c>       examples/consumer-components with find_package(tutti COMPONENTS
#                                <c>), for mpi, nccl, cuda, sodium and blas: built and run where
#                                this build found the component (mpi under mpiexec; nccl and
#                                cuda run only with a GPU), reported skipped where it did not
# Each configures, builds and runs in a scratch folder of this build tree, with this build's
# generator, compiler and Thrust. They use every core, so they run alone.
cmake_host_system_information(RESULT tutti_consumer_jobs QUERY NUMBER_OF_LOGICAL_CORES)
set(tutti_consumer_args
  -DTUTTI_SOURCE_DIR=${PROJECT_SOURCE_DIR}
  -DGENERATOR=${CMAKE_GENERATOR}
  -DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}
  -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
  -DCCCL_INCLUDE_DIR=${TUTTI_CCCL_INCLUDE_DIR}
  -DBUILD_TYPE=$<CONFIG>
  -DJOBS=${tutti_consumer_jobs})
set(tutti_consumer_script ${CMAKE_CURRENT_LIST_DIR}/cmake/run_consumer.cmake)
set(tutti_consumer_skip "tutti consumer skipped")

set(tutti_found_components)
foreach(component IN LISTS TUTTI_PACKAGE_COMPONENTS)
  if(TARGET tutti::${component})
    list(APPEND tutti_found_components tutti::${component})
  endif()
endforeach()
string(JOIN "|" tutti_expected_targets ${tutti_found_components})

add_test(NAME consumer.fetchcontent
         COMMAND ${CMAKE_COMMAND} -DMODE=fetchcontent ${tutti_consumer_args}
                 -DEXPECT_TARGETS=${tutti_expected_targets}
                 -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers/fetchcontent
                 -P ${tutti_consumer_script})
add_test(NAME consumer.find_package
         COMMAND ${CMAKE_COMMAND} -DMODE=find_package ${tutti_consumer_args}
                 -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers/find_package
                 -P ${tutti_consumer_script})
set(tutti_consumer_tests consumer.fetchcontent consumer.find_package)

foreach(component IN LISTS TUTTI_PACKAGE_COMPONENTS)
  set(name consumer.component.${component})
  if(NOT TARGET tutti::${component})
    # Counted as skipped, never as passed, and never silently absent.
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E echo
             "${tutti_consumer_skip}: this build did not find what tutti::${component} needs")
  else()
    set(launcher)
    if(component STREQUAL "mpi")
      set(launcher -DLAUNCHER=${tutti_mpiexec_joined})
    endif()
    add_test(NAME ${name}
             COMMAND ${CMAKE_COMMAND} -DMODE=component -DCOMPONENT=${component}
                     ${tutti_consumer_args} ${launcher}
                     -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers/component-${component}
                     -P ${tutti_consumer_script})
    if(component STREQUAL "mpi")
      set_tests_properties(${name} PROPERTIES ENVIRONMENT "${tutti_mpi_environment}")
    endif()
  endif()
  list(APPEND tutti_consumer_tests ${name})
endforeach()
set_tests_properties(${tutti_consumer_tests} PROPERTIES
  TIMEOUT 300 RUN_SERIAL TRUE LABELS "consumer;build_check"
  SKIP_REGULAR_EXPRESSION "${tutti_consumer_skip}")
