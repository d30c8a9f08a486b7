// SPDX-License-Identifier: Apache-2.0
/// @file plan/plan_format.hpp
/// @brief The plan as `tutti plan` prints it (`format_plan`, with the whole job on each N) and as
/// JSON (`plan_to_json`).
#pragma once

#include <tutti/detail/json.hpp>
#include <tutti/detail/number_format.hpp>
#include <tutti/plan/detail/plan_verdict.hpp>
#include <tutti/plan/plan_types.hpp>
#include <tutti/plan/projection.hpp>

#include <algorithm>
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

inline json reasons_json(const std::vector<plan_reason>& v) {
  json out = json::array();
  for (const auto& r : v) out.push_back({{"name", r.name}, {"text", r.text}});
  return out;
}

// A row's whole-job fields, added to `row`: per_device_batch, steps_per_epoch, job_s,
// time_saved_s, job_cost, extra_cost, samples_factor, loss_speedup, useful_share, beyond[] (the
// limits it exceeds).
inline void add_job_json(json& row, const plan_inputs& in, const projection& p,
                         const projection_row& x, double one_s) {
  const double price = p.options.price_per_device_hour;
  row["per_device_batch"] = report_number(x.per_device_batch);
  row["steps_per_epoch"] = report_number(x.steps_per_epoch);
  row["job_s"] = report_number(job_seconds(in, x));
  row["time_saved_s"] = report_number(one_s - job_seconds(in, x));
  row["job_cost"] = report_number(job_cost(in, x));
  row["extra_cost"] = report_number(job_cost(in, x) - one_s / 3600.0 * price);
  row["samples_factor"] = report_number(x.samples_factor);
  row["loss_speedup"] = report_number(x.loss_speedup);
  row["useful_share"] = report_number(x.useful_share);
  row["beyond"] = row_limits(in, p, x);
}

// A memory forecast as JSON: the trainer's accounts, what the program holds beside them, and
// the peak, in bytes (exact integers).
inline json forecast_json(const memory_forecast& f) {
  const memory_accounts& t = f.trainer;
  return {{"parameters", t.parameters},
          {"gradients", t.gradients},
          {"optimizer_state", t.optimizer_state},
          {"rows", t.rows},
          {"step_buffers", t.step_buffers},
          {"shard", t.shard},
          {"trainer_total", t.total()},
          {"data", f.data},
          {"building", f.building},
          {"loading", f.loading},
          {"process", f.process},
          {"peak", f.peak()}};
}

// The question "does it fit?" with the bytes behind its answer.
inline json fits_json(const plan_result& r) {
  const plan_inputs& in = r.inputs;
  return {{"answer", r.fit_answer},
          {"fits", r.fits},
          {"parameter_bytes", report_number(r.parameter_bytes)},
          {"gradient_bytes", report_number(r.gradient_bytes)},
          {"optimizer_bytes", report_number(r.optimizer_bytes)},
          {"activation_bytes", report_number(r.activation_bytes)},
          {"memory_bytes", report_number(r.memory_bytes)},
          {"device_memory_bytes", report_number(in.device_memory_bytes)},
          {"forecast", in.memory ? forecast_json(*in.memory) : json(nullptr)},
          {"measured_peak_bytes",
           in.measured_peak_bytes > 0 ? report_number(in.measured_peak_bytes) : json(nullptr)}};
}

// The question "is one device too slow?" with the times behind its answer.
inline json data_json(const plan_result& r) {
  const plan_inputs& in = r.inputs;
  return {{"answer", r.data_answer},
          {"needs_more_than_one", r.needs_more_than_one},
          {"one_device_samples_per_s", report_number(r.one_device_samples_per_s)},
          {"one_device_s", report_number(r.one_device_s)},
          {"deadline_s", report_number(in.deadline_s)},
          {"reasonable_s", report_number(in.reasonable_s)},
          {"samples_per_epoch", report_number(in.step.samples_per_epoch)},
          {"epochs", report_number(in.epochs)}};
}

// The question "what does the topology cost?": the links, the scaling rule and a shared host.
inline json topology_json(const plan_result& r) {
  const plan_inputs& in = r.inputs;
  const projection_options& o = in.projection;
  json host = nullptr;
  if (o.host.enabled()) {
    const double threads =
        o.host.measured_threads > 0
            ? o.host.measured_threads
            : o.host.threads_per_rank(std::min(in.step.world_size, o.devices_per_node));
    host = {{"cores", report_number(o.host.cores)},
            {"available_cores", report_number(o.host.available())},
            {"measured_threads", report_number(threads)},
            {"thread_speedup",
             {{"data", report_number(o.host.thread_speedup.data)},
              {"compute", report_number(o.host.thread_speedup.compute)},
              {"optimizer", report_number(o.host.thread_speedup.optimizer)}}},
            {"sync_s", report_number(o.host.sync_s)}};
  }
  return {{"answer", r.topology_answer},
          {"devices_per_node", o.devices_per_node},
          {"intra", link_profile_json(o.intra)},
          {"inter", link_profile_json(o.inter)},
          {"nics_per_node", o.nics_per_node},
          {"scaling", to_string(o.scaling)},
          {"exchange", to_string(o.exchange)},
          {"exposed_ratio", report_number(r.proj.exposed_ratio)},
          {"price_per_device_hour", report_number(o.price_per_device_hour)},
          {"knee_fraction", report_number(o.knee_fraction)},
          {"shared_host", host}};
}

// One row of the projection, with its whole-job fields.
inline json row_json(const plan_inputs& in, const projection& p, const projection_row& x,
                     double one_s) {
  json row = {{"devices", x.devices},
              {"nodes", x.nodes},
              {"algorithm", to_string(x.algorithm)},
              {"global_batch", report_number(x.global_batch)},
              {"step_s", report_number(x.step_s)},
              {"samples_per_s", report_number(x.samples_per_s)},
              {"speedup", report_number(x.speedup)},
              {"efficiency", report_number(x.efficiency)},
              {"reduce_total_s", report_number(x.reduce_total_s)},
              {"reduce_exposed_s", report_number(x.reduce_exposed_s)},
              {"threads_per_rank", report_number(x.threads_per_rank)},
              {"host_factor", report_number(x.host_factor)},
              {"update_factor", report_number(x.update_factor)},
              {"sync_s", report_number(x.sync_s)},
              {"epoch_s", report_number(x.epoch_s)},
              {"device_hours_per_epoch", report_number(x.device_hours_per_epoch)},
              {"cost_per_epoch", report_number(x.cost_per_epoch)},
              {"marginal_cost", report_number(x.marginal_cost)}};
  add_job_json(row, in, p, x, one_s);
  return row;
}

// The plan under the other scaling rule: its verdict and the whole job on each N.
inline json other_scaling_json(const plan_inputs& in, const plan_alternative& a) {
  json rows = json::array();
  for (const projection_row& x : a.proj.rows) {
    json row = {{"devices", x.devices},
                {"global_batch", report_number(x.global_batch)},
                {"step_s", report_number(x.step_s)},
                {"speedup", report_number(x.speedup)}};
    add_job_json(row, in, a.proj, x, a.one_device_s);
    rows.push_back(std::move(row));
  }
  return {{"scaling", to_string(a.proj.options.scaling)},
          {"verdict", to_string(a.verdict)},
          {"devices", a.devices},
          {"verdict_text", a.verdict_text},
          {"binding", reasons_json(a.binding)},
          {"one_device_s", report_number(a.one_device_s)},
          {"rows", rows}};
}

// The noise scale's part of the plan, or null without one.
inline json noise_scale_json(const plan_result& r) {
  const plan_inputs& in = r.inputs;
  if (!in.noise_scale) return nullptr;
  return {{"b_noise", report_number(in.noise_scale->b_noise)},
          {"at_least", in.noise_scale->at_least},
          {"source", in.noise_scale->source},
          {"useful_fraction", report_number(in.useful_fraction)},
          {"noise_knee", json_optional(r.proj.noise_knee)},
          {"last_useful", r.proj.b_noise ? json(r.proj.last_useful) : json(nullptr)},
          {"crossed_at", json_optional(r.proj.noise_crossed_at)},
          {"answer", r.noise_answer}};
}

}  // namespace detail::plan

/// The plan as JSON: {verdict, devices, verdict_text, reasons[], binding[{name, text}],
/// cautions[{name, text}], limits{reasonable_s, min_steps_per_epoch, max_batch_from_data,
/// max_safe_batch, wanted_devices}, batch, questions{fits, data, topology}, rows[{devices, nodes,
/// algorithm, global_batch, step_s, samples_per_s, speedup, efficiency, reduce_total_s,
/// reduce_exposed_s, threads_per_rank, host_factor, update_factor, sync_s, epoch_s,
/// device_hours_per_epoch, cost_per_epoch, marginal_cost, per_device_batch, steps_per_epoch, job_s,
/// time_saved_s, job_cost, extra_cost, samples_factor, loss_speedup, useful_share, beyond[]}],
/// other_scaling{scaling, verdict, devices, verdict_text, binding[], one_device_s,
/// rows[{devices, global_batch, ...whole-job fields}]}, knee, last_worthwhile, deadline_met_at,
/// noise_scale{b_noise, at_least, source, useful_fraction, noise_knee, last_useful, crossed_at,
/// answer} or null}. With a resolved noise scale the whole-job fields are to the same loss.
/// Infinite marginal costs and absent values are null.
inline std::string plan_to_json(const plan_result& r) {
  using detail::json;
  using detail::report_number;
  namespace f = detail::plan;
  const plan_inputs& in = r.inputs;
  json batch = nullptr;
  if (in.max_safe_batch)
    batch = {{"max_safe_batch", report_number(*in.max_safe_batch)},
             {"global_batch", report_number(r.advised_global_batch)},
             {"exceeds", r.batch_exceeds_safe},
             {"max_devices_within", r.max_devices_within_batch},
             {"per_device_batch_within", report_number(r.per_device_batch_within)},
             {"answer", r.batch_answer}};
  json rows = json::array();
  for (const projection_row& x : r.proj.rows)
    rows.push_back(f::row_json(in, r.proj, x, r.one_device_s));
  const json j = {
      {"verdict", to_string(r.verdict)},
      {"devices", r.devices},
      {"verdict_text", r.verdict_text},
      {"reasons", r.reasons},
      {"binding", f::reasons_json(r.binding)},
      {"cautions", f::reasons_json(r.cautions)},
      {"limits",
       {{"reasonable_s", report_number(in.reasonable_s)},
        {"min_steps_per_epoch", report_number(in.min_steps_per_epoch)},
        {"max_batch_from_data", report_number(r.max_batch_from_data)},
        {"max_safe_batch", report_number(in.max_safe_batch)},
        {"wanted_devices", detail::json_optional(r.wanted_devices)}}},
      {"batch", batch},
      {"questions",
       {{"fits", f::fits_json(r)}, {"data", f::data_json(r)}, {"topology", f::topology_json(r)}}},
      {"rows", rows},
      {"other_scaling",
       r.other_scaling ? f::other_scaling_json(in, *r.other_scaling) : json(nullptr)},
      {"knee", detail::json_optional(r.proj.knee)},
      {"last_worthwhile", r.proj.rows.empty() ? json(nullptr) : json(r.proj.last_worthwhile)},
      {"deadline_met_at", detail::json_optional(r.deadline_met_at)},
      {"noise_scale", f::noise_scale_json(r)}};
  return j.dump(2) + "\n";
}

}  // namespace tutti
