// SPDX-License-Identifier: Apache-2.0
/// @file ledger/accounts.hpp
/// @brief Measured accounts: what each step of each rank spent on data, compute, the guard,
/// waiting, the gradient reduce and the optimizer; summaries and the per-rank table.
///
/// A step is cut into contiguous intervals, each charged to one `tutti::account`, so the
/// accounts of a step add up to its wall time and an epoch's steps to the epoch's step loop.
/// On `tutti::host_space` the intervals come from `std::chrono::steady_clock`; on
/// `tutti::cuda_space` from CUDA events recorded on the compute stream and resolved lazily (at
/// the epoch's end, or when the event ring wraps), so measuring adds no synchronisation to a step.
#pragma once

#include <tutti/config.hpp>
#include <tutti/error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#if defined(TUTTI_HAS_CUDA)
#include <tutti/space/cuda.hpp>
#endif

namespace tutti {

/// What an interval of a step is charged to.
enum class account : std::uint8_t {
  data,       ///< sampling and gathering the batch into the space
  compute,    ///< loss and gradient (forward + backward)
  guard,      ///< finite check, skip protection and replica checks
  wait,       ///< waiting at the start of the reduce for the slowest rank
  reduce,     ///< the gradient reduction itself
  optimizer,  ///< applying the update
  other,      ///< host work between steps: callbacks and logging
};

/// Number of `tutti::account` values.
inline constexpr std::size_t account_count = 7;

/// The account's name as printed in reports ("data", "compute", ...).
constexpr const char* to_string(account a) noexcept {
  switch (a) {
    case account::data:
      return "data";
    case account::compute:
      return "compute";
    case account::guard:
      return "guard";
    case account::wait:
      return "wait";
    case account::reduce:
      return "reduce";
    case account::optimizer:
      return "optimizer";
    case account::other:
      break;
  }
  return "other";
}

/// What one step of one rank spent, in seconds per account, and the bytes it reduced.
struct step_account {
  std::size_t epoch = 0;      ///< 0-based epoch
  std::size_t step = 0;       ///< 0-based step within the epoch
  double data = 0;            ///< sampling and gathering the batch
  double compute = 0;         ///< loss and gradient
  double guard = 0;           ///< finite check, skip protection, replica checks
  double wait = 0;            ///< waiting for the slowest rank (0 when not measured)
  double reduce_total = 0;    ///< the gradient reduction, measured wait excluded
  double reduce_exposed = 0;  ///< the part of reduce_total the step waited for
  double optimizer = 0;       ///< applying the update
  double other = 0;           ///< callbacks and logging
  std::uint64_t bytes = 0;    ///< gradient bytes handed to the reducer

  /// The step's time: every account once, the reduce as far as it was exposed.
  double seconds() const noexcept {
    return data + compute + guard + wait + reduce_exposed + optimizer + other;
  }
  /// Time spent outside the collective (the step less waiting and the exposed reduce): what
  /// makes the other ranks wait when it is larger on one rank.
  double work() const noexcept { return seconds() - wait - reduce_exposed; }
  /// The seconds charged to `a` (`account::reduce` is reduce_total).
  double& operator[](account a) noexcept {
    switch (a) {
      case account::data:
        return data;
      case account::compute:
        return compute;
      case account::guard:
        return guard;
      case account::wait:
        return wait;
      case account::reduce:
        return reduce_total;
      case account::optimizer:
        return optimizer;
      case account::other:
        break;
    }
    return other;
  }
  /// Adds every account and the bytes of `o` into this one.
  step_account& operator+=(const step_account& o) noexcept {
    data += o.data;
    compute += o.compute;
    guard += o.guard;
    wait += o.wait;
    reduce_total += o.reduce_total;
    reduce_exposed += o.reduce_exposed;
    optimizer += o.optimizer;
    other += o.other;
    bytes += o.bytes;
    return *this;
  }
};

/// Seconds a rank spent in each phase of its steps, as results report them (`epoch_record`,
/// `fit_result`): its step accounts summed, the reduce counted as far as it was exposed.
struct phase_seconds {
  double data = 0;       ///< sampling and gathering the batch into the space
  double compute = 0;    ///< loss and gradient (forward + backward)
  double reduce = 0;     ///< averaging gradients across ranks (measured wait excluded)
  double optimizer = 0;  ///< applying the update
  double guard = 0;      ///< finite check, skip protection and replica checks
  double wait = 0;       ///< waiting for the slowest rank (when measured)
  double other = 0;      ///< callbacks and logging between steps
  /// Sum of the phases: the wall time of the steps.
  double total() const noexcept {
    return data + compute + reduce + optimizer + guard + wait + other;
  }
  /// The phases of the accounts `a`.
  static phase_seconds of(const step_account& a) noexcept {
    return {.data = a.data,
            .compute = a.compute,
            .reduce = a.reduce_exposed,
            .optimizer = a.optimizer,
            .guard = a.guard,
            .wait = a.wait,
            .other = a.other};
  }
  /// Adds every phase of `p` into this one.
  phase_seconds& operator+=(const phase_seconds& p) noexcept {
    data += p.data;
    compute += p.compute;
    reduce += p.reduce;
    optimizer += p.optimizer;
    guard += p.guard;
    wait += p.wait;
    other += p.other;
    return *this;
  }
};

/// Mean, median, 95th percentile and total of one account over the recorded steps.
struct account_summary {
  double mean = 0;   ///< seconds per step
  double p50 = 0;    ///< median, nearest-rank
  double p95 = 0;    ///< 95th percentile, nearest-rank
  double total = 0;  ///< seconds over all steps
};

/// One rank's line of the per-rank table.
struct rank_row {
  int rank = 0;             ///< the rank
  double step_seconds = 0;  ///< its mean step time
  double work_seconds = 0;  ///< its mean time outside the collective (`step_account::work`)
  double wait_seconds = 0;  ///< its mean measured wait for the slowest rank
  double relative = 0;      ///< work_seconds / the median over ranks (1 when the median is 0)
  bool slow = false;        ///< work_seconds >= (1 + threshold) × the median
};

/// The per-rank table: every rank's mean step and work time, with the slow ranks flagged.
///
/// Ranks synchronised by a blocking reduce all take the same step time (the fast ones wait
/// inside the collective), so a rank is judged by its work time, which excludes the wait and
/// the reduce: the rank whose work is longest is the one the others wait for.
struct rank_table {
  std::vector<rank_row> rows;      ///< one per rank, in rank order
  double median_work_seconds = 0;  ///< median of the ranks' work_seconds
  double threshold = 0.2;          ///< a rank is slow at (1 + threshold) × the median or more
  /// The ranks flagged slow, ascending.
  std::vector<int> slow_ranks() const {
    std::vector<int> out;
    for (const auto& r : rows)
      if (r.slow) out.push_back(r.rank);
    return out;
  }
};

/// Builds the per-rank table from every rank's mean step, work and wait times (rank order).
/// Throws `tutti::invalid_argument` unless the three spans have the same, non-zero size and
/// threshold >= 0.
inline rank_table make_rank_table(std::span<const double> step_seconds,
                                  std::span<const double> work_seconds,
                                  std::span<const double> wait_seconds, double threshold = 0.2) {
  TUTTI_EXPECTS(!step_seconds.empty() && step_seconds.size() == work_seconds.size() &&
                    step_seconds.size() == wait_seconds.size(),
                "tutti::make_rank_table",
                "got " + std::to_string(step_seconds.size()) + ", " +
                    std::to_string(work_seconds.size()) + " and " +
                    std::to_string(wait_seconds.size()) +
                    " values; expected one step, work and wait time per rank");
  TUTTI_EXPECTS(std::isfinite(threshold) && threshold >= 0, "tutti::make_rank_table",
                "threshold is " + std::to_string(threshold) + "; expected a finite value >= 0");
  rank_table t;
  t.threshold = threshold;
  std::vector<double> sorted(work_seconds.begin(), work_seconds.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  t.median_work_seconds = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  for (std::size_t r = 0; r < n; ++r) {
    rank_row row;
    row.rank = static_cast<int>(r);
    row.step_seconds = step_seconds[r];
    row.work_seconds = work_seconds[r];
    row.wait_seconds = wait_seconds[r];
    row.relative = t.median_work_seconds > 0 ? work_seconds[r] / t.median_work_seconds : 1.0;
    row.slow =
        t.median_work_seconds > 0 && work_seconds[r] >= (1.0 + threshold) * t.median_work_seconds;
    t.rows.push_back(row);
  }
  return t;
}

/// Bus-bandwidth factor of an allreduce over `world_size` ranks in the nccl-tests convention:
/// busbw = algbw × 2(n−1)/n (0 for one rank, which moves nothing).
constexpr double allreduce_bus_factor(int world_size) noexcept {
  return world_size > 1 ? 2.0 * double(world_size - 1) / double(world_size) : 0.0;
}

/// A run's accounts on one rank, summarised.
struct ledger_summary {
  std::size_t steps = 0;                     ///< steps recorded
  int world_size = 1;                        ///< ranks of the run
  account_summary data;                      ///< sampling and gathering
  account_summary compute;                   ///< loss and gradient
  account_summary guard;                     ///< finite check, skip protection, replica checks
  account_summary wait;                      ///< waiting for the slowest rank
  account_summary reduce_total;              ///< the gradient reduction
  account_summary reduce_exposed;            ///< the part of it the step waited for
  account_summary optimizer;                 ///< applying the update
  account_summary other;                     ///< callbacks and logging
  account_summary step;                      ///< the step time (`step_account::seconds`)
  std::uint64_t bytes_reduced_per_step = 0;  ///< gradient bytes one rank reduces per step
  /// Algorithm bandwidth of the gradient reduction, bytes/s: bytes per step / mean reduce time.
  double algbw = 0;
  /// Bus bandwidth, bytes/s: algbw × 2(n−1)/n (nccl-tests' allreduce convention).
  double busbw = 0;
  /// The per-rank table over the whole run (filled by the trainer).
  rank_table ranks;
};

/// The steps of one rank: exact running totals per run and per epoch, and the step records
/// themselves for percentiles. Up to `keep` steps are kept; beyond that a uniform sample of
/// `keep` of them (deterministic reservoir), so memory stays bounded on long runs while means
/// and totals stay exact.
class ledger {
 public:
  /// Steps kept for percentiles when not told otherwise.
  static constexpr std::size_t default_keep = std::size_t{1} << 16;

  /// A ledger keeping at most `keep` (>= 1) step records.
  explicit ledger(std::size_t keep = default_keep) : m_keep(keep) {
    TUTTI_EXPECTS(keep >= 1, "tutti::ledger", "keep is 0; expected >= 1");
  }

  /// Starts a new epoch's totals.
  void begin_epoch() noexcept {
    m_epoch = {};
    m_epoch_steps = 0;
  }
  /// Records one step.
  void record(const step_account& s) {
    m_total += s;
    m_epoch += s;
    ++m_epoch_steps;
    ++m_steps;
    if (m_kept.size() < m_keep) {
      m_kept.push_back(s);
    } else {
      // Algorithm R with a counter-based draw: step k replaces a kept one with chance keep/k.
      const std::uint64_t j = splitmix(m_steps) % m_steps;
      if (j < m_keep) m_kept[static_cast<std::size_t>(j)] = s;
    }
  }

  /// Steps recorded since construction.
  std::size_t steps() const noexcept { return m_steps; }
  /// Sums of every account since construction.
  const step_account& totals() const noexcept { return m_total; }
  /// Steps recorded since `begin_epoch`.
  std::size_t epoch_steps() const noexcept { return m_epoch_steps; }
  /// Sums of every account since `begin_epoch`.
  const step_account& epoch_totals() const noexcept { return m_epoch; }
  /// The step records kept for percentiles (all of them up to `keep`).
  std::span<const step_account> kept() const noexcept { return m_kept; }

  /// Mean, p50, p95 and total of every account; bandwidths for `world_size` ranks. The
  /// per-rank table is left empty (it needs a collective; the trainer fills it).
  ledger_summary summarize(int world_size) const {
    ledger_summary s;
    s.steps = m_steps;
    s.world_size = world_size;
    s.data = summary([](const step_account& a) { return a.data; }, m_total.data);
    s.compute = summary([](const step_account& a) { return a.compute; }, m_total.compute);
    s.guard = summary([](const step_account& a) { return a.guard; }, m_total.guard);
    s.wait = summary([](const step_account& a) { return a.wait; }, m_total.wait);
    s.reduce_total =
        summary([](const step_account& a) { return a.reduce_total; }, m_total.reduce_total);
    s.reduce_exposed =
        summary([](const step_account& a) { return a.reduce_exposed; }, m_total.reduce_exposed);
    s.optimizer = summary([](const step_account& a) { return a.optimizer; }, m_total.optimizer);
    s.other = summary([](const step_account& a) { return a.other; }, m_total.other);
    s.step = summary([](const step_account& a) { return a.seconds(); }, m_total.seconds());
    if (m_steps > 0) {
      s.bytes_reduced_per_step = m_total.bytes / m_steps;
      s.algbw =
          s.reduce_total.mean > 0 ? double(s.bytes_reduced_per_step) / s.reduce_total.mean : 0.0;
      s.busbw = s.algbw * allreduce_bus_factor(world_size);
    }
    return s;
  }

 private:
  static std::uint64_t splitmix(std::uint64_t x) noexcept {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  template <class Get>
  account_summary summary(Get get, double total) const {
    account_summary a;
    a.total = total;
    if (m_steps == 0) return a;
    a.mean = total / double(m_steps);
    std::vector<double> v;
    v.reserve(m_kept.size());
    for (const auto& s : m_kept) v.push_back(get(s));
    std::sort(v.begin(), v.end());
    const auto nearest_rank = [&v](double p) {
      const auto k = static_cast<std::size_t>(std::ceil(p * double(v.size())));
      return v[std::min(v.size(), std::max<std::size_t>(k, 1)) - 1];
    };
    a.p50 = nearest_rank(0.50);
    a.p95 = nearest_rank(0.95);
    return a;
  }

  std::size_t m_keep;
  std::size_t m_steps = 0;
  std::size_t m_epoch_steps = 0;
  step_account m_total;
  step_account m_epoch;
  std::vector<step_account> m_kept;
};

namespace detail::ledger_impl {

/// Cuts the steps of one rank into intervals charged to accounts, measured on the host clock.
/// `start` opens the timeline (an epoch); each `mark(a)` charges the time since the previous
/// mark (or `start`) to `a`; `end_step` hands the step to the ledger. Used for every space
/// whose work completes when its calls return (host-accessible spaces).
template <class Space>
class step_clock {
 public:
  /// One marked interval: step `step` of epoch `epoch` spent [start, start + seconds) on
  /// `phase`, in seconds since the origin given to `trace`.
  struct span {
    std::size_t epoch = 0, step = 0;
    account phase = account::other;
    double start = 0, seconds = 0;
  };

  explicit step_clock(const Space& /*space*/) {}

  /// Reads the time from `now` (seconds) instead of `std::chrono::steady_clock`: the trainer
  /// hands it the reducer's clock where the reducer keeps one (`reducer_keeps_clock`), so a
  /// test can run the accounts on a simulated clock. Call before `start`.
  void use_clock(std::function<double()> now) {
    m_now = std::move(now);
    m_last = seconds();
  }

  /// Hands every marked interval to `sink` as it is marked (a timeline; no clock read is added).
  /// Its starts are seconds since `origin` on the steady clock (on a clock given by `use_clock`,
  /// seconds of that clock).
  void trace(std::function<void(const span&)> sink, std::chrono::steady_clock::time_point origin) {
    m_trace = std::move(sink);
    m_origin = m_now ? 0.0 : std::chrono::duration<double>(origin.time_since_epoch()).count();
  }

  /// Opens the timeline: the first step's first interval starts now.
  void start() { m_last = seconds(); }
  /// Starts the record of step `step` of epoch `epoch`.
  void begin_step(std::size_t epoch, std::size_t step) {
    m_step = {};
    m_step.epoch = epoch;
    m_step.step = step;
    m_wait_in_reduce = 0;
    m_background = 0;
  }
  /// While paused, marks charge nothing (a step being recorded as a graph runs nothing).
  void pause(bool paused) noexcept { m_paused = paused; }
  /// Charges the time since the previous mark to `a`.
  void mark(account a) {
    if (m_paused) return;
    const double now = seconds();
    const double d = now - m_last;
    m_step[a] += d;
    if (m_trace) m_trace(span{m_step.epoch, m_step.step, a, m_last - m_origin, d});
    m_last = now;
  }
  /// Moves up to `seconds` of this step's reduce into the wait account (a reducer that knows
  /// how long it waited for its peers inside the collective says so).
  void wait_within_reduce(double seconds) { m_wait_in_reduce += seconds; }
  /// The step's reduction also ran `seconds` on a communication thread, overlapped with the
  /// step's other accounts: the reduce total becomes at least that, while the exposed reduce
  /// stays what was marked.
  void reduce_in_background(double seconds) { m_background += seconds; }
  /// Ends the step, which reduced `bytes` bytes, and records it in `into`.
  void end_step(std::uint64_t bytes, ledger& into) { into.record(finish(m_step, bytes)); }
  /// Records every step still pending in `into` (none on the host clock).
  void flush(ledger& /*into*/) {}

 private:
  step_account finish(step_account s, std::uint64_t bytes) const {
    const double w = std::clamp(m_wait_in_reduce, 0.0, s.reduce_total);
    s.reduce_total -= w;
    s.wait += w;
    // What was marked is what the step waited for; a background reduction adds hidden time.
    s.reduce_exposed = s.reduce_total;
    s.reduce_total = std::max(s.reduce_total, m_background);
    s.bytes = bytes;
    return s;
  }

  /// The clock's time in seconds.
  double seconds() const {
    if (m_now) return m_now();
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  std::function<double()> m_now;  // use_clock's clock, or none: the steady clock
  double m_last = seconds();
  step_account m_step;
  double m_wait_in_reduce = 0;
  double m_background = 0;
  std::function<void(const span&)> m_trace;
  double m_origin = 0;
  bool m_paused = false;
};

#if defined(TUTTI_HAS_CUDA)
/// The CUDA clock: each mark records an event on the compute stream, so intervals are GPU time
/// between stream positions and recording them never waits. Events are resolved (elapsed times
/// read) at `flush`, or when the ring of `capacity` events is about to reuse one whose step is
/// still pending; then the host waits for an event recorded thousands of marks earlier, which
/// has long completed unless the host ran that far ahead.
template <>
class step_clock<cuda_space> {
 public:
  /// Events in the ring (about 500 steps of marks).
  static constexpr std::size_t capacity = 4096;

  explicit step_clock(const cuda_space& space) : m_stream(space.stream()) {
    m_events.reserve(capacity);
    try {
      for (std::size_t i = 0; i < capacity; ++i) {
        cudaEvent_t e = nullptr;
        TUTTI_CUDA_CHECK(cudaEventCreate(&e));
        m_events.push_back(e);
      }
    } catch (...) {
      release();
      throw;
    }
  }
  step_clock(const step_clock&) = delete;
  step_clock& operator=(const step_clock&) = delete;
  ~step_clock() { release(); }

  /// Opens the timeline at the stream's current position. Steps pending from an earlier
  /// timeline must have been flushed.
  void start() {
    m_marks.clear();
    m_steps.clear();
    m_origin = record();
  }
  /// Starts the record of step `step` of epoch `epoch`.
  void begin_step(std::size_t epoch, std::size_t step) {
    m_open = {};
    m_open.acc.epoch = epoch;
    m_open.acc.step = step;
    m_open.first_mark = m_marks_recorded;
  }
  /// While paused, marks record nothing: a stream being captured into a graph takes no event.
  void pause(bool paused) noexcept { m_paused = paused; }
  /// Charges the stream time since the previous mark to `a`.
  void mark(account a) {
    if (m_paused) return;
    const std::uint64_t e = record();
    m_marks.push_back({e, a});
    ++m_marks_recorded;
  }
  /// Moves up to `seconds` (host-measured) of this step's reduce into the wait account.
  void wait_within_reduce(double seconds) { m_open.wait_in_reduce += seconds; }
  /// As on the host clock: `seconds` of reduction overlapped with the step (host-measured).
  void reduce_in_background(double seconds) { m_open.background += seconds; }
  /// Ends the step; it is recorded in `into` once its events are resolved.
  void end_step(std::uint64_t bytes, ledger& into) {
    m_open.acc.bytes = bytes;
    m_open.marks = m_marks_recorded - m_open.first_mark;
    m_steps.push_back(m_open);
    m_into = &into;
  }
  /// Resolves every ended step and records it in `into` (waits for its last event).
  void flush(ledger& into) {
    while (!m_steps.empty()) resolve_front(into);
  }

 private:
  struct mark_rec {
    std::uint64_t event;  // monotonic event number; the event is m_events[event % capacity]
    account charged;
  };
  struct step_rec {
    step_account acc;
    std::uint64_t first_mark = 0;
    std::uint64_t marks = 0;
    double wait_in_reduce = 0;
    double background = 0;
  };

  cudaEvent_t event(std::uint64_t n) const { return m_events[n % capacity]; }

  // Records the next event, first resolving ended steps whose events the ring would reuse.
  std::uint64_t record() {
    while (m_next >= m_origin + capacity && !m_steps.empty() && m_into != nullptr)
      resolve_front(*m_into);
    TUTTI_EXPECTS(m_next < m_origin + capacity,
                  "tutti::detail::ledger_impl::step_clock<cuda_space>",
                  "one step made more than " + std::to_string(capacity) +
                      " marks; expected a handful per step");
    TUTTI_CUDA_CHECK(cudaEventRecord(event(m_next), m_stream));
    return m_next++;
  }

  void resolve_front(ledger& into) {
    step_rec s = m_steps.front();
    m_steps.pop_front();
    if (s.marks > 0) TUTTI_CUDA_CHECK(cudaEventSynchronize(event(m_marks[s.marks - 1].event)));
    for (std::uint64_t k = 0; k < s.marks; ++k) {
      const mark_rec m = m_marks.front();
      m_marks.pop_front();
      float ms = 0.f;
      TUTTI_CUDA_CHECK(cudaEventElapsedTime(&ms, event(m_origin), event(m.event)));
      s.acc[m.charged] += double(ms) * 1e-3;
      m_origin = m.event;
    }
    const double w = std::clamp(s.wait_in_reduce, 0.0, s.acc.reduce_total);
    s.acc.reduce_total -= w;
    s.acc.wait += w;
    s.acc.reduce_exposed = s.acc.reduce_total;
    s.acc.reduce_total = std::max(s.acc.reduce_total, s.background);
    into.record(s.acc);
  }

  void release() noexcept {
    for (cudaEvent_t e : m_events) (void)cudaEventDestroy(e);
    m_events.clear();
  }

  cudaStream_t m_stream;
  std::vector<cudaEvent_t> m_events;
  std::uint64_t m_next = 0;    // events recorded so far
  std::uint64_t m_origin = 0;  // the event the oldest pending interval starts from
  std::uint64_t m_marks_recorded = 0;
  std::deque<mark_rec> m_marks;  // marks of pending and open steps, in order
  std::deque<step_rec> m_steps;  // ended steps not yet resolved
  step_rec m_open;
  ledger* m_into = nullptr;
  bool m_paused = false;
};
#endif

}  // namespace detail::ledger_impl
}  // namespace tutti
