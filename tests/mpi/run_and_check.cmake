# SPDX-License-Identifier: Apache-2.0
# Runs a program under mpiexec and checks how it behaves: a failing or stalled rank ends the whole
# job, named (abort, stall); `tutti train --reducer mpi` matches `--ranks 2` and prints its report
# once (cli-parity); a job with a killed rank resumes bitwise (resume).
#   cmake -DCASE=<abort|stall|cli-parity|resume> -DMPIEXEC=<launcher words joined by |>
#         [-DMPIEXEC_POSTFLAGS=<words joined by |>] -DPROGRAM=<exe> [-DWORK=<dir>]
#         [-DPROGRAM_ARGS=<words joined by |>] -P run_and_check.cmake
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" launcher "${MPIEXEC}")
string(REPLACE "|" ";" postflags "${MPIEXEC_POSTFLAGS}")
string(REPLACE "|" ";" program_args "${PROGRAM_ARGS}")

include(${CMAKE_CURRENT_LIST_DIR}/../cmake/report_json.cmake)

# Occurrences of the plain string `needle` in `text`.
function(count_of out text needle)
  string(REPLACE "${needle}" "\n@@\n" marked "${text}")
  string(REGEX MATCHALL "\n@@\n" hits "${marked}")
  list(LENGTH hits n)
  set(${out} ${n} PARENT_SCOPE)
endfunction()

if(CASE STREQUAL "abort")
  # Rank 1 throws after a collective; rank 0 waits in the next one. The whole job must end by
  # itself, non-zero, well before the test's timeout, and say which rank failed.
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${program_args} TIMEOUT 45
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  message(STATUS "mpiexec exit '${rc}' after ${seconds} s\nstdout:\n${out}\nstderr:\n${err}")
  if(NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "the job did not end by itself (${rc}): a failed rank left others hanging")
  endif()
  if(rc EQUAL 0 OR rc EQUAL 3)
    message(FATAL_ERROR "mpiexec exited ${rc}; expected a non-zero exit from MPI_Abort")
  endif()
  if(NOT err MATCHES "tutti: rank 1: injected failure after the first collective")
    message(FATAL_ERROR "stderr does not name rank 1 with its error ('tutti: rank 1: ...')")
  endif()
  if(out MATCHES "passed a collective")
    message(FATAL_ERROR "a rank passed a collective that rank 1 never joined")
  endif()
elseif(CASE STREQUAL "stall")
  # Rank 1 sleeps a minute before a collective; rank 0's 2 s timeout must end the whole job
  # within seconds, naming rank 1 and where rank 0 was.
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${program_args} TIMEOUT 40
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  message(STATUS "mpiexec exit '${rc}' after ${seconds} s\nstderr:\n${err}")
  if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 0 OR rc EQUAL 3 OR seconds GREATER 20)
    message(FATAL_ERROR "a stalled rank: exit '${rc}' after ${seconds} s; expected the job to end "
                        "non-zero within seconds of the 2 s timeout")
  endif()
  if(NOT err MATCHES "rank 0 waited 2000 ms in collective #[0-9]+ \\(epoch 1, step 42\\); rank\\(s\\) 1 did not reach it")
    message(FATAL_ERROR "stderr does not name rank 1 as the rank that never arrived")
  endif()
  if(out MATCHES "passed a collective")
    message(FATAL_ERROR "a rank passed the collective")
  endif()
elseif(CASE STREQUAL "cli-parity")
  file(MAKE_DIRECTORY ${WORK})
  file(REMOVE ${WORK}/m.json ${WORK}/l.json ${WORK}/m.log)
  # 2 MPI processes from seed 7, logging to one file; then the same run as 2 local ranks.
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} train --reducer mpi --seed 7
                          --json ${WORK}/m.json --log ${WORK}/m.log
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpiexec ... tutti train --reducer mpi exited ${rc}\n${out}\n${err}")
  endif()
  message(STATUS "mpiexec -n 2 tutti train --reducer mpi --seed 7:\n${out}")
  count_of(headers "${out}" "tutti train: ")
  count_of(finals "${out}" "test auc ")
  if(NOT headers EQUAL 1 OR NOT finals EQUAL 1)
    message(FATAL_ERROR "the report was printed ${headers} / ${finals} times; expected once, by rank 0")
  endif()
  execute_process(COMMAND ${PROGRAM} train --ranks 2 --seed 7 --json ${WORK}/l.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tutti train --ranks 2 exited ${rc}\n${out}\n${err}")
  endif()
  file(READ ${WORK}/m.json jm)
  file(READ ${WORK}/l.json jl)
  string(JSON world GET "${jm}" world_size)
  if(NOT world EQUAL 2)
    message(FATAL_ERROR "the MPI run reports world_size ${world}; expected 2")
  endif()
  # Both processes on this host: the gradient arena is mpi_allreduce's shared memory; local
  # ranks (threads) have none.
  string(JSON arena_m GET "${jm}" shared_arena)
  string(JSON arena_l GET "${jl}" shared_arena)
  if(NOT arena_m OR arena_l)
    message(FATAL_ERROR "shared_arena is ${arena_m} for 2 MPI processes and ${arena_l} for 2 "
                        "local ranks; expected true and false")
  endif()
  # Both processes appended their records to the one log: one per rank and epoch.
  string(JSON epochs LENGTH "${jm}" epochs)
  file(STRINGS ${WORK}/m.log records REGEX "\"step\":")
  list(LENGTH records n_records)
  math(EXPR expected_records "2 * ${epochs}")
  count_of(rank1 "${records}" "\"rank\":1,")
  if(NOT n_records EQUAL expected_records OR NOT rank1 EQUAL epochs)
    message(FATAL_ERROR "the log holds ${n_records} records (${rank1} of rank 1); expected "
                        "${expected_records}, half of them rank 1's")
  endif()
  final_loss(lm "${jm}")
  final_loss(ll "${jl}")
  # 1e-5 relative.
  expect_close("final train loss, 2 processes (mpi) and 2 threads (local)" ${lm} ${ll} 10)

  # A batch 2 processes split unevenly (512 and 511 per step) ends as 1 rank at that batch.
  set(uneven_args train --epochs 2 --batch 1023 --learners 3000 --dim 16 --seed 5 --quiet)
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${uneven_args} --reducer mpi
                          --json ${WORK}/um.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpiexec ... tutti train --reducer mpi --batch 1023 exited ${rc}\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${PROGRAM} ${uneven_args} --ranks 1 --json ${WORK}/u1.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tutti train --ranks 1 --batch 1023 exited ${rc}\n${out}\n${err}")
  endif()
  file(READ ${WORK}/um.json jum)
  file(READ ${WORK}/u1.json ju1)
  final_loss(lum "${jum}")
  final_loss(lu1 "${ju1}")
  expect_close("final train loss, batch 1023 on 2 processes (mpi) and 1 rank" ${lum} ${lu1} 10)

  # The overlapped reduction under MPI (a communication thread per process, MPI initialised
  # with MPI_THREAD_SERIALIZED): the same parameters as 2 local ranks without it, bitwise.
  set(overlap_args train --epochs 2 --batch 1024 --learners 3000 --dim 16 --seed 5 --quiet)
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${overlap_args} --reducer mpi
                          --overlap --bucket-mb 0.01 --json ${WORK}/om.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpiexec ... tutti train --reducer mpi --overlap exited ${rc}\n${out}\n${err}")
  endif()
  set(overlap_err "${err}")
  execute_process(COMMAND ${PROGRAM} ${overlap_args} --ranks 2 --json ${WORK}/ol.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tutti train --ranks 2 (no overlap) exited ${rc}\n${out}\n${err}")
  endif()
  file(READ ${WORK}/om.json jm)
  file(READ ${WORK}/ol.json jl)
  string(JSON sum_m GET "${jm}" parameters_checksum)
  string(JSON sum_l GET "${jl}" parameters_checksum)
  string(JSON overlap GET "${jm}" ledger overlap)
  if(NOT sum_m STREQUAL sum_l OR NOT overlap)
    message(FATAL_ERROR "2 MPI processes with --overlap ended with checksum ${sum_m} "
                        "(overlap ${overlap}); 2 local ranks without it ${sum_l}; expected equal")
  endif()
  message(STATUS "--overlap under mpiexec: parameters_checksum ${sum_m} = local ranks")
  # Each process's communication thread at the default --comm-nice -10, or a warning saying why
  # not (no CAP_SYS_NICE, RLIMIT_NICE too low).
  string(JSON nice GET "${jm}" ledger comm_thread_nice)
  if(NOT nice STREQUAL "-10")
    string(FIND "${overlap_err}" "not the -10 asked for" warned)
    if(warned EQUAL -1)
      message(FATAL_ERROR "--overlap under mpiexec: the communication thread ran at nice ${nice} "
                          "and no warning said why; expected -10 or the warning")
    endif()
  endif()
  message(STATUS "--overlap under mpiexec: communication thread at nice ${nice}")

  # --sparse-exchange measured under mpiexec: both processes agree on one cost ratio (the
  # trial's timings differ per process, the ratio may not) and train the dense run's model.
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${overlap_args} --reducer mpi
                          --sparse-exchange measured --json ${WORK}/sm.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mpiexec ... tutti train --sparse-exchange measured exited ${rc}\n${out}\n${err}")
  endif()
  file(READ ${WORK}/sm.json jsm)
  string(JSON ratio GET "${jsm}" ledger sparse_row_cost_ratio)
  string(JSON sparse_steps GET "${jsm}" ledger sparse_steps)
  if(NOT ratio GREATER 0 OR sparse_steps LESS 5)
    message(FATAL_ERROR "--sparse-exchange measured: ratio ${ratio}, ${sparse_steps} steps with "
                        "rows; expected a positive ratio and the 5 rows trial steps at least")
  endif()
  final_loss(lsm "${jsm}")
  final_loss(lol "${jl}")
  expect_close("final train loss, measured sparse exchange (mpi) and dense (local)" ${lsm} ${lol} 10)
  message(STATUS "--sparse-exchange measured under mpiexec: ratio ${ratio}, ${sparse_steps} steps with rows")

  # tutti bench allreduce under mpiexec: in mpi_allreduce's shared arena by default (every value
  # checked, the table labelled), through MPI_Allreduce with --shared-arena off.
  foreach(arena on off)
    execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} bench allreduce --reducer mpi
                            --shared-arena ${arena} --min-bytes 4096 --max-bytes 262144
                            --seconds-per-size 0.01 --cores-seconds 0.05
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(arena STREQUAL "on")
      set(label "# mpi_shared_arena, 2 ranks (processes)")
    else()
      set(label "# mpi, 2 ranks (processes)")
    endif()
    count_of(tables "${out}" "${label}")
    if(NOT rc EQUAL 0 OR NOT tables EQUAL 1)
      message(FATAL_ERROR "mpiexec ... tutti bench allreduce --reducer mpi --shared-arena "
                          "${arena}: exit ${rc}, ${tables} table(s) '${label}'; expected exit 0 "
                          "(no wrong value) and one\n${out}\n${err}")
    endif()
  endforeach()
  message(STATUS "tutti bench allreduce --reducer mpi: shared arena and MPI_Allreduce, no wrong value")

  # Sealed shards, each process holding only its own shard key: the same training as two
  # local ranks with the same keys (needs a tutti built with libsodium).
  execute_process(COMMAND ${PROGRAM} seal --gen-key ${WORK}/probe.key RESULT_VARIABLE sodium
                  OUTPUT_QUIET ERROR_QUIET)
  file(REMOVE ${WORK}/probe.key)
  if(sodium EQUAL 0)
    write_ratings_csv(${WORK}/ratings.csv 600)
    seal_with_shard_keys(${PROGRAM} ${WORK}/ratings.csv 2 ${WORK}/s)
    set(sealed_args train --sealed ${WORK}/s/sealed --key-file ${WORK}/s/keys/shard-{rank}.key
        --batch 32 --epochs 3 --seed 3 --quiet)
    execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${sealed_args} --reducer mpi
                            --json ${WORK}/sm.json RESULT_VARIABLE rc OUTPUT_VARIABLE out
                            ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "mpiexec ... tutti train --sealed (shard keys) exited ${rc}\n${out}\n${err}")
    endif()
    execute_process(COMMAND ${PROGRAM} ${sealed_args} --ranks 2 --json ${WORK}/sl.json
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "tutti train --sealed (shard keys) --ranks 2 exited ${rc}\n${out}\n${err}")
    endif()
    file(READ ${WORK}/sm.json jm)
    file(READ ${WORK}/sl.json jl)
    final_loss(lm "${jm}")
    final_loss(ll "${jl}")
    expect_close("sealed shard keys, final train loss, 2 processes and 2 threads" ${lm} ${ll} 10)
  endif()

  # Usage errors are the same on every process: exit 2, one line from rank 0 only.
  foreach(args "--ranks;3" "--batch;1")
    execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} train --reducer mpi ${args}
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    count_of(lines "${err}" "tutti: error: ")
    if(NOT rc EQUAL 2 OR NOT lines EQUAL 1)
      message(FATAL_ERROR "mpiexec ... tutti train --reducer mpi ${args}: exit ${rc}, ${lines} "
                          "error line(s); expected exit 2 and one line\n${err}")
    endif()
    string(REGEX MATCH "tutti: error: [^\n]*" line "${err}")
    message(STATUS "tutti train --reducer mpi ${args} -> ${line}")
  endforeach()
elseif(CASE STREQUAL "resume")
  # Two processes with periodic checkpoints; rank 1 is killed (SIGKILL) after the second one.
  # The whole job must end by itself, leave no process behind, and resume under mpiexec to
  # the parameters of an uninterrupted run, bitwise.
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  set(run train --reducer mpi --epochs 6 --batch 1024 --seed 3 --quiet)
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${run} --json ${WORK}/whole.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "uninterrupted run exited ${rc}\n${out}\n${err}")
  endif()
  string(JOIN " " command ${launcher} ${PROGRAM} ${postflags} ${run})
  set(ck ${WORK}/ck)
  string(TIMESTAMP t0 "%s")
  execute_process(COMMAND sh -c "${command} --checkpoint-dir ${ck} --checkpoint-every 40 & job=$!; \
while [ $(ls ${ck}/*.tck 2>/dev/null | wc -l) -lt 2 ]; do \
  kill -0 $job 2>/dev/null || break; sleep 0.01; done; \
for p in $(pgrep -f 'checkpoint-dir ${ck}'); do \
  if tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then \
    kill -KILL $p; echo killed $p; fi; done; \
wait $job"
                  TIMEOUT 60 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  if(NOT out MATCHES "killed [0-9]+" OR rc EQUAL 0 OR NOT rc MATCHES "^[0-9]+$")
    message(FATAL_ERROR "killing rank 1: '${out}', job exit '${rc}' after ${seconds} s; expected "
                        "a kill and a job that ends by itself, non-zero\n${err}")
  endif()
  execute_process(COMMAND pgrep -f "checkpoint-dir ${ck}" OUTPUT_VARIABLE left)
  if(NOT left STREQUAL "")
    message(FATAL_ERROR "processes left behind after rank 1 was killed: ${left}")
  endif()
  message(STATUS "rank 1 killed: the job ended by itself in ${seconds} s (exit ${rc})")
  execute_process(COMMAND ${launcher} ${PROGRAM} ${postflags} ${run} --resume ${ck}
                          --json ${WORK}/resumed.json
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "resumed run exited ${rc}\n${out}\n${err}")
  endif()
  file(READ ${WORK}/whole.json jw)
  file(READ ${WORK}/resumed.json jr)
  string(JSON a GET "${jw}" parameters_checksum)
  string(JSON b GET "${jr}" parameters_checksum)
  string(JSON from GET "${jr}" resumed_from_step)
  if(NOT a STREQUAL b OR from EQUAL 0)
    message(FATAL_ERROR "parameters: uninterrupted ${a}, resumed from step ${from} ${b}; expected "
                        "equal, after a resume")
  endif()
  message(STATUS "2 processes, rank 1 killed, resumed from step ${from}: parameters ${b} = uninterrupted")
else()
  message(FATAL_ERROR "unknown CASE '${CASE}'")
endif()
