// SPDX-License-Identifier: Apache-2.0
/// @file schedules/polynomial.hpp
/// @brief `tutti::polynomial`: polynomial decay from the base rate to a fraction of it.
#pragma once

#include <tutti/error.hpp>
#include <tutti/schedules/detail/progress.hpp>

#include <cmath>
#include <cstddef>
#include <string>

namespace tutti {

/// Polynomial decay (as Hugging Face's `polynomial_decay`):
/// `lr = base_lr * (f + (1 - f) * (1 - step / total_steps)^power)` with `f = final_fraction`.
/// `power = 1` is linear decay. The rate reaches `base_lr * f` at `step = total_steps` and stays
/// there for any later step.
struct polynomial {
  /// Exponent of the decay; finite and > 0.
  double power = 1.0;
  /// The final rate as a fraction of the base rate; finite and >= 0.
  double final_fraction = 0.0;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    TUTTI_EXPECTS(std::isfinite(power) && power > 0.0, "tutti::polynomial::lr",
                  "power is " + std::to_string(power) + "; expected a finite value > 0");
    detail::check_final_fraction("tutti::polynomial::lr", final_fraction);
  }

  /// The rate at 0-based `step` of a run of `total_steps` steps.
  double lr(std::size_t step, std::size_t total_steps, double base_lr) const {
    validate();
    const double t = detail::schedule_progress(step, total_steps);
    return base_lr * (final_fraction + (1.0 - final_fraction) * std::pow(1.0 - t, power));
  }
};

}  // namespace tutti
