// SPDX-License-Identifier: Apache-2.0
/// @file schedules/constant.hpp
/// @brief `tutti::constant`: the learning rate stays at its base value.
#pragma once

#include <cstddef>

namespace tutti {

/// The trivial `tutti::lr_schedule`: every step runs at `base_lr`.
///
/// It is also the example to copy when writing your own schedule: an aggregate holding its
/// hyper-parameters, with one const member `lr(step, total_steps, base_lr)` that the trainer
/// calls on the host once per optimizer step (`step` is 0-based, `total_steps` the number of
/// optimizer steps in the whole run). Nothing else is required; per-run state has no place in a
/// schedule because the rate must be a pure function of the step (so a resumed run, or any rank,
/// computes the same value).
struct constant {
  /// Returns `base_lr` whatever the step.
  double lr(std::size_t /*step*/, std::size_t /*total_steps*/, double base_lr) const {
    return base_lr;
  }
};

}  // namespace tutti
