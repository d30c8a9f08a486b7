// SPDX-License-Identifier: Apache-2.0
/// @file ledger/planner.hpp
/// @brief `tutti plan`'s engine: does the model fit, is there enough data to need more than one
/// device, what does the topology let N devices buy, and one verdict with its reasons.
#pragma once

#include <tutti/error.hpp>
#include <tutti/ledger/detail/format.hpp>
#include <tutti/ledger/projection.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tutti {

/// Optimizer-state size in units of the parameters: sgd 0, momentum (sgd with momentum) 1,
/// adam and adamw 2 (first and second moments). Throws `tutti::invalid_argument` otherwise.
inline double optimizer_state_factor(std::string_view optimizer) {
  if (optimizer == "sgd") return 0.0;
  if (optimizer == "momentum") return 1.0;
  if (optimizer == "adam" || optimizer == "adamw") return 2.0;
  detail::throw_invalid(
      "tutti::optimizer_state_factor",
      "unknown optimizer '" + std::string(optimizer) + "'; expected sgd, momentum, adam or adamw");
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
  /// `tutti study large-batch`, or the user); the plan warns when its N devices exceed it.
  std::optional<double> max_safe_batch{};
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

/// The planner's answer to each question and its verdict.
struct plan_result {
  plan_inputs inputs;  ///< what was asked

  // (1) Does the model fit on one device?
  double parameter_bytes = 0;   ///< params x bytes per param
  double gradient_bytes = 0;    ///< one gradient per parameter
  double optimizer_bytes = 0;   ///< optimizer state
  double activation_bytes = 0;  ///< activations of the batch
  double memory_bytes = 0;      ///< the sum of the four
  bool fits = false;            ///< memory_bytes <= device memory
  std::string fit_answer;       ///< question 1 in words

  // (2) Is there enough data to need more than one device?
  double one_device_samples_per_s = 0;  ///< throughput of one device
  double one_device_s = 0;              ///< time for all epochs on one device
  bool needs_more_than_one = false;     ///< one device misses the deadline
  std::string data_answer;              ///< question 2 in words

  // (3) What does the topology let N devices buy?
  projection proj;                     ///< the table (no rows when the model does not fit)
  std::optional<int> deadline_met_at;  ///< fewest devices meeting the deadline, if any
  std::string topology_answer;         ///< question 3 in words

  plan_verdict verdict = plan_verdict::one_device;  ///< the advice
  int devices = 1;                                  ///< devices advised (0 for model parallelism)
  std::string verdict_text;                         ///< the advice in one sentence
  std::vector<std::string> reasons;                 ///< why, one line each

  // The batch limit: the advised N's global batch against `inputs.max_safe_batch`.
  double advised_global_batch = 0;     ///< global batch at the advised N
  bool batch_exceeds_safe = false;     ///< it is above the largest safe batch
  int max_devices_within_batch = 0;    ///< most devices at the per-device batch within it
  double per_device_batch_within = 0;  ///< per-device batch at the advised N within it
  std::string batch_answer;            ///< the batch check in words (empty without a limit)
};

namespace detail::ledger_impl {

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

}  // namespace detail::ledger_impl

namespace detail::ledger_impl {

// The global batch grows with N under weak scaling (each device keeps its batch), which can
// take the run past the batch its accuracy tolerates; say so, and what to do instead.
inline void check_batch_limit(plan_result& r) {
  const plan_inputs& in = r.inputs;
  if (!in.max_safe_batch || r.devices < 1) return;
  const double limit = *in.max_safe_batch;
  TUTTI_EXPECTS(limit > 0, "tutti::plan", "max_safe_batch is not positive; expected a batch");
  const double per_device = in.step.per_device_batch();
  const projection_row* row = r.proj.row(r.devices);
  r.advised_global_batch = row ? row->global_batch : per_device * r.devices;
  r.max_devices_within_batch = static_cast<int>(std::floor(limit / per_device));
  r.per_device_batch_within = std::floor(limit / r.devices);
  r.batch_exceeds_safe = r.advised_global_batch > limit;
  if (!r.batch_exceeds_safe) {
    r.batch_answer = sfmt("the global batch at N = %d, %.0f, is within the largest safe batch %.0f",
                          r.devices, r.advised_global_batch, limit);
    return;
  }
  r.batch_answer = sfmt(
      "at N = %d the global batch is %.0f (%d x %.0f), above the largest safe batch %.0f: the "
      "model would lose accuracy. Instead: a per-device batch of at most %.0f on %d devices "
      "(each step then does less work, so the reduce weighs more), or at most %d device%s at "
      "%.0f per device. Gradient accumulation does not help here: it raises the global batch",
      r.devices, r.advised_global_batch, r.devices, per_device, limit, r.per_device_batch_within,
      r.devices, r.max_devices_within_batch, r.max_devices_within_batch == 1 ? "" : "s",
      per_device);
  r.verdict_text += sfmt("; but that global batch (%.0f) exceeds the largest safe one (%.0f)",
                         r.advised_global_batch, limit);
  r.reasons.push_back(r.batch_answer);
}

}  // namespace detail::ledger_impl

/// Answers the three questions in order and gives one verdict (docs/ledger.md, "The planner").
///
/// (1) parameters + gradients + optimizer state + activations against the device's memory:
/// more, and data parallelism cannot help (every replica holds all of it): "needs model
/// parallelism". (2) one device's time for the epochs against the deadline. (3) the projection,
/// its knee and the fewest devices that meet the deadline. Without a deadline the advice is
/// the last N before the knee. Throws `tutti::invalid_argument` on impossible inputs.
inline plan_result make_plan(const plan_inputs& in) {
  using detail::ledger_impl::bytes_text;
  using detail::ledger_impl::duration_text;
  using detail::ledger_impl::sfmt;
  static constexpr const char* fn = "tutti::make_plan";
  TUTTI_EXPECTS(std::isfinite(in.params) && in.params > 0, fn,
                "params = " + detail::ledger_impl::num(in.params) + "; expected a positive count");
  TUTTI_EXPECTS(
      in.bytes_per_param > 0, fn,
      "bytes_per_param = " + detail::ledger_impl::num(in.bytes_per_param) + "; expected > 0");
  TUTTI_EXPECTS(
      in.activation_bytes >= 0, fn,
      "activation_bytes = " + detail::ledger_impl::num(in.activation_bytes) + "; expected >= 0");
  TUTTI_EXPECTS(
      in.device_memory_bytes > 0, fn,
      "device_memory = " + detail::ledger_impl::num(in.device_memory_bytes) + "; expected > 0");
  TUTTI_EXPECTS(std::isfinite(in.epochs) && in.epochs > 0, fn,
                "epochs = " + detail::ledger_impl::num(in.epochs) + "; expected > 0");
  TUTTI_EXPECTS(
      !in.deadline_s || *in.deadline_s > 0, fn,
      "deadline = " + detail::ledger_impl::num(in.deadline_s.value_or(0)) + " s; expected > 0");

  plan_result r;
  r.inputs = in;
  // (1) memory
  r.parameter_bytes = in.params * in.bytes_per_param;
  r.gradient_bytes = r.parameter_bytes;
  r.optimizer_bytes = in.optimizer_state_bytes >= 0
                          ? in.optimizer_state_bytes
                          : optimizer_state_factor(in.optimizer) * r.parameter_bytes;
  r.activation_bytes = in.activation_bytes;
  r.memory_bytes = r.parameter_bytes + r.gradient_bytes + r.optimizer_bytes + r.activation_bytes;
  r.fits = r.memory_bytes <= in.device_memory_bytes;
  r.fit_answer = sfmt(
      "%s: parameters %s + gradients %s + optimizer state (%s) %s + activations %s = %s, "
      "against %s of device memory (%s used)",
      r.fits ? "yes" : "no", bytes_text(r.parameter_bytes).c_str(),
      bytes_text(r.gradient_bytes).c_str(), in.optimizer.c_str(),
      bytes_text(r.optimizer_bytes).c_str(), bytes_text(r.activation_bytes).c_str(),
      bytes_text(r.memory_bytes).c_str(), bytes_text(in.device_memory_bytes).c_str(),
      detail::ledger_impl::pct(r.memory_bytes / in.device_memory_bytes).c_str());

  // (2) data: one device's time for the epochs (the projection's baseline row)
  projection_options one_opts = in.projection;
  one_opts.devices = {1};
  const projection one = project(in.step, one_opts);
  const projection_row& r1 = one.rows.front();
  r.one_device_samples_per_s = r1.samples_per_s;
  r.one_device_s = in.epochs * r1.epoch_s;
  r.needs_more_than_one = in.deadline_s && r.one_device_s > *in.deadline_s;
  const std::string work =
      sfmt("%s samples x %g epoch%s at %s samples/s take %s on one device",
           detail::ledger_impl::count_text(in.step.samples_per_epoch).c_str(), in.epochs,
           in.epochs == 1 ? "" : "s", detail::ledger_impl::figure(r1.samples_per_s).c_str(),
           duration_text(r.one_device_s).c_str());
  if (!in.deadline_s)
    r.data_answer = "no deadline given: " + work;
  else
    r.data_answer =
        sfmt("%s: %s, %s the deadline of %s", r.needs_more_than_one ? "yes" : "no", work.c_str(),
             r.needs_more_than_one ? "past" : "within", duration_text(*in.deadline_s).c_str());

  // (3) topology
  const std::string topo = detail::ledger_impl::topology_text(in.projection);
  if (!r.fits) {
    r.proj = one;
    r.proj.rows.clear();
    r.topology_answer =
        "not applicable: data parallelism replicates the whole model, so every one of N "
        "devices would still need " +
        bytes_text(r.memory_bytes) + "; N devices buy throughput, not memory";
    r.verdict = plan_verdict::needs_model_parallelism;
    r.devices = 0;
    r.verdict_text =
        "needs model parallelism: the model does not fit one device, and data parallelism "
        "cannot make it fit";
    r.reasons.push_back(sfmt("one replica needs %s but a device holds %s (%.2fx over)",
                             bytes_text(r.memory_bytes).c_str(),
                             bytes_text(in.device_memory_bytes).c_str(),
                             r.memory_bytes / in.device_memory_bytes));
    r.reasons.push_back(
        "splitting the model (tensor, pipeline or sharded-state parallelism such as ZeRO/FSDP) "
        "is out of tutti's scope");
    if (r.optimizer_bytes > 0 && r.memory_bytes - r.optimizer_bytes <= in.device_memory_bytes)
      r.reasons.push_back(
          sfmt("without the optimizer's %s of state (sgd) it would need %s and fit: a stateless "
               "optimizer is the one change that brings it back to data parallelism",
               bytes_text(r.optimizer_bytes).c_str(),
               bytes_text(r.memory_bytes - r.optimizer_bytes).c_str()));
    return r;
  }

  r.proj = project(in.step, in.projection);
  const projection& p = r.proj;
  if (in.deadline_s)
    for (const auto& row : p.rows)
      if (in.epochs * row.epoch_s <= *in.deadline_s) {
        r.deadline_met_at = row.devices;
        break;
      }
  const projection_row* best = p.row(p.last_worthwhile);
  r.topology_answer = sfmt("on %s, %s scaling: ", topo.c_str(), to_string(p.options.scaling));
  if (p.knee) {
    const projection_row* k = p.row(*p.knee);
    r.topology_answer += sfmt(
        "the knee is at N = %d: the devices added to reach it bring %s of one device's "
        "throughput each (under %s)",
        *p.knee,
        detail::ledger_impl::pct(k->gain_per_added_device / p.one_device_samples_per_s).c_str(),
        detail::ledger_impl::pct(p.options.knee_fraction).c_str());
    if (p.last_worthwhile > 1)
      r.topology_answer +=
          sfmt("; N = %d, the last before it, reaches %.2fx at %s efficiency", p.last_worthwhile,
               best->speedup, detail::ledger_impl::pct(best->efficiency).c_str());
    const projection_row& last = p.rows.back();
    if (last.devices > *p.knee)
      r.topology_answer += sfmt("; N = %d would reach %.2fx at %s efficiency", last.devices,
                                last.speedup, detail::ledger_impl::pct(last.efficiency).c_str());
  } else
    r.topology_answer +=
        sfmt("no knee up to N = %d (%.2fx at %s efficiency)", p.rows.back().devices,
             p.rows.back().speedup, detail::ledger_impl::pct(p.rows.back().efficiency).c_str());

  r.reasons.push_back(sfmt("it fits: %s of %s", bytes_text(r.memory_bytes).c_str(),
                           bytes_text(in.device_memory_bytes).c_str()));
  const auto describe = [&](const projection_row& row) {
    return sfmt("%d devices: %.2fx, %s efficiency, %s for %g epoch%s, %s per epoch (1 device: %s)",
                row.devices, row.speedup, detail::ledger_impl::pct(row.efficiency).c_str(),
                duration_text(in.epochs * row.epoch_s).c_str(), in.epochs,
                in.epochs == 1 ? "" : "s", detail::ledger_impl::figure(row.cost_per_epoch).c_str(),
                detail::ledger_impl::figure(p.rows.front().cost_per_epoch).c_str());
  };
  const auto knee_reason = [&] {
    if (!p.knee) return;
    const projection_row* k = p.row(*p.knee);
    r.reasons.push_back(sfmt(
        "past N = %d the devices added to reach %d bring %s samples/s each, %s of one "
        "device's %s (the %s knee), at %s per hour per extra sample/s",
        p.last_worthwhile, *p.knee, detail::ledger_impl::figure(k->gain_per_added_device).c_str(),
        detail::ledger_impl::pct(k->gain_per_added_device / p.one_device_samples_per_s).c_str(),
        detail::ledger_impl::figure(p.one_device_samples_per_s).c_str(),
        detail::ledger_impl::pct(p.options.knee_fraction).c_str(),
        detail::ledger_impl::figure(k->marginal_cost).c_str()));
  };

  if (in.deadline_s && !r.needs_more_than_one) {
    r.verdict = plan_verdict::one_device;
    r.devices = 1;
    r.verdict_text =
        sfmt("one device: it finishes in %s, within the deadline of %s",
             duration_text(r.one_device_s).c_str(), duration_text(*in.deadline_s).c_str());
    r.reasons.push_back(r.data_answer);
    if (const projection_row* two = p.row(2))
      r.reasons.push_back(sfmt(
          "a second device would save %s but cost %s more per epoch (%.2fx at %s efficiency)",
          duration_text(r.one_device_s - in.epochs * two->epoch_s).c_str(),
          detail::ledger_impl::pct(two->cost_per_epoch / p.rows.front().cost_per_epoch - 1).c_str(),
          two->speedup, detail::ledger_impl::pct(two->efficiency).c_str()));
  } else if (in.deadline_s && r.deadline_met_at) {
    const projection_row& row = *p.row(*r.deadline_met_at);
    r.verdict = plan_verdict::data_parallel;
    r.devices = row.devices;
    r.verdict_text =
        sfmt("data parallel on %d devices: the fewest that finish within %s (%s)", row.devices,
             duration_text(*in.deadline_s).c_str(), duration_text(in.epochs * row.epoch_s).c_str());
    r.reasons.push_back(r.data_answer);
    r.reasons.push_back(describe(row));
    if (p.knee && row.devices >= *p.knee) {
      r.reasons.push_back(
          sfmt("the deadline forces N = %d, at or past the knee (N = %d)", row.devices, *p.knee));
      knee_reason();
    }
  } else if (in.deadline_s) {
    const projection_row& row = *best;
    r.verdict = plan_verdict::data_parallel;
    r.devices = row.devices;
    r.verdict_text = sfmt(
        "data parallel on %d devices, but the deadline of %s is out of reach on this topology: "
        "%d devices take %s",
        row.devices, duration_text(*in.deadline_s).c_str(), row.devices,
        duration_text(in.epochs * row.epoch_s).c_str());
    r.reasons.push_back(r.data_answer);
    r.reasons.push_back(describe(row));
    double fastest = std::numeric_limits<double>::infinity();
    int fastest_n = 1;
    for (const auto& x : p.rows)
      if (in.epochs * x.epoch_s < fastest) {
        fastest = in.epochs * x.epoch_s;
        fastest_n = x.devices;
      }
    r.reasons.push_back(sfmt(
        "no N up to %d meets it; the fastest, N = %d, takes %s: a faster link, more samples per "
        "device and step, or fewer epochs must make up the rest",
        p.rows.back().devices, fastest_n, duration_text(fastest).c_str()));
    knee_reason();
  } else if (p.last_worthwhile == 1) {
    r.verdict = plan_verdict::one_device;
    r.devices = 1;
    r.verdict_text = "one device: a second one would add less than " +
                     detail::ledger_impl::pct(p.options.knee_fraction) +
                     " of a device's throughput";
    r.reasons.push_back(r.data_answer);
    knee_reason();
  } else {
    const projection_row& row = *best;
    r.verdict = plan_verdict::data_parallel;
    r.devices = row.devices;
    r.verdict_text = sfmt(
        "data parallel on %d devices: the most that each still add at least %s of a device's "
        "throughput",
        row.devices, detail::ledger_impl::pct(p.options.knee_fraction).c_str());
    r.reasons.push_back(r.data_answer);
    r.reasons.push_back(describe(row));
    knee_reason();
  }
  detail::ledger_impl::check_batch_limit(r);
  return r;
}

/// The plan as the text report `tutti plan` prints: the inputs, the three questions with
/// their numbers, the projection table, the verdict and its reasons.
inline std::string format_plan(const plan_result& r) {
  using detail::ledger_impl::sfmt;
  const plan_inputs& in = r.inputs;
  const measured_step& s = in.step;
  std::string out = "tutti plan\n";
  out += sfmt("  model: %s parameters x %g B, %s; activations %s per device\n",
              detail::ledger_impl::count_text(in.params).c_str(), in.bytes_per_param,
              in.optimizer.c_str(), detail::ledger_impl::bytes_text(in.activation_bytes).c_str());
  out += sfmt(
      "  step (one device of a %d-device run): %s = data %s + compute %s + optimizer %s + reduce "
      "%s exposed of %s; %g samples per device; %s reduced per step\n",
      s.world_size, detail::ledger_impl::duration_text(s.step_s()).c_str(),
      detail::ledger_impl::duration_text(s.data_s).c_str(),
      detail::ledger_impl::duration_text(s.compute_s).c_str(),
      detail::ledger_impl::duration_text(s.optimizer_s).c_str(),
      detail::ledger_impl::duration_text(s.reduce_exposed_s).c_str(),
      detail::ledger_impl::duration_text(s.reduce_total_s).c_str(), s.per_device_batch(),
      detail::ledger_impl::bytes_text(s.bytes_reduced).c_str());
  out += "  topology: " + detail::ledger_impl::topology_text(in.projection) + "\n";
  out += sfmt("  price: %g per device-hour%s\n", in.projection.price_per_device_hour,
              in.projection.price_per_device_hour == 1.0 ? " (cost columns = device-hours)" : "");
  out += "\n1. Does the model fit on one device?\n   " + r.fit_answer + "\n";
  out += "\n2. Is there enough data to need more than one device?\n   " + r.data_answer + "\n";
  out += "\n3. What does the topology let N devices buy?\n   " + r.topology_answer + "\n";
  if (!r.proj.rows.empty()) out += "\n" + format_projection_table(r.proj);
  out += "\nverdict: " + r.verdict_text + "\n";
  for (const auto& reason : r.reasons) out += "  - " + reason + "\n";
  return out;
}

/// The plan as JSON: {verdict, devices, verdict_text, reasons[], questions{fits, data,
/// topology}, rows[{devices, nodes, algorithm, step_s, samples_per_s, speedup, efficiency,
/// reduce_total_s, reduce_exposed_s, threads_per_rank, host_factor, sync_s,
/// device_hours_per_epoch, cost_per_epoch, marginal_cost}],
/// knee, last_worthwhile, deadline_met_at}. Infinite marginal costs and absent values are null.
inline std::string plan_to_json(const plan_result& r) {
  using detail::ledger_impl::json_number;
  using detail::ledger_impl::json_string;
  const auto opt_int = [](const std::optional<int>& v) {
    return v ? std::to_string(*v) : std::string("null");
  };
  const plan_inputs& in = r.inputs;
  std::string j = "{\n";
  j += "  \"verdict\": " + json_string(to_string(r.verdict)) + ",\n";
  j += "  \"devices\": " + std::to_string(r.devices) + ",\n";
  j += "  \"verdict_text\": " + json_string(r.verdict_text) + ",\n";
  j += "  \"reasons\": [";
  for (std::size_t i = 0; i < r.reasons.size(); ++i)
    j += (i ? ", " : "") + json_string(r.reasons[i]);
  j += "],\n  \"batch\": ";
  if (in.max_safe_batch)
    j += "{\"max_safe_batch\": " + json_number(*in.max_safe_batch) +
         ", \"global_batch\": " + json_number(r.advised_global_batch) +
         ", \"exceeds\": " + (r.batch_exceeds_safe ? "true" : "false") +
         ", \"max_devices_within\": " + std::to_string(r.max_devices_within_batch) +
         ", \"per_device_batch_within\": " + json_number(r.per_device_batch_within) +
         ", \"answer\": " + json_string(r.batch_answer) + "}";
  else
    j += "null";
  j += ",\n  \"questions\": {\n";
  j += "    \"fits\": {\"answer\": " + json_string(r.fit_answer) +
       ", \"fits\": " + (r.fits ? "true" : "false") +
       ", \"parameter_bytes\": " + json_number(r.parameter_bytes) +
       ", \"gradient_bytes\": " + json_number(r.gradient_bytes) +
       ", \"optimizer_bytes\": " + json_number(r.optimizer_bytes) +
       ", \"activation_bytes\": " + json_number(r.activation_bytes) +
       ", \"memory_bytes\": " + json_number(r.memory_bytes) +
       ", \"device_memory_bytes\": " + json_number(in.device_memory_bytes) + "},\n";
  j += "    \"data\": {\"answer\": " + json_string(r.data_answer) +
       ", \"needs_more_than_one\": " + (r.needs_more_than_one ? "true" : "false") +
       ", \"one_device_samples_per_s\": " + json_number(r.one_device_samples_per_s) +
       ", \"one_device_s\": " + json_number(r.one_device_s) +
       ", \"deadline_s\": " + (in.deadline_s ? json_number(*in.deadline_s) : "null") +
       ", \"samples_per_epoch\": " + json_number(in.step.samples_per_epoch) +
       ", \"epochs\": " + json_number(in.epochs) + "},\n";
  const projection_options& o = in.projection;
  j += "    \"topology\": {\"answer\": " + json_string(r.topology_answer) +
       ", \"devices_per_node\": " + std::to_string(o.devices_per_node) +
       ", \"intra\": " + link_profile_json(o.intra) + ", \"inter\": " + link_profile_json(o.inter) +
       ", \"nics_per_node\": " + std::to_string(o.nics_per_node) +
       ", \"scaling\": " + json_string(to_string(o.scaling)) +
       ", \"exposed_ratio\": " + json_number(r.proj.exposed_ratio) +
       ", \"price_per_device_hour\": " + json_number(o.price_per_device_hour) +
       ", \"knee_fraction\": " + json_number(o.knee_fraction) + ", \"shared_host\": " +
       (o.host.enabled()
            ? "{\"cores\": " + json_number(o.host.cores) + ", \"available_cores\": " +
                  json_number(o.host.available()) + ", \"measured_threads\": " +
                  json_number(o.host.measured_threads > 0
                                  ? o.host.measured_threads
                                  : o.host.threads_per_rank(
                                        std::min(in.step.world_size, o.devices_per_node))) +
                  ", \"thread_speedup\": {\"data\": " + json_number(o.host.thread_speedup.data) +
                  ", \"compute\": " + json_number(o.host.thread_speedup.compute) +
                  ", \"optimizer\": " + json_number(o.host.thread_speedup.optimizer) + "}" +
                  ", \"sync_s\": " + json_number(o.host.sync_s) + "}"
            : std::string("null")) +
       "}\n  },\n";
  j += "  \"rows\": [";
  for (std::size_t i = 0; i < r.proj.rows.size(); ++i) {
    const projection_row& x = r.proj.rows[i];
    j += std::string(i ? "," : "") + "\n    {\"devices\": " + std::to_string(x.devices) +
         ", \"nodes\": " + std::to_string(x.nodes) +
         ", \"algorithm\": " + json_string(to_string(x.algorithm)) +
         ", \"global_batch\": " + json_number(x.global_batch) +
         ", \"step_s\": " + json_number(x.step_s) +
         ", \"samples_per_s\": " + json_number(x.samples_per_s) +
         ", \"speedup\": " + json_number(x.speedup) +
         ", \"efficiency\": " + json_number(x.efficiency) +
         ", \"reduce_total_s\": " + json_number(x.reduce_total_s) +
         ", \"reduce_exposed_s\": " + json_number(x.reduce_exposed_s) +
         ", \"threads_per_rank\": " + json_number(x.threads_per_rank) +
         ", \"host_factor\": " + json_number(x.host_factor) +
         ", \"sync_s\": " + json_number(x.sync_s) + ", \"epoch_s\": " + json_number(x.epoch_s) +
         ", \"device_hours_per_epoch\": " + json_number(x.device_hours_per_epoch) +
         ", \"cost_per_epoch\": " + json_number(x.cost_per_epoch) +
         ", \"marginal_cost\": " + json_number(x.marginal_cost) + "}";
  }
  j += r.proj.rows.empty() ? "],\n" : "\n  ],\n";
  j += "  \"knee\": " + opt_int(r.proj.knee) + ",\n";
  j += "  \"last_worthwhile\": " +
       (r.proj.rows.empty() ? std::string("null") : std::to_string(r.proj.last_worthwhile)) + ",\n";
  j += "  \"deadline_met_at\": " + opt_int(r.deadline_met_at) + "\n}\n";
  return j;
}

}  // namespace tutti
