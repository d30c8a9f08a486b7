// SPDX-License-Identifier: Apache-2.0
/// @file bench/allreduce.hpp
/// @brief Measures `all_reduce_mean` per message size in the nccl-tests convention (time,
/// algbw, busbw, #wrong) and fits the alpha-beta model to it: the core of
/// `tutti bench allreduce` and of benchmarks/allreduce.cpp. For ranks that share one host's
/// cores it also measures the cores the host leaves this job and what a step's
/// synchronisation costs beyond its work and its reduce.
///
/// For each size the ranks start every timed iteration right after a one-value collective, so
/// they start together; a rank times its own call, an iteration's time is the slowest rank's,
/// and the reported time is the median over iterations. After the timed loop each rank checks
/// its buffer against the known mean.
#pragma once

#include <tutti/detail/median.hpp>
#include <tutti/detail/number_format.hpp>
#include <tutti/error.hpp>
#include <tutti/launch.hpp>
#include <tutti/plan/links.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/single_rank.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <ctime>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tutti {

/// How to sweep: sizes min_bytes, min_bytes x factor, ... up to max_bytes.
struct allreduce_bench_options {
  std::size_t min_bytes = 4096;                   ///< smallest message (multiple of 4)
  std::size_t max_bytes = std::size_t{64} << 20;  ///< largest message
  std::size_t factor = 4;                         ///< ratio of consecutive sizes
  std::size_t iters = 0;                          ///< timed iterations per size; 0: adaptive
  std::size_t warmup = 3;                         ///< untimed iterations per size
  double seconds_per_size = 0.2;                  ///< adaptive target time per size
  std::size_t min_iters = 5;                      ///< adaptive lower bound on iterations
};

/// One row of the table: one reducer, world size and message size.
struct allreduce_bench_row {
  std::string reducer;    ///< "local_ring" or "no_op"
  int ranks = 1;          ///< world size
  std::size_t bytes = 0;  ///< message size
  std::size_t count = 0;  ///< floats in the message
  std::size_t iters = 0;  ///< timed iterations
  double time_us = 0;     ///< median over iterations of the slowest rank's time
  double algbw_gbs = 0;   ///< bytes / time, GB/s
  double busbw_gbs = 0;   ///< algbw x 2(n-1)/n, GB/s
  std::size_t wrong = 0;  ///< elements off the known mean, summed over ranks
};

namespace detail::bench {

using bench_clock = std::chrono::steady_clock;

// What one rank measured for one message size.
struct bench_rank_sample {
  std::vector<double> seconds;  // per timed iteration
  std::size_t wrong = 0;
};

// Rank r holds r + 1 + (i % 7): every value and partial sum is an exact float, so the mean
// (W + 1) / 2 + (i % 7) is known exactly, and the mean of W equal buffers is the buffer itself:
// the check after many iterations tests the last one as strictly as the first.
inline void bench_fill(std::span<float> v, int rank) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(rank + 1) + float(i % 7);
}

inline std::size_t bench_count_wrong(std::span<const float> v, int world) {
  const double base = (world + 1) / 2.0;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double expected = base + double(i % 7);
    if (!(std::abs(double(v[i]) - expected) <= 1e-6 * std::abs(expected))) ++wrong;
  }
  return wrong;
}

// A collective on one value: the ranks leave it within a wake-up of each other.
template <class Reducer>
void bench_line_up(Reducer& reducer) {
  double v[1] = {0.0};
  reducer.all_reduce_max(std::span<double>(v));
}

// The buffer a benchmark reduces: the first `count` floats of the arena the reducer lent
// (`mpi_allreduce::shared_arena()`, which it reduces in place, as in training) when it has one
// that large, else `own`, resized to `count` (first touched by this rank's thread).
template <class Reducer>
std::span<float> bench_buffer(Reducer& reducer, std::size_t count, std::vector<float>& own) {
  if constexpr (requires {
                  { reducer.shared_arena() } -> std::convertible_to<std::span<float>>;
                }) {
    const std::span<float> lent = reducer.shared_arena();
    if (lent.size() >= count) return lent.first(count);
  }
  own.assign(count, 0.f);
  return own;
}

// Warmup and timed iterations of all_reduce_mean over `s` on one rank; returns the seconds of
// each timed iteration. Every rank of the group calls it with the same arguments (the iteration
// count is agreed on). `wait()` runs after each call, inside the timing: for a reducer that
// returns before its collective ends (`nccl_ring`: a wait on the compute stream).
template <class Reducer, class Wait>
std::vector<double> bench_time(Reducer& reducer, std::span<float> s,
                               const allreduce_bench_options& c, Wait&& wait) {
  bench_line_up(reducer);
  const auto warm_start = bench_clock::now();
  for (std::size_t k = 0; k < c.warmup; ++k) {
    reducer.all_reduce_mean(s);
    wait();
  }
  double per_iter[1] = {std::chrono::duration<double>(bench_clock::now() - warm_start).count() /
                        double(std::max<std::size_t>(c.warmup, 1))};
  // Every rank must run the same number of iterations: agree on the slowest rank's estimate.
  reducer.all_reduce_max(std::span<double>(per_iter));
  std::size_t iters = c.iters;
  if (iters == 0) {
    const double want = per_iter[0] > 0 ? c.seconds_per_size / per_iter[0] : 1e6;
    iters = std::clamp<std::size_t>(static_cast<std::size_t>(std::ceil(want)), c.min_iters,
                                    std::size_t{1000000});
  }
  std::vector<double> seconds;
  seconds.reserve(iters);
  for (std::size_t k = 0; k < iters; ++k) {
    bench_line_up(reducer);
    const auto t0 = bench_clock::now();
    reducer.all_reduce_mean(s);
    wait();
    seconds.push_back(std::chrono::duration<double>(bench_clock::now() - t0).count());
  }
  return seconds;
}

// `bench_time` over a host buffer (`bench_buffer`) filled by `bench_fill`, then the wrong values.
template <class Reducer>
bench_rank_sample bench_measure(Reducer& reducer, std::size_t count,
                                const allreduce_bench_options& c) {
  std::vector<float> own;
  const std::span<float> s = bench_buffer(reducer, count, own);
  bench_fill(s, reducer.rank());
  bench_rank_sample out;
  out.seconds = bench_time(reducer, s, c, [] {});
  out.wrong = bench_count_wrong(s, reducer.world_size());
  return out;
}

// The row of one size from the slowest rank's time per iteration and the wrong values of all.
inline allreduce_bench_row bench_row(const std::string& reducer, int world, std::size_t count,
                                     const std::vector<double>& slowest, std::size_t wrong) {
  allreduce_bench_row out;
  out.reducer = reducer;
  out.ranks = world;
  out.count = count;
  out.bytes = count * sizeof(float);
  out.iters = slowest.size();
  const double t = tutti::detail::median(slowest);
  out.time_us = t * 1e6;
  out.algbw_gbs = t > 0 ? double(out.bytes) / t / 1e9 : 0.0;
  out.busbw_gbs = out.algbw_gbs * 2.0 * double(world - 1) / double(world);
  out.wrong = wrong;
  return out;
}

// Makes every rank's sample the group's: per iteration the slowest rank's seconds, and the wrong
// values summed over ranks. A collective of `reducer`'s group.
template <class Reducer>
void bench_gather_slowest(Reducer& reducer, bench_rank_sample& s) {
  if (!s.seconds.empty()) reducer.all_reduce_max(std::span<double>(s.seconds));
  double wrong[1] = {double(s.wrong)};
  reducer.all_reduce_sum(std::span<double>(wrong));
  s.wrong = static_cast<std::size_t>(wrong[0]);
}

// CPU time of the calling thread, seconds; a negative value where the platform has no such clock.
inline double thread_cpu_seconds() noexcept {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
#endif
  return -1.0;
}

// Keeps a computed value observable so a busy loop is not optimised away (from any thread).
inline void keep_alive(double x) noexcept {
  static std::atomic<double> sink{0.0};
  sink.store(x, std::memory_order_relaxed);
}

// Burns `seconds` of this thread's CPU time (not wall time: when the thread shares its core the
// burn takes longer, as a rank's compute does). Falls back to wall time without a CPU clock.
inline void burn_cpu(double seconds) noexcept {
  if (seconds <= 0) return;
  double x = 1.0;
  const double t0 = thread_cpu_seconds();
  if (t0 < 0) {
    const auto end = bench_clock::now() + std::chrono::duration<double>(seconds);
    while (bench_clock::now() < end)
      for (int k = 0; k < 64; ++k) x = x * 1.0000001 + 1e-9;
  } else {
    while (thread_cpu_seconds() - t0 < seconds)
      for (int k = 0; k < 64; ++k) x = x * 1.0000001 + 1e-9;
  }
  keep_alive(x);
}

}  // namespace detail::bench

/// The message sizes of the sweep. Throws `tutti::invalid_argument` unless min_bytes is a
/// positive multiple of 4, max_bytes >= min_bytes and factor >= 2.
inline std::vector<std::size_t> allreduce_bench_sizes(const allreduce_bench_options& c) {
  static constexpr const char* fn = "tutti::allreduce_bench_sizes";
  TUTTI_EXPECTS(c.min_bytes >= sizeof(float) && c.min_bytes % sizeof(float) == 0, fn,
                "min_bytes = " + std::to_string(c.min_bytes) +
                    "; expected a positive multiple of 4 (float32 messages)");
  TUTTI_EXPECTS(c.max_bytes >= c.min_bytes, fn,
                "max_bytes = " + std::to_string(c.max_bytes) + " < min_bytes = " +
                    std::to_string(c.min_bytes) + "; expected max_bytes >= min_bytes");
  TUTTI_EXPECTS(c.factor >= 2, fn,
                "factor = " + std::to_string(c.factor) + "; expected a ratio >= 2");
  std::vector<std::size_t> sizes;
  for (std::size_t b = c.min_bytes; b <= c.max_bytes; b *= c.factor) {
    sizes.push_back(b);
    if (b > c.max_bytes / c.factor) break;  // the next step would overflow or pass the end
  }
  return sizes;
}

/// Runs the sweep on the ranks of `reducer`'s group and returns one row per size, the same on
/// every rank: a collective, so every rank calls it with the same options. An iteration's time
/// is the slowest rank's (gathered with the reducer's own `all_reduce_max`), the wrong values
/// are summed over ranks. `name` labels the rows ("local_ring", "mpi", ...). A reducer that lent
/// a shared arena at least as large as a message (`mpi_allreduce::shared_gradient_arena`) is
/// timed on it, reducing in place as in training; otherwise every rank reduces its own buffer.
template <class Reducer>
std::vector<allreduce_bench_row> bench_allreduce(Reducer& reducer, const allreduce_bench_options& c,
                                                 const std::string& name) {
  std::vector<allreduce_bench_row> rows;
  for (const std::size_t bytes : allreduce_bench_sizes(c)) {
    auto sample = detail::bench::bench_measure(reducer, bytes / sizeof(float), c);
    detail::bench::bench_gather_slowest(reducer, sample);
    rows.push_back(detail::bench::bench_row(name, reducer.world_size(), bytes / sizeof(float),
                                            sample.seconds, sample.wrong));
  }
  return rows;
}

/// Runs the sweep on `world` ranks of `tutti::local_ring` (threads of this process, one group
/// for all sizes) and returns one row per size.
inline std::vector<allreduce_bench_row> bench_allreduce_local_ring(
    int world, const allreduce_bench_options& c = {}) {
  allreduce_bench_sizes(c);  // a bad sweep throws here, before any rank starts
  std::vector<allreduce_bench_row> rows;
  run_local(world, [&](local_ring& ring) {
    auto mine = bench_allreduce(ring, c, "local_ring");
    if (ring.rank() == 0) rows = std::move(mine);
  });
  return rows;
}

/// Runs the sweep on `single_rank`: the floor of what a step pays to reduce (an early return).
inline std::vector<allreduce_bench_row> bench_allreduce_no_op(
    const allreduce_bench_options& c = {}) {
  single_rank reducer;
  return bench_allreduce(reducer, c, "no_op");
}

/// How many of the host's cores this process's threads got: `threads` threads burn CPU for
/// `seconds` of wall time, and the CPU time the scheduler granted them, over the wall time, is
/// the cores other jobs left free (at most `threads`). On a shared machine this is what ranks
/// that share the host will get; a planner's `shared_host::available_cores`. Returns `threads`
/// where the platform has no per-thread CPU clock. Throws `tutti::invalid_argument` unless
/// threads >= 1 and seconds > 0.
inline double measure_available_cores(int threads, double seconds = 0.3) {
  static constexpr const char* fn = "tutti::measure_available_cores";
  TUTTI_EXPECTS(threads >= 1, fn, "threads = " + std::to_string(threads) + "; expected >= 1");
  TUTTI_EXPECTS(seconds > 0 && std::isfinite(seconds), fn,
                "seconds = " + detail::num(seconds) + "; expected > 0");
  if (detail::bench::thread_cpu_seconds() < 0) return double(threads);
  std::vector<double> cpu(static_cast<std::size_t>(threads), 0.0);
  std::atomic<bool> go{false};
  const auto burn = [&](std::size_t k) {
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    const double c0 = detail::bench::thread_cpu_seconds();
    const auto end = detail::bench::bench_clock::now() + std::chrono::duration<double>(seconds);
    double x = 1.0;
    while (detail::bench::bench_clock::now() < end)
      for (int i = 0; i < 256; ++i) x = x * 1.0000001 + 1e-9;
    cpu[k] = detail::bench::thread_cpu_seconds() - c0;
    detail::bench::keep_alive(x);
  };
  std::vector<std::thread> pool;
  pool.reserve(cpu.size());
  for (std::size_t k = 0; k < cpu.size(); ++k) pool.emplace_back(burn, k);
  const auto t0 = detail::bench::bench_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& t : pool) t.join();
  const double wall = std::chrono::duration<double>(detail::bench::bench_clock::now() - t0).count();
  double total = 0;
  for (const double v : cpu) total += v;
  return wall > 0 ? std::min(double(threads), total / wall) : double(threads);
}

/// An emulated training step: every rank burns `work_s` of its own CPU time (its compute), then
/// reduces `bytes` with `all_reduce_mean`; no line-up in between, so ranks arrive as a training
/// step's do and pay what the host charges for synchronising them (wake-ups, ranks that wait on
/// a core another rank needs, a reducer that polls while it waits).
struct step_bench_result {
  std::string reducer;    ///< "local_ring", "mpi", ...
  int ranks = 1;          ///< world size
  double work_s = 0;      ///< CPU seconds each rank burns per step
  double bytes = 0;       ///< bytes reduced per step
  std::size_t iters = 0;  ///< timed steps
  double mean_s = 0;      ///< mean over steps of the slowest rank's step time
  double p50_s = 0;       ///< median of the same
  double p95_s = 0;       ///< 95th percentile of the same
};

/// Times `iters` emulated steps (`step_bench_result`) on the ranks of `reducer`'s group after
/// `warmup` untimed ones; a collective, the same result on every rank. Like `bench_allreduce`,
/// it reduces in the reducer's shared arena when it has one large enough. Throws
/// `tutti::invalid_argument` unless bytes is a positive multiple of 4, work_s >= 0 and iters >= 1.
template <class Reducer>
step_bench_result bench_step(Reducer& reducer, std::size_t bytes, double work_s, std::size_t iters,
                             const std::string& name, std::size_t warmup = 3) {
  static constexpr const char* fn = "tutti::bench_step";
  TUTTI_EXPECTS(bytes >= sizeof(float) && bytes % sizeof(float) == 0, fn,
                "bytes = " + std::to_string(bytes) + "; expected a positive multiple of 4");
  TUTTI_EXPECTS(work_s >= 0 && std::isfinite(work_s), fn,
                "work_s = " + detail::num(work_s) + "; expected >= 0");
  TUTTI_EXPECTS(iters >= 1, fn, "iters = 0; expected at least one timed step");
  std::vector<float> own;
  const std::span<float> s = detail::bench::bench_buffer(reducer, bytes / sizeof(float), own);
  detail::bench::bench_fill(s, reducer.rank());
  detail::bench::bench_line_up(reducer);
  for (std::size_t k = 0; k < warmup; ++k) {
    detail::bench::burn_cpu(work_s);
    reducer.all_reduce_mean(s);
  }
  detail::bench::bench_rank_sample sample;
  sample.seconds.reserve(iters);
  auto t0 = detail::bench::bench_clock::now();
  for (std::size_t k = 0; k < iters; ++k) {
    detail::bench::burn_cpu(work_s);
    reducer.all_reduce_mean(s);
    const auto t1 = detail::bench::bench_clock::now();
    sample.seconds.push_back(std::chrono::duration<double>(t1 - t0).count());
    t0 = t1;
  }
  detail::bench::bench_gather_slowest(reducer, sample);
  step_bench_result r;
  r.reducer = name;
  r.ranks = reducer.world_size();
  r.work_s = work_s;
  r.bytes = double(bytes);
  r.iters = iters;
  double sum = 0;
  for (const double v : sample.seconds) sum += v;
  r.mean_s = sum / double(iters);
  std::vector<double> sorted = sample.seconds;
  std::sort(sorted.begin(), sorted.end());
  r.p50_s = tutti::detail::median(sorted);
  r.p95_s = sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(0.95 * double(iters)))];
  return r;
}

/// The two comment lines that head a table of `reducer` on `world` ranks.
inline std::string format_allreduce_header(const std::string& reducer, int world) {
  std::string s;
  if (reducer == "no_op")
    s = "\n# no_op, 1 rank, float32, all_reduce_mean (an early return: the time is the clock's "
        "own overhead, algbw is not a bandwidth)\n";
  else
    s = detail::sfmt("\n# %s, %d rank%s (%s), float32, all_reduce_mean\n", reducer.c_str(), world,
                     world == 1 ? "" : "s",
                     reducer.rfind("mpi", 0) == 0 ? "processes" : "threads of one process");
  return s + detail::sfmt("# %12s %11s %8s %12s %12s %12s %7s\n", "size(B)", "count", "iters",
                          "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

/// One table row in nccl-tests' columns.
inline std::string format_allreduce_row(const allreduce_bench_row& r) {
  return detail::sfmt("  %12zu %11zu %8zu %12.3f %12.3f %12.3f %7zu\n", r.bytes, r.count, r.iters,
                      r.time_us, r.algbw_gbs, r.busbw_gbs, r.wrong);
}

/// The alpha-beta model fitted to measured allreduce times:
/// time = alpha x 2(n-1) + beta x 2(n-1)/n x S, the ring's cost model with alpha the latency
/// of one step and 1/beta the link's bandwidth.
struct alpha_beta_fit {
  double alpha_s = 0;          ///< latency of one ring step, seconds
  double beta_s_per_byte = 0;  ///< seconds per byte on the link
  std::size_t points = 0;      ///< rows fitted
  double max_rel_error = 0;    ///< largest |model - measured| / measured over the rows
  double rms_rel_error = 0;    ///< root mean square of the same

  /// Predicted seconds of an allreduce of `bytes` on `n` ranks.
  double seconds(double bytes, int n) const noexcept {
    return n > 1 ? alpha_s * 2.0 * (n - 1) + beta_s_per_byte * 2.0 * (n - 1) / n * bytes : 0.0;
  }
  /// The fit as a link profile for the cost model (and `tutti plan --link-file`).
  link_profile as_link(std::string name = "measured", std::string source = "") const {
    return {std::move(name), 1.0 / beta_s_per_byte / 1e9, alpha_s * 1e6,
            source.empty()
                ? detail::sfmt("alpha-beta fit of %zu allreduce timings (max error %.0f%%)", points,
                               100.0 * max_rel_error)
                : std::move(source)};
  }
};

/// Fits alpha and beta to the rows of more than one rank by least squares on relative error
/// (each row weighted by 1/time^2, so the 4 KB and the 64 MB rows count alike): with x1 =
/// 2(n-1), x2 = 2(n-1)/n S, minimise sum ((alpha x1 + beta x2 - t) / t)^2. Rows of one world
/// size give the form time = a + b x 2(n-1)/n S with a = 2(n-1) alpha. A negative
/// alpha (latency below the timer's noise) is refitted as alpha = 0. Throws
/// `tutti::invalid_argument` with fewer than two usable rows or a non-positive bandwidth.
inline alpha_beta_fit fit_alpha_beta(const std::vector<allreduce_bench_row>& rows) {
  static constexpr const char* fn = "tutti::fit_alpha_beta";
  struct pt {
    double x1, x2, t;
  };
  std::vector<pt> pts;
  for (const auto& r : rows)
    if (r.ranks > 1 && r.time_us > 0 && r.wrong == 0)
      pts.push_back(
          {2.0 * (r.ranks - 1), 2.0 * (r.ranks - 1) / r.ranks * double(r.bytes), r.time_us * 1e-6});
  TUTTI_EXPECTS(pts.size() >= 2, fn,
                "got " + std::to_string(pts.size()) +
                    " usable rows; expected at least two timings of more than one rank");
  double a11 = 0, a12 = 0, a22 = 0, b1 = 0, b2 = 0;
  for (const auto& p : pts) {
    const double w = 1.0 / (p.t * p.t);
    a11 += w * p.x1 * p.x1;
    a12 += w * p.x1 * p.x2;
    a22 += w * p.x2 * p.x2;
    b1 += w * p.x1 * p.t;
    b2 += w * p.x2 * p.t;
  }
  alpha_beta_fit f;
  const double det = a11 * a22 - a12 * a12;
  if (det > 0) {
    f.alpha_s = (b1 * a22 - b2 * a12) / det;
    f.beta_s_per_byte = (a11 * b2 - a12 * b1) / det;
  }
  if (!(det > 0) || f.alpha_s < 0) {
    f.alpha_s = 0;
    f.beta_s_per_byte = b2 / a22;
  }
  TUTTI_EXPECTS(f.beta_s_per_byte > 0 && std::isfinite(f.beta_s_per_byte), fn,
                "the fitted bandwidth is not positive; expected timings that grow with the size");
  f.points = pts.size();
  double sq = 0;
  for (const auto& p : pts) {
    const double e = std::abs(f.alpha_s * p.x1 + f.beta_s_per_byte * p.x2 - p.t) / p.t;
    f.max_rel_error = std::max(f.max_rel_error, e);
    sq += e * e;
  }
  f.rms_rel_error = std::sqrt(sq / double(pts.size()));
  return f;
}

/// The fit in words: "alpha 12.3 us per step, bandwidth 2.41 GB/s (1/beta); ...".
inline std::string format_alpha_beta(const alpha_beta_fit& f) {
  return detail::sfmt(
      "# alpha-beta fit (time = alpha 2(n-1) + beta 2(n-1)/n S, least squares on relative "
      "error, %zu rows):\n#   alpha = %.3f us per step, 1/beta = %.3f GB/s; error max %.1f%%, "
      "rms %.1f%%\n",
      f.points, f.alpha_s * 1e6, 1.0 / f.beta_s_per_byte / 1e9, 100.0 * f.max_rel_error,
      100.0 * f.rms_rel_error);
}

}  // namespace tutti
