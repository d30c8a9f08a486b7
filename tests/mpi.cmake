# SPDX-License-Identifier: Apache-2.0
# The MPI tests (label mpi), included from tests/CMakeLists.txt; added only where MPI for C++
# and an mpiexec are found:
#   mpi.reducer      tests/mpi/mpi_reducer_test.cpp on 2 processes (mpi.reducer_4: on 4, with
#                    the shared arena over 2 emulated hosts): every collective, the
#                    agreement checks, TUTTI_MPI_CHECK, a trainer on 2 processes vs 2 threads
#   mpi.cli_parity   `mpiexec -n 2 tutti train --reducer mpi` and `tutti train --ranks 2` agree on
#                    the final train loss within 1e-5 relative; usage errors under mpiexec
#   mpi.abort        an error on one process ends every process, with a line naming its rank
#   mpi.stall        a rank that never arrives ends every process within the timeout, named
#   mpi.*_shared     the same two with the gradients in mpi_allreduce's shared arena
# Each runs 2 processes on what may be 2 shared cores, so they run alone (RUN_SERIAL).
# tutti::mpi comes from cmake/tutti-mpi.cmake; mpiexec from CMake's FindMPI, which it ran.
if(NOT TARGET tutti::mpi OR NOT MPIEXEC_EXECUTABLE)
  message(STATUS "tutti: MPI tests off (MPI for C++ or mpiexec not found)")
  # Counted as skipped, never as passed, and never silently absent.
  add_test(NAME mpi.not_built
           COMMAND ${CMAKE_COMMAND} -E echo "${tutti_test_skip_line}MPI for C++ or mpiexec not found")
  set_tests_properties(mpi.not_built PROPERTIES SKIP_REGULAR_EXPRESSION "${tutti_test_skip_line}")
  return()
endif()

set(tutti_mpiexec ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${MPIEXEC_PREFLAGS})
# One OpenMP thread per process, idle threads sleeping: the 2 processes share the cores.
set(tutti_mpi_environment OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive)
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE tutti_mpiexec_version
                ERROR_VARIABLE tutti_mpiexec_version TIMEOUT 30)
if(tutti_mpiexec_version MATCHES "Open MPI|OpenRTE")
  # CI runs as root, which Open MPI refuses without the flag, on machines that may have fewer
  # cores than processes. Inside containers the shared-memory transport's single-copy mode
  # (cross-memory attach, needs ptrace rights) can be forbidden; copying through the shared
  # segment always works. Ranks waiting in a collective yield the core instead of spinning.
  list(APPEND tutti_mpiexec --allow-run-as-root --oversubscribe)
  list(APPEND tutti_mpi_environment OMPI_MCA_btl_vader_single_copy_mechanism=none
       OMPI_MCA_mpi_yield_when_idle=1)
endif()

foreach(name mpi_reducer_test mpi_abort_test mpi_stall_test)
  add_executable(tutti_${name} ${CMAKE_CURRENT_LIST_DIR}/mpi/${name}.cpp)
  target_link_libraries(tutti_${name} PRIVATE tutti::tutti tutti::mpi)
  target_compile_options(tutti_${name} PRIVATE -Wall -Wextra -Wpedantic)
endforeach()

add_test(NAME mpi.reducer
         COMMAND ${tutti_mpiexec} $<TARGET_FILE:tutti_mpi_reducer_test> ${MPIEXEC_POSTFLAGS})
set_tests_properties(mpi.reducer PROPERTIES TIMEOUT 120)
# 4 processes (oversubscribed): ring orders of W > 2, and the shared arena across 2 emulated
# hosts (each host's sum, then MPI between hosts).
string(REPLACE "${MPIEXEC_NUMPROC_FLAG};2" "${MPIEXEC_NUMPROC_FLAG};4" tutti_mpiexec_4
               "${tutti_mpiexec}")
add_test(NAME mpi.reducer_4
         COMMAND ${tutti_mpiexec_4} $<TARGET_FILE:tutti_mpi_reducer_test> ${MPIEXEC_POSTFLAGS})
set_tests_properties(mpi.reducer_4 PROPERTIES TIMEOUT 180)

# The scripts get the launcher as one argument, its words joined by "|".
string(JOIN "|" tutti_mpiexec_joined ${tutti_mpiexec})
string(JOIN "|" tutti_mpiexec_postflags ${MPIEXEC_POSTFLAGS})
set(tutti_mpi_script_args -DMPIEXEC=${tutti_mpiexec_joined}
    -DMPIEXEC_POSTFLAGS=${tutti_mpiexec_postflags})

add_test(NAME mpi.abort
         COMMAND ${CMAKE_COMMAND} -DCASE=abort ${tutti_mpi_script_args}
                 -DPROGRAM=$<TARGET_FILE:tutti_mpi_abort_test>
                 -P ${CMAKE_CURRENT_LIST_DIR}/mpi/run_and_check.cmake)
set_tests_properties(mpi.abort PROPERTIES TIMEOUT 60)

add_test(NAME mpi.stall
         COMMAND ${CMAKE_COMMAND} -DCASE=stall ${tutti_mpi_script_args}
                 -DPROGRAM=$<TARGET_FILE:tutti_mpi_stall_test>
                 -P ${CMAKE_CURRENT_LIST_DIR}/mpi/run_and_check.cmake)
set_tests_properties(mpi.stall PROPERTIES TIMEOUT 60)

# The same two with the gradients in mpi_allreduce's shared arena (its in-place reduction).
foreach(case abort stall)
  add_test(NAME mpi.${case}_shared
           COMMAND ${CMAKE_COMMAND} -DCASE=${case} ${tutti_mpi_script_args} -DPROGRAM_ARGS=shared
                   -DPROGRAM=$<TARGET_FILE:tutti_mpi_${case}_test>
                   -P ${CMAKE_CURRENT_LIST_DIR}/mpi/run_and_check.cmake)
  set_tests_properties(mpi.${case}_shared PROPERTIES TIMEOUT 60)
endforeach()

set(tutti_mpi_tests mpi.reducer mpi.reducer_4 mpi.abort mpi.stall mpi.abort_shared mpi.stall_shared)
if(TARGET tutti_cli)
  # The program links tutti::mpi wherever that target exists (examples/CMakeLists.txt).
  get_target_property(tutti_cli_links tutti_cli LINK_LIBRARIES)
  if("tutti::mpi" IN_LIST tutti_cli_links)
    add_test(NAME mpi.cli_parity
             COMMAND ${CMAKE_COMMAND} -DCASE=cli-parity ${tutti_mpi_script_args}
                     -DPROGRAM=$<TARGET_FILE:tutti_cli> -DWORK=${CMAKE_CURRENT_BINARY_DIR}/mpi/cli
                     -P ${CMAKE_CURRENT_LIST_DIR}/mpi/run_and_check.cmake)
    set_tests_properties(mpi.cli_parity PROPERTIES TIMEOUT 300)
    add_test(NAME mpi.resume
             COMMAND ${CMAKE_COMMAND} -DCASE=resume ${tutti_mpi_script_args}
                     -DPROGRAM=$<TARGET_FILE:tutti_cli> -DWORK=${CMAKE_CURRENT_BINARY_DIR}/mpi/resume
                     -P ${CMAKE_CURRENT_LIST_DIR}/mpi/run_and_check.cmake)
    set_tests_properties(mpi.resume PROPERTIES TIMEOUT 180)
    list(APPEND tutti_mpi_tests mpi.cli_parity mpi.resume)
  endif()
endif()
set_tests_properties(${tutti_mpi_tests} PROPERTIES
  LABELS mpi RUN_SERIAL TRUE ENVIRONMENT "${tutti_mpi_environment}")
