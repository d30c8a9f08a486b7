// SPDX-License-Identifier: Apache-2.0
/// @file schedules/step_decay.hpp
/// @brief `tutti::step_decay`: multiply the learning rate by `gamma` every `step_size` steps.
#pragma once

#include <tutti/error.hpp>

#include <cmath>
#include <cstddef>
#include <string>

namespace tutti {

/// Step decay (PyTorch's `StepLR`): `lr = base_lr * gamma^(step / step_size)`, integer division.
struct step_decay {
  /// Number of steps between two decays; must be positive.
  std::size_t step_size = 1000;
  /// Factor applied at each decay; must be finite and positive.
  double gamma = 0.1;

  /// Throws `tutti::invalid_argument` when a hyper-parameter is out of range.
  void validate() const {
    TUTTI_EXPECTS(step_size > 0, "tutti::step_decay::lr",
                  "step_size is 0; expected a positive number of steps");
    TUTTI_EXPECTS(std::isfinite(gamma) && gamma > 0.0, "tutti::step_decay::lr",
                  "gamma is " + std::to_string(gamma) + "; expected a finite value > 0");
  }

  /// The rate at 0-based `step`; `total_steps` plays no part.
  double lr(std::size_t step, std::size_t /*total_steps*/, double base_lr) const {
    validate();
    return base_lr * std::pow(gamma, static_cast<double>(step / step_size));
  }
};

}  // namespace tutti
