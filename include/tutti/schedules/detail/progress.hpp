// SPDX-License-Identifier: Apache-2.0
/// @file schedules/detail/progress.hpp
/// @brief What the annealing schedules (cosine, polynomial) share: run progress and a check.
#pragma once

#include <tutti/error.hpp>

#include <cmath>
#include <cstddef>
#include <string>

namespace tutti::detail {

/// Progress through a run in [0, 1]: step 0 is the start even of an empty run (so warmup longer
/// than the run ramps to the base rate); any step at or past the end is the end.
inline double schedule_progress(std::size_t step, std::size_t total_steps) {
  if (step == 0) return 0.0;
  if (step >= total_steps) return 1.0;
  return static_cast<double>(step) / static_cast<double>(total_steps);
}

/// Throws `tutti::invalid_argument` from `fn` unless `final_fraction` is finite and >= 0.
inline void check_final_fraction(const char* fn, double final_fraction) {
  TUTTI_EXPECTS(
      std::isfinite(final_fraction) && final_fraction >= 0.0, fn,
      "final_fraction is " + std::to_string(final_fraction) + "; expected a finite value >= 0");
}

}  // namespace tutti::detail
