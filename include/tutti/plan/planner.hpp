// SPDX-License-Identifier: Apache-2.0
/// @file plan/planner.hpp
/// @brief `tutti plan`'s engine: does the model fit, is there enough data to need more than one
/// device, what does the topology let N devices buy, and one verdict with its reasons. The
/// plan as text and JSON is in plan/plan_format.hpp.
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/detail/plan_verdict.hpp>
#include <tutti/plan/noise_model.hpp>
#include <tutti/plan/plan_types.hpp>
#include <tutti/plan/projection.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace tutti {

namespace detail::plan {

// The projection of `in`'s step under `o`, in time to the same loss when the noise scale is known.
inline projection plan_projection(const plan_inputs& in, const projection_options& o) {
  projection p = project(in.step, o);
  if (in.noise_scale && !in.noise_scale->at_least)
    apply_noise_scale(p, in.noise_scale->b_noise, in.useful_fraction);
  return p;
}

// Question 4: how large a batch is still useful, from the noise scale; against the largest safe
// batch when both are known, with the one that binds.
inline std::string noise_answer(const plan_result& r) {
  const plan_inputs& in = r.inputs;
  const projection& p = r.proj;
  if (!in.noise_scale)
    return "not known: no gradient noise scale was given (tutti train measures it with 2+ ranks "
           "or --accumulation 2+; --noise-scale gives it)";
  const noise_scale_input& ns = *in.noise_scale;
  const std::string from = ns.source.empty() ? std::string() : " (" + ns.source + ")";
  if (ns.at_least)
    return sfmt(
        "B_noise is at least %s samples%s: the run did not resolve |G|^2, so it sets no "
        "limit; the jobs are per epoch, not to the same loss",
        count_text(ns.b_noise).c_str(), from.c_str());
  std::string a = sfmt("B_noise ~ %s samples%s; the measured global batch %s is %.2gx it",
                       count_text(ns.b_noise).c_str(), from.c_str(),
                       count_text(in.step.global_batch).c_str(), in.step.global_batch / ns.b_noise);
  if (p.rows.empty()) return a;
  if (p.noise_crossed_at)
    a += sfmt("; from N = %d the global batch passes it (%s)", *p.noise_crossed_at,
              count_text(p.row(*p.noise_crossed_at)->global_batch).c_str());
  else
    a += sfmt("; no N up to %d passes it", p.rows.back().devices);
  if (p.noise_knee)
    a += "; " + noise_knee_text(in, p);
  else
    a += sfmt(
        "; up to N = %d at least %s of what each added device brings shortens the time to "
        "the same loss",
        p.rows.back().devices, pct(p.useful_fraction).c_str());
  if (in.max_safe_batch) {
    const int safe = devices_within(p, *in.max_safe_batch);
    const int useful = p.last_useful;
    a += sfmt(". The largest safe batch %s allows N <= %d, the noise scale N <= %d: %s",
              count_text(*in.max_safe_batch).c_str(), safe, useful,
              safe < useful   ? "the largest safe batch binds (accuracy stops N first)"
              : useful < safe ? "the noise scale binds (devices stop paying first)"
                              : "both stop at the same N");
  }
  return a;
}

// Question 1 from the run's memory forecast: its peak resident bytes against the host's memory,
// by account, with the peak a run of the same shape measured when one is known.
inline void forecast_fit(plan_result& r) {
  const plan_inputs& in = r.inputs;
  const memory_forecast& f = *in.memory;
  const memory_accounts& t = f.trainer;
  r.parameter_bytes = double(t.parameters);
  r.gradient_bytes = double(t.gradients);
  r.optimizer_bytes = double(t.optimizer_state);
  r.activation_bytes = in.activation_bytes;
  r.memory_bytes = double(f.peak()) + in.activation_bytes;
  r.other_bytes = r.memory_bytes - r.parameter_bytes - r.gradient_bytes - r.optimizer_bytes -
                  r.activation_bytes;
  r.fits = r.memory_bytes <= in.device_memory_bytes;
  const bool loading = f.process + f.loading > f.training_peak();
  r.fit_answer = sfmt(
      "%s: a peak of %s resident (forecast from the trainer's accounts: parameters %s + "
      "gradients %s + optimizer state (%s) %s + training rows %s + step buffers %s + shard %s; "
      "beside them the split's rows and id dictionaries %s%s, the program %s; the peak falls "
      "%s), against %s of memory (%s used)",
      r.fits ? "yes" : "no", bytes_text(r.memory_bytes).c_str(),
      bytes_text(double(t.parameters)).c_str(), bytes_text(double(t.gradients)).c_str(),
      in.optimizer.c_str(), bytes_text(double(t.optimizer_state)).c_str(),
      bytes_text(double(t.rows)).c_str(), bytes_text(double(t.step_buffers)).c_str(),
      bytes_text(double(t.shard)).c_str(), bytes_text(double(f.data)).c_str(),
      f.building > 0 ? (", the negatives' tables while the buffers are built " +
                        bytes_text(double(f.building)))
                           .c_str()
                     : "",
      bytes_text(double(f.process)).c_str(),
      loading          ? "while the rows are loaded and split"
      : f.building > 0 ? "while the step's buffers are built"
                       : "while it trains",
      bytes_text(in.device_memory_bytes).c_str(),
      pct(r.memory_bytes / in.device_memory_bytes).c_str());
  if (in.measured_peak_bytes > 0)
    r.fit_answer += sfmt("; the run measured a peak of %s (the forecast is %+.1f%% of it)",
                         bytes_text(in.measured_peak_bytes).c_str(),
                         100.0 * (r.memory_bytes / in.measured_peak_bytes - 1.0));
}

}  // namespace detail::plan

/// Answers the three questions in order and gives one verdict (docs/ledger.md, "The planner").
///
/// (1) parameters + gradients + optimizer state + activations against the device's memory:
/// more, and data parallelism cannot help (every replica holds all of it): "needs model
/// parallelism". (2) one device's time for the epochs against the deadline, else against the
/// reasonable time. (3) the projection, its knee, and each N's time saved and money spent. The
/// verdict: one device when it meets the deadline (without one, the reasonable time); else the
/// fewest devices that do, never past the data's steps per epoch or the largest safe batch, and
/// without a deadline never past the knee; else the most those limits allow. Each limit that
/// binds is a named reason; the other scaling mode's verdict rides along when its rows differ.
/// Throws `tutti::invalid_argument` on impossible inputs.
inline plan_result make_plan(const plan_inputs& in) {
  using detail::bytes_text;
  using detail::duration_text;
  using detail::sfmt;
  static constexpr const char* fn = "tutti::make_plan";
  TUTTI_EXPECTS(std::isfinite(in.params) && in.params > 0, fn,
                "params = " + detail::num(in.params) + "; expected a positive count");
  TUTTI_EXPECTS(in.bytes_per_param > 0, fn,
                "bytes_per_param = " + detail::num(in.bytes_per_param) + "; expected > 0");
  TUTTI_EXPECTS(in.activation_bytes >= 0, fn,
                "activation_bytes = " + detail::num(in.activation_bytes) + "; expected >= 0");
  TUTTI_EXPECTS(in.device_memory_bytes > 0, fn,
                "device_memory = " + detail::num(in.device_memory_bytes) + "; expected > 0");
  TUTTI_EXPECTS(std::isfinite(in.epochs) && in.epochs > 0, fn,
                "epochs = " + detail::num(in.epochs) + "; expected > 0");
  TUTTI_EXPECTS(!in.deadline_s || *in.deadline_s > 0, fn,
                "deadline = " + detail::num(in.deadline_s.value_or(0)) + " s; expected > 0");
  TUTTI_EXPECTS(std::isfinite(in.reasonable_s) && in.reasonable_s > 0, fn,
                "reasonable_s = " + detail::num(in.reasonable_s) + "; expected seconds > 0");
  TUTTI_EXPECTS(std::isfinite(in.min_steps_per_epoch) && in.min_steps_per_epoch >= 0, fn,
                "min_steps_per_epoch = " + detail::num(in.min_steps_per_epoch) +
                    "; expected >= 0 (0: no limit)");
  TUTTI_EXPECTS(
      !in.max_safe_batch || *in.max_safe_batch > 0, fn,
      "max_safe_batch = " + detail::num(in.max_safe_batch.value_or(0)) + "; expected a batch > 0");
  TUTTI_EXPECTS(
      !in.noise_scale || (std::isfinite(in.noise_scale->b_noise) && in.noise_scale->b_noise > 0),
      fn,
      "noise_scale = " + detail::num(in.noise_scale ? in.noise_scale->b_noise : 0.0) +
          "; expected samples > 0");
  TUTTI_EXPECTS(in.useful_fraction > 0 && in.useful_fraction <= 1, fn,
                "useful_fraction = " + detail::num(in.useful_fraction) + "; expected 0 < f <= 1");

  plan_result r;
  r.inputs = in;
  // (1) memory
  if (in.memory) {
    detail::plan::forecast_fit(r);
  } else {
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
        detail::plan::pct(r.memory_bytes / in.device_memory_bytes).c_str());
  }

  // (2) data: one device's time for the epochs (the projection's baseline row)
  projection_options one_opts = in.projection;
  one_opts.devices = {1};
  const projection one = detail::plan::plan_projection(in, one_opts);
  const projection_row& r1 = one.rows.front();
  r.one_device_samples_per_s = r1.samples_per_s;
  r.one_device_s = detail::plan::job_seconds(in, r1);
  const double target = in.deadline_s ? *in.deadline_s : in.reasonable_s;
  r.needs_more_than_one = r.one_device_s > target;
  std::string work = sfmt("%s samples x %g epoch%s at %s samples/s take %s on one device",
                          detail::count_text(in.step.samples_per_epoch).c_str(), in.epochs,
                          in.epochs == 1 ? "" : "s", detail::figure(r1.samples_per_s).c_str(),
                          duration_text(r.one_device_s).c_str());
  if (one.b_noise && r1.samples_factor != 1.0)
    work += sfmt(
        " (to the loss the measured batch %s reaches in them: %.3gx the samples at one "
        "device's batch of %s)",
        detail::count_text(in.step.global_batch).c_str(), r1.samples_factor,
        detail::count_text(r1.global_batch).c_str());
  if (!in.deadline_s)
    r.data_answer = sfmt("%s: %s, %s the reasonable %s (no deadline given)",
                         r.needs_more_than_one ? "yes" : "no", work.c_str(),
                         r.needs_more_than_one ? "past" : "within", duration_text(target).c_str());
  else
    r.data_answer =
        sfmt("%s: %s, %s the deadline of %s", r.needs_more_than_one ? "yes" : "no", work.c_str(),
             r.needs_more_than_one ? "past" : "within", duration_text(*in.deadline_s).c_str());

  // (3) topology
  const std::string topo = detail::plan::topology_text(in.projection);
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

  r.proj = detail::plan::plan_projection(in, in.projection);
  const projection& p = r.proj;
  const projection_row* best = p.row(p.last_worthwhile);
  r.topology_answer = sfmt("on %s, %s scaling: ", topo.c_str(), to_string(p.options.scaling));
  if (p.knee) {
    const projection_row* k = p.row(*p.knee);
    r.topology_answer += sfmt(
        "the knee is at N = %d: the devices added to reach it bring %s of one device's "
        "throughput each (under %s)",
        *p.knee, detail::plan::pct(k->gain_per_added_device / p.one_device_samples_per_s).c_str(),
        detail::plan::pct(p.options.knee_fraction).c_str());
    if (p.last_worthwhile > 1)
      r.topology_answer +=
          sfmt("; N = %d, the last before it, reaches %.2fx at %s efficiency", p.last_worthwhile,
               best->speedup, detail::plan::pct(best->efficiency).c_str());
    const projection_row& last = p.rows.back();
    if (last.devices > *p.knee)
      r.topology_answer += sfmt("; N = %d would reach %.2fx at %s efficiency", last.devices,
                                last.speedup, detail::plan::pct(last.efficiency).c_str());
  } else
    r.topology_answer +=
        sfmt("no knee up to N = %d (%.2fx at %s efficiency)", p.rows.back().devices,
             p.rows.back().speedup, detail::plan::pct(p.rows.back().efficiency).c_str());

  r.reasons.push_back(sfmt("it fits: %s of %s", bytes_text(r.memory_bytes).c_str(),
                           bytes_text(in.device_memory_bytes).c_str()));
  r.reasons.push_back(r.data_answer);
  detail::plan::decide(r);
  r.noise_answer = detail::plan::noise_answer(r);
  if (const projection_row* row = p.row(r.devices); row && r.devices > 1)
    r.reasons.push_back(
        sfmt("%d devices: %.2fx, %s efficiency, %s for %g epoch%s, %s per epoch (1 device: %s)",
             row->devices, row->speedup, detail::plan::pct(row->efficiency).c_str(),
             duration_text(detail::plan::job_seconds(in, *row)).c_str(), in.epochs,
             in.epochs == 1 ? "" : "s", detail::figure(row->cost_per_epoch).c_str(),
             detail::figure(p.rows.front().cost_per_epoch).c_str()));
  for (const auto& b : r.binding) r.reasons.push_back("[" + b.name + "] " + b.text);
  if (in.deadline_s && r.devices == 1 && !r.needs_more_than_one)
    if (const projection_row* two = p.row(2))
      r.reasons.push_back(
          sfmt("a second device would save %s but cost %s more per epoch (%.2fx at %s efficiency)",
               duration_text(r.one_device_s - detail::plan::job_seconds(in, *two)).c_str(),
               detail::plan::pct(two->cost_per_epoch / p.rows.front().cost_per_epoch - 1).c_str(),
               two->speedup, detail::plan::pct(two->efficiency).c_str()));

  // The other scaling mode, when its rows differ: weak keeps each device's batch, strong the
  // measured global batch, and the limits can fall differently on them.
  plan_result alt;
  alt.inputs = in;
  projection_options& ao = alt.inputs.projection;
  ao.scaling =
      in.projection.scaling == scaling_mode::weak ? scaling_mode::strong : scaling_mode::weak;
  alt.proj = detail::plan::plan_projection(in, ao);
  bool differ = alt.proj.rows.size() != p.rows.size();
  for (std::size_t i = 0; !differ && i < p.rows.size(); ++i)
    differ = alt.proj.rows[i].global_batch != p.rows[i].global_batch;
  if (differ) {
    projection_options ao1 = ao;
    ao1.devices = {1};
    alt.one_device_s =
        detail::plan::job_seconds(in, detail::plan::plan_projection(in, ao1).rows.front());
    detail::plan::decide(alt);
    r.other_scaling = plan_alternative{.proj = alt.proj,
                                       .one_device_s = alt.one_device_s,
                                       .verdict = alt.verdict,
                                       .devices = alt.devices,
                                       .verdict_text = alt.verdict_text,
                                       .binding = alt.binding};
    if (alt.verdict != r.verdict || alt.devices != r.devices)
      r.reasons.push_back(sfmt("under %s scaling (%s) the verdict would be: %s",
                               to_string(ao.scaling),
                               ao.scaling == scaling_mode::strong
                                   ? sfmt("the measured global batch of %s split over the devices",
                                          detail::count_text(in.step.global_batch).c_str())
                                         .c_str()
                                   : sfmt("every device keeps %s samples per step",
                                          detail::count_text(in.step.per_device_batch()).c_str())
                                         .c_str(),
                               alt.verdict_text.c_str()));
  }
  for (const auto& c : r.cautions) r.reasons.push_back("[" + c.name + "] " + c.text);
  return r;
}

}  // namespace tutti
