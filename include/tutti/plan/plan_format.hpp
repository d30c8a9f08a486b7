// SPDX-License-Identifier: Apache-2.0
/// @file plan/plan_format.hpp
/// @brief The plan as `tutti plan` prints it (`format_plan`, with the whole job on each N) and as
/// JSON (`plan_to_json`).
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/plan/detail/plan_verdict.hpp>
#include <tutti/plan/plan_types.hpp>
#include <tutti/plan/projection.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace tutti {

/// The whole job on each N of `p` as a text table: global batch, steps per epoch, the job's
/// time, the time it saves and the money it costs against one device (whose job takes `one_s`),
/// the limits the row is beyond, and `*` on the advised N.
inline std::string format_plan_job_table(const plan_inputs& in, const projection& p, double one_s,
                                         int advised) {
  namespace f = detail::plan;
  const double price = p.options.price_per_device_hour;
  const double one_cost = one_s / 3600.0 * price;
  std::string out =
      detail::sfmt("  %7s %12s %11s %10s %10s %11s %11s  %s\n", "devices", "global batch",
                   "steps/epoch", "job", "saved", "job cost", "extra cost", "beyond");
  for (const auto& x : p.rows) {
    std::string beyond;
    for (const auto& name : f::row_limits(in, p, x)) {
      if (!beyond.empty()) beyond += ", ";
      beyond += name == "min_steps_per_epoch"
                    ? detail::sfmt("steps/epoch < %g", in.min_steps_per_epoch)
                : name == "max_safe_batch" ? detail::sfmt("batch > %.0f", *in.max_safe_batch)
                : name == "noise_knee"     ? std::string("the noise knee")
                                           : std::string("the knee");
    }
    const double job = f::job_seconds(in, x);
    const double cost = f::job_cost(in, x);
    std::string line = detail::sfmt(
        "%s %7d %12s %11.0f %10s %10s %11s %11s  %s", x.devices == advised ? "*" : " ", x.devices,
        detail::count_text(x.global_batch).c_str(), x.steps_per_epoch,
        detail::duration_text(job).c_str(), f::signed_duration(one_s - job).c_str(),
        detail::figure(cost).c_str(), detail::figure(cost - one_cost).c_str(), beyond.c_str());
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  const std::string job =
      p.b_noise ? detail::sfmt("the time to the loss %g epoch%s at the measured batch %s reach%s",
                               in.epochs, in.epochs == 1 ? "" : "s",
                               detail::count_text(p.measured.global_batch).c_str(),
                               in.epochs == 1 ? "es" : "")
                : detail::sfmt("%g epoch%s", in.epochs, in.epochs == 1 ? "" : "s");
  out += detail::sfmt(
      "(the whole job, %s, %s scaling; saved and extra cost against one device; beyond: the "
      "limits a row exceeds; * the advised N)\n",
      job.c_str(), to_string(p.options.scaling));
  return out;
}

/// The plan as the text report `tutti plan` prints: the inputs, the three questions with
/// their numbers, the projection table, each N's time saved and money spent, the other scaling
/// mode's verdict when it differs, the verdict and its reasons.
inline std::string format_plan(const plan_result& r) {
  using detail::sfmt;
  const plan_inputs& in = r.inputs;
  const measured_step& s = in.step;
  std::string out = "tutti plan\n";
  out += sfmt("  model: %s parameters x %g B, %s; activations %s per device\n",
              detail::count_text(in.params).c_str(), in.bytes_per_param, in.optimizer.c_str(),
              detail::bytes_text(in.activation_bytes).c_str());
  out += sfmt(
      "  step (one device of a %d-device run): %s = data %s + compute %s + optimizer %s + reduce "
      "%s exposed of %s; %g samples per device; %s reduced per step\n",
      s.world_size, detail::duration_text(s.step_s()).c_str(),
      detail::duration_text(s.data_s).c_str(), detail::duration_text(s.compute_s).c_str(),
      detail::duration_text(s.optimizer_s).c_str(),
      detail::duration_text(s.reduce_exposed_s).c_str(),
      detail::duration_text(s.reduce_total_s).c_str(), s.per_device_batch(),
      detail::bytes_text(s.bytes_reduced).c_str());
  out += "  topology: " + detail::plan::topology_text(in.projection) + "\n";
  out += sfmt("  price: %g per device-hour%s\n", in.projection.price_per_device_hour,
              in.projection.price_per_device_hour == 1.0 ? " (cost columns = device-hours)" : "");
  out += r.inputs.memory ? "\n1. Does the run fit this host's memory?\n   "
                         : "\n1. Does the model fit on one device?\n   ";
  out += r.fit_answer + "\n";
  out += "\n2. Is there enough data to need more than one device?\n   " + r.data_answer + "\n";
  out += "\n3. What does the topology let N devices buy?\n   " + r.topology_answer + "\n";
  if (!r.noise_answer.empty())
    out += "\n4. How large a global batch still buys progress?\n   " + r.noise_answer + "\n";
  if (!r.proj.rows.empty()) {
    out += "\n" + format_projection_table(r.proj);
    out += sfmt("\nlimits: at least %g steps per epoch (a global batch of at most %s)",
                in.min_steps_per_epoch, detail::count_text(r.max_batch_from_data).c_str());
    if (in.max_safe_batch) out += sfmt("; the largest safe batch %.0f", *in.max_safe_batch);
    if (r.proj.b_noise)
      out += sfmt("; without a deadline, no N past the noise knee (%.0f%% useful)",
                  100.0 * r.proj.useful_fraction);
    if (!in.deadline_s)
      out +=
          "; no deadline, so a job is reasonable within " + detail::duration_text(in.reasonable_s);
    out += "\n" + format_plan_job_table(in, r.proj, r.one_device_s, r.devices);
  }
  if (r.other_scaling) {
    const plan_alternative& a = *r.other_scaling;
    out +=
        sfmt("\nunder %s scaling: %s\n", to_string(a.proj.options.scaling), a.verdict_text.c_str());
    out += format_plan_job_table(in, a.proj, a.one_device_s, a.devices);
  }
  out += "\nverdict: " + r.verdict_text + "\n";
  for (const auto& reason : r.reasons) out += "  - " + reason + "\n";
  return out;
}

namespace detail::plan {

inline std::string reasons_json(const std::vector<plan_reason>& v) {
  std::string j = "[";
  for (std::size_t i = 0; i < v.size(); ++i)
    j += std::string(i ? ", " : "") + "{\"name\": " + json_string(v[i].name) +
         ", \"text\": " + json_string(v[i].text) + "}";
  return j + "]";
}

// A row's whole-job fields: per_device_batch, steps_per_epoch, job_s, time_saved_s, job_cost,
// extra_cost, beyond[] (the limits it exceeds).
inline std::string job_json(const plan_inputs& in, const projection& p, const projection_row& x,
                            double one_s) {
  const double price = p.options.price_per_device_hour;
  std::string beyond = "[";
  for (const auto& name : row_limits(in, p, x))
    beyond += std::string(beyond.size() > 1 ? ", " : "") + json_string(name);
  return ", \"per_device_batch\": " + json_number(x.per_device_batch, report_digits) +
         ", \"steps_per_epoch\": " + json_number(x.steps_per_epoch, report_digits) +
         ", \"job_s\": " + json_number(job_seconds(in, x), report_digits) +
         ", \"time_saved_s\": " + json_number(one_s - job_seconds(in, x), report_digits) +
         ", \"job_cost\": " + json_number(job_cost(in, x), report_digits) + ", \"extra_cost\": " +
         json_number(job_cost(in, x) - one_s / 3600.0 * price, report_digits) +
         ", \"samples_factor\": " + json_number(x.samples_factor, report_digits) +
         ", \"loss_speedup\": " + json_number(x.loss_speedup, report_digits) +
         ", \"useful_share\": " + json_number(x.useful_share, report_digits) +
         ", \"beyond\": " + beyond + "]";
}

}  // namespace detail::plan

namespace detail::plan {

// A memory forecast as JSON: the trainer's accounts, what the program holds beside them, and
// the peak, in bytes (exact integers).
inline std::string forecast_json(const memory_forecast& f) {
  const auto n = [](std::uint64_t v) {
    return std::to_string(v);
  };
  const memory_accounts& t = f.trainer;
  return "{\"parameters\": " + n(t.parameters) + ", \"gradients\": " + n(t.gradients) +
         ", \"optimizer_state\": " + n(t.optimizer_state) + ", \"rows\": " + n(t.rows) +
         ", \"step_buffers\": " + n(t.step_buffers) + ", \"shard\": " + n(t.shard) +
         ", \"trainer_total\": " + n(t.total()) + ", \"data\": " + n(f.data) +
         ", \"building\": " + n(f.building) + ", \"loading\": " + n(f.loading) +
         ", \"process\": " + n(f.process) + ", \"peak\": " + n(f.peak()) + "}";
}

}  // namespace detail::plan

/// The plan as JSON: {verdict, devices, verdict_text, reasons[], binding[{name, text}],
/// cautions[{name, text}], limits{reasonable_s, min_steps_per_epoch, max_batch_from_data,
/// max_safe_batch, wanted_devices}, batch, questions{fits, data, topology}, rows[{devices, nodes,
/// algorithm, global_batch, step_s, samples_per_s, speedup, efficiency, reduce_total_s,
/// reduce_exposed_s, threads_per_rank, host_factor, sync_s, epoch_s, device_hours_per_epoch,
/// cost_per_epoch, marginal_cost, per_device_batch, steps_per_epoch, job_s, time_saved_s,
/// job_cost, extra_cost, samples_factor, loss_speedup, useful_share, beyond[]}],
/// other_scaling{scaling, verdict, devices, verdict_text, binding[], one_device_s,
/// rows[{devices, global_batch, ...whole-job fields}]}, knee, last_worthwhile, deadline_met_at,
/// noise_scale{b_noise, at_least, source, useful_fraction, noise_knee, last_useful, crossed_at,
/// answer} or null}. With a resolved noise scale the whole-job fields are to the same loss.
/// Infinite marginal costs and absent values are null.
inline std::string plan_to_json(const plan_result& r) {
  using detail::json_number;
  using detail::json_string;
  using detail::report_digits;
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
  j += "],\n  \"binding\": " + detail::plan::reasons_json(r.binding);
  j += ",\n  \"cautions\": " + detail::plan::reasons_json(r.cautions);
  j += ",\n  \"limits\": {\"reasonable_s\": " + json_number(in.reasonable_s, report_digits) +
       ", \"min_steps_per_epoch\": " + json_number(in.min_steps_per_epoch, report_digits) +
       ", \"max_batch_from_data\": " + json_number(r.max_batch_from_data, report_digits) +
       ", \"max_safe_batch\": " +
       (in.max_safe_batch ? json_number(*in.max_safe_batch, report_digits) : "null") +
       ", \"wanted_devices\": " + opt_int(r.wanted_devices) + "}";
  j += ",\n  \"batch\": ";
  if (in.max_safe_batch)
    j += "{\"max_safe_batch\": " + json_number(*in.max_safe_batch, report_digits) +
         ", \"global_batch\": " + json_number(r.advised_global_batch, report_digits) +
         ", \"exceeds\": " + (r.batch_exceeds_safe ? "true" : "false") +
         ", \"max_devices_within\": " + std::to_string(r.max_devices_within_batch) +
         ", \"per_device_batch_within\": " + json_number(r.per_device_batch_within, report_digits) +
         ", \"answer\": " + json_string(r.batch_answer) + "}";
  else
    j += "null";
  j += ",\n  \"questions\": {\n";
  j += "    \"fits\": {\"answer\": " + json_string(r.fit_answer) +
       ", \"fits\": " + (r.fits ? "true" : "false") +
       ", \"parameter_bytes\": " + json_number(r.parameter_bytes, report_digits) +
       ", \"gradient_bytes\": " + json_number(r.gradient_bytes, report_digits) +
       ", \"optimizer_bytes\": " + json_number(r.optimizer_bytes, report_digits) +
       ", \"activation_bytes\": " + json_number(r.activation_bytes, report_digits) +
       ", \"memory_bytes\": " + json_number(r.memory_bytes, report_digits) +
       ", \"device_memory_bytes\": " + json_number(in.device_memory_bytes, report_digits) +
       ", \"forecast\": " + (in.memory ? detail::plan::forecast_json(*in.memory) : "null") +
       ", \"measured_peak_bytes\": " +
       (in.measured_peak_bytes > 0 ? json_number(in.measured_peak_bytes, report_digits) : "null") +
       "},\n";
  j += "    \"data\": {\"answer\": " + json_string(r.data_answer) +
       ", \"needs_more_than_one\": " + (r.needs_more_than_one ? "true" : "false") +
       ", \"one_device_samples_per_s\": " + json_number(r.one_device_samples_per_s, report_digits) +
       ", \"one_device_s\": " + json_number(r.one_device_s, report_digits) + ", \"deadline_s\": " +
       (in.deadline_s ? json_number(*in.deadline_s, report_digits) : "null") +
       ", \"reasonable_s\": " + json_number(in.reasonable_s, report_digits) +
       ", \"samples_per_epoch\": " + json_number(in.step.samples_per_epoch, report_digits) +
       ", \"epochs\": " + json_number(in.epochs, report_digits) + "},\n";
  const projection_options& o = in.projection;
  j +=
      "    \"topology\": {\"answer\": " + json_string(r.topology_answer) +
      ", \"devices_per_node\": " + std::to_string(o.devices_per_node) +
      ", \"intra\": " + link_profile_json(o.intra) + ", \"inter\": " + link_profile_json(o.inter) +
      ", \"nics_per_node\": " + std::to_string(o.nics_per_node) +
      ", \"scaling\": " + json_string(to_string(o.scaling)) +
      ", \"exposed_ratio\": " + json_number(r.proj.exposed_ratio, report_digits) +
      ", \"price_per_device_hour\": " + json_number(o.price_per_device_hour, report_digits) +
      ", \"knee_fraction\": " + json_number(o.knee_fraction, report_digits) +
      ", \"shared_host\": " +
      (o.host.enabled()
           ? "{\"cores\": " + json_number(o.host.cores, report_digits) + ", \"available_cores\": " +
                 json_number(o.host.available(), report_digits) + ", \"measured_threads\": " +
                 json_number(o.host.measured_threads > 0
                                 ? o.host.measured_threads
                                 : o.host.threads_per_rank(
                                       std::min(in.step.world_size, o.devices_per_node)),
                             report_digits) +
                 ", \"thread_speedup\": {\"data\": " +
                 json_number(o.host.thread_speedup.data, report_digits) +
                 ", \"compute\": " + json_number(o.host.thread_speedup.compute, report_digits) +
                 ", \"optimizer\": " + json_number(o.host.thread_speedup.optimizer, report_digits) +
                 "}" + ", \"sync_s\": " + json_number(o.host.sync_s, report_digits) + "}"
           : std::string("null")) +
      "}\n  },\n";
  j += "  \"rows\": [";
  for (std::size_t i = 0; i < r.proj.rows.size(); ++i) {
    const projection_row& x = r.proj.rows[i];
    j += std::string(i ? "," : "") + "\n    {\"devices\": " + std::to_string(x.devices) +
         ", \"nodes\": " + std::to_string(x.nodes) +
         ", \"algorithm\": " + json_string(to_string(x.algorithm)) +
         ", \"global_batch\": " + json_number(x.global_batch, report_digits) +
         ", \"step_s\": " + json_number(x.step_s, report_digits) +
         ", \"samples_per_s\": " + json_number(x.samples_per_s, report_digits) +
         ", \"speedup\": " + json_number(x.speedup, report_digits) +
         ", \"efficiency\": " + json_number(x.efficiency, report_digits) +
         ", \"reduce_total_s\": " + json_number(x.reduce_total_s, report_digits) +
         ", \"reduce_exposed_s\": " + json_number(x.reduce_exposed_s, report_digits) +
         ", \"threads_per_rank\": " + json_number(x.threads_per_rank, report_digits) +
         ", \"host_factor\": " + json_number(x.host_factor, report_digits) +
         ", \"sync_s\": " + json_number(x.sync_s, report_digits) +
         ", \"epoch_s\": " + json_number(x.epoch_s, report_digits) +
         ", \"device_hours_per_epoch\": " + json_number(x.device_hours_per_epoch, report_digits) +
         ", \"cost_per_epoch\": " + json_number(x.cost_per_epoch, report_digits) +
         ", \"marginal_cost\": " + json_number(x.marginal_cost, report_digits) +
         detail::plan::job_json(in, r.proj, x, r.one_device_s) + "}";
  }
  j += r.proj.rows.empty() ? "],\n" : "\n  ],\n";
  j += "  \"other_scaling\": ";
  if (r.other_scaling) {
    const plan_alternative& a = *r.other_scaling;
    j += "{\"scaling\": " + json_string(to_string(a.proj.options.scaling)) +
         ", \"verdict\": " + json_string(to_string(a.verdict)) +
         ", \"devices\": " + std::to_string(a.devices) +
         ", \"verdict_text\": " + json_string(a.verdict_text) +
         ", \"binding\": " + detail::plan::reasons_json(a.binding) +
         ", \"one_device_s\": " + json_number(a.one_device_s, report_digits) + ", \"rows\": [";
    for (std::size_t i = 0; i < a.proj.rows.size(); ++i) {
      const projection_row& x = a.proj.rows[i];
      j += std::string(i ? ", " : "") + "{\"devices\": " + std::to_string(x.devices) +
           ", \"global_batch\": " + json_number(x.global_batch, report_digits) +
           ", \"step_s\": " + json_number(x.step_s, report_digits) +
           ", \"speedup\": " + json_number(x.speedup, report_digits) +
           detail::plan::job_json(in, a.proj, x, a.one_device_s) + "}";
    }
    j += "]}";
  } else
    j += "null";
  j += ",\n";
  j += "  \"knee\": " + opt_int(r.proj.knee) + ",\n";
  j += "  \"last_worthwhile\": " +
       (r.proj.rows.empty() ? std::string("null") : std::to_string(r.proj.last_worthwhile)) + ",\n";
  j += "  \"deadline_met_at\": " + opt_int(r.deadline_met_at) + ",\n";
  j += "  \"noise_scale\": ";
  if (in.noise_scale)
    j += "{\"b_noise\": " + json_number(in.noise_scale->b_noise, report_digits) +
         ", \"at_least\": " + (in.noise_scale->at_least ? "true" : "false") +
         ", \"source\": " + json_string(in.noise_scale->source) +
         ", \"useful_fraction\": " + json_number(in.useful_fraction, report_digits) +
         ", \"noise_knee\": " + opt_int(r.proj.noise_knee) + ", \"last_useful\": " +
         (r.proj.b_noise ? std::to_string(r.proj.last_useful) : std::string("null")) +
         ", \"crossed_at\": " + opt_int(r.proj.noise_crossed_at) +
         ", \"answer\": " + json_string(r.noise_answer) + "}\n}\n";
  else
    j += "null\n}\n";
  return j;
}

}  // namespace tutti
