// SPDX-License-Identifier: Apache-2.0
/// @file plan/noise_model.hpp
/// @brief Time to the same loss: the projection's rows under the empirical model of large-batch
/// training (McCandlish, Kaplan, Amodei et al. 2018), given the gradient noise scale B_noise
/// that `tutti train` measures (docs/ledger.md, "Time to the same loss").
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/projection.hpp>

#include <cmath>
#include <string>

namespace tutti {

/// The gradient noise scale a plan assumes.
struct noise_scale_input {
  double b_noise = 0;     ///< B_noise in samples (tutti train's B_simple), or its lower bound
  bool at_least = false;  ///< only a lower bound is known: the run did not resolve |G|²
  std::string source;     ///< where it comes from, for the report
};

/// Samples the model needs at global batch `b` to reach the loss that batch `b_ref` reaches,
/// relative to `b_ref`'s: E(b) / E(b_ref) with E(B) = E_min (1 + B / B_noise).
inline double samples_to_same_loss(double b, double b_ref, double b_noise) {
  return (1.0 + b / b_noise) / (1.0 + b_ref / b_noise);
}

/// Steps the model needs at global batch `b` to reach the loss that batch `b_ref` reaches,
/// relative to `b_ref`'s: S(b) / S(b_ref) with S(B) = S_min (1 + B_noise / B).
inline double steps_to_same_loss(double b, double b_ref, double b_noise) {
  return (1.0 + b_noise / b) / (1.0 + b_noise / b_ref);
}

/// Turns `p`'s rows into time to the same loss as the measured run's global batch reaches: each
/// row's `samples_factor` = E(B_N) / E(B_measured), its `loss_speedup` (one device's time to that
/// loss over N's), and the `useful_share` of the samples/s its added devices bring that shortens
/// it. The noise knee is the first N whose added devices bring samples/s of which less than
/// `useful_fraction` shortens the time to the same loss; `last_useful` the largest N before it.
/// Strong scaling keeps the global batch, so there every factor is 1 and no N is past the knee.
/// Throws `tutti::invalid_argument` for a noise scale or fraction out of range.
inline void apply_noise_scale(projection& p, double b_noise, double useful_fraction) {
  static constexpr const char* fn = "tutti::apply_noise_scale";
  TUTTI_EXPECTS(std::isfinite(b_noise) && b_noise > 0, fn,
                "B_noise = " + detail::num(b_noise) + "; expected samples > 0");
  TUTTI_EXPECTS(useful_fraction > 0 && useful_fraction <= 1, fn,
                "useful_fraction = " + detail::num(useful_fraction) + "; expected 0 < f <= 1");
  p.b_noise = b_noise;
  p.useful_fraction = useful_fraction;
  p.noise_knee.reset();
  p.noise_crossed_at.reset();
  const double b_ref = p.measured.global_batch;
  // One device's global batch: its own batch (weak scaling) or the whole measured one (strong).
  const double one_batch =
      p.options.scaling == scaling_mode::weak ? p.measured.per_device_batch() : b_ref;
  const double one_loss_sps =
      p.one_device_samples_per_s / samples_to_same_loss(one_batch, b_ref, b_noise);
  const projection_row* prev = nullptr;
  for (projection_row& r : p.rows) {
    r.samples_factor = samples_to_same_loss(r.global_batch, b_ref, b_noise);
    const double loss_sps = r.samples_per_s / r.samples_factor;
    r.loss_speedup = loss_sps / one_loss_sps;
    r.useful_share = 1;
    if (prev) {
      const double added = r.samples_per_s - prev->samples_per_s;
      const double useful = loss_sps - prev->samples_per_s / prev->samples_factor;
      r.useful_share = added > 0 ? useful / added : 0.0;
      if (!p.noise_knee && added > 0 && r.useful_share < useful_fraction) p.noise_knee = r.devices;
    }
    if (!p.noise_crossed_at && r.global_batch > b_noise) p.noise_crossed_at = r.devices;
    if (!p.noise_knee) p.last_useful = r.devices;
    prev = &r;
  }
}

}  // namespace tutti
