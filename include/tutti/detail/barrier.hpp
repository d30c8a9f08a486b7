// SPDX-License-Identifier: Apache-2.0
/// @file detail/barrier.hpp
/// @brief `tutti::detail::rendezvous`: a reusable thread barrier that can be aborted and times out.
///
/// std::barrier cannot be aborted, so one failed rank would leave the others blocked forever.
/// This barrier turns every failure (an explicit abort, a rank that does not arrive in time, a
/// rank whose work ended while others still wait for it) into a `tutti::collective_error` on
/// every rank, never a hang.
#pragma once

#include <tutti/error.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tutti::detail {

/// Generation-counting barrier for `world_size` threads, with abort and a per-wait timeout.
/// Once aborted it stays aborted: every later arrival throws the same `collective_error`.
class rendezvous {
 public:
  /// A barrier for `world_size` ranks whose waits give up after `timeout`.
  rendezvous(int world_size, std::chrono::milliseconds timeout)
      : m_world(world_size),
        m_timeout(timeout),
        m_arrived(static_cast<std::size_t>(world_size), 0),
        m_departed(static_cast<std::size_t>(world_size), 0) {}

  rendezvous(const rendezvous&) = delete;
  rendezvous& operator=(const rendezvous&) = delete;

  /// Blocks `rank` until every rank has arrived. Throws `collective_error` if the group is or
  /// becomes aborted, or after the timeout (which also aborts the group, releasing the others);
  /// `op` names the collective in that message.
  void arrive_and_wait(int rank, const char* op) {
    std::unique_lock lock(m_mutex);
    throw_if_aborted();
    if (m_count == 0) m_op = op;
    for (int k = 0; k < m_world; ++k)
      if (m_departed[static_cast<std::size_t>(k)]) abort_departed(k);
    m_arrived[static_cast<std::size_t>(rank)] = 1;
    if (++m_count == m_world) {
      m_count = 0;
      std::fill(m_arrived.begin(), m_arrived.end(), char{0});
      ++m_generation;
      m_cv.notify_all();
      return;
    }
    const std::uint64_t generation = m_generation;
    const auto deadline = std::chrono::steady_clock::now() + m_timeout;
    for (;;) {
      // A completed barrier wins over a later abort; the abort surfaces at the next arrival.
      if (m_generation != generation) return;
      throw_if_aborted();
      if (m_cv.wait_until(lock, deadline) == std::cv_status::timeout &&
          m_generation == generation && !m_aborted)
        abort_timed_out();
    }
  }

  /// Aborts the group on behalf of `failed_rank` (-1 when unknown): every rank blocked in or
  /// later entering `arrive_and_wait` throws `collective_error(failed_rank, "rank N failed: why")`.
  /// The first abort wins; later ones keep its reason.
  void abort(int failed_rank, const std::string& why) {
    std::lock_guard lock(m_mutex);
    abort_locked(failed_rank, (failed_rank >= 0 ? "rank " + std::to_string(failed_rank)
                                                : std::string("a rank")) +
                                  " failed: " + why);
  }

  /// Records that `rank` will never arrive again (its work is done). A rank still waiting, or
  /// arriving later, cannot be released any more, so the group aborts instead of waiting out the
  /// timeout.
  void depart(int rank) {
    std::lock_guard lock(m_mutex);
    m_departed[static_cast<std::size_t>(rank)] = 1;
    if (m_count > 0 && !m_aborted) {
      abort_locked(rank, std::string(m_op) + ": rank " + std::to_string(rank) +
                             " finished its work without joining this collective");
    }
  }

  /// True once the group has been aborted.
  bool aborted() const {
    std::lock_guard lock(m_mutex);
    return m_aborted;
  }

 private:
  void throw_if_aborted() const {
    if (m_aborted) throw collective_error(m_failed_rank, m_message);
  }
  void abort_locked(int failed_rank, std::string message) {
    if (m_aborted) return;
    m_aborted = true;
    m_failed_rank = failed_rank;
    m_message = std::move(message);
    m_cv.notify_all();
  }
  [[noreturn]] void abort_departed(int rank) {
    abort_locked(rank, std::string(m_op) + ": rank " + std::to_string(rank) +
                           " finished its work without joining this collective");
    throw collective_error(m_failed_rank, m_message);
  }
  [[noreturn]] void abort_timed_out() {
    std::string missing;
    int first_missing = -1;
    for (int k = 0; k < m_world; ++k) {
      if (m_arrived[static_cast<std::size_t>(k)]) continue;
      if (first_missing < 0) first_missing = k;
      missing += (missing.empty() ? "" : ", ") + std::to_string(k);
    }
    abort_locked(first_missing, std::string(m_op) + ": ranks " + missing +
                                    " did not arrive within " + std::to_string(m_timeout.count()) +
                                    " ms");
    throw collective_error(m_failed_rank, m_message);
  }

  mutable std::mutex m_mutex;
  std::condition_variable m_cv;
  int m_world;
  std::chrono::milliseconds m_timeout;
  std::vector<char> m_arrived;   // per rank, for the generation in progress
  std::vector<char> m_departed;  // per rank, set once its work has returned
  int m_count = 0;
  std::uint64_t m_generation = 0;
  const char* m_op = "";
  bool m_aborted = false;
  int m_failed_rank = -1;
  std::string m_message;
};

}  // namespace tutti::detail
