// SPDX-License-Identifier: Apache-2.0
/// @file ledger/planner.hpp
/// @brief `tutti plan`'s engine: does the model fit, is there enough data to need more than one
/// device, what does the topology let N devices buy, and one verdict with its reasons. The
/// plan as text and JSON is in ledger/plan_format.hpp.
#pragma once

#include <tutti/error.hpp>
#include <tutti/ledger/detail/format.hpp>
#include <tutti/ledger/detail/plan_verdict.hpp>
#include <tutti/ledger/plan_types.hpp>
#include <tutti/ledger/projection.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace tutti {

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
  TUTTI_EXPECTS(
      std::isfinite(in.reasonable_s) && in.reasonable_s > 0, fn,
      "reasonable_s = " + detail::ledger_impl::num(in.reasonable_s) + "; expected seconds > 0");
  TUTTI_EXPECTS(std::isfinite(in.min_steps_per_epoch) && in.min_steps_per_epoch >= 0, fn,
                "min_steps_per_epoch = " + detail::ledger_impl::num(in.min_steps_per_epoch) +
                    "; expected >= 0 (0: no limit)");
  TUTTI_EXPECTS(!in.max_safe_batch || *in.max_safe_batch > 0, fn,
                "max_safe_batch = " + detail::ledger_impl::num(in.max_safe_batch.value_or(0)) +
                    "; expected a batch > 0");

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
  const double target = in.deadline_s ? *in.deadline_s : in.reasonable_s;
  r.needs_more_than_one = r.one_device_s > target;
  const std::string work =
      sfmt("%s samples x %g epoch%s at %s samples/s take %s on one device",
           detail::ledger_impl::count_text(in.step.samples_per_epoch).c_str(), in.epochs,
           in.epochs == 1 ? "" : "s", detail::ledger_impl::figure(r1.samples_per_s).c_str(),
           duration_text(r.one_device_s).c_str());
  if (!in.deadline_s)
    r.data_answer = sfmt("%s: %s, %s the reasonable %s (no deadline given)",
                         r.needs_more_than_one ? "yes" : "no", work.c_str(),
                         r.needs_more_than_one ? "past" : "within", duration_text(target).c_str());
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
  r.reasons.push_back(r.data_answer);
  detail::ledger_impl::decide(r);
  if (const projection_row* row = p.row(r.devices); row && r.devices > 1)
    r.reasons.push_back(
        sfmt("%d devices: %.2fx, %s efficiency, %s for %g epoch%s, %s per epoch (1 device: %s)",
             row->devices, row->speedup, detail::ledger_impl::pct(row->efficiency).c_str(),
             duration_text(in.epochs * row->epoch_s).c_str(), in.epochs, in.epochs == 1 ? "" : "s",
             detail::ledger_impl::figure(row->cost_per_epoch).c_str(),
             detail::ledger_impl::figure(p.rows.front().cost_per_epoch).c_str()));
  for (const auto& b : r.binding) r.reasons.push_back("[" + b.name + "] " + b.text);
  if (in.deadline_s && r.devices == 1 && !r.needs_more_than_one)
    if (const projection_row* two = p.row(2))
      r.reasons.push_back(sfmt(
          "a second device would save %s but cost %s more per epoch (%.2fx at %s efficiency)",
          duration_text(r.one_device_s - in.epochs * two->epoch_s).c_str(),
          detail::ledger_impl::pct(two->cost_per_epoch / p.rows.front().cost_per_epoch - 1).c_str(),
          two->speedup, detail::ledger_impl::pct(two->efficiency).c_str()));

  // The other scaling mode, when its rows differ: weak keeps each device's batch, strong the
  // measured global batch, and the limits can fall differently on them.
  plan_result alt;
  alt.inputs = in;
  projection_options& ao = alt.inputs.projection;
  ao.scaling =
      in.projection.scaling == scaling_mode::weak ? scaling_mode::strong : scaling_mode::weak;
  alt.proj = project(in.step, ao);
  bool differ = alt.proj.rows.size() != p.rows.size();
  for (std::size_t i = 0; !differ && i < p.rows.size(); ++i)
    differ = alt.proj.rows[i].global_batch != p.rows[i].global_batch;
  if (differ) {
    projection_options ao1 = ao;
    ao1.devices = {1};
    alt.one_device_s = in.epochs * project(in.step, ao1).rows.front().epoch_s;
    detail::ledger_impl::decide(alt);
    r.other_scaling = plan_alternative{.proj = alt.proj,
                                       .one_device_s = alt.one_device_s,
                                       .verdict = alt.verdict,
                                       .devices = alt.devices,
                                       .verdict_text = alt.verdict_text,
                                       .binding = alt.binding};
    if (alt.verdict != r.verdict || alt.devices != r.devices)
      r.reasons.push_back(
          sfmt("under %s scaling (%s) the verdict would be: %s", to_string(ao.scaling),
               ao.scaling == scaling_mode::strong
                   ? sfmt("the measured global batch of %s split over the devices",
                          detail::ledger_impl::count_text(in.step.global_batch).c_str())
                         .c_str()
                   : sfmt("every device keeps %s samples per step",
                          detail::ledger_impl::count_text(in.step.per_device_batch()).c_str())
                         .c_str(),
               alt.verdict_text.c_str()));
  }
  for (const auto& c : r.cautions) r.reasons.push_back("[" + c.name + "] " + c.text);
  return r;
}

}  // namespace tutti
