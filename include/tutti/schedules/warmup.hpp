// SPDX-License-Identifier: Apache-2.0
/// @file schedules/warmup.hpp
/// @brief `tutti::warmup<Inner>`: linear warmup in front of any other schedule.
#pragma once

#include <tutti/concepts.hpp>
#include <tutti/error.hpp>
#include <tutti/schedules/constant.hpp>

#include <cmath>
#include <cstddef>
#include <string>

namespace tutti {

/// Gradual linear warmup (Goyal et al. 2017) followed by another schedule.
///
/// For `step < warmup_steps` the rate goes linearly from `base_lr * start_fraction` (at step 0)
/// towards the inner schedule's first value, `inner.lr(0, total_steps - warmup_steps, base_lr)`,
/// which it would reach at step `warmup_steps`. From there on the inner schedule runs over the
/// remaining steps: `inner.lr(step - warmup_steps, total_steps - warmup_steps, base_lr)`, so the
/// two pieces join without a jump. `warmup_steps = 0` is exactly the inner schedule.
///
/// Large global batches are the reason to warm up: with the linear scaling rule
/// (see scaling.hpp) the scaled rate is too large for the first steps of training.
/// With the default `start_fraction = 0` step 0 makes no update (as Hugging Face's linear warmup);
/// set it to, say, `1.0 / warmup_steps` when every step should count.
///
///     tutti::warmup<tutti::cosine>{.warmup_steps = 100, .inner = {.final_fraction = 0.01}}
///
/// @tparam Inner the schedule after warmup, a type modelling `tutti::lr_schedule`
template <lr_schedule Inner = constant>
struct warmup {
  /// Number of warmup steps; 0 disables warmup.
  std::size_t warmup_steps = 0;
  /// The schedule that runs after warmup, over the remaining steps.
  Inner inner{};
  /// The rate at step 0 as a fraction of the base rate; in [0, 1].
  double start_fraction = 0.0;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    TUTTI_EXPECTS(
        std::isfinite(start_fraction) && start_fraction >= 0.0 && start_fraction <= 1.0,
        "tutti::warmup::lr",
        "start_fraction is " + std::to_string(start_fraction) + "; expected a value in [0, 1]");
  }

  /// The rate at 0-based `step` of a run of `total_steps` steps.
  double lr(std::size_t step, std::size_t total_steps, double base_lr) const {
    validate();
    const std::size_t rest = total_steps > warmup_steps ? total_steps - warmup_steps : 0;
    if (step >= warmup_steps) return inner.lr(step - warmup_steps, rest, base_lr);
    const double from = base_lr * start_fraction;
    const double to = inner.lr(0, rest, base_lr);
    return from + (to - from) * (static_cast<double>(step) / static_cast<double>(warmup_steps));
  }
};

}  // namespace tutti
