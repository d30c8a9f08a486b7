// SPDX-License-Identifier: Apache-2.0
// A run most of whose steps were skipped for a non-finite loss or gradient (`--nonfinite skip`,
// the default) has not trained: it is reported as it went, but not exported, and it ends with
// exit status 1 naming the count and what to change, instead of "fine" with NaN metrics.
#pragma once

#include "config.hpp"

#include <tutti/error.hpp>
#include <tutti/trainer/options.hpp>

#include <cstdio>
#include <string>

namespace tutti::cli::detail {

/// True when more than half of the run's steps were skipped for a non-finite value.
inline bool mostly_skipped(const fit_result& r) {
  return r.steps > 0 && r.skipped_steps * 2 > r.steps;
}

/// A learning rate as the user would write it (1e+30, 0.01).
inline std::string lr_text(double lr) {
  char s[32];
  std::snprintf(s, sizeof s, "%g", lr);
  return s;
}

/// Throws `tutti::error` when `r` was mostly skipped (see mostly_skipped).
inline void check_trained(const train_config& c, const fit_result& r) {
  if (!mostly_skipped(r)) return;
  throw error("tutti train: " + std::to_string(r.skipped_steps) + " of " + std::to_string(r.steps) +
              " steps were skipped for a non-finite loss or gradient (--nonfinite skip), so the "
              "model did not train" +
              (c.export_dir.empty() ? std::string() : " and was not exported") +
              "; expected a smaller --lr (it was " + lr_text(c.lr) +
              ") or finite labels; --nonfinite stop ends such a run at its first non-finite "
              "step");
}

}  // namespace tutti::cli::detail
