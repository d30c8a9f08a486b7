// SPDX-License-Identifier: Apache-2.0
/// @file launch.hpp
/// @brief `tutti::run_local`: runs W ranks as threads of this process, joined by a `local_ring`;
/// `tutti::run_host_ranks`: the same, or one rank on `single_rank` with no thread of its own.
#pragma once

#include <tutti/detail/rank_threads.hpp>
#include <tutti/error.hpp>
#include <tutti/reducers/local_ring.hpp>
#include <tutti/reducers/single_rank.hpp>

#include <algorithm>
#include <concepts>
#include <string>
#include <utility>

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

  detail::first_failure failure;
  const auto abort = [&](int rank, const std::string& why) {
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
    } catch (...) {
      failure.record_current(rank, abort);
    }
  };
#if defined(_OPENMP)
  // Rank 0 borrows the calling thread; give its OpenMP setting back afterwards.
  const int caller_threads = omp_get_max_threads();
#endif
  detail::run_rank_threads(world_size, run_rank, [&](const std::string& why) {
    group.abort(-1, "tutti::run_local " + why);
  });
#if defined(_OPENMP)
  omp_set_num_threads(caller_threads);
#endif
  failure.rethrow_if_any();
}

/// Runs `rank(reducer)` once per host rank of this process: with `ranks == 1` on the calling
/// thread with a `single_rank` (no group, no thread), otherwise as `run_local` does with a
/// `local_ring` of `ranks` made with `opt`. `rank` is generic over the reducer's type, so one
/// lambda composes the trainer for either. Throws as `run_local` does.
template <class F>
void run_host_ranks(int ranks, F&& rank, local_options opt = {}) {
  if (ranks == 1)
    rank(single_rank{});
  else
    run_local(
        ranks, [&](local_ring ring) { rank(std::move(ring)); }, opt);
}

}  // namespace tutti
