// SPDX-License-Identifier: Apache-2.0
/// @file plan/plan_types.hpp
/// @brief What the planner is asked (`tutti::plan_inputs`) and what it answers
/// (`tutti::plan_result`: the three questions, the verdict and its named reasons).
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/memory_accounts.hpp>
#include <tutti/plan/noise_model.hpp>
#include <tutti/plan/projection.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tutti {

/// Optimizer-state size in units of the parameters: sgd 0, momentum (sgd with momentum) and
/// row-sparse-sgd (its momentum) 1, adam, adamw and lazy-adam 2 (first and second moments).
/// Throws `tutti::invalid_argument` otherwise: rowwise-adagrad keeps one value per row, which a
/// factor cannot say (give its state in bytes; a train report carries its optimizer's state size
/// itself).
inline double optimizer_state_factor(std::string_view optimizer) {
  if (optimizer == "sgd") return 0.0;
  if (optimizer == "momentum" || optimizer == "row-sparse-sgd") return 1.0;
  if (optimizer == "adam" || optimizer == "adamw" || optimizer == "lazy-adam") return 2.0;
  detail::throw_invalid("tutti::optimizer_state_factor",
                        "unknown optimizer '" + std::string(optimizer) +
                            "'; expected sgd, momentum, row-sparse-sgd, adam, adamw or lazy-adam "
                            "(rowwise-adagrad: give its state in bytes, one value per row)");
}

/// What the planner is asked about: the model, the data, the deadline and a measured (or
/// estimated) step of one run, plus the projection's topology and price.
struct plan_inputs {
  double params = 0;                   ///< trainable parameters
  double bytes_per_param = 4;          ///< bytes per parameter value (and per gradient value)
  std::string optimizer = "adam";      ///< its name, for the report
  double optimizer_state_bytes = -1;   ///< bytes of optimizer state; < 0: factor x params x bpp
  double activation_bytes = 0;         ///< activations of one device's batch, bytes
  double device_memory_bytes = 80e9;   ///< memory of one device, bytes
  double epochs = 1;                   ///< passes over the data the user wants
  std::optional<double> deadline_s{};  ///< time the training must fit in, seconds
  measured_step step;                  ///< one step: accounts, bytes, batch, samples per epoch
  projection_options projection{};     ///< topology, sweep, scaling, price, knee fraction
  /// The largest global batch known to keep the model's accuracy (from a large-batch study,
  /// `tutti study large-batch`, or the user); the plan advises no N whose global batch exceeds it.
  std::optional<double> max_safe_batch{};
  /// Without a deadline, the longest job (all epochs on one device) worth no more devices,
  /// seconds: a job one device finishes within it stays on one device, a longer one takes the
  /// fewest devices that bring it within it, never past the knee.
  double reasonable_s = 3600.0;
  /// The fewest steps an epoch must keep: no N is advised whose global batch exceeds samples per
  /// epoch / this (0: no such limit).
  double min_steps_per_epoch = 50.0;
  /// The gradient noise scale (`tutti train` measures it): when resolved, every N's job is its
  /// time to the loss the measured global batch reaches in `epochs`, and no N is advised past
  /// the noise knee without a deadline (plan/noise_model.hpp); a lower bound is reported only.
  std::optional<noise_scale_input> noise_scale{};
  /// A device is worth adding while at least this share of the samples/s it brings shortens the
  /// time to the same loss.
  double useful_fraction = 0.2;
  /// The run's memory forecast from the trainer's accounts (`tutti plan --host`): "does it fit"
  /// then weighs its peak against `device_memory_bytes` (the host's memory) instead of
  /// parameters + gradients + optimizer state + activations.
  std::optional<memory_forecast> memory{};
  /// The peak resident bytes a run of the same shape measured (`--from` a host run's report),
  /// shown beside the forecast; 0: none.
  double measured_peak_bytes = 0;
};

/// Why the verdict is what it is: a name a script can match and a sentence a person reads
/// (docs/ledger.md, "Limits and reasons").
struct plan_reason {
  std::string name;  ///< e.g. "reasonable_time", "deadline", "knee", "min_steps_per_epoch"
  std::string text;  ///< the sentence, with its numbers
};

/// The planner's verdict.
enum class plan_verdict {
  one_device,               ///< one device does the job
  data_parallel,            ///< data parallel on `plan_result::devices` devices
  needs_model_parallelism,  ///< the model does not fit one device: out of tutti's scope
};

/// "one_device", "data_parallel" or "needs_model_parallelism".
inline const char* to_string(plan_verdict v) noexcept {
  switch (v) {
    case plan_verdict::one_device:
      return "one_device";
    case plan_verdict::data_parallel:
      return "data_parallel";
    case plan_verdict::needs_model_parallelism:
      break;
  }
  return "needs_model_parallelism";
}

/// The verdict the other scaling mode would give (weak against strong), with its rows.
struct plan_alternative {
  projection proj;                                  ///< its projection
  double one_device_s = 0;                          ///< one device's time for all epochs
  plan_verdict verdict = plan_verdict::one_device;  ///< its advice
  int devices = 1;                                  ///< devices it advises
  std::string verdict_text;                         ///< the advice in one sentence
  std::vector<plan_reason> binding;                 ///< the limits that set it
};

/// The planner's answer to each question and its verdict.
struct plan_result {
  plan_inputs inputs;  ///< what was asked

  // (1) Does the model fit on one device?
  double parameter_bytes = 0;   ///< params x bytes per param
  double gradient_bytes = 0;    ///< one gradient per parameter
  double optimizer_bytes = 0;   ///< optimizer state
  double activation_bytes = 0;  ///< activations of the batch
  double memory_bytes = 0;      ///< the sum of the four (with a forecast: its peak)
  double other_bytes = 0;       ///< with a forecast: the rows, buffers, data and program
  bool fits = false;            ///< memory_bytes <= device memory
  std::string fit_answer;       ///< question 1 in words

  // (2) Is there enough data to need more than one device?
  double one_device_samples_per_s = 0;  ///< throughput of one device
  double one_device_s = 0;              ///< time for all epochs on one device
  /// One device misses the deadline (without one: takes longer than the reasonable time).
  bool needs_more_than_one = false;
  std::string data_answer;  ///< question 2 in words

  // (3) What does the topology let N devices buy?
  projection proj;                     ///< the table (no rows when the model does not fit)
  std::optional<int> deadline_met_at;  ///< fewest devices meeting the deadline, if any
  std::string topology_answer;         ///< question 3 in words

  plan_verdict verdict = plan_verdict::one_device;  ///< the advice
  int devices = 1;                                  ///< devices advised (0 for model parallelism)
  std::string verdict_text;                         ///< the advice in one sentence
  std::vector<std::string> reasons;   ///< why, one line each (binding ones "[name] ...")
  std::vector<plan_reason> binding;   ///< the limits that set the verdict, named
  std::vector<plan_reason> cautions;  ///< what to check before trusting it, named

  // The limits on N (docs/ledger.md, "Limits and reasons").
  double max_batch_from_data = 0;     ///< samples per epoch / min steps per epoch (inf: none)
  std::optional<int> wanted_devices;  ///< fewest N meeting the deadline or reasonable time, limits
                                      ///< aside (1 when one device does)

  // The batch limit: the advised N's global batch against `inputs.max_safe_batch`.
  double advised_global_batch = 0;     ///< global batch at the advised N
  bool batch_exceeds_safe = false;     ///< it is above the largest safe batch (only at N = 1)
  int max_devices_within_batch = 0;    ///< most devices at the per-device batch within it
  double per_device_batch_within = 0;  ///< per-device batch within it at the N wanted
  std::string batch_answer;            ///< the batch check in words (empty without a limit)

  /// (4) How large a batch is still useful: the noise scale's answer, and against the largest
  /// safe batch when both are known (which binds).
  std::string noise_answer;

  /// The same plan under the other scaling mode, when its rows differ from `proj`'s.
  std::optional<plan_alternative> other_scaling;
};

namespace detail::plan {

inline std::string pct(double v) {
  return sfmt("%.0f%%", 100.0 * v);
}

inline std::string topology_text(const projection_options& o) {
  std::string s = sfmt("%d device%s per node over %s (%.4g GB/s, %.3g us)", o.devices_per_node,
                       o.devices_per_node == 1 ? "" : "s", o.intra.name.c_str(), o.intra.gb_per_s,
                       o.intra.latency_us);
  s += sfmt(", nodes over %s (%.4g GB/s, %.3g us)", o.inter.name.c_str(), o.inter.gb_per_s,
            o.inter.latency_us);
  if (o.nics_per_node > 1) s += sfmt(" x %d ports", o.nics_per_node);
  if (o.host.enabled())
    s += sfmt("; ranks share a host of %.3g cores per node (%.3g available)", o.host.cores,
              o.host.available());
  return s;
}

}  // namespace detail::plan

}  // namespace tutti
