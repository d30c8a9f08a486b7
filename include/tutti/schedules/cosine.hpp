// SPDX-License-Identifier: Apache-2.0
/// @file schedules/cosine.hpp
/// @brief `tutti::cosine`: cosine annealing from the base rate to a fraction of it.
#pragma once

#include <tutti/error.hpp>
#include <tutti/schedules/detail/progress.hpp>

#include <cmath>
#include <cstddef>
#include <numbers>
#include <string>

namespace tutti {

/// Cosine annealing (Loshchilov & Hutter 2017, without restarts):
/// `lr = base_lr * (f + (1 - f) * (1 + cos(pi * step / total_steps)) / 2)` with
/// `f = final_fraction`. Step 0 runs at `base_lr`; the rate reaches `base_lr * f` at
/// `step = total_steps` (as PyTorch's `CosineAnnealingLR` with `T_max = total_steps`) and stays
/// there for any later step, so a run that overshoots its plan never sees the rate climb again.
struct cosine {
  /// The final rate as a fraction of the base rate; finite and >= 0.
  double final_fraction = 0.0;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const { detail::check_final_fraction("tutti::cosine::lr", final_fraction); }

  /// The rate at 0-based `step` of a run of `total_steps` steps.
  double lr(std::size_t step, std::size_t total_steps, double base_lr) const {
    validate();
    const double t = detail::schedule_progress(step, total_steps);
    return base_lr *
           (final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + std::cos(std::numbers::pi * t)));
  }
};

}  // namespace tutti
