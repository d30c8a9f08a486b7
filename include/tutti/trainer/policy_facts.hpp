// SPDX-License-Identifier: Apache-2.0
/// @file trainer/policy_facts.hpp
/// @brief What the trainer's core (`tutti::trainer_core`, compiled once per model, sampler and
/// reducer) knows of the optimizer and the schedule `tutti::trainer` hands it: each capability
/// the step plans by, read from the concrete types once, at construction.
#pragma once

#include <tutti/concepts.hpp>
#include <tutti/layout.hpp>
#include <tutti/trainer/memory_forecast.hpp>
#include <tutti/trainer/step_replay.hpp>

#include <cstddef>

namespace tutti::detail {

/// The optimizer's and the schedule's facts the core plans the step by.
struct policy_facts {
  std::size_t state_floats = 0;  ///< the optimizer state's floats for the model's layout
  bool wants_row_step = false;   ///< the optimizer takes the row-sparse step (`steps_rows`)
  bool fuses_rows = false;       ///< it updates runs of rows (`optimizer_fuses_rows`, host)
  /// On the model's space: it steps rows there (`optimizer_steps_rows_on_space`), and reads
  /// the step's values from the space's memory (`optimizer_steps_rows_from_memory`).
  bool steps_rows_on_space = false;
  bool rows_from_memory = false;
  /// 64-bit words of the values a device step reads from the space's memory
  /// (`detail::step_values` of the optimizer's `row_step_values`).
  std::size_t values_words = 0;
  std::size_t warmup_steps = 0;  ///< the schedule's warmup steps (`schedule_has_warmup`), or 0
};

/// The facts of `optimizer` and `schedule` on `Space` for a model of `layout`.
template <class Space, class Optimizer, class Schedule>
policy_facts policy_facts_of(const Optimizer& optimizer, const Schedule& schedule,
                             const parameter_layout& layout) {
  policy_facts f;
  f.state_floats = optimizer_state_floats(optimizer, layout);
  f.wants_row_step = optimizer_wants_row_step(optimizer);
  f.fuses_rows = optimizer_fuses_rows<Optimizer, Space>;
  f.steps_rows_on_space = optimizer_steps_rows_on_space<Optimizer, Space>;
  f.rows_from_memory = optimizer_steps_rows_from_memory<Optimizer, Space>;
  f.values_words = step_values_words<typename row_values_of<Optimizer, Space>::type>();
  if constexpr (schedule_has_warmup<Schedule>)
    f.warmup_steps = static_cast<std::size_t>(schedule.warmup_steps);
  return f;
}

}  // namespace tutti::detail
