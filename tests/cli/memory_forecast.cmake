# SPDX-License-Identifier: Apache-2.0
# CASE plan-host-memory (included by run_and_check.cmake, whose functions it uses): `tutti plan
# --host` forecasts a host run's memory from the trainer's accounts.
#  - From the run's report (its shape only: learners, courses, rows, dim, batch, optimizer,
#    negatives), the forecast trainer accounts equal the ones the run reported, byte for byte,
#    and the forecast peak is within 15% of the peak resident memory the run measured.
#  - With --rows-in-place: the same parameters, no rows held, the forecast equal again.
#  - From flags (--learners, --courses, --dim, --rows) the forecast peak is within 15% too.
#  - --optimizer momentum, adamw and sgd forecast 1x, 2x and no optimizer state.
#  - --host with the shape but no --rows is refused, naming --rows.
if(NOT EXISTS /usr/bin/python3)
  message("tutti-test: skipped: the log is written by benchmarks/make_log.py, and there is no "
          "/usr/bin/python3")
  return()
endif()
set(log ${WORK}/log.tsv)
execute_process(COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/../../benchmarks/make_log.py
                        --rows 1500000 --learners 800000 --courses 4000 ${log}
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_log.py exited ${rc}: ${err}")
endif()
train(${WORK}/run.json --data ${log} --user-col user --item-col item --feedback implicit
      --ranks 1 --epochs 1 --dim 96 --optimizer rowwise-adagrad)
tutti_ok(plan --from ${WORK}/run.json --host --json ${WORK}/plan.json)
file(READ ${WORK}/run.json run)
file(READ ${WORK}/plan.json plan)
json_get(answer "${plan}" questions fits answer)
message(STATUS "${answer}")
foreach(account parameters gradients optimizer_state rows step_buffers shard)
  json_get(held "${run}" memory ${account})
  json_get(forecast "${plan}" questions fits forecast ${account})
  if(NOT held EQUAL forecast)
    message(FATAL_ERROR "the forecast's ${account} is ${forecast} B; the run held ${held} B")
  endif()
endforeach()

# --rows-in-place: the same parameters, bit for bit, no copy of the rows, and the forecast from
# its report (rows 0) equal to what it held.
train(${WORK}/in_place.json --data ${log} --user-col user --item-col item --feedback implicit
      --ranks 1 --epochs 1 --dim 96 --optimizer rowwise-adagrad --rows-in-place)
tutti_ok(plan --from ${WORK}/in_place.json --host --json ${WORK}/in_place_plan.json)
file(READ ${WORK}/in_place.json in_place)
file(READ ${WORK}/in_place_plan.json in_place_plan)
json_get(copied "${run}" parameters_checksum)
json_get(read_in_place "${in_place}" parameters_checksum)
if(NOT copied STREQUAL read_in_place)
  message(FATAL_ERROR "--rows-in-place trained to ${read_in_place}; the copy to ${copied}")
endif()
json_get(held "${in_place}" memory rows)
if(NOT held EQUAL 0)
  message(FATAL_ERROR "--rows-in-place held ${held} B of rows; expected none")
endif()
foreach(account parameters gradients optimizer_state rows step_buffers shard)
  json_get(held "${in_place}" memory ${account})
  json_get(forecast "${in_place_plan}" questions fits forecast ${account})
  if(NOT held EQUAL forecast)
    message(FATAL_ERROR "--rows-in-place: the forecast's ${account} is ${forecast} B; the run "
                        "held ${held} B")
  endif()
endforeach()

# The forecast peak `peak` within 15% of the measured `measured`.
function(expect_within_15 what peak measured)
  math(EXPR percent "${peak} * 100 / ${measured}")
  if(percent LESS 85 OR percent GREATER 115)
    message(FATAL_ERROR "${what}: forecast peak ${peak} B is ${percent}% of the measured "
                        "${measured} B; expected 85-115%")
  endif()
  message(STATUS "${what}: forecast ${peak} B, measured ${measured} B (${percent}%)")
endfunction()
json_get(measured "${run}" memory peak_resident_bytes)
json_get(peak "${plan}" questions fits forecast peak)
expect_within_15("--from the run's report" ${peak} ${measured})

json_get(users "${run}" dataset users)
json_get(items "${run}" dataset items)
json_get(rows "${run}" dataset rows_used)
set(shape --learners ${users} --courses ${items} --dim 96 --optimizer rowwise-adagrad
          --step-ms 1 --batch 4096 --samples ${rows})
tutti_ok(plan --host ${shape} --rows ${rows} --json ${WORK}/flags.json)
file(READ ${WORK}/flags.json flags)
json_get(peak "${flags}" questions fits forecast peak)
expect_within_15("from --learners, --courses, --dim and --rows" ${peak} ${measured})

# The optimizers the plan names that tutti train spells otherwise: SGD with momentum keeps one
# float of state per parameter, AdamW two, plain SGD none.
foreach(case "momentum;1" "adamw;2" "sgd;0")
  list(GET case 0 name)
  list(GET case 1 per)
  tutti_ok(plan --host --learners ${users} --courses ${items} --dim 96 --optimizer ${name}
           --step-ms 1 --batch 4096 --samples ${rows} --rows ${rows} --json ${WORK}/opt.json)
  file(READ ${WORK}/opt.json opt)
  json_get(params "${opt}" questions fits forecast parameters)
  json_get(state "${opt}" questions fits forecast optimizer_state)
  math(EXPR want "${per} * ${params}")
  if(NOT state EQUAL want)
    message(FATAL_ERROR "plan --host --optimizer ${name}: optimizer state ${state} B for "
                        "${params} B of parameters; expected ${per}x")
  endif()
endforeach()

execute_process(COMMAND ${TUTTI} plan --host ${shape} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "needs --rows")
  message(FATAL_ERROR "plan --host without --rows: exit ${rc}, '${err}'; expected exit 2 naming "
                      "--rows")
endif()
