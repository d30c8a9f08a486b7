# SPDX-License-Identifier: Apache-2.0
# CASE faults (included by run_and_check.cmake, whose functions it uses): what a careless or a
# demanding user meets, each case with its exit code and its message, so none of them returns.
#  - Data that cannot train: a CSV with only its header; names that are not UTF-8 (file:line:
#    column); more --negatives than the data has courses.
#  - A resume on other data names both runs' files.
#  - recommend: an unknown id among --users (its line, how many are unknown); a byte-order mark
#    there is read as the CSV reader reads it; files of two exports mixed.
#  - plan, bench and study check their outputs before the work, and a report that cannot be
#    written ends with exit 1 naming the file and the reason.

find_program(sh sh REQUIRED)
small_ratings(rows 60 40 0 5)
set(text "userId,movieId,rating\n${rows}")
file(WRITE ${WORK}/data.csv "${text}")
set(small --data ${WORK}/data.csv --ranks 1 --batch 64)

# Data that cannot train is refused before any step, at the place it went wrong.
file(WRITE ${WORK}/header.csv "userId,movieId,rating\n")
expect_error(1 "header.csv:2:0: no data rows after the header" train --data ${WORK}/header.csv)
execute_process(COMMAND ${sh} -c "printf 'user,course,rating\\nu1,c1,3\\nu\\377x,c2,4\\n' > \"$0\""
                        ${WORK}/latin.csv)
expect_error(1 "latin.csv:3:1: column 'user': expected UTF-8 text .*got 'u.xffx'" train
             --data ${WORK}/latin.csv --user-col user --item-col course --label-col rating)
expect_error(2 "--negatives 100000: the training data holds 40 courses, so a list holds at most 39"
             train ${small} --holdout last --negatives 100000)

# A resume on other rows names the data of both runs, not only their digests.
file(REMOVE_RECURSE ${WORK}/ck)
train(${WORK}/ck.json ${small} --epochs 2 --checkpoint-dir ${WORK}/ck --checkpoint-every 2)
file(WRITE ${WORK}/more.csv "${text}61,3,4\n")
expect_error(2 "the training rows are not those the checkpoint was trained on \\('[^']*data.csv', now '[^']*more.csv'\\)"
             train --data ${WORK}/more.csv --ranks 1 --batch 64 --epochs 2 --resume ${WORK}/ck)

# recommend: an unknown id among many is named with its line; a BOM is skipped.
file(REMOVE_RECURSE ${WORK}/m4 ${WORK}/m3)
train(${WORK}/m4.json ${small} --epochs 1 --dim 4 --export ${WORK}/m4)
file(WRITE ${WORK}/users.txt "13\n14\n99999\n15\n88888\n")
expect_error(2 "users.txt:3: learner id '99999' is not in the model .*; 2 of the file's 5 ids are unknown"
             recommend --model ${WORK}/m4 --users ${WORK}/users.txt)
execute_process(COMMAND ${sh} -c "printf '\\357\\273\\27713\\n14\\n' > \"$0\"" ${WORK}/bom.txt)
execute_process(COMMAND ${TUTTI} recommend --model ${WORK}/m4 --users ${WORK}/bom.txt --k 2
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\n +13 +1 ")
  message(FATAL_ERROR "recommend --users with a BOM: exit ${rc}, '${out}${err}'; expected the "
                      "lists of learners 13 and 14")
endif()
# The factors of another export (dim 3) beside a dim-4 model.json: named, not served.
train(${WORK}/m3.json ${small} --epochs 1 --dim 3 --export ${WORK}/m3)
file(COPY_FILE ${WORK}/m3/user_factors.npy ${WORK}/m4/user_factors.npy)
file(COPY_FILE ${WORK}/m3/item_factors.npy ${WORK}/m4/item_factors.npy)
expect_error(1 "user_factors.npy' has shape \\[60,3\\], but '.*model.json' gives \\[60,4\\]"
             recommend --model ${WORK}/m4 --user 13)

# plan, bench and study: outputs checked before the work; an unwritable report is an error.
expect_error(2 "--json '.*nofolder/p.json': its folder .* does not exist" plan --params 1M
             --step-ms 10 --batch 64 --samples 3000 --json ${WORK}/nofolder/p.json)
if(EXISTS /dev/full)
  expect_error(1 "tutti plan --json: cannot write '/dev/full': No space left on device" plan
               --params 1M --step-ms 10 --batch 64 --samples 3000 --json /dev/full)
endif()
expect_error(2 "--save-link '.*' is a folder; expected the path of a file" bench allreduce
             --save-link ${WORK})
expect_error(2 "--json '.*nofolder/s.json': its folder .* does not exist" study large-batch
             --json ${WORK}/nofolder/s.json)
expect_error(2 "--report '.*data.csv' is a file; expected a folder" study large-batch
             --report ${WORK}/data.csv)
