// SPDX-License-Identifier: Apache-2.0
/// @file detail/thread_range.hpp
/// @brief The calling OpenMP thread's equal share of a range, for loops in which every thread
/// reads every row and keeps those of its own range (a counting sort by learner, each learner's
/// entries written by one thread only: the serial result, without atomics).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tutti::detail {

/// [lo, hi) of [0, n) that the calling thread of the current team owns: n·t/T to n·(t+1)/T for
/// thread t of T (the whole range outside a parallel region or without OpenMP).
struct thread_share {
  std::int64_t lo = 0, hi = 0;
  /// True when `v` lies in the share.
  bool holds(std::int64_t v) const { return v >= lo && v < hi; }
};

/// This thread's number in its team and the team's size (0 and 1 outside a parallel region,
/// or without OpenMP).
struct thread_place {
  std::size_t index = 0, count = 1;
};
inline thread_place this_thread_place() {
#if defined(_OPENMP)
  return {static_cast<std::size_t>(omp_get_thread_num()),
          static_cast<std::size_t>(omp_get_num_threads())};
#else
  return {};
#endif
}

inline thread_share thread_share_of(std::size_t n) {
  const auto [t, threads] = this_thread_place();
  return {static_cast<std::int64_t>(n * t / threads),
          static_cast<std::int64_t>(n * (t + 1) / threads)};
}

}  // namespace tutti::detail
