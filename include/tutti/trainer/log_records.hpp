// SPDX-License-Identifier: Apache-2.0
/// @file trainer/log_records.hpp
/// @brief The text a trainer writes: its JSON-lines records (a step, the learning rate derived
/// for the global batch) and the warning of a batch grown past its reference with no scaling.
#pragma once

#include <tutti/detail/json.hpp>
#include <tutti/schedules/scaling.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace tutti::detail {

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

/// One step's record: where it was, its loss, samples and rate, and the seconds so far.
inline std::string step_record(int rank, std::size_t epoch, std::size_t step,
                               std::size_t global_step, double loss, double samples, double lr,
                               double seconds) {
  return json{{"rank", rank},
              {"epoch", epoch},
              {"step", step},
              {"global_step", global_step},
              {"loss", json_number(loss, log_record_digits)},
              {"samples", json_number(samples, log_record_digits)},
              {"lr", json_number(lr, log_record_digits)},
              {"seconds", json_number(seconds, log_record_digits)}}
      .dump();
}

/// What the learning rate was derived from: the rule, the batches and the warmup.
struct learning_rate_facts {
  int world_size = 1;
  std::size_t global_batch = 0, reference_batch = 0, warmup_steps = 0;
  lr_scaling scaling = lr_scaling::none;
  double base_lr = 0, lr = 0;
};

/// Rank 0's record of the rate derived for the global batch.
inline std::string learning_rate_record(const learning_rate_facts& f) {
  return json{{"rank", 0},
              {"event", "learning_rate"},
              {"world_size", f.world_size},
              {"global_batch", f.global_batch},
              {"reference_batch", f.reference_batch},
              {"scaling", to_string(f.scaling)},
              {"base_lr", json_number(f.base_lr, log_record_digits)},
              {"lr", json_number(f.lr, log_record_digits)},
              {"warmup_steps", f.warmup_steps}}
      .dump();
}

/// The warning of a global batch `growth` times its reference with no scaling rule, whose local
/// batches are `local` ("512", or "511-512" when they differ).
inline std::string batch_growth_warning(const learning_rate_facts& f, double growth,
                                        const std::string& local) {
  char text[512];
  std::snprintf(text, sizeof text,
                "the global batch %zu (%zu ranks x %s) is %.3g x the reference batch %zu, "
                "and no learning-rate scaling rule is set: the run trains at the base rate "
                "%g tuned for batch %zu. Consider linear scaling with warmup (lr %g) or "
                "square-root scaling (lr %g), or a smaller batch",
                f.global_batch, static_cast<std::size_t>(f.world_size), local.c_str(), growth,
                f.reference_batch, f.base_lr, f.reference_batch, f.base_lr * growth,
                f.base_lr * std::sqrt(growth));
  return text;
}

}  // namespace tutti::detail
