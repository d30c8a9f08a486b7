# SPDX-License-Identifier: Apache-2.0
# CASE outputs (included by run_and_check.cmake, whose functions it uses): nothing lost, nothing
# written over an input.
#  - An output naming an input (the data file, directly or through a symbolic link; the key file;
#    recommend --json naming the model's own factors) is refused before any work, with exit 2
#    and both names, and the input is left as it was.
#  - An output whose folder does not exist, or that is a folder, is refused before the training.
#  - A report that cannot be written (/dev/full, a file-size limit) ends with exit 1 naming the
#    file and the reason; a report written before at that path stays whole, no temporary is left.
#  - --duplicates given at its default value turns cleaning on, as its help says.
#  - An export whose model.json names an unknown output is refused by recommend.

small_ratings(rows 60 40 0 5)
set(text "userId,movieId,rating\n${rows}")
file(WRITE ${WORK}/data.csv "${text}")
file(SHA256 ${WORK}/data.csv data_sum)
set(small --data ${WORK}/data.csv --epochs 1 --ranks 1 --batch 64 --dim 4)

# Outputs over inputs, and outputs that cannot be written, are refused before the work.
expect_error(2 "--json '.*data.csv' is the file read as --data" train ${small}
             --json ${WORK}/data.csv)
file(CREATE_LINK ${WORK}/data.csv ${WORK}/link.json SYMBOLIC)
expect_error(2 "--json '.*link.json' is the file read as --data" train ${small}
             --json ${WORK}/link.json)
expect_error(2 "--log '.*data.csv' is the file read as --data" train ${small}
             --log ${WORK}/data.csv)
file(SHA256 ${WORK}/data.csv after_sum)
if(NOT after_sum STREQUAL data_sum)
  message(FATAL_ERROR "data.csv changed after the refused runs")
endif()
expect_error(2 "--json '.*no-such-folder/r.json': its folder .* does not exist" train ${small}
             --json ${WORK}/no-such-folder/r.json)
expect_error(2 "--json '.*' is a folder; expected the path of a file" train ${small}
             --json ${WORK})
expect_error(2 "--export '.*data.csv' is a file; expected a folder" train ${small}
             --export ${WORK}/data.csv)

# A report that cannot be written: exit 1, the file and the reason; the earlier report stays.
train(${WORK}/r.json ${small})
file(SHA256 ${WORK}/r.json report_sum)
if(EXISTS /dev/full)
  expect_error(1 "--json: cannot write '/dev/full': No space left on device" train ${small}
               --json /dev/full)
  expect_error(1 "--log: cannot write '/dev/full'" train ${small} --log /dev/full)
endif()
find_program(sh sh REQUIRED)
execute_process(COMMAND ${sh} -c "ulimit -f 2 && exec \"$0\" \"$@\"" ${TUTTI} train ${small}
                        --json ${WORK}/r.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(SHA256 ${WORK}/r.json kept_sum)
file(GLOB leftovers ${WORK}/r.json.tmp-*)
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot write '[^']*r.json': File too large"
   OR NOT kept_sum STREQUAL report_sum OR leftovers)
  message(FATAL_ERROR "--json under a 1 KiB file-size limit: exit ${rc}, '${err}', report "
                      "unchanged: ${kept_sum} vs ${report_sum}, temporaries '${leftovers}'; "
                      "expected exit 1 naming r.json, the earlier report whole, no temporary")
endif()
message(STATUS "--json under a file-size limit: ${err}")

# --duplicates given at its default turns cleaning on: a malformed row is set aside.
file(WRITE ${WORK}/dirty.csv "${text}61,3,x\n")
expect_error(1 "dirty.csv:362" train --data ${WORK}/dirty.csv --epochs 1 --ranks 1 --quiet)
train(${WORK}/clean.json --data ${WORK}/dirty.csv --epochs 1 --ranks 1 --batch 64 --dim 4
      --duplicates keep_first)
file(READ ${WORK}/clean.json j)
json_get(rejected "${j}" dataset rows_rejected)
if(NOT rejected EQUAL 1)
  message(FATAL_ERROR "--duplicates keep_first: ${rejected} rows rejected; expected 1")
endif()

# recommend: --json over the model's own files is refused; an unknown output is refused.
file(REMOVE_RECURSE ${WORK}/model)
export_train(${WORK}/model)
file(SHA256 ${WORK}/model/user_factors.npy factors_sum)
expect_error(2 "--json '.*user_factors.npy' is the file read as --model" recommend
             --model ${WORK}/model --user 13 --json ${WORK}/model/user_factors.npy)
file(SHA256 ${WORK}/model/user_factors.npy factors_after)
if(NOT factors_after STREQUAL factors_sum)
  message(FATAL_ERROR "recommend --json over user_factors.npy changed the file")
endif()
file(READ ${WORK}/model/model.json manifest)
string(JSON manifest SET "${manifest}" output "\"logit\"")
file(WRITE ${WORK}/model/model.json "${manifest}")
expect_error(1 "\"output\" is 'logit'; expected \"sigmoid\" or \"identity\"" recommend
             --model ${WORK}/model --user 13)

# A run whose steps were mostly skipped as non-finite did not train: exit 1 with the count, its
# report written as it went, no export.
file(REMOVE_RECURSE ${WORK}/diverged)
execute_process(COMMAND ${TUTTI} train ${small} --lr 1e30 --json ${WORK}/diverged.json
                        --export ${WORK}/diverged --quiet
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
file(READ ${WORK}/diverged.json j)
json_get(skipped "${j}" skipped_steps)
if(NOT rc EQUAL 1 OR NOT err MATCHES "steps were skipped for a non-finite loss or gradient"
   OR skipped LESS 2 OR EXISTS ${WORK}/diverged/model.json)
  message(FATAL_ERROR "--lr 1e30: exit ${rc}, '${err}', ${skipped} steps skipped, export "
                      "written: ${WORK}/diverged/model.json; expected exit 1, no export")
endif()
message(STATUS "--lr 1e30: ${err}")

# An export that stopped part way (only some of its files, a temporary among them) is replaced by
# the next one instead of blocking it.
file(REMOVE_RECURSE ${WORK}/partial)
file(MAKE_DIRECTORY ${WORK}/partial)
file(COPY_FILE ${WORK}/model/user_factors.npy ${WORK}/partial/user_factors.npy)
file(WRITE ${WORK}/partial/item_factors.npy.tmp-12345 "cut")
train(${WORK}/partial.json ${small} --export ${WORK}/partial)
if(NOT EXISTS ${WORK}/partial/model.json OR NOT EXISTS ${WORK}/partial/item_factors.npy)
  message(FATAL_ERROR "--export over a partial export: no whole export in ${WORK}/partial")
endif()
