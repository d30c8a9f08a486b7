// SPDX-License-Identifier: Apache-2.0
// The gradient noise scale in tutti train's table, closing lines and JSON report.
#pragma once

#include <tutti/trainer.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>

namespace tutti::cli::detail {

/// The epoch table's noise-scale cell: B_simple in samples, or "-" while unknown.
inline std::string noise_cell(const noise_scale_estimate& n) {
  if (!n.bounded()) return "-";
  char text[32];
  if (n.known())
    std::snprintf(text, sizeof text, "%.0f", n.b_simple);
  else
    std::snprintf(text, sizeof text, ">%.0f", n.b_simple_at_least);
  return text;
}

/// What the run's noise scale says about its global batch, in one sentence.
inline std::string noise_sentence(const fit_result& r, std::size_t batch) {
  const noise_scale_estimate& n = r.noise_scale;
  if (!n.bounded()) return "gradient noise scale: not measured (" + r.noise_scale_why + ")";
  if (!n.known()) {
    char text[400];
    std::snprintf(text, sizeof text,
                  "gradient noise scale: |G|^2 not resolved at batch %zu after %zu measurements, "
                  "so B_simple is at least %.0f samples; %s",
                  batch, n.measurements, n.b_simple_at_least,
                  double(batch) < 0.5 * n.b_simple_at_least
                      ? "a larger batch (more devices) still buys progress per step nearly in "
                        "proportion"
                      : "more measurements (a longer run) would say more");
    return text;
  }
  char text[400];
  const double ratio = double(batch) / n.b_simple;
  std::snprintf(text, sizeof text,
                "gradient noise scale B_simple ~ %.0f samples at the end (%zu measurements): the "
                "global batch %zu is %.2g x it; %s",
                n.b_simple, n.measurements, batch, ratio,
                ratio < 0.5 ? "a larger batch (more devices) still buys progress per step nearly "
                              "in proportion"
                : ratio < 2 ? "near it, each doubling of the batch buys about half a doubling "
                              "of progress per step"
                            : "beyond it, a larger batch buys little more progress per step, so "
                              "more devices mostly spend samples");
  return text;
}

/// The noise scale in a report: its estimate and inputs, or null with the reason.
inline nlohmann::json to_json(const noise_scale_estimate& n, const std::string& why = {}) {
  nlohmann::json j = {{"b_simple", n.known() ? nlohmann::json(n.b_simple) : nlohmann::json()},
                      {"measurements", n.measurements}};
  if (!n.known() && !why.empty()) j["why"] = why;
  if (n.measurements == 0) return j;
  if (n.b_simple_at_least > 0) j["b_simple_at_least"] = n.b_simple_at_least;
  j["grad_sq"] = n.grad_sq;
  j["grad_sq_error"] = n.grad_sq_error;
  j["trace_sigma"] = n.trace;
  j["small_batch"] = n.small_batch;
  j["big_batch"] = n.big_batch;
  return j;
}

}  // namespace tutti::cli::detail
