// SPDX-License-Identifier: Apache-2.0
/// @file trainer/noise_probe.hpp
/// @brief The gradient noise scale as `fit` measures it: which steps measure it, the squared norms
/// before and after the reduction, and why an estimate is missing. Part of `tutti::trainer_core`
/// (tutti/trainer.hpp declares these members and includes this file).
#pragma once

#include <tutti/trainer.hpp>

namespace tutti {

template <class Model, class Sampler, class Reducer>
detail::noise_step trainer_core<Model, Sampler, Reducer>::plan_noise_step(
    std::size_t global_step, std::uint64_t global_real, const detail::batch_split& split,
    std::size_t s, std::size_t count, std::size_t micro_batch) const {
  const std::size_t every = m_options.noise_scale_every;
  if (every == 0 || global_step % every != 0 || global_real != m_options.batch || count == 0)
    return {};
  const double batch = double(m_options.batch), world = double(split.world);
  if (split.world > 1) {
    double inv = 0;
    for (std::size_t r = 0; r < split.world; ++r)
      inv += 1.0 / double(split.first(r, s + 1) - split.first(r, s));
    const double to_mean = batch / (world * double(count));
    return {inv / world, to_mean * to_mean, false};
  }
  if (count <= micro_batch) return {};  // one batch size only
  const double to_mean = batch / double(micro_batch);
  return {1.0 / double(micro_batch), to_mean * to_mean, true};
}

template <class Model, class Sampler, class Reducer>
double trainer_core<Model, Sampler, Reducer>::arena_squared_norm() const {
  if constexpr (space_type::host_accessible)
    if (m_rows.on()) return m_rows.squared_norm(m_space, m_grads.data());
  return detail::squared_norm(m_space, m_grads.data(), gradient_values());
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::record_small_noise(bool from_buckets) {
  if (!m_noise_step.active()) return;
  if (!m_noise_step.first_micro && !from_buckets) m_noise_small = arena_squared_norm();
  const auto small = static_cast<float>(m_noise_small * m_noise_step.factor);
  if constexpr (space_type::host_accessible)
    m_grads.data()[gradient_values() + 2] = small;
  else
    fill(m_space, m_grads.subspan(gradient_values() + 2, 1), small);
}

template <class Model, class Sampler, class Reducer>
void trainer_core<Model, Sampler, Reducer>::add_noise_measurement() {
  if (!m_noise_step.active()) return;
  float trailing[3] = {0.f, 0.f, 0.f};  // non-finite flag, stop request, small-batch norm
  if constexpr (space_type::host_accessible) {
    trailing[2] = m_grads.data()[gradient_values() + 2];
  } else {
    m_space.copy_to_host(trailing, m_grads.data() + gradient_values(), sizeof trailing);
    if (trailing[0] != 0.f) return;  // a skipped step
  }
  m_noise.add(trailing[2], m_noise_step.inv_small, arena_squared_norm(), double(m_options.batch));
}

template <class Model, class Sampler, class Reducer>
std::string trainer_core<Model, Sampler, Reducer>::noise_scale_why(std::size_t steps) const {
  if (m_noise.estimate().known()) return {};
  if (m_options.noise_scale_every == 0) return "off (noise_scale_every = 0)";
  if (m_reducer.world_size() == 1 && m_options.accumulation < 2)
    return "one rank has one batch size per step; measure with accumulation >= 2";
  if (m_noise.estimate().measurements == 0)
    return "no full step measured in " + std::to_string(steps) + " steps (every " +
           std::to_string(m_options.noise_scale_every) + ")";
  const noise_scale_estimate e = m_noise.estimate();
  if (e.bounded())
    return "|G|^2 is not resolved after " + std::to_string(e.measurements) +
           " measurements: at this batch the mean gradient is lost in its noise, and B_simple "
           "is at least " +
           std::to_string(static_cast<long long>(e.b_simple_at_least)) + " samples";
  return "too few measurements (" + std::to_string(e.measurements) + ") to judge |G|^2 by";
}

}  // namespace tutti
