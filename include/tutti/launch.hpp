// SPDX-License-Identifier: Apache-2.0
/// @file launch.hpp
/// @brief `tutti::run_local`: runs W ranks as threads of this process, joined by a `local_ring`.
#pragma once

#include <tutti/error.hpp>
#include <tutti/reducers/local_ring.hpp>

#include <algorithm>
#include <concepts>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tutti {

/// Runs `f(ring)` once per rank of a fresh `tutti::local_group` of `world_size` ranks: rank 0
/// on the calling thread, the others on their own threads, and returns when all have returned.
/// `f` is shared by all ranks and called concurrently. Each rank gets
/// `opt.threads_per_rank` OpenMP threads, or an even share of the process's when that is 0, so
/// W ranks do not oversubscribe the cores.
///
/// If a rank throws, the group is aborted (ranks in or entering a collective get
/// `tutti::collective_error`), every thread is joined, and the exception of the first rank that
/// failed is rethrown unchanged, not the collective errors it caused in the others. A rank that
/// returns while others wait for it in a collective fails the group at once.
/// Throws `tutti::invalid_argument` unless world_size >= 1 (and `opt` is valid).
template <class F>
requires std::invocable<F&, local_ring&>
void run_local(int world_size, F&& f, local_options opt = {}) {
  TUTTI_EXPECTS(world_size >= 1, "tutti::run_local",
                "world_size = " + std::to_string(world_size) + "; expected world_size >= 1");
  local_group group(world_size, opt);
#if defined(_OPENMP)
  const int omp_threads = opt.threads_per_rank > 0
                              ? opt.threads_per_rank
                              : std::max(1, omp_get_max_threads() / world_size);
#endif

  std::mutex error_mutex;
  std::exception_ptr first_error;
  // Recording before aborting guarantees the original exception is first: the collective
  // errors it causes in other ranks can only start after the abort.
  const auto fail = [&](int rank, std::exception_ptr error, const std::string& why) {
    {
      std::lock_guard lock(error_mutex);
      if (!first_error) first_error = std::move(error);
    }
    group.abort(rank, why);
  };
  const auto run_rank = [&](int rank) {
#if defined(_OPENMP)
    omp_set_num_threads(omp_threads);
#endif
    try {
      local_ring ring(group, rank);
      f(ring);
      group.depart(rank);
    } catch (const std::exception& e) {
      fail(rank, std::current_exception(), e.what());
    } catch (...) {
      fail(rank, std::current_exception(), "an exception not derived from std::exception");
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(world_size - 1));
  try {
    for (int rank = 1; rank < world_size; ++rank) threads.emplace_back(run_rank, rank);
  } catch (const std::exception& e) {
    // Ranks already started would wait for the missing ones until the timeout.
    group.abort(-1, std::string("tutti::run_local could not start a rank thread: ") + e.what());
    for (auto& t : threads) t.join();
    throw;
  }
  {
#if defined(_OPENMP)
    // Rank 0 borrows the calling thread; give its OpenMP setting back afterwards.
    const int caller_threads = omp_get_max_threads();
    run_rank(0);
    omp_set_num_threads(caller_threads);
#else
    run_rank(0);
#endif
  }
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace tutti
