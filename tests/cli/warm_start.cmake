# SPDX-License-Identifier: Apache-2.0
# CASE warm-start (included by run_and_check.cmake, whose functions it uses): today's data
# continues from yesterday's export (--init-from).
#  - The report counts the learners and courses taken from the export and the new ones.
#  - The first epoch starts from what the export learned: its training loss is below that of the
#    same run started from scratch.
#  - 1 and 2 ranks start from the same arena and end with the same loss.
#  - Another --dim, another model, or --export over the export read are refused before the work.
#  - The export's optimizer state and steps go on with the same optimizer, not with another; a
#    warm-started run resumes exactly, and not without its --init-from.
#  - Two days given as two --data files are the joined file; --replay-share keeps a share of the
#    training rows of the first day's pairs.
#  - The report gives the setup phases (read, split, trainer built, fit prepared) and when the
#    first step ended, and the memory the trainer held by account, within the peak resident
#    memory.

# Day 1: 60 learners, 40 courses. Day 2: the same rows, two more per learner, 10 new learners
# and 2 new courses.
small_ratings(old_rows 60 40 0 5)
small_ratings(new_rows 70 42 6 7)
set(day1 "userId,movieId,rating\n${old_rows}")
set(day2 "${day1}${new_rows}")
file(WRITE ${WORK}/day1.csv "${day1}")
file(WRITE ${WORK}/day2.csv "${day2}")
file(REMOVE_RECURSE ${WORK}/day1)
train(${WORK}/day1.json --data ${WORK}/day1.csv --epochs 10 --dim 8 --seed 3 --ranks 1
      --export ${WORK}/day1)

set(today --data ${WORK}/day2.csv --epochs 1 --dim 8 --seed 3 --batch 128)
train(${WORK}/warm.json ${today} --ranks 1 --init-from ${WORK}/day1)
train(${WORK}/warm2.json ${today} --ranks 2 --init-from ${WORK}/day1)
train(${WORK}/cold.json ${today} --ranks 1)
file(READ ${WORK}/warm.json warm)
file(READ ${WORK}/warm2.json warm2)
file(READ ${WORK}/cold.json cold)
foreach(field users_reused users_new items_reused items_new)
  json_get(${field} "${warm}" dataset warm_start ${field})
endforeach()
if(NOT users_reused EQUAL 60 OR NOT users_new EQUAL 10 OR NOT items_reused EQUAL 40
   OR NOT items_new EQUAL 2)
  message(FATAL_ERROR "--init-from: ${users_reused} learners reused, ${users_new} new, "
                      "${items_reused} courses reused, ${items_new} new; expected 60, 10, 40, 2")
endif()
json_get(warm_loss "${warm}" epochs 0 train_loss)
json_get(warm2_loss "${warm2}" epochs 0 train_loss)
json_get(cold_loss "${cold}" epochs 0 train_loss)
if(NOT warm_loss LESS cold_loss)
  message(FATAL_ERROR "--init-from: the first epoch's loss is ${warm_loss}, from scratch "
                      "${cold_loss}; expected the warm start below")
endif()
expect_near("--init-from on 2 ranks: the first epoch's loss" "${warm2_loss}" "${warm_loss}" 10)
message(STATUS "--init-from: first epoch ${warm_loss} (2 ranks ${warm2_loss}), from scratch "
               "${cold_loss}")

expect_error(2 "--init-from .*day1 holds 8 factors per row; expected --dim 8" train
             --data ${WORK}/day2.csv --dim 4 --init-from ${WORK}/day1)
expect_error(2 "--init-from with --model ncf" train --data ${WORK}/day2.csv --model ncf
             --init-from ${WORK}/day1)
expect_error(2 "--export '.*day1/.*' is the file read as --init-from" train ${today}
             --init-from ${WORK}/day1 --export ${WORK}/day1)

# The export carries the optimizer's state and the steps it took: a warm start with the same
# optimizer (Adam, the default) goes on from them; another optimizer starts afresh, saying why.
file(READ ${WORK}/day1/model.json manifest)
json_get(day1_steps "${manifest}" optimizer_state steps)
json_get(carried "${warm}" dataset warm_start optimizer_state carried)
json_get(steps "${warm}" dataset warm_start optimizer_state steps)
if(NOT carried OR day1_steps LESS_EQUAL 0 OR NOT steps EQUAL day1_steps
   OR NOT EXISTS ${WORK}/day1/user_state.npy)
  message(FATAL_ERROR "--init-from: optimizer state carried '${carried}' after ${steps} steps; "
                      "expected carried after the export's ${day1_steps}, from user_state.npy")
endif()
train(${WORK}/adagrad.json ${today} --ranks 1 --init-from ${WORK}/day1 --optimizer
      rowwise-adagrad)
file(READ ${WORK}/adagrad.json adagrad)
json_get(carried "${adagrad}" dataset warm_start optimizer_state carried)
json_get(why "${adagrad}" dataset warm_start optimizer_state why_not)
if(carried OR NOT why MATCHES "the export's state is adam's, this run's optimizer rowwise-adagrad")
  message(FATAL_ERROR "--init-from with another optimizer: carried '${carried}' ('${why}'); "
                      "expected a fresh start that names both optimizers")
endif()

# A warm-started run resumes exactly: stopped after step 4 (the checkpoints after it removed),
# it ends with the uninterrupted run's parameters. Its checkpoint records the steps the run
# continued, so a resume without --init-from is refused.
set(today2 --data ${WORK}/day2.csv --epochs 2 --dim 8 --seed 3 --batch 128 --ranks 1
    --init-from ${WORK}/day1)
file(REMOVE_RECURSE ${WORK}/wck)
train(${WORK}/wck.json ${today2} --checkpoint-dir ${WORK}/wck --checkpoint-every 2
      --checkpoint-keep 20)
file(GLOB written ${WORK}/wck/ckpt-*.tck)
foreach(f ${written})
  get_filename_component(name ${f} NAME_WE)
  string(REGEX REPLACE "^ckpt-0*" "" step "${name}")
  if(step GREATER 4)
    file(REMOVE ${f})
  endif()
endforeach()
train(${WORK}/wres.json ${today2} --resume ${WORK}/wck)
file(READ ${WORK}/wck.json wck)
file(READ ${WORK}/wres.json wres)
json_get(whole "${wck}" parameters_checksum)
json_get(resumed "${wres}" parameters_checksum)
json_get(from "${wres}" resumed_from_step)
if(NOT from EQUAL 4 OR NOT resumed STREQUAL whole)
  message(FATAL_ERROR "a warm start resumed from step ${from}: parameters ${resumed}; "
                      "uninterrupted ${whole}; expected step 4 and the same")
endif()
expect_error(2 "continued_steps" train --data ${WORK}/day2.csv --epochs 2 --dim 8 --seed 3
             --batch 128 --ranks 1 --resume ${WORK}/wck)

# The wait before training is in the report, phase by phase (rank 0's): the first step ends after
# the data was read and split and the trainer built.
foreach(phase read split init prepare first_step)
  json_get(seconds "${warm}" setup ${phase}_seconds)
  json_nano(${phase} "${seconds}")
  if(${phase} LESS 0)
    message(FATAL_ERROR "setup.${phase}_seconds is ${seconds}; expected a duration")
  endif()
endforeach()
math(EXPR before "${read} + ${split} + ${init} + ${prepare}")
if(first_step LESS before)
  message(FATAL_ERROR "setup: the first step ended ${first_step} ns after the start, before the "
                      "${before} ns of reading, splitting, building and preparing; expected after them")
endif()

# The memory rank 0's trainer held, by account, adds up to its total, and the process's peak
# resident memory holds at least that much (every account is written, so resident).
set(sum 0)
foreach(account parameters gradients optimizer_state rows step_buffers shard)
  json_get(bytes "${warm}" memory ${account})
  math(EXPR sum "${sum} + ${bytes}")
endforeach()
json_get(total "${warm}" memory total)
json_get(peak "${warm}" memory peak_resident_bytes)
json_get(parameters "${warm}" memory parameters)
if(NOT sum EQUAL total OR parameters LESS_EQUAL 0)
  message(FATAL_ERROR "memory: the accounts add up to ${sum} bytes, the total says ${total}, "
                      "parameters ${parameters}; expected the sum and parameters above 0")
endif()
if(peak LESS total)
  message(FATAL_ERROR "memory: peak resident ${peak} bytes, below the ${total} the trainer "
                      "held; expected at least that")
endif()

# Two days as two --data files: read one after the other they are the joined file (the same
# parameters, bit for bit, on 1 rank and on 2), and the report says so. --replay-share keeps a
# share of day 1's pairs and every row of day 2; without several files it is refused.
file(WRITE ${WORK}/day2-only.csv "userId,movieId,rating\n${new_rows}")
set(both --epochs 2 --dim 8 --seed 3 --batch 128)
foreach(ranks 1 2)
  train(${WORK}/joined.json --data ${WORK}/day2.csv ${both} --ranks ${ranks})
  train(${WORK}/two.json --data ${WORK}/day1.csv ${WORK}/day2-only.csv ${both} --ranks ${ranks})
  file(READ ${WORK}/joined.json joined)
  file(READ ${WORK}/two.json two)
  json_get(sum_joined "${joined}" parameters_checksum)
  json_get(sum_two "${two}" parameters_checksum)
  if(NOT sum_joined STREQUAL sum_two)
    message(FATAL_ERROR "--data day1.csv day2-only.csv on ${ranks} rank(s): parameters "
                        "${sum_two}; the joined file's ${sum_joined}; expected the same")
  endif()
endforeach()
json_get(files "${two}" dataset replay files)
json_get(history "${two}" dataset replay history_rows)
json_get(kept "${two}" dataset replay kept_rows)
json_get(used_all "${two}" dataset rows_used)
if(NOT files EQUAL 2 OR history LESS_EQUAL 0 OR NOT kept EQUAL history)
  message(FATAL_ERROR "dataset.replay: ${files} files, ${history} training rows of day 1's "
                      "pairs, ${kept} kept; expected 2, some, and all of them")
endif()
train(${WORK}/replay.json --data ${WORK}/day1.csv ${WORK}/day2-only.csv ${both} --ranks 1
      --replay-share 0.5)
file(READ ${WORK}/replay.json replay)
json_get(kept "${replay}" dataset replay kept_rows)
json_get(used "${replay}" dataset rows_used)
math(EXPR want_used "${used_all} - ${history} + ${kept}")
if(kept LESS_EQUAL 0 OR NOT kept LESS history OR NOT used EQUAL want_used)
  message(FATAL_ERROR "--replay-share 0.5: ${kept} of ${history} rows of day 1's pairs kept, "
                      "${used} rows used; expected some, not all, and ${want_used} used")
endif()
message(STATUS "--replay-share 0.5: ${kept} of ${history} training rows of day 1's pairs")
expect_error(2 "--replay-share keeps a share of the earlier files' rows; expected several"
             train --data ${WORK}/day2.csv --replay-share 0.5)
