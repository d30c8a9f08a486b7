// SPDX-License-Identifier: Apache-2.0
/// @file plan/projection.hpp
/// @brief From one measured step to N = 1, 2, 4, ... devices: step time, samples/s, speedup,
/// efficiency, device-hours and money per epoch, marginal cost, and the knee.
#pragma once

#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/plan/cost_model.hpp>
#include <tutti/plan/links.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tutti {

/// A row-sparse segment of a measured step (an embedding table): what the dense reduce sends for
/// it, what the rows one device's step touched take in a sparse exchange's gather (their ids and
/// values, docs/trainer.md#sparse-embedding-exchange), and what their ids alone take in the
/// row-sparse step's gather (0 for a step that does not gather them), per step. Where the
/// optimizer updated rows (the row-sparse step): the table's rows and a row's values, the rows
/// one device's step touched and those the update read (every device's union), per step; with
/// `updated_rows` 0 the optimizer's time is taken not to depend on the device count.
struct measured_row_segment {
  double dense_bytes = 0;
  double row_bytes = 0;
  double id_bytes = 0;
  double table_rows = 0;
  double cols = 0;
  double rows = 0;
  double updated_rows = 0;
};

/// How a projected step sends the row-sparse segments of its gradient.
enum class projected_exchange {
  dense,            ///< through the dense reduce (`--sparse-exchange off`)
  rows_when_fewer,  ///< each segment as rows where they are fewer bytes (`--sparse-exchange auto`)
  rows,             ///< every segment as rows (`--sparse-exchange on`)
};

/// "dense", "rows_when_fewer" or "rows".
inline const char* to_string(projected_exchange x) noexcept {
  return x == projected_exchange::dense             ? "dense"
         : x == projected_exchange::rows_when_fewer ? "rows_when_fewer"
                                                    : "rows";
}

/// How a run with the sparse-exchange policy named `policy` ("off", "auto", "on", "measured", as
/// `tutti::to_string(sparse_exchange_policy)` spells them) sends its row-sparse segments: "off"
/// densely, "on" as rows, "auto" and "measured" as rows where they are fewer bytes.
inline projected_exchange projected_exchange_of(std::string_view policy) noexcept {
  if (policy == "on") return projected_exchange::rows;
  if (policy == "auto" || policy == "measured") return projected_exchange::rows_when_fewer;
  return projected_exchange::dense;
}

/// What one device spent on one step of a measured run, by account, and the run's shape. A
/// 1-rank run with `single_rank` reduces nothing but still reports the gradient bytes.
struct measured_step {
  double data_s = 0;             ///< sampling and gathering the batch, seconds per step
  double compute_s = 0;          ///< forward + backward, seconds per step
  double optimizer_s = 0;        ///< applying the update, seconds per step
  double reduce_total_s = 0;     ///< the whole gradient allreduce, seconds per step
  double reduce_exposed_s = 0;   ///< the part of it the step waited for, seconds per step
  double bytes_reduced = 0;      ///< gradient bytes one device hands to the reducer per step
  double global_batch = 0;       ///< samples per step over all ranks of the measured run
  double samples_per_epoch = 0;  ///< samples in one epoch (training rows)
  int world_size = 1;            ///< ranks of the measured run
  /// What the dense reduce of the whole gradient sends per step; 0: `bytes_reduced` (a run that
  /// reduced densely). Read only with `row_segments`.
  double dense_bytes = 0;
  /// The gradient's row-sparse segments (embedding tables) as a sparse exchange would send them,
  /// for `projection_options::exchange`; empty: every device count reduces `bytes_reduced`.
  std::vector<measured_row_segment> row_segments{};

  /// Samples per step on one device.
  double per_device_batch() const noexcept { return global_batch / world_size; }
  /// What the dense reduce of the whole gradient sends per step (`dense_bytes`, or else the
  /// measured `bytes_reduced`).
  double dense_gradient_bytes() const noexcept {
    return dense_bytes > 0 ? dense_bytes : bytes_reduced;
  }
  /// The step as measured: data + compute + optimizer + exposed reduce.
  double step_s() const noexcept { return data_s + compute_s + optimizer_s + reduce_exposed_s; }
};

/// Whether the global batch grows with the devices (weak scaling: every device keeps its
/// batch, as DDP users do) or is held fixed and split (strong scaling).
enum class scaling_mode { weak, strong };

/// "weak" or "strong".
inline const char* to_string(scaling_mode s) noexcept {
  return s == scaling_mode::weak ? "weak" : "strong";
}

/// How much faster the measured rank's threads ran than one thread would on free cores, per
/// account; 0: linear (as many times as it had threads). Accounts differ: many short parallel
/// loops (compute) can gain less from threads than one long streaming pass (the optimizer).
struct thread_speedups {
  double data = 0;       ///< sampling and gathering the batch
  double compute = 0;    ///< forward + backward (and what counts with it)
  double optimizer = 0;  ///< applying the update
};

/// Ranks that share one host's cores (threads or processes of one machine, as `run_local` and
/// `tutti train --reducer mpi` run them) instead of owning a device each. Such ranks split the
/// host between them: a rank of k on a node of C cores gets t = max(1, floor(C / k)) threads, as
/// `run_local` and the MPI path give it, and when the ranks' threads outnumber the cores other
/// jobs leave free they take turns. docs/ledger.md, "Ranks that share a host".
struct shared_host {
  double cores = 0;  ///< cores of one node; 0: every rank owns its device (nothing is shared)
  /// Cores other jobs leave the ranks (`tutti::measure_available_cores`); 0: all `cores`.
  double available_cores = 0;
  /// Threads of each measured rank; 0: what the launcher gave it, max(1, floor(cores / measured
  /// ranks per node)).
  double measured_threads = 0;
  /// How much faster the measured rank's threads ran than one thread would on free cores, per
  /// account (`tutti::thread_speedup_from`); 0: linear. Thread counts in between follow
  /// Amdahl's law through (1, 1) and (measured threads, the speedup).
  thread_speedups thread_speedup{};
  /// What a step of more than one rank pays to synchronise them beyond its work and its reduce
  /// (wake-ups, a rank that polls on a core another rank needs), seconds per step; measured by
  /// `tutti::bench_step` (`tutti bench allreduce --step-work-us`).
  double sync_s = 0;

  /// True when ranks share their node's cores.
  bool enabled() const noexcept { return cores > 0; }
  /// The available cores, `cores` when not given.
  double available() const noexcept { return available_cores > 0 ? available_cores : cores; }
  /// Threads a rank gets when `ranks` ranks share a node: max(1, floor(cores / ranks)).
  double threads_per_rank(int ranks) const noexcept {
    return std::max(1.0, std::floor(cores / double(std::max(ranks, 1))));
  }
  /// How many times slower each thread runs because `ranks` ranks of `threads` threads each
  /// outnumber the available cores: max(1, ranks x threads / available).
  double core_share(int ranks, double threads) const noexcept {
    return std::max(1.0, double(ranks) * threads / available());
  }
};

/// How to project: which device counts, on what topology, at what price.
struct projection_options {
  int max_devices = 1024;                     ///< sweep 1, 2, 4, ... up to this (inclusive)
  std::vector<int> devices{};                 ///< explicit device counts (ascending); empty: sweep
  int devices_per_node = 8;                   ///< devices a node holds
  link_profile intra = find_link("pcie4");    ///< link between the devices of a node
  link_profile inter = find_link("pcie4");    ///< link between nodes (one port)
  int nics_per_node = 1;                      ///< network ports per node
  scaling_mode scaling = scaling_mode::weak;  ///< what happens to the batch as N grows
  double price_per_device_hour = 1.0;         ///< money per device-hour (1: cost = device-hours)
  double knee_fraction = 0.5;                 ///< a device is worth adding while it adds this share
  /// Exposed / total of the reduce (1: no overlap). Empty: the measured step's ratio, or 1
  /// when the measured run reduced nothing (one rank).
  std::optional<double> exposed_ratio{};
  /// Ranks that share a host's cores; off by default (every rank a device of its own).
  shared_host host{};
  /// How the row-sparse segments travel at each device count (with `measured_step::row_segments`).
  projected_exchange exchange = projected_exchange::dense;
};

/// The bytes a step of `n` devices hands to the reducer, in the ledger's convention (a gather of b
/// bytes a device moves what an allreduce of n·b/2 does). Without row segments, the measured
/// `bytes_reduced`. With them, for n > 1: the dense bytes, each segment replaced by the rows a
/// device's step touched where `x` says so (with a gather of the counts, a word a segment and
/// device), and the row-sparse step's gather of the touched ids (and of their counts) where the
/// step makes it. A device's step is taken to touch the measured rows (per-device batch kept).
inline double projected_bytes(const measured_step& m, projected_exchange x, int n) {
  if (m.row_segments.empty()) return m.bytes_reduced;
  const double dense = m.dense_gradient_bytes();
  if (n <= 1) return dense;
  const double devices = n;
  const double counts = devices * double(m.row_segments.size()) * 8.0 / 2;
  double bytes = dense + (x == projected_exchange::dense ? 0.0 : counts);
  bool ids = false;
  for (const measured_row_segment& s : m.row_segments) {
    const double rows = devices * s.row_bytes / 2;
    if (x == projected_exchange::rows ||
        (x == projected_exchange::rows_when_fewer && rows < s.dense_bytes))
      bytes += rows - s.dense_bytes;
    bytes += devices * s.id_bytes / 2;
    ids = ids || s.id_bytes > 0;
  }
  return bytes + (ids ? counts : 0.0);
}

/// The rows `n` devices' union holds when each touches `rows` of a table of `table_rows`,
/// each device's a uniform draw: R (1 − (1 − r/R)^n). Rows drawn by popularity overlap more,
/// so the union is at most this.
inline double union_rows(double rows, double table_rows, int n) {
  if (table_rows <= 0 || rows <= 0) return 0.0;
  const double share = std::min(1.0, rows / table_rows);
  return table_rows * (1.0 - std::pow(1.0 - share, double(n)));
}

/// The optimizer's time at `n` devices over the measured one: the row-sparse step updates the
/// union of every device's touched rows, so its work follows the values of that union (the
/// dense segments' values alike at every count). Each segment's measured union is carried to n
/// devices by `union_rows` at n over `union_rows` at the measured world size, so the measured
/// run's own count gives 1. 1 where a segment lists no updated rows.
inline double projected_update_factor(const measured_step& m, int n) {
  const double dense = m.dense_gradient_bytes();
  double listed = 0, measured = 0, projected = 0;
  for (const measured_row_segment& s : m.row_segments) {
    if (s.updated_rows <= 0 || s.cols <= 0) return 1.0;
    listed += s.dense_bytes;
    measured += s.updated_rows * s.cols;
    const double at_measured = union_rows(s.rows, s.table_rows, m.world_size);
    const double grown = at_measured > 0 ? union_rows(s.rows, s.table_rows, n) / at_measured : 1;
    projected += s.updated_rows * grown * s.cols;
  }
  if (measured <= 0) return 1.0;
  // The rest of the gradient is dense: every device updates all of it (4 bytes a value).
  const double rest = std::max(0.0, dense - listed) / 4.0;
  return (rest + projected) / (rest + measured);
}

/// The projection for one device count.
struct projection_row {
  int devices = 1;              ///< N
  int nodes = 1;                ///< nodes the N devices fill
  double per_device_batch = 0;  ///< samples per step on each device
  double global_batch = 0;      ///< samples per step over the N devices
  double data_s = 0;            ///< per step, scaled with the per-device batch
  double compute_s = 0;         ///< per step, scaled with the per-device batch
  double optimizer_s = 0;       ///< per step, independent of the batch
  /// The optimizer's time over the measured one: the union of the devices' rows a row-sparse
  /// step updates (`projected_update_factor`); 1 for a dense optimizer.
  double update_factor = 1;
  /// Threads of each rank on a shared host (0 when ranks own their devices).
  double threads_per_rank = 0;
  /// A rank's host work relative to the measured rank's, per sample for data and compute and per
  /// step for the optimizer, averaged over the three weighted by the measured time: 1 for ranks
  /// that own their devices (`shared_host_factor` per account).
  double host_factor = 1;
  double sync_s = 0;  ///< synchronisation per step on a shared host (0 for one rank)
  allreduce_algorithm algorithm = allreduce_algorithm::none;  ///< the fastest allreduce
  double reduce_total_s = 0;                                  ///< predicted allreduce time per step
  double reduce_exposed_s = 0;                                ///< its exposed part after overlap
  double step_s = 0;                  ///< data + compute + optimizer + exposed reduce + sync
  double samples_per_s = 0;           ///< global batch / step
  double speedup = 1;                 ///< samples/s over one device's samples/s
  double efficiency = 1;              ///< speedup / N
  double steps_per_epoch = 0;         ///< ceil(samples per epoch / global batch)
  double epoch_s = 0;                 ///< steps per epoch x step
  double device_hours_per_epoch = 0;  ///< N x epoch hours
  double cost_per_epoch = 0;          ///< device-hours x price
  double gain_per_added_device = 0;   ///< samples/s added per device since the previous row
  /// Money per hour for each extra sample/s bought by the devices added since the previous row
  /// (the first row: relative to no device); +infinity when they added no throughput.
  double marginal_cost = 0;
  /// Under a gradient noise scale (`apply_noise_scale`): samples needed for the loss the
  /// measured global batch reaches, E(B_N) / E(B_measured); 1 without one.
  double samples_factor = 1;
  /// One device's time to that loss over N's (= speedup without a noise scale).
  double loss_speedup = 1;
  /// Of the samples/s the devices added since the previous row bring, the share that shortens
  /// the time to that loss (1 without a noise scale, 0 when they bring none).
  double useful_share = 1;
};

/// A projection: its inputs, its rows and the knee.
struct projection {
  measured_step measured;               ///< the step it was made from
  projection_options options;           ///< how it was made
  double exposed_ratio = 1;             ///< the exposed / total reduce ratio applied
  double one_device_samples_per_s = 0;  ///< throughput of one device (the speedup baseline)
  std::vector<projection_row> rows;     ///< one per device count, ascending
  /// The first N whose added devices each add less than knee_fraction of one device's
  /// throughput; empty when every step of the sweep is worth it.
  std::optional<int> knee;
  /// The largest N before the knee (every N when there is none): the last worth paying for.
  int last_worthwhile = 1;
  /// Rows left out because strong scaling would give a device less than one sample.
  bool truncated = false;
  /// The gradient noise scale the rows' time to the same loss assumes (`apply_noise_scale`);
  /// empty: none, and every row's samples_factor is 1.
  std::optional<double> b_noise;
  /// A device is worth adding while this share of the samples/s it brings shortens the time to
  /// the same loss.
  double useful_fraction = 0.2;
  /// The first N whose added devices bring samples/s of which less than useful_fraction shortens
  /// the time to the same loss; empty without a noise scale or when every N is useful.
  std::optional<int> noise_knee;
  /// The largest N before the noise knee (every N when there is none).
  int last_useful = 1;
  /// The first N whose global batch passes B_noise.
  std::optional<int> noise_crossed_at;

  /// The row of `n` devices, or nullptr.
  const projection_row* row(int n) const noexcept {
    for (const auto& r : rows)
      if (r.devices == n) return &r;
    return nullptr;
  }
};

namespace detail::plan {

// Ranks of the measured run on its busiest node.
inline int measured_ranks_per_node(const measured_step& m, int devices_per_node) {
  return std::max(1, std::min(m.world_size, devices_per_node));
}

inline double measured_threads(const shared_host& h, const measured_step& m, int devices_per_node) {
  return h.measured_threads > 0 ? h.measured_threads
                                : h.threads_per_rank(measured_ranks_per_node(m, devices_per_node));
}

inline void check_measured(const measured_step& m) {
  static constexpr const char* fn = "tutti::project";
  for (const double v : {m.data_s, m.compute_s, m.optimizer_s, m.reduce_total_s, m.reduce_exposed_s,
                         m.bytes_reduced})
    TUTTI_EXPECTS(std::isfinite(v) && v >= 0, fn,
                  "a measured account is " + num(v) + "; expected finite seconds/bytes >= 0");
  for (const measured_row_segment& s : m.row_segments)
    TUTTI_EXPECTS(
        std::isfinite(s.dense_bytes) && s.dense_bytes >= 0 && std::isfinite(s.row_bytes) &&
            s.row_bytes >= 0 && std::isfinite(s.id_bytes) && s.id_bytes >= 0,
        fn,
        "a row-sparse segment's bytes are " + num(s.dense_bytes) + " dense, " + num(s.row_bytes) +
            " as rows and " + num(s.id_bytes) + " as ids; expected finite bytes >= 0");
  for (const measured_row_segment& s : m.row_segments)
    TUTTI_EXPECTS(
        std::isfinite(s.table_rows) && s.table_rows >= 0 && std::isfinite(s.cols) && s.cols >= 0 &&
            std::isfinite(s.rows) && s.rows >= 0 && s.rows <= s.table_rows &&
            std::isfinite(s.updated_rows) && s.updated_rows >= 0 && s.updated_rows <= s.table_rows,
        fn,
        "a row-sparse segment has " + num(s.rows) + " rows touched and " + num(s.updated_rows) +
            " updated a step of a table of " + num(s.table_rows) + " rows of " + num(s.cols) +
            " values; expected finite counts >= 0, at most the table's rows");
  TUTTI_EXPECTS(m.world_size >= 1, fn,
                "world_size = " + std::to_string(m.world_size) + "; expected >= 1");
  TUTTI_EXPECTS(std::isfinite(m.global_batch) && m.global_batch >= m.world_size, fn,
                "global_batch = " + num(m.global_batch) +
                    "; expected at least one sample per rank (world_size = " +
                    std::to_string(m.world_size) + ")");
  TUTTI_EXPECTS(std::isfinite(m.samples_per_epoch) && m.samples_per_epoch > 0, fn,
                "samples_per_epoch = " + num(m.samples_per_epoch) + "; expected > 0");
  TUTTI_EXPECTS(m.data_s + m.compute_s + m.optimizer_s > 0, fn,
                "the measured step spent no time on data, compute or optimizer; expected a "
                "step time > 0 to project from");
  TUTTI_EXPECTS(m.reduce_exposed_s <= m.reduce_total_s * (1 + 1e-9) || m.reduce_total_s == 0, fn,
                "reduce_exposed_s = " + num(m.reduce_exposed_s) + " > reduce_total_s = " +
                    num(m.reduce_total_s) + "; expected the exposed part of the total");
}

inline void check_host(const shared_host& h, const measured_step& m, int devices_per_node) {
  static constexpr const char* fn = "tutti::project";
  const thread_speedups& s = h.thread_speedup;
  for (const double v :
       {h.cores, h.available_cores, h.measured_threads, s.data, s.compute, s.optimizer, h.sync_s})
    TUTTI_EXPECTS(std::isfinite(v) && v >= 0, fn,
                  "shared_host has " + num(v) + "; expected finite values >= 0 (0: default)");
  if (!h.enabled()) return;
  const double t0 = measured_threads(h, m, devices_per_node);
  for (const double v : {s.data, s.compute, s.optimizer})
    TUTTI_EXPECTS(v <= t0 * (1 + 1e-12), fn,
                  "shared_host.thread_speedup has " + num(v) + " > " + num(t0) +
                      " measured threads; expected at most linear (Amdahl)");
}

// Amdahl's law through (1, 1) and (measured threads T, speedup S): p = (1 - 1/S) / (1 - 1/T),
// speedup(t) = 1 / ((1 - p) + p / t). Linear (p = 1) when T = 1 or no speedup was measured.
inline double thread_speedup_at(double t, double measured, double speedup) {
  if (measured <= 1 || speedup <= 0) return t;
  const double p = (1.0 - 1.0 / speedup) / (1.0 - 1.0 / measured);
  return 1.0 / ((1.0 - p) + p / t);
}

inline std::vector<int> device_counts(const projection_options& o) {
  std::vector<int> n = o.devices;
  if (n.empty())
    for (int d = 1; d <= o.max_devices; d *= 2) {
      n.push_back(d);
      if (d > o.max_devices / 2) break;
    }
  return n;
}

}  // namespace detail::plan

/// A rank's host work in one account relative to the measured rank's when `ranks` ranks share
/// a node of `h` (docs/ledger.md, "Ranks that share a host"): with T threads for the measured
/// rank, whose account ran `speedup` times faster than on one thread (0: linear, T), t =
/// max(1, floor(cores / ranks)) threads for the projected one, Amdahl's S(t) through (1, 1) and
/// (T, speedup), and the core share c(k, t) = max(1, k t / available cores),
///
///     factor = S(T) c(ranks, t) / (S(t) c(measured ranks, T)),
///
/// 1 when `h` is off. The batch ratio comes on top for data and compute.
inline double shared_host_factor(const shared_host& h, double speedup, const measured_step& m,
                                 int devices_per_node, int ranks) {
  if (!h.enabled()) return 1.0;
  namespace f = detail::plan;
  const double T = f::measured_threads(h, m, devices_per_node);
  const double S = speedup > 0 ? speedup : T;
  const double t = h.threads_per_rank(ranks);
  const int k0 = f::measured_ranks_per_node(m, devices_per_node);
  return S * h.core_share(ranks, t) / (f::thread_speedup_at(t, T, S) * h.core_share(k0, T));
}

/// The measured rank's thread speedups on free cores from two runs of it: `one_thread`, the
/// same run with one thread, and `measured`, with `h`'s measured threads. Per account, what the
/// runs saw is corrected for the core share of the time, S = (one thread / measured) x
/// c(k, T) / c(k, 1), and capped at linear; an account either run left empty stays 0 (linear).
/// Throws `tutti::invalid_argument` for a host without cores or runs of different shapes.
inline thread_speedups thread_speedup_from(const measured_step& one_thread,
                                           const measured_step& measured, const shared_host& h,
                                           int devices_per_node) {
  static constexpr const char* fn = "tutti::thread_speedup_from";
  TUTTI_EXPECTS(h.enabled(), fn, "shared_host.cores = 0; expected the cores of the host");
  TUTTI_EXPECTS(one_thread.world_size == measured.world_size &&
                    one_thread.global_batch == measured.global_batch,
                fn,
                "the runs differ in world size or global batch; expected the same run with one "
                "thread and with the measured threads");
  const double T = detail::plan::measured_threads(h, measured, devices_per_node);
  const int k0 = detail::plan::measured_ranks_per_node(measured, devices_per_node);
  const double correction = h.core_share(k0, T) / h.core_share(k0, 1.0);
  const auto one = [&](double alone, double with_threads) {
    TUTTI_EXPECTS(
        std::isfinite(alone) && std::isfinite(with_threads) && alone >= 0 && with_threads >= 0, fn,
        "an account is not a finite time >= 0");
    return alone > 0 && with_threads > 0 ? std::min(T, alone / with_threads * correction) : 0.0;
  };
  return {.data = one(one_thread.data_s, measured.data_s),
          .compute = one(one_thread.compute_s, measured.compute_s),
          .optimizer = one(one_thread.optimizer_s, measured.optimizer_s)};
}

/// Projects the measured step to N devices of `o`'s topology (docs/ledger.md, "Definitions").
///
/// Per device and step: data and compute scale with the per-device batch (weak scaling keeps
/// it; strong scaling divides the measured global batch by N); the optimizer's time does not
/// (it touches every parameter whatever the batch), but for a row-sparse step it follows the
/// union of the devices' rows it updates (`projected_update_factor`); the reduce is the fastest
/// allreduce of the measured gradient bytes on N devices, of which the exposed ratio is charged,
/// but no more can hide than the step's compute (`exposed_reduce_seconds`). Ranks that share a host
/// (`projection_options::host`) split its cores: each account's time is multiplied by its
/// `shared_host_factor`, and a step of more than one rank pays the measured synchronisation on
/// top. Throws `tutti::invalid_argument` on an impossible measurement or options.
inline projection project(const measured_step& m, const projection_options& o = {}) {
  static constexpr const char* fn = "tutti::project";
  detail::plan::check_measured(m);
  TUTTI_EXPECTS(o.max_devices >= 1, fn,
                "max_devices = " + std::to_string(o.max_devices) + "; expected >= 1");
  TUTTI_EXPECTS(std::isfinite(o.price_per_device_hour) && o.price_per_device_hour >= 0, fn,
                "price = " + detail::num(o.price_per_device_hour) + "; expected >= 0");
  TUTTI_EXPECTS(o.knee_fraction > 0 && o.knee_fraction <= 1, fn,
                "knee_fraction = " + detail::num(o.knee_fraction) + "; expected 0 < f <= 1");
  detail::plan::check_host(o.host, m, o.devices_per_node);
  const std::vector<int> counts = detail::plan::device_counts(o);
  for (std::size_t i = 0; i < counts.size(); ++i)
    TUTTI_EXPECTS(counts[i] >= 1 && (i == 0 || counts[i] > counts[i - 1]), fn,
                  "device counts must be ascending and >= 1; got " + std::to_string(counts[i]) +
                      " at position " + std::to_string(i));

  projection p;
  p.measured = m;
  p.options = o;
  if (o.exposed_ratio)
    p.exposed_ratio = *o.exposed_ratio;
  else
    p.exposed_ratio = m.reduce_total_s > 0 && m.world_size > 1
                          ? std::clamp(m.reduce_exposed_s / m.reduce_total_s, 0.0, 1.0)
                          : 1.0;
  TUTTI_EXPECTS(p.exposed_ratio >= 0 && p.exposed_ratio <= 1, fn,
                "exposed_ratio = " + detail::num(p.exposed_ratio) + "; expected 0 <= ratio <= 1");

  const double b0 = m.per_device_batch();
  const auto make_row = [&](int n) {
    projection_row r;
    r.devices = n;
    topology t{.devices = n,
               .devices_per_node = o.devices_per_node,
               .intra = o.intra,
               .inter = o.inter,
               .nics_per_node = o.nics_per_node};
    r.nodes = t.nodes();
    r.per_device_batch = o.scaling == scaling_mode::weak ? b0 : m.global_batch / n;
    r.global_batch = r.per_device_batch * n;
    const int on_node = std::min(n, o.devices_per_node);
    const thread_speedups& su = o.host.thread_speedup;
    const auto factor = [&](double speedup) {
      return shared_host_factor(o.host, speedup, m, o.devices_per_node, on_node);
    };
    const double fd = factor(su.data), fc = factor(su.compute), fo = factor(su.optimizer);
    r.threads_per_rank = o.host.enabled() ? o.host.threads_per_rank(on_node) : 0.0;
    r.host_factor = (m.data_s * fd + m.compute_s * fc + m.optimizer_s * fo) /
                    (m.data_s + m.compute_s + m.optimizer_s);
    const double scale = r.per_device_batch / b0;
    r.data_s = m.data_s * scale * fd;
    r.compute_s = m.compute_s * scale * fc;
    r.update_factor = projected_update_factor(m, n);
    r.optimizer_s = m.optimizer_s * fo * r.update_factor;
    r.sync_s = o.host.enabled() && n > 1 ? o.host.sync_s : 0.0;
    const allreduce_estimate e = best_allreduce(projected_bytes(m, o.exchange, n), t);
    r.algorithm = e.algorithm;
    r.reduce_total_s = e.seconds();
    r.reduce_exposed_s = exposed_reduce_seconds(r.reduce_total_s, p.exposed_ratio, r.compute_s);
    r.step_s = r.data_s + r.compute_s + r.optimizer_s + r.reduce_exposed_s + r.sync_s;
    r.samples_per_s = r.global_batch / r.step_s;
    r.steps_per_epoch = std::ceil(m.samples_per_epoch / r.global_batch);
    r.epoch_s = r.steps_per_epoch * r.step_s;
    r.device_hours_per_epoch = n * r.epoch_s / 3600.0;
    r.cost_per_epoch = r.device_hours_per_epoch * o.price_per_device_hour;
    return r;
  };

  const projection_row one = make_row(1);
  p.one_device_samples_per_s = one.samples_per_s;
  const double worth = o.knee_fraction * one.samples_per_s;
  int prev_n = 0;
  double prev_sps = 0;
  for (const int n : counts) {
    if (o.scaling == scaling_mode::strong && m.global_batch / n < 1.0) {
      p.truncated = true;
      break;
    }
    projection_row r = make_row(n);
    r.speedup = r.samples_per_s / one.samples_per_s;
    r.efficiency = r.speedup / n;
    const double added_sps = r.samples_per_s - prev_sps;
    r.gain_per_added_device = added_sps / (n - prev_n);
    r.marginal_cost = added_sps > 0 ? (n - prev_n) * o.price_per_device_hour / added_sps
                                    : std::numeric_limits<double>::infinity();
    if (!p.knee && prev_n > 0 && r.gain_per_added_device < worth) p.knee = n;
    if (!p.knee) p.last_worthwhile = n;
    p.last_useful = n;
    prev_n = n;
    prev_sps = r.samples_per_s;
    p.rows.push_back(r);
  }
  return p;
}

/// The line under a projection whose optimizer updates the union of the devices' rows (its
/// factor at the most devices), or empty where the optimizer's time is kept.
inline std::string update_factor_note(const projection& p) {
  if (p.rows.empty() || p.rows.back().update_factor == 1.0) return {};
  return detail::sfmt(
      "(each device updates the rows every device touched: the optimizer's time x%.2f at %d "
      "devices)\n",
      p.rows.back().update_factor, p.rows.back().devices);
}

/// The projection as a fixed-width text table, one row per device count, followed by the knee
/// (the `tutti plan` table and the projection `tutti train` prints).
inline std::string format_projection_table(const projection& p) {
  using detail::sfmt;
  std::string out = sfmt("%7s %5s %12s %10s %10s %10s %12s %8s %6s %11s %12s %12s", "devices",
                         "nodes", "allreduce", "reduce", "exposed", "step", "samples/s", "speedup",
                         "eff", "dev-h/epoch", "cost/epoch", "marginal");
  out += p.b_noise ? sfmt(" %9s %9s %7s\n", "samples x", "to-loss x", "useful") : "\n";
  for (const auto& r : p.rows) {
    namespace f = detail;
    out += sfmt("%7d %5d %12s %10s %10s %10s %12s %8.2f %5.0f%% %11s %12s %12s", r.devices, r.nodes,
                to_string(r.algorithm), f::duration_text(r.reduce_total_s).c_str(),
                f::duration_text(r.reduce_exposed_s).c_str(), f::duration_text(r.step_s).c_str(),
                f::figure(r.samples_per_s).c_str(), r.speedup, 100.0 * r.efficiency,
                f::figure(r.device_hours_per_epoch).c_str(), f::figure(r.cost_per_epoch).c_str(),
                f::figure(r.marginal_cost).c_str());
    out += p.b_noise ? sfmt(" %9.3f %9.2f %6.0f%%\n", r.samples_factor, r.loss_speedup,
                            100.0 * r.useful_share)
                     : "\n";
  }
  out += sfmt(
      "(%s scaling; reduce = predicted allreduce per step, exposed = the part the step waits "
      "for at exposed/total %.2f; marginal = money per hour per extra sample/s of the last "
      "devices added)\n",
      to_string(p.options.scaling), p.exposed_ratio);
  if (p.truncated)
    out += "(strong scaling stops where a device would get less than one sample per step)\n";
  out += update_factor_note(p);
  if (const shared_host& h = p.options.host; h.enabled()) {
    namespace f = detail::plan;
    const double T = f::measured_threads(h, p.measured, p.options.devices_per_node);
    const auto su = [T](double v) {
      return v > 0 ? v : T;
    };
    out += sfmt(
        "(ranks share a host of %.3g cores, %.3g available; the measured rank had %g thread%s, "
        "speedup %.3g data, %.3g compute, %.3g optimizer; per rank:",
        h.cores, h.available(), T, T == 1 ? "" : "s", su(h.thread_speedup.data),
        su(h.thread_speedup.compute), su(h.thread_speedup.optimizer));
    for (const auto& r : p.rows)
      out += sfmt(" N = %d %g thread%s x%.3g,", r.devices, r.threads_per_rank,
                  r.threads_per_rank == 1 ? "" : "s", r.host_factor);
    out +=
        sfmt(" host work; sync %s per step of N > 1)\n", detail::duration_text(h.sync_s).c_str());
  }
  if (p.b_noise) {
    out += sfmt(
        "(time to the same loss at B_noise = %s samples: samples x = the samples that loss takes "
        "at N's global batch against the measured %s; to-loss x = one device's time to it over "
        "N's; useful = the share of the added samples/s that shortens it)\n",
        detail::count_text(*p.b_noise).c_str(),
        detail::count_text(p.measured.global_batch).c_str());
    if (p.noise_knee)
      out += sfmt(
          "noise knee: N = %d, where less than %.0f%% of what the added devices bring shortens "
          "the time to the same loss; the last N worth it is %d\n",
          *p.noise_knee, 100.0 * p.useful_fraction, p.last_useful);
  }
  if (p.knee)
    out += sfmt(
        "knee: N = %d, where each added device brings less than %.0f%% of one device's "
        "%s samples/s; the last N worth paying for is %d\n",
        *p.knee, 100.0 * p.options.knee_fraction,
        detail::figure(p.one_device_samples_per_s).c_str(), p.last_worthwhile);
  else
    out += sfmt(
        "knee: none up to N = %d: every doubling still adds at least %.0f%% of one device's "
        "%s samples/s per added device\n",
        p.rows.empty() ? 1 : p.rows.back().devices, 100.0 * p.options.knee_fraction,
        detail::figure(p.one_device_samples_per_s).c_str());
  return out;
}

}  // namespace tutti
