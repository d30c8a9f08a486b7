// SPDX-License-Identifier: Apache-2.0
/// @file trainer/bucket_pipeline.hpp
/// @brief The trainer's overlapped reduction on host memory: the gradient arena cut into
/// buckets, reduced by a communication thread as backward reports them final.
#pragma once

#include <tutti/concepts/reducer.hpp>
#include <tutti/detail/thread_priority.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tutti::detail {

/// One rank's overlapped reduction. The arena [0, total) is cut into buckets of `bucket_floats`
/// values from its end (bucket 0 holds the last values, as backward produces them first); the
/// arena's first `last_bucket_floats` values, if given, form a last bucket of their own.
/// `ready(offset, count)` (from the compute thread, through a model's `tutti::gradient_ready`)
/// counts values final; once bucket b and every bucket before it are complete, `check(begin,
/// end)` runs on it (the trainer's finite check, while the bucket still holds this rank's own
/// values) and b leaves:
/// - with a reducer that `reducer_starts_collectives`, at once on the calling thread (the reducer
///   orders it after the kernels that produced the bucket, and `finish` orders the compute
///   stream after all of them);
/// - otherwise through a communication thread, which runs `Reducer::all_reduce_mean` on it in
///   place while backward goes on.
/// `finish` hands over what was not reported, then waits for the thread (or calls
/// `finish_started`) and rethrows the thread's error. Every rank launches the same buckets in
/// the same order, so the collectives match whatever the timing.
///
/// Between `finish` and the next step's first launch the thread is idle and the reducer belongs
/// to the compute thread again. Padding between segments counts as ready from the start.
template <class Reducer>
class bucket_pipeline {
 public:
  /// Reduces without a thread when the reducer starts collectives itself.
  static constexpr bool direct = reducer_starts_collectives<Reducer>;

  /// `last_bucket_floats` (0: none) caps the bucket that holds the arena's first values, which
  /// backward makes final last: it is all that is left to reduce once backward ends. `nice`: the
  /// communication thread's nice value (`detail::set_this_thread_nice`; nullopt keeps the
  /// process's); the constructor returns once the thread has tried, see `priority`.
  bucket_pipeline(Reducer& reducer, float* grads, const parameter_layout& layout,
                  std::size_t bucket_floats,
                  std::function<void(std::size_t, std::size_t)> check = {},
                  std::optional<int> nice = std::nullopt, std::size_t last_bucket_floats = 0)
      : m_reducer(reducer),
        m_grads(grads),
        m_total(layout.total()),
        m_bucket(std::max<std::size_t>(1, bucket_floats)),
        m_check(std::move(check)) {
    for (std::size_t end = m_total; end > 0;) {
      std::size_t begin = end > m_bucket ? end - m_bucket : 0;
      if (begin == 0 && last_bucket_floats > 0 && end > last_bucket_floats)
        begin = last_bucket_floats;  // [0, last) leaves on its own, last
      m_begin.push_back(begin);
      m_end.push_back(end);
      end = begin;
    }
    const std::size_t n = m_begin.size();
    m_padding.assign(n, 0);
    m_ready.assign(n, 0);
    // The values no segment owns (alignment padding, the tail) are ready from the start.
    m_padding_bits.assign((m_total + 63) / 64, 0);
    std::size_t at = 0;
    for (const auto& s : layout.segments()) {
      count_padding(at, s.offset);
      at = s.offset + s.size();
    }
    count_padding(at, m_total);
    m_seen = m_padding_bits;
    if constexpr (!direct) {
      m_thread = std::thread([this, nice] {
        // A failed request leaves the thread as it was; the trainer reports it.
        nice_outcome outcome =
            nice ? set_this_thread_nice(*nice) : nice_outcome{false, this_thread_nice(), {}};
        {
          std::lock_guard lock(m_mutex);
          m_priority = std::move(outcome);
        }
        m_idle.notify_all();
        work();
      });
      std::unique_lock lock(m_mutex);
      m_idle.wait(lock, [this] { return m_priority.has_value(); });
    }
  }

  bucket_pipeline(const bucket_pipeline&) = delete;
  bucket_pipeline& operator=(const bucket_pipeline&) = delete;

  /// Stops the thread after the collective it is in, if any (its peers reach that collective:
  /// they launch the same buckets; a peer that failed aborts its group). Buckets queued behind
  /// it are dropped, so a rank whose step failed mid-backward leaves at once and its launcher
  /// (`run_local`, `mpi_abort_on_exception`) reports the original error and ends the others.
  ~bucket_pipeline() {
    if constexpr (direct) return;
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_wake.notify_all();
    m_thread.join();
  }

  /// The communication thread's priority request and its outcome (nullopt without a thread:
  /// a reducer that starts collectives itself). Without a request `applied` is false and `nice`
  /// the value the thread inherited.
  std::optional<nice_outcome> priority() const {
    std::lock_guard lock(m_mutex);
    return m_priority;
  }

  /// Number of buckets.
  std::size_t buckets() const noexcept { return m_begin.size(); }
  /// Bucket b's arena range [first, second).
  std::pair<std::size_t, std::size_t> bucket_range(std::size_t b) const {
    return {m_begin.at(b), m_end.at(b)};
  }

  /// Opens a step: nothing reported, nothing launched.
  void begin_step() {
    std::copy(m_padding.begin(), m_padding.end(), m_ready.begin());
    std::copy(m_padding_bits.begin(), m_padding_bits.end(), m_seen.begin());
    m_next = 0;
    std::lock_guard lock(m_mutex);
    m_queued = m_done = 0;
    m_busy = 0;
  }

  /// Counts [offset, offset + count) final and launches every bucket that completes in order.
  /// Throws `tutti::invalid_argument` for a range outside the arena or reported twice.
  void ready(std::size_t offset, std::size_t count) {
    if (count == 0) return;
    TUTTI_EXPECTS(offset <= m_total && count <= m_total - offset, "tutti::gradient_ready",
                  "range [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                      ") is outside the gradient arena of " + std::to_string(m_total) + " values");
    TUTTI_EXPECTS(mark_seen(offset, offset + count), "tutti::gradient_ready",
                  "range [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                      ") holds values reported final twice in one call (or padding between "
                      "segments); expected each segment's values once");
    const std::size_t last = offset + count - 1;
    for (std::size_t b = bucket_of(last);; ++b) {
      const std::size_t lo = std::max(m_begin[b], offset);
      const std::size_t hi = std::min(m_end[b], offset + count);
      m_ready[b] += hi - lo;
      if (m_begin[b] <= offset) break;
    }
    while (m_next < buckets() && m_ready[m_next] == m_end[m_next] - m_begin[m_next]) launch();
  }

  /// Launches the buckets not yet launched (in order), waits until the thread has reduced every
  /// bucket, and rethrows the first error of its collectives.
  void finish() {
    while (m_next < buckets()) launch();
    if constexpr (direct) {
      m_reducer.finish_started();
      return;
    }
    std::unique_lock lock(m_mutex);
    m_idle.wait(lock, [this] { return m_done == m_queued || m_error; });
    if (m_error) std::rethrow_exception(m_error);
  }

  /// Seconds the thread spent in the last step's collectives (valid after `finish`; 0 for a
  /// reducer that starts collectives itself, whose time the host does not see).
  double busy_seconds() const {
    std::lock_guard lock(m_mutex);
    return m_busy;
  }

 private:
  // Buckets are m_bucket wide from the end, but the last may be split off the one before it.
  std::size_t bucket_of(std::size_t position) const {
    std::size_t b = (m_total - 1 - position) / m_bucket;
    if (b + 1 < m_begin.size() && position < m_begin[b]) ++b;
    return b;
  }

  // Sets the bits of [from, to) in m_seen; false (and nothing set) when one was set already.
  bool mark_seen(std::size_t from, std::size_t to) {
    const auto words = [&](auto&& visit) {
      for (std::size_t p = from; p < to;) {
        const std::size_t w = p / 64, bit = p % 64;
        const std::size_t n = std::min<std::size_t>(64 - bit, to - p);
        const std::uint64_t mask = (n == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << n) - 1))
                                   << bit;
        if (!visit(m_seen[w], mask)) return false;
        p += n;
      }
      return true;
    };
    if (!words([](std::uint64_t& word, std::uint64_t mask) { return (word & mask) == 0; }))
      return false;
    return words([](std::uint64_t& word, std::uint64_t mask) {
      word |= mask;
      return true;
    });
  }

  void count_padding(std::size_t from, std::size_t to) {
    for (std::size_t p = from; p < to; ++p) m_padding_bits[p / 64] |= std::uint64_t{1} << (p % 64);
    for (std::size_t p = from; p < to;) {
      const std::size_t b = bucket_of(p);
      const std::size_t hi = std::min(m_end[b], to);
      m_padding[b] += hi - p;
      p = hi;
    }
  }

  // Checks bucket m_next on this thread (its values are still this rank's own) and sends it.
  void launch() {
    const std::size_t b = m_next++;
    if (m_check) m_check(m_begin[b], m_end[b]);
    if constexpr (direct) {
      m_reducer.start_all_reduce_mean(
          std::span<float>(m_grads + m_begin[b], m_end[b] - m_begin[b]));
      return;
    }
    {
      std::lock_guard lock(m_mutex);
      ++m_queued;
    }
    m_wake.notify_one();
  }

  void work() {
    for (;;) {
      std::size_t b = 0;
      {
        std::unique_lock lock(m_mutex);
        m_wake.wait(lock, [this] { return m_stop || (m_done < m_queued && !m_error); });
        if (m_stop) return;
        b = m_done;
      }
      const auto t0 = std::chrono::steady_clock::now();
      try {
        m_reducer.all_reduce_mean(std::span<float>(m_grads + m_begin[b], m_end[b] - m_begin[b]));
      } catch (...) {
        std::lock_guard lock(m_mutex);
        m_error = std::current_exception();
        m_idle.notify_all();
        continue;
      }
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      {
        std::lock_guard lock(m_mutex);
        m_busy += dt;
        ++m_done;
      }
      m_idle.notify_all();
    }
  }

  Reducer& m_reducer;
  float* m_grads;
  std::size_t m_total;
  std::size_t m_bucket;
  std::function<void(std::size_t, std::size_t)> m_check;
  std::vector<std::size_t> m_begin, m_end, m_padding, m_ready;
  std::vector<std::uint64_t> m_padding_bits, m_seen;  // one bit per value: padding, reported
  std::size_t m_next = 0;  // the next bucket to launch (compute thread only)

  mutable std::mutex m_mutex;
  std::condition_variable m_wake;  // work queued, or stop
  std::condition_variable m_idle;  // a bucket done, an error, or the thread's priority set
  std::size_t m_queued = 0, m_done = 0;
  double m_busy = 0;
  bool m_stop = false;
  std::exception_ptr m_error;
  std::optional<nice_outcome> m_priority;  // set once by the thread as it starts
  std::thread m_thread;
};

}  // namespace tutti::detail
