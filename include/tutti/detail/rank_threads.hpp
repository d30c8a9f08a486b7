// SPDX-License-Identifier: Apache-2.0
/// @file detail/rank_threads.hpp
/// @brief W ranks as threads of this process, and the first of their failures: what
/// `tutti::run_local` and `tutti::run_nccl` share.
#pragma once

#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tutti::detail {

/// The exception of the first rank that failed. A rank records its exception before it aborts
/// its group, so the collective errors the abort causes in the other ranks come after it and the
/// original failure is the one rethrown.
class first_failure {
 public:
  /// Inside a `catch`: records the exception in flight (if none is yet), then calls
  /// `abort(rank, what)` with its message.
  template <class Abort>
  void record_current(int rank, Abort&& abort) {
    const std::exception_ptr error = std::current_exception();
    std::string why = "an exception not derived from std::exception";
    try {
      throw;
    } catch (const std::exception& e) {
      why = e.what();
    } catch (...) {
    }
    {
      std::lock_guard lock(m_mutex);
      if (!m_first) m_first = error;
    }
    abort(rank, why);
  }

  /// Rethrows the recorded exception, if any.
  void rethrow_if_any() const {
    if (m_first) std::rethrow_exception(m_first);
  }

 private:
  std::mutex m_mutex;
  std::exception_ptr m_first;
};

/// Runs `rank(r)` for every r in [0, world_size): rank 0 on the calling thread, the others on
/// threads of their own; returns when all have returned. `rank` must not throw. When a thread
/// cannot be started, `cannot_start(why)` is called (it must release the ranks already started,
/// which would otherwise wait for the missing ones), those are joined, and the error is
/// rethrown.
template <class Rank, class CannotStart>
void run_rank_threads(int world_size, Rank&& rank, CannotStart&& cannot_start) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world_size > 1 ? world_size - 1 : 0));
  try {
    for (int r = 1; r < world_size; ++r) threads.emplace_back(rank, r);
  } catch (const std::exception& e) {
    cannot_start(std::string("could not start a rank thread: ") + e.what());
    for (auto& t : threads) t.join();
    throw;
  }
  if (world_size > 0) rank(0);
  for (auto& t : threads) t.join();
}

}  // namespace tutti::detail
