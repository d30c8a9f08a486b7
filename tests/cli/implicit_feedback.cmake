# SPDX-License-Identifier: Apache-2.0
# CASE implicit (included by run_and_check.cmake, whose functions it uses): `tutti train
# --feedback implicit`, a log of positives trained with negatives sampled in each step.
#  - The synthetic log: the model ranks the held-out course better than the popularity ranking
#    of the same lists, 1 rank and 2 ranks reach the same loss, every positive once per epoch,
#    and --lists-out writes the split and the lists a peer ranks; --eval full ranks every course
#    not taken, with no more hits than the sampled lists.
#  - A log file without a label column: a repeated pair counts once (or each time), and the
#    report says what was kept; with --label-col, only the rows whose label is above 0.
#  - The list losses (--loss bpr, --loss softmax with the popularity sampler's correction) rank
#    above popularity too, and the report names the loss.
#  - Labels that are all 1 trained as labels, or with no negatives, are refused; so is a --loss
#    the labels or the model cannot take.
#  - Adam by default on tables a step touches a few rows of: the header names the row-sparse
#    optimizers, once; not when --optimizer is given.
#  - --split-seed chooses the held-out rows and the lists apart from --seed.

set(common --feedback implicit --holdout last --learners 1000 --courses 200 --epochs 12
    --batch 1024 --seed 5)
train(${WORK}/r1.json ${common} --ranks 1 --lists-out ${WORK}/lists)
train(${WORK}/r2.json ${common} --ranks 2)
file(READ ${WORK}/r1.json j1)
file(READ ${WORK}/r2.json j2)
check_exactly_once("${j1}")
check_exactly_once("${j2}")
final_loss(l1 "${j1}")
final_loss(l2 "${j2}")
expect_close("final train loss with sampled negatives, 2 ranks and 1 rank" ${l2} ${l1} 100)
json_get(k "${j1}" dataset sampled_negatives per_positive)
json_get(sampler "${j1}" dataset sampled_negatives sampler)
json_get(hr "${j1}" ranking hit_rate)
json_get(pop "${j1}" ranking popularity_hit_rate)
json_get(random "${j1}" ranking random_hit_rate)
json_get(metric "${j1}" eval metric)
to_nano(hr_n ${hr})
to_nano(pop_n ${pop})
to_nano(random_n ${random})
# 3 points of HR@10 over 1,000 lists above the popularity ranking (12 epochs: ~0.5 against 0.39).
math(EXPR pop_bound "${pop_n} + 30000000")
math(EXPR random_bound "3 * ${random_n}")
if(NOT k EQUAL 4 OR NOT sampler STREQUAL "uniform" OR NOT metric STREQUAL "none"
   OR hr_n LESS pop_bound OR hr_n LESS random_bound)
  message(FATAL_ERROR "--feedback implicit: ${k} ${sampler} negatives, metric ${metric}, hr@10 "
                      "${hr} (popularity ${pop}, random ${random}); expected 4 uniform "
                      "negatives, no AUC, hr@10 at least 0.03 above popularity")
endif()
message(STATUS "--feedback implicit: hr@10 ${hr}, popularity ${pop}, random ${random}")

foreach(loss bpr softmax)
  train(${WORK}/${loss}.json ${common} --ranks 1 --loss ${loss} --negative-sampler popularity)
  file(READ ${WORK}/${loss}.json jl)
  json_get(named "${jl}" loss)
  json_get(hr_loss "${jl}" ranking hit_rate)
  to_nano(hr_loss_n ${hr_loss})
  if(NOT named STREQUAL loss OR hr_loss_n LESS pop_bound)
    message(FATAL_ERROR "--loss ${loss}: the report names ${named}, hr@10 ${hr_loss} (popularity "
                        "${pop}); expected ${loss}, hr@10 at least 0.03 above popularity")
  endif()
  message(STATUS "--loss ${loss}: hr@10 ${hr_loss}")
endforeach()
json_get(named "${j1}" loss)
if(NOT named STREQUAL "logistic")
  message(FATAL_ERROR "--feedback implicit: the report names the loss ${named}; expected logistic")
endif()

# --eval full ranks every course a learner did not take: the same model (the lists do not change
# the training), and each sampled list is part of the full one, so no hit of the full ranking
# is missing from the sampled one.
train(${WORK}/full.json ${common} --ranks 1 --eval full)
file(READ ${WORK}/full.json jf)
json_get(eval "${jf}" ranking eval)
json_get(hr_full "${jf}" ranking hit_rate)
json_get(per_list "${jf}" ranking sampled_per_list)
json_get(sum_full "${jf}" parameters_checksum)
json_get(sum_sampled "${j1}" parameters_checksum)
to_nano(hr_full_n ${hr_full})
to_nano(per_list_n ${per_list})
if(NOT eval STREQUAL "full" OR NOT sum_full STREQUAL sum_sampled OR hr_full_n GREATER hr_n
   OR per_list_n LESS 20000000000 OR per_list_n GREATER 199000000000)
  message(FATAL_ERROR "--eval full: eval ${eval}, hr@10 ${hr_full} (sampled ${hr}), ${per_list} "
                      "courses per list, parameters ${sum_full} (sampled ${sum_sampled}); "
                      "expected the same parameters, a hit rate no higher, 20-199 courses")
endif()
message(STATUS "--eval full: hr@10 ${hr_full} over ${per_list} courses per list")
json_get(train_rows "${j1}" dataset train_rows)
json_get(lists "${j1}" ranking lists)
file(STRINGS ${WORK}/lists/train.csv train_lines)
file(STRINGS ${WORK}/lists/lists.csv list_lines)
list(LENGTH train_lines n_train)
list(LENGTH list_lines n_lists)
list(GET list_lines 1 first_list)
string(REPLACE "," ";" first_list "${first_list}")
list(LENGTH first_list width)
math(EXPR n_train "${n_train} - 1")
math(EXPR n_lists "${n_lists} - 1")
if(NOT n_train EQUAL train_rows OR NOT n_lists EQUAL lists OR NOT width EQUAL 102
   OR NOT EXISTS ${WORK}/lists/README.txt)
  message(FATAL_ERROR "--lists-out: ${n_train} training rows of ${train_rows}, ${n_lists} lists "
                      "of ${lists}, ${width} fields in a list; expected user, count, 100 courses")
endif()

# A log file: learner u took courses (7u + 3j) mod 40 for j < 6; the first 20 learners logged
# their first course twice. The `done` column is 1 on every row, `clicked` is 0 on every third.
set(log "learner,course,ts,done,clicked\n")
set(rows 0)
foreach(u RANGE 299)
  foreach(j RANGE 5)
    math(EXPR c "(7 * ${u} + 3 * ${j}) % 40")
    math(EXPR t "${u} * 10 + ${j}")
    math(EXPR third "${rows} % 3")
    set(clicked 1)
    if(third EQUAL 0)
      set(clicked 0)
    endif()
    string(APPEND log "l${u},c${c},${t},1,${clicked}\n")
    math(EXPR rows "${rows} + 1")
  endforeach()
  if(u LESS 20)
    math(EXPR c "(7 * ${u}) % 40")
    string(APPEND log "l${u},c${c},${u}9,1,1\n")
    math(EXPR rows "${rows} + 1")
  endif()
endforeach()
file(WRITE ${WORK}/log.csv "${log}")
set(file_args --data ${WORK}/log.csv --user-col learner --item-col course --timestamp-col ts
    --holdout last --epochs 2 --ranks 1 --negatives 20)
train(${WORK}/once.json --feedback implicit ${file_args})
train(${WORK}/each.json --feedback implicit --repeats each ${file_args})
train(${WORK}/clicked.json --feedback implicit --label-col clicked ${file_args})
foreach(run once each clicked)
  file(READ ${WORK}/${run}.json j)
  json_get(read_${run} "${j}" dataset positives rows)
  json_get(kept_${run} "${j}" dataset positives kept)
  json_get(repeated_${run} "${j}" dataset positives repeated)
  json_get(dropped_${run} "${j}" dataset positives not_positive)
endforeach()
math(EXPR once_want "${rows} - 20")
# clicked: rows 0, 3, 6, ... of the 1,800 six-course rows are 0 (600); the repeats are clicked.
math(EXPR clicked_want "${rows} - 600")
if(NOT read_once EQUAL rows OR NOT kept_once EQUAL once_want OR NOT repeated_once EQUAL 20
   OR NOT kept_each EQUAL rows OR NOT repeated_each EQUAL 0
   OR NOT dropped_clicked EQUAL 600 OR kept_clicked GREATER clicked_want)
  message(FATAL_ERROR "a log of ${rows} rows with 20 repeats: once kept ${kept_once} (repeated "
                      "${repeated_once}), each kept ${kept_each} (repeated ${repeated_each}), "
                      "--label-col clicked dropped ${dropped_clicked}; expected ${once_want} "
                      "(20), ${rows} (0), 600")
endif()
message(STATUS "log of ${rows} rows: once ${kept_once}, each ${kept_each}, clicked ${kept_clicked}")

expect_error(2 "expected --feedback implicit" train ${file_args} --label-col done --implicit)
expect_error(2 "expected --feedback implicit" train --feedback implicit --sampled-negatives 0
             ${file_args})
expect_error(2 "ranks each positive above its sampled negatives and there are none" train
             --feedback implicit --loss bpr --sampled-negatives 0 ${file_args})
expect_error(2 "--loss softmax with --model lr" train --feedback implicit --loss softmax
             --model lr ${file_args})
expect_error(2 "expected --loss logistic, bpr or softmax" train --feedback implicit --loss squared
             ${file_args})
expect_error(2 "whose labels are ratings; expected --loss squared" train --synthetic-ratings
             --loss bpr --sampled-negatives 2 --learners 50 --courses 20 --epochs 1)

# Adam by default, on tables a step touches a few rows of: the header says, once, that a
# row-sparse optimizer would update only those; not when --optimizer is given, nor on a table a
# step touches most of.
set(wide --feedback implicit --learners 3000 --courses 50 --epochs 1 --batch 128 --seed 5
    --ranks 1)
tutti_ok(train ${wide})
string(REGEX MATCHALL "note: adam \\(the default\\) updates every row" notes "${out}")
list(LENGTH notes n_notes)
if(NOT n_notes EQUAL 1 OR NOT out MATCHES "--optimizer lazy-adam or rowwise-adagrad")
  message(FATAL_ERROR "default adam on 3,050 rows, 178 touched a step at most: expected the "
                      "row-sparse note once, got:\n${out}")
endif()
tutti_ok(train ${wide} --optimizer adam)
if(out MATCHES "note: adam")
  message(FATAL_ERROR "--optimizer adam given: expected no note, got:\n${out}")
endif()
tutti_ok(train --feedback implicit --learners 200 --courses 50 --epochs 1 --batch 1024 --ranks 1)
if(out MATCHES "note: adam")
  message(FATAL_ERROR "200 learners, batch 1024: every row touched, expected no note, got:\n${out}")
endif()

# --split-seed alone chooses the held-out rows and the lists: two training seeds of one split seed
# rank the popularity model alike (it reads only the training rows and the lists), and alike to
# the run whose --seed is that split seed; another --seed without it draws other lists.
set(split --feedback implicit --holdout last --learners 300 --courses 200 --epochs 1 --batch 512)
train(${WORK}/ss1.json ${split} --seed 1 --split-seed 9)
train(${WORK}/ss2.json ${split} --seed 2 --split-seed 9)
train(${WORK}/ss9.json ${split} --seed 9)
train(${WORK}/ss2own.json ${split} --seed 2)
foreach(run ss1 ss2 ss9 ss2own)
  file(READ ${WORK}/${run}.json js)
  json_get(pop_${run} "${js}" ranking popularity_ndcg)
  json_get(split_${run} "${js}" split_seed)
  json_get(loss_${run} "${js}" epochs 0 train_loss)
endforeach()
if(NOT pop_ss1 STREQUAL pop_ss2 OR NOT pop_ss1 STREQUAL pop_ss9 OR pop_ss2own STREQUAL pop_ss2
   OR NOT split_ss1 EQUAL 9 OR NOT split_ss2own EQUAL 2 OR loss_ss1 STREQUAL loss_ss2)
  message(FATAL_ERROR "--split-seed: popularity NDCG@10 ${pop_ss1} / ${pop_ss2} (seeds 1, 2, "
                      "split 9), ${pop_ss9} (seed 9), ${pop_ss2own} (seed 2, its own split); "
                      "split_seed ${split_ss1}, ${split_ss2own}; train loss ${loss_ss1} / "
                      "${loss_ss2}; expected the first three equal, the fourth not, the split "
                      "seeds 9 and 2, and the two training seeds' losses apart")
endif()
message(STATUS "--split-seed: popularity NDCG@10 ${pop_ss1} on split 9, ${pop_ss2own} on split 2")
