// SPDX-License-Identifier: Apache-2.0
/// @file detail/learner_buckets.hpp
/// @brief Rows grouped by learner in two passes that stay in the caches: first into buckets of
/// consecutive learners, then each bucket by learner.
///
/// A counting sort by learner over millions of learners writes each row to a random place of an
/// array of the log's size and counts it in an array of a value per learner: a cache miss for
/// each. Into at most 4,096 buckets, the rows are written to a few thousand places that advance
/// in step (the lines they fill stay cached); a bucket's learners then fit a count array in the
/// first-level cache. The repeats of a log are found this way (`data/feedback.hpp`), and each
/// learner's courses where they fit 16 bits (`data/detail/learner_lists.hpp`): there the
/// learner's place in its bucket is packed beside the course in the list's own buffer, so no
/// copy of the rows is held while the trainer's arenas are allocated.
#pragma once

#include <tutti/detail/thread_range.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tutti::detail {

/// Buckets of 2^shift consecutive learners: bucket b holds learners [b << shift, (b + 1) << shift).
struct learner_buckets {
  int shift = 0;
  std::size_t count = 0;  ///< buckets
  /// Learner `u`'s bucket.
  std::size_t of(std::size_t u) const noexcept { return u >> shift; }
  /// Learner `u`'s place in its bucket (16 bits).
  std::uint16_t low(std::size_t u) const noexcept {
    return static_cast<std::uint16_t>(u & ((std::size_t{1} << shift) - 1));
  }
  /// Learners a bucket.
  std::size_t width() const noexcept { return std::size_t{1} << shift; }
};

/// The buckets of `learners` learners: at most 4,096 (2^12) of at most 2^16 learners each (more
/// buckets only past 2^28 learners).
inline learner_buckets learner_buckets_of(std::size_t learners) {
  if (learners == 0) return {};
  const int width = static_cast<int>(std::bit_width(learners - 1));
  const int shift = std::clamp(width - 12, 0, 16);
  return {shift, ((learners - 1) >> shift) + 1};
}

/// Places rows [0, n) in learner buckets, stably (in row order within a bucket): each thread
/// counts and then places its own range of rows, the threads' ranges in row order.
/// `for_rows(lo, hi, f)` calls `f(r, learner, course)` for each row r of [lo, hi) to place, in
/// order (a row it skips is left out); `place(p, r, learner, course)` stores row r at place p.
/// Returns the buckets' starts (`b.count + 1` values, the last the rows placed); `Offset` holds
/// the number of rows.
template <class Offset, class ForRows, class Place>
std::vector<Offset> place_in_learner_buckets(std::size_t n, const learner_buckets& b,
                                             ForRows for_rows, Place place) {
  std::vector<Offset> start(b.count + 1, Offset{0});
  std::vector<Offset> at;  // each thread's next place in each bucket
#pragma omp parallel
  {
    const thread_share mine = thread_share_of(n);
    const auto [t, threads] = this_thread_place();
    const auto lo = static_cast<std::size_t>(mine.lo), hi = static_cast<std::size_t>(mine.hi);
#pragma omp single
    at.assign(threads * b.count, Offset{0});
    Offset* next = at.data() + t * b.count;
    for_rows(lo, hi, [&](std::size_t, std::int32_t u, std::int32_t) {
      ++next[b.of(static_cast<std::size_t>(u))];
    });
#pragma omp barrier
#pragma omp single
    {
      Offset placed = 0;
      for (std::size_t k = 0; k < b.count; ++k) {
        start[k] = placed;
        for (std::size_t q = 0; q < threads; ++q) {
          const Offset rows = at[q * b.count + k];
          at[q * b.count + k] = placed;
          placed += rows;
        }
      }
      start[b.count] = placed;
    }
    for_rows(lo, hi, [&](std::size_t r, std::int32_t u, std::int32_t i) {
      place(next[b.of(static_cast<std::size_t>(u))]++, r, u, i);
    });
  }
  return start;
}

}  // namespace tutti::detail
