// SPDX-License-Identifier: Apache-2.0
/// @file plan/detail/plan_verdict.hpp
/// @brief The planner's verdict on a projection: the target (the deadline, else the reasonable
/// time), the limits on N (steps per epoch, the largest safe batch, the knee), and the named
/// reasons and cautions (docs/ledger.md, "Limits and reasons").
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/plan_types.hpp>
#include <tutti/plan/projection.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace tutti::detail::plan {

// The largest global batch the data feeds: samples per epoch / the fewest steps an epoch keeps.
inline double data_batch_limit(const plan_inputs& in) {
  return in.min_steps_per_epoch > 0 ? in.step.samples_per_epoch / in.min_steps_per_epoch
                                    : std::numeric_limits<double>::infinity();
}

// The largest N whose global batch is within `batch` (1 when none is).
inline int devices_within(const projection& p, double batch) {
  int n = 1;
  for (const auto& x : p.rows)
    if (x.global_batch <= batch) n = x.devices;
  return n;
}

// The whole job on a row: its time to the loss the measured global batch reaches in the epochs
// asked for (the epochs themselves without a noise scale), and its money.
inline double job_seconds(const plan_inputs& in, const projection_row& x) {
  return in.epochs * x.epoch_s * x.samples_factor;
}
inline double job_cost(const plan_inputs& in, const projection_row& x) {
  return in.epochs * x.cost_per_epoch * x.samples_factor;
}

// The limits a row of the projection is beyond, by name: "min_steps_per_epoch",
// "max_safe_batch", "knee", "noise_knee".
inline std::vector<std::string> row_limits(const plan_inputs& in, const projection& p,
                                           const projection_row& row) {
  std::vector<std::string> out;
  if (row.global_batch > data_batch_limit(in)) out.emplace_back("min_steps_per_epoch");
  if (in.max_safe_batch && row.global_batch > *in.max_safe_batch)
    out.emplace_back("max_safe_batch");
  if (p.knee && row.devices > p.last_worthwhile) out.emplace_back("knee");
  if (p.noise_knee && row.devices > p.last_useful) out.emplace_back("noise_knee");
  return out;
}

// A duration that may be negative (time "saved" by an N slower than one device).
inline std::string signed_duration(double s) {
  return s < 0 ? "-" + duration_text(-s) : duration_text(s);
}

// What N buys for the whole job against one device: time saved and money spent.
inline std::string saving_text(const plan_inputs& in, const projection_row& x, double one_s,
                               double price) {
  const double job = job_seconds(in, x);
  const double one_cost = one_s / 3600.0 * price;
  const double extra = job_cost(in, x) - one_cost;
  return sfmt("N = %d would save %s (%s instead of %s) for %s more (%+.0f%%)", x.devices,
              signed_duration(one_s - job).c_str(), duration_text(job).c_str(),
              duration_text(one_s).c_str(), figure(extra).c_str(),
              one_cost > 0 ? 100.0 * extra / one_cost : 0.0);
}

// The knee as a sentence: what the devices past the last worthwhile N bring.
inline std::string knee_text(const projection& p) {
  const projection_row* k = p.row(*p.knee);
  return sfmt(
      "past N = %d the devices added to reach %d bring %s samples/s each, %s of one "
      "device's %s (the %s knee), at %s per hour per extra sample/s",
      p.last_worthwhile, *p.knee, figure(k->gain_per_added_device).c_str(),
      pct(k->gain_per_added_device / p.one_device_samples_per_s).c_str(),
      figure(p.one_device_samples_per_s).c_str(), pct(p.options.knee_fraction).c_str(),
      figure(k->marginal_cost).c_str());
}

// The noise knee as a sentence: what the devices past the last useful N bring to the time to the
// same loss.
inline std::string noise_knee_text(const plan_inputs& in, const projection& p) {
  const projection_row* k = p.row(*p.noise_knee);
  const projection_row* u = p.row(p.last_useful);
  return sfmt(
      "past N = %d (global batch %s, %.2gx B_noise = %s) the devices added to reach N = %d bring "
      "samples/s of which %s shortens the time to the same loss (under %s): at N = %d that loss "
      "takes %.2fx the samples of the measured batch %s, and the job %s against %s at N = %d",
      p.last_useful, count_text(u->global_batch).c_str(), u->global_batch / *p.b_noise,
      count_text(*p.b_noise).c_str(), k->devices, pct(std::max(0.0, k->useful_share)).c_str(),
      pct(p.useful_fraction).c_str(), k->devices, k->samples_factor,
      count_text(p.measured.global_batch).c_str(), duration_text(job_seconds(in, *k)).c_str(),
      duration_text(job_seconds(in, *u)).c_str(), p.last_useful);
}

// What every step of the verdict reads: the inputs, the projection, the target (the deadline,
// else the reasonable time), the largest N each limit allows, and the N chosen.
struct verdict_context {
  const plan_inputs& in;
  const projection& p;
  double price = 0;
  bool has_deadline = false;
  double target = 0;
  double max_batch_from_data = 0;
  int data_cap = 1, safe_cap = 1, knee_cap = 1, hard_cap = 1;  // largest N within each limit
  int noise_cap = 1;          // largest N before the noise knee (the last row without one)
  std::optional<int> want{};  // fewest N meeting the target, limits aside
  bool met = false;           // `want` is within the limits
  int n = 1;                  // the N advised
  int blocked = 1;            // the N the target asks for
  const projection_row* row = nullptr;                   // the advised N's row
  const projection_row* next = nullptr;                  // the first row past it
  const projection_row* fastest = nullptr;               // the fastest row of all
  const projection_row* fastest_allowed = nullptr;       // the fastest N > 1 within the hard limits
  std::string n_devices{}, n_time{}, one_time{}, tgt{};  // the phrases the sentences share

  double job(const projection_row& x) const { return job_seconds(in, x); }
  bool data_ok(const projection_row& x) const { return x.global_batch <= max_batch_from_data; }
  bool safe_ok(const projection_row& x) const {
    return !in.max_safe_batch || x.global_batch <= *in.max_safe_batch;
  }
  // The largest N up to which every row keeps a limit (the global batch never shrinks with N).
  template <class Ok>
  int cap(Ok ok) const {
    int devices = p.rows.front().devices;
    for (const auto& x : p.rows) {
      if (!ok(x)) break;
      devices = x.devices;
    }
    return devices;
  }
};

// The limits, the N wanted and the N advised; sets the verdict and the advised N's fields of `r`.
inline verdict_context choose_devices(plan_result& r) {
  verdict_context c{.in = r.inputs, .p = r.proj};
  const plan_inputs& in = r.inputs;
  const projection& p = r.proj;
  c.price = p.options.price_per_device_hour;
  c.has_deadline = in.deadline_s.has_value();
  c.target = c.has_deadline ? *in.deadline_s : in.reasonable_s;
  c.max_batch_from_data = r.max_batch_from_data = data_batch_limit(in);
  c.data_cap = c.cap([&](const projection_row& x) { return c.data_ok(x); });
  c.safe_cap = c.cap([&](const projection_row& x) { return c.safe_ok(x); });
  c.knee_cap = p.last_worthwhile;
  c.noise_cap = p.last_useful;
  c.hard_cap = std::min(c.data_cap, c.safe_cap);
  const int soft_cap = std::min({c.hard_cap, c.knee_cap, c.noise_cap});
  if (r.one_device_s <= c.target)
    c.want = 1;
  else
    for (const auto& x : p.rows)
      if (c.job(x) <= c.target) {
        c.want = x.devices;
        break;
      }
  r.wanted_devices = c.want;
  if (c.has_deadline) r.deadline_met_at = c.want;
  const int allowed = c.has_deadline ? c.hard_cap : soft_cap;
  c.met = c.want && *c.want <= allowed;
  c.n = c.met ? *c.want : soft_cap;
  c.blocked = c.want.value_or(p.rows.back().devices);
  c.row = p.row(c.n);
  for (const auto& x : p.rows)
    if (x.devices > c.n) {
      c.next = &x;
      break;
    }
  c.fastest = &p.rows.front();
  for (const auto& x : p.rows) {
    if (c.job(x) < c.job(*c.fastest)) c.fastest = &x;
    if (x.devices > 1 && c.data_ok(x) && c.safe_ok(x) &&
        (!c.fastest_allowed || c.job(x) < c.job(*c.fastest_allowed)))
      c.fastest_allowed = &x;
  }
  r.devices = c.n;
  r.verdict = c.n == 1 ? plan_verdict::one_device : plan_verdict::data_parallel;
  r.advised_global_batch = c.row ? c.row->global_batch : in.step.per_device_batch();
  c.n_devices = c.n == 1 ? std::string("one device") : sfmt("%d devices", c.n);
  c.n_time = duration_text(c.row ? c.job(*c.row) : r.one_device_s);
  c.one_time = duration_text(r.one_device_s);
  c.tgt = duration_text(c.target);
  return c;
}

// The target: whether one device, or the fewest devices the limits allow, meet the deadline
// (else the reasonable time), as the verdict's sentence and its first named reason.
inline void reason_target(plan_result& r, const verdict_context& c) {
  if (c.met && c.n == 1) {
    if (c.has_deadline) {
      r.verdict_text = sfmt("one device: it finishes in %s, within the deadline of %s",
                            c.one_time.c_str(), c.tgt.c_str());
      r.binding.push_back({"deadline", sfmt("one device finishes in %s, within the deadline of %s",
                                            c.one_time.c_str(), c.tgt.c_str())});
    } else {
      r.verdict_text = sfmt(
          "one device: it finishes the job in %s, within the reasonable %s (no deadline "
          "given)",
          c.one_time.c_str(), c.tgt.c_str());
      r.binding.push_back(
          {"reasonable_time",
           sfmt("no deadline given, and one device finishes the job in %s, within the reasonable "
                "%s: more devices would buy time nobody asked for, at more device-hours; %s",
                c.one_time.c_str(), c.tgt.c_str(),
                c.fastest_allowed ? ("at best (the fastest N the limits allow) " +
                                     saving_text(c.in, *c.fastest_allowed, r.one_device_s, c.price))
                                        .c_str()
                                  : "no N > 1 is within the limits")});
    }
  } else if (c.met) {
    if (c.has_deadline) {
      r.verdict_text = sfmt("data parallel on %d devices: the fewest that finish within %s (%s)",
                            c.n, c.tgt.c_str(), c.n_time.c_str());
      r.binding.push_back(
          {"deadline", sfmt("one device takes %s, past the deadline of %s; %d devices are the "
                            "fewest that finish within it (%s)",
                            c.one_time.c_str(), c.tgt.c_str(), c.n, c.n_time.c_str())});
    } else {
      r.verdict_text = sfmt(
          "data parallel on %d devices: the fewest that bring the job within the reasonable %s "
          "(%s; one device: %s)",
          c.n, c.tgt.c_str(), c.n_time.c_str(), c.one_time.c_str());
      r.binding.push_back(
          {"reasonable_time",
           sfmt("no deadline given, and one device takes %s, longer than the reasonable %s; %d "
                "devices are the fewest that bring it within: %s",
                c.one_time.c_str(), c.tgt.c_str(), c.n,
                saving_text(c.in, *c.row, r.one_device_s, c.price).c_str())});
    }
  } else {
    const std::string head =
        c.has_deadline
            ? sfmt("one device takes %s, past the deadline of %s", c.one_time.c_str(),
                   c.tgt.c_str())
            : sfmt("no deadline given, and one device takes %s, longer than the reasonable %s",
                   c.one_time.c_str(), c.tgt.c_str());
    std::string tail;
    if (c.want)
      tail = sfmt("; N = %d would %s (%s), but the limits below stop at N = %d (%s)", *c.want,
                  c.has_deadline ? "meet it" : "bring it within",
                  duration_text(c.job(*c.p.row(*c.want))).c_str(), c.n, c.n_time.c_str());
    else
      tail = sfmt("; no N up to %d %s; the fastest, N = %d, takes %s%s", c.p.rows.back().devices,
                  c.has_deadline ? "meets it" : "brings it within", c.fastest->devices,
                  duration_text(c.job(*c.fastest)).c_str(),
                  c.has_deadline ? ": a faster link, more samples per device and step, or fewer "
                                   "epochs must make up the rest"
                                 : "");
    r.binding.push_back(
        {c.has_deadline ? "deadline_out_of_reach" : "reasonable_time", head + tail});
  }
}

// The limits that stop N short of what the target asks for, each named, and the verdict's
// sentence when the target is not met.
inline void reason_limits(plan_result& r, const verdict_context& c) {
  std::vector<std::string> more, fewer;  // verdict phrases: "the most that ...", "a second ..."
  if (!c.met && c.next && c.n < c.blocked) {
    if (c.knee_cap == c.n && c.p.knee) {
      more.push_back("each still add at least " + pct(c.p.options.knee_fraction) +
                     " of a device's throughput");
      fewer.push_back("add less than " + pct(c.p.options.knee_fraction) +
                      " of a device's throughput");
      r.binding.push_back({"knee", knee_text(c.p)});
    }
    if (c.noise_cap == c.n && c.p.noise_knee) {
      more.push_back("turn at least " + pct(c.p.useful_fraction) +
                     " of what they bring into time to the same loss");
      fewer.push_back("turn less than " + pct(c.p.useful_fraction) +
                      " of what it brings into time to the same loss");
      r.binding.push_back({"noise_scale", noise_knee_text(c.in, c.p)});
    }
    if (c.data_cap == c.n) {
      more.push_back(sfmt("keep at least %g steps per epoch", c.in.min_steps_per_epoch));
      fewer.push_back(sfmt("leave fewer than %g steps per epoch", c.in.min_steps_per_epoch));
      r.binding.push_back(
          {"min_steps_per_epoch",
           sfmt("at N = %d the global batch would be %s: %s samples per epoch make %.1f steps "
                "of it, under the minimum of %g steps per epoch; the data feeds at most %s "
                "samples per step",
                c.next->devices, count_text(c.next->global_batch).c_str(),
                count_text(c.in.step.samples_per_epoch).c_str(),
                c.in.step.samples_per_epoch / c.next->global_batch, c.in.min_steps_per_epoch,
                count_text(r.max_batch_from_data).c_str())});
    }
    if (c.safe_cap == c.n && c.in.max_safe_batch) {
      const double limit = *c.in.max_safe_batch;
      more.push_back(sfmt("keep the global batch within the largest safe one (%.0f)", limit));
      fewer.push_back(sfmt("take the global batch past the largest safe one (%.0f)", limit));
      const int within = static_cast<int>(std::floor(limit / c.next->per_device_batch));
      r.binding.push_back(
          {"max_safe_batch",
           sfmt("at N = %d the global batch would be %.0f (%d x %.0f), above the largest safe "
                "batch %.0f: the model would lose accuracy. Instead: a per-device batch of at "
                "most %.0f on %d devices (each step then does less work, so the reduce weighs "
                "more), or at most %d device%s at %.0f per device. Gradient accumulation does "
                "not help here: it raises the global batch",
                c.next->devices, c.next->global_batch, c.next->devices, c.next->per_device_batch,
                limit, std::floor(limit / c.blocked), c.blocked, within, within == 1 ? "" : "s",
                c.next->per_device_batch)});
    }
  }
  const auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? " and " : "") + v[i];
    return s;
  };
  if (!c.met) {
    if (c.n == 1)
      r.verdict_text = more.empty() ? "one device: the sweep has no more devices"
                                    : "one device: a second one would " + join(fewer);
    else
      r.verdict_text =
          more.empty()
              ? sfmt("data parallel on %d devices, the most of the sweep", c.n)
              : sfmt("data parallel on %d devices: the most that %s", c.n, join(more).c_str());
    if (c.has_deadline)
      r.verdict_text += sfmt("; the deadline of %s is out of reach%s: %s take%s %s", c.tgt.c_str(),
                             more.empty() ? " on this topology" : " within them",
                             c.n_devices.c_str(), c.n == 1 ? "s" : "", c.n_time.c_str());
  }
}

// Cautions: what the verdict cannot see.
inline void add_cautions(plan_result& r, const verdict_context& c) {
  if (c.has_deadline && c.met && c.p.knee && c.n >= *c.p.knee)
    r.cautions.push_back({"past_knee", sfmt("the deadline forces N = %d, at or past the knee "
                                            "(N = %d): ",
                                            c.n, *c.p.knee) +
                                           knee_text(c.p)});
  if (c.has_deadline && c.met && c.p.noise_knee && c.n >= *c.p.noise_knee)
    r.cautions.push_back(
        {"past_noise_knee", sfmt("the deadline forces N = %d, at or past the noise knee (N = %d): ",
                                 c.n, *c.p.noise_knee) +
                                noise_knee_text(c.in, c.p)});
  if (const auto& ns = c.in.noise_scale; ns && ns->at_least) {
    const int within = devices_within(c.p, ns->b_noise);
    r.cautions.push_back(
        {"noise_scale_unresolved",
         sfmt("the measured run bounds B_noise only from below (at least %s samples: |G|^2 was "
              "within its noise): the times are per epoch, not to the same loss, and up to N = %d "
              "(global batch within the bound) a larger batch needs at most %.2fx the samples; "
              "beyond it nothing is known; a longer run or 2+ ranks at a larger batch resolve it",
              count_text(ns->b_noise).c_str(), within,
              samples_to_same_loss(c.p.row(within)->global_batch, c.in.step.global_batch,
                                   ns->b_noise))});
  }
  if (c.row && !c.data_ok(*c.row))
    r.cautions.push_back(
        {"min_steps_per_epoch",
         sfmt("even %s's global batch of %s leaves %.1f steps per epoch, under the minimum of %g: "
              "lower the batch",
              c.n_devices.c_str(), count_text(c.row->global_batch).c_str(),
              c.in.step.samples_per_epoch / c.row->global_batch, c.in.min_steps_per_epoch)});
  if (c.row && !c.safe_ok(*c.row))
    r.cautions.push_back(
        {"max_safe_batch",
         sfmt("even %s's global batch of %.0f is above the largest safe batch %.0f: the model "
              "would lose accuracy; lower the per-device batch to at most %.0f",
              c.n_devices.c_str(), c.row->global_batch, *c.in.max_safe_batch,
              std::floor(*c.in.max_safe_batch / c.n))});
  if (!c.in.max_safe_batch && c.row && c.row->global_batch > c.in.step.global_batch)
    r.cautions.push_back(
        {"batch_untested",
         sfmt("at N = %d the global batch is %s, %.3gx the %s the measured run trained with; "
              "nothing here says the model keeps its accuracy there%s: check it with tutti "
              "study large-batch (--study) or give --max-safe-batch",
              c.n, count_text(c.row->global_batch).c_str(),
              c.row->global_batch / c.in.step.global_batch,
              count_text(c.in.step.global_batch).c_str(),
              c.p.b_noise ? " (the noise scale prices the extra samples the loss takes, with the "
                            "learning rate retuned for the batch; it says nothing of the test "
                            "metric)"
                          : "")});
}

// The batch limit's fields (`max_safe_batch`), in numbers and in words.
inline void batch_fields(plan_result& r, const verdict_context& c) {
  if (c.in.max_safe_batch) {
    const double limit = *c.in.max_safe_batch;
    TUTTI_EXPECTS(limit > 0, "tutti::make_plan",
                  "max_safe_batch is not positive; expected a batch");
    const bool safe_binds = !c.met && c.next && c.n < c.blocked && c.safe_cap == c.n;
    r.max_devices_within_batch = static_cast<int>(
        std::floor(limit / (c.row ? c.row->per_device_batch : c.in.step.per_device_batch())));
    r.per_device_batch_within = std::floor(limit / (safe_binds ? c.blocked : c.n));
    r.batch_exceeds_safe = r.advised_global_batch > limit;
    if (safe_binds)
      r.batch_answer = r.binding.back().text;
    else if (r.batch_exceeds_safe)
      r.batch_answer = r.cautions.back().text;
    else
      r.batch_answer =
          sfmt("the global batch at N = %d, %.0f, is within the largest safe batch %.0f", c.n,
               r.advised_global_batch, limit);
  }
}

// The verdict on `r.proj` (docs/ledger.md, "Limits and reasons"). The target is the deadline,
// else the reasonable time. One device when it meets the target; else the fewest devices that
// do, within the hard limits (steps per epoch, the largest safe batch) and, without a deadline,
// before the knee; else the most those limits and the knee allow. Every limit that stops N is
// named in `r.binding`.
inline void decide(plan_result& r) {
  const verdict_context c = choose_devices(r);
  reason_target(r, c);
  reason_limits(r, c);
  add_cautions(r, c);
  batch_fields(r, c);
}

}  // namespace tutti::detail::plan
