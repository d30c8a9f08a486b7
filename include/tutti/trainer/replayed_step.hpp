// SPDX-License-Identifier: Apache-2.0
/// @file trainer/replayed_step.hpp
/// @brief One step from the gradient to the update: its kernels one by one, or on a space that
/// records work as a graph (a CUDA Graph), the steady step recorded once and replayed with one
/// launch. Part of `tutti::trainer_core` (tutti/trainer.hpp declares these members and includes
/// this file).
#pragma once

#include <tutti/trainer.hpp>

namespace tutti {

template <class Model, class Sampler, class Reducer>
auto trainer_core<Model, Sampler, Reducer>::run_step(const step_context& c) -> reduced {
  write_step_values(c);
  if (!replayable(c)) return take_step(c);
  const step_slots& s = c.slots;
  const detail::step_shape shape{s.count, gradient_scale(s), s.weight};
  using action = typename detail::step_replay<space_type>::action;
  switch (m_replay.next(shape)) {
    case action::run:  // the first step of its shape: the model's memory grows to it
      return take_step(c);
    case action::capture: {
      // Recorded, not run: the kernels read what changes from step to step from the space's
      // memory (write_step_values), so the record replays as any later step of this shape.
      // What the step passes by argument is this step's, as the record keeps it.
      c.timer.pause(true);
      const bool recorded =
          m_replay.capture(m_space, shape, [this, &c] { m_replay.bytes = take_step(c).bytes; });
      c.timer.pause(false);
      if (!recorded) return take_step(c);  // refused: every step runs its kernels from now on
      break;
    }
    case action::replay:
      break;
  }
  m_replay.replay(m_space);
  c.timer.mark(account::compute);  // a replayed step is one interval of the stream
  return reduced{m_replay.bytes, false};
}

template <class Model, class Sampler, class Reducer>
bool trainer_core<Model, Sampler, Reducer>::replayable(const step_context& c) const {
  if constexpr (space_captures_steps<space_type> && model_repeats_its_kernels<Model> &&
                model_reports_touched_rows_on_space<Model>) {
    if (!m_facts.rows_from_memory) return false;
    // The stop request is written into the step and read back on a poll step: those run.
    const bool stop_work =
        m_options.stop != nullptr &&
        ((c.global_step + 1) % m_options.stop_poll_every == 0 || m_options.stop->load());
    return m_rows.on() && m_reducer.world_size() == 1 && !c.pipeline && !m_options.measure_wait &&
           !m_noise_step.active() && !stop_work && c.slots.count == c.plan.micro_batch &&
           c.slots.global_real > 0;
  } else {
    (void)c;
    return false;
  }
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::write_step_values(const step_context& c) {
  if constexpr (!space_type::host_accessible) {
    std::vector<std::uint64_t>& v = m_values_on_host;
    v[0] = c.slots.begin;
    v[1] = c.slots.step;
    if (m_facts.rows_from_memory && m_rows.on())
      write_row_values(v.data(), static_cast<float>(c.lr), optimizer_step(c.global_step));
    m_space.copy_from_host(m_values.data(), v.data(), v.size() * sizeof(std::uint64_t));
  } else {
    (void)c;
  }
}

template <class Model, class Sampler, class Reducer>
float trainer_core<Model, Sampler, Reducer>::gradient_scale(const step_slots& s) const {
  return s.global_real > 0
             ? static_cast<float>(double(m_reducer.world_size()) / double(s.global_real))
             : 0.f;
}

}  // namespace tutti
