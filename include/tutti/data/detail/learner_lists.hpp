// SPDX-License-Identifier: Apache-2.0
/// @file data/detail/learner_lists.hpp
/// @brief Each learner's distinct courses of a set of rows as CSR (offsets, then the courses
/// ascending), grouped by all threads: what the negatives' tables and an export's seen lists hold.
/// Where the courses fit 16 bits the rows are grouped in buckets of consecutive learners, packed
/// into the lists' own buffer (twice as fast on 20 M rows, nothing of their size allocated);
/// otherwise in one pass over the rows per thread.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/detail/learner_buckets.hpp>
#include <tutti/detail/thread_range.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace tutti::detail {

/// Each of the `nu` learners' courses in the rows of `sets`, set after set, in row order:
/// `offsets` (`nu + 1` values, zero) becomes the CSR offsets and `taken` (a value per row of all
/// the sets) the courses. Threads split the learners in equal ranges; each reads every row and
/// keeps those of its range, so the result is the serial one. The offsets are their own cursors:
/// counted one place ahead, summed, advanced by the rows, then shifted back. `Offset` holds the
/// number of rows.
template <class Offset>
void group_courses_by_learner(std::span<const data::interactions* const> sets, std::size_t nu,
                              Offset* offsets, std::int32_t* taken) {
  Offset* at = offsets + 1;  // at[u]: learner u's count, then the end of its list
#pragma omp parallel
  {
    const thread_share mine = thread_share_of(nu);
    for (const data::interactions* d : sets)
      for (const std::int32_t u : d->users)
        if (mine.holds(u)) ++at[u];
#pragma omp barrier
#pragma omp single
    {  // at[u] = the start of learner u + 1's list, so at[u - 1] is u's: the cursor
      for (std::size_t u = 1; u < nu; ++u) at[u] += at[u - 1];
      for (std::size_t u = nu; u-- > 1;) at[u] = at[u - 1];
      if (nu > 0) at[0] = 0;
    }
    for (const data::interactions* d : sets) {
      const std::int32_t* users = d->users.data();
      const std::int32_t* items = d->items.data();
      for (std::size_t r = 0; r < d->size(); ++r)
        if (mine.holds(users[r])) taken[at[users[r]]++] = items[r];
    }
  }
}

/// Sorts and deduplicates the list [b, e), marking the places it frees -1 (never a course);
/// returns how many.
inline std::size_t sort_unique_list(std::int32_t* b, std::int32_t* e) {
  if (e - b < 2) return 0;  // most learners of a large log: nothing to sort
  std::sort(b, e);
  std::int32_t* kept = std::unique(b, e);
  std::fill(kept, e, std::int32_t{-1});
  return static_cast<std::size_t>(e - kept);
}

/// Closes the gaps `sort_unique_list` marked in the `nu` lists of `offsets`/`taken`, in one
/// pass (`offsets[nu]` courses kept).
template <class Offset>
void close_list_gaps(Offset* offsets, std::size_t nu, std::int32_t* taken) {
  Offset out = 0;
  for (std::size_t u = 0; u < nu; ++u) {
    const Offset from = offsets[u], to = offsets[u + 1];
    offsets[u] = out;
    for (Offset k = from; k < to && taken[k] >= 0; ++k) taken[out++] = taken[k];
  }
  offsets[nu] = out;
}

/// Sorts and deduplicates each of the `nu` learners' lists of `offsets`/`taken` in place
/// (learners in parallel), the gaps closed where a list lost a course. Nothing is allocated.
template <class Offset>
void sort_unique_lists(Offset* offsets, std::size_t nu, std::int32_t* taken) {
  std::uint64_t dropped = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : dropped)
  for (std::ptrdiff_t l = 0; l < static_cast<std::ptrdiff_t>(nu); ++l)
    dropped += sort_unique_list(taken + offsets[l], taken + offsets[l + 1]);
  if (dropped > 0) close_list_gaps(offsets, nu, taken);
}

/// A course and its learner's place in its bucket as one value: the place above, the course in
/// the low 16 bits (`packs_courses`).
inline std::int32_t pack_course(std::uint16_t low, std::int32_t course) noexcept {
  return static_cast<std::int32_t>((std::uint32_t{low} << 16) | static_cast<std::uint32_t>(course));
}

/// The learner's place in its bucket of a value `pack_course` made.
inline std::size_t packed_place(std::int32_t v) noexcept {
  return static_cast<std::size_t>(static_cast<std::uint32_t>(v) >> 16);
}

/// True when the courses of `sets` fit the 16 bits `pack_course` gives them.
inline bool packs_courses(std::span<const data::interactions* const> sets) noexcept {
  return std::all_of(sets.begin(), sets.end(), [](const data::interactions* d) {
    return d->n_items() <= (std::int32_t{1} << 16);
  });
}

/// Puts one bucket's packed values (`pack_course`) in order of their learner's place, in place,
/// by cycles of swaps (each value sent to its place's next free slot): `next[l]` holds where
/// place l's values start (`width` + 1 values, the last the bucket's size) and ends where they
/// end; `end` is room for `width` values. The order within a place is not kept.
template <class Offset>
void order_packed_bucket(std::int32_t* a, std::size_t width, Offset* next, Offset* end) {
  for (std::size_t l = 0; l < width; ++l) end[l] = next[l + 1];  // before any advances
  for (std::size_t l = 0; l < width; ++l) {
    while (next[l] < end[l]) {
      std::int32_t v = a[next[l]];
      for (std::size_t d = packed_place(v); d != l; d = packed_place(v)) std::swap(v, a[next[d]++]);
      a[next[l]++] = v;
    }
  }
}

/// `learner_courses` in two passes that stay in the caches, where `packs_courses`: each row's
/// course and its learner's place in a bucket of consecutive learners
/// (`detail::learner_buckets`) packed into `taken`, bucket by bucket (`place_in_learner_buckets`);
/// then each bucket, in the caches, counted into the offsets, put in order of learner, its
/// places stripped and each list sorted and deduplicated (`sort_unique_list`). Nothing of the
/// rows' size is allocated. Returns the courses dropped as repeats (their places marked -1).
template <class Offset>
std::size_t sorted_courses_in_buckets(std::span<const data::interactions* const> sets,
                                      std::size_t nu, Offset* offsets, std::int32_t* taken) {
  std::size_t n = 0;
  for (const data::interactions* d : sets) n += d->size();
  const learner_buckets b = learner_buckets_of(nu);
  const std::vector<Offset> start = place_in_learner_buckets<Offset>(
      n, b,
      [&](std::size_t lo, std::size_t hi, auto&& f) {
        std::size_t first = 0;  // the set's first row in the rows of all sets
        for (const data::interactions* d : sets) {
          const std::size_t from = std::max(lo, first), to = std::min(hi, first + d->size());
          for (std::size_t r = from; r < to; ++r) f(r, d->users[r - first], d->items[r - first]);
          first += d->size();
        }
      },
      [&](Offset p, std::size_t, std::int32_t u, std::int32_t i) {
        taken[p] = pack_course(b.low(static_cast<std::size_t>(u)), i);
      });
  std::size_t dropped = 0;
#pragma omp parallel reduction(+ : dropped)
  {
    std::vector<Offset> next(b.width() + 1), end(b.width());
#pragma omp for schedule(dynamic, 16)
    for (std::ptrdiff_t k = 0; k < static_cast<std::ptrdiff_t>(b.count); ++k) {
      const auto bucket = static_cast<std::size_t>(k);
      const std::size_t first = bucket << b.shift, width = std::min(b.width(), nu - first);
      std::int32_t* a = taken + start[bucket];
      const auto rows = static_cast<std::size_t>(start[bucket + 1] - start[bucket]);
      std::fill_n(next.begin(), width + 1, Offset{0});
      for (std::size_t r = 0; r < rows; ++r) ++next[packed_place(a[r]) + 1];
      for (std::size_t l = 0; l < width; ++l) next[l + 1] += next[l];
      for (std::size_t l = 0; l < width; ++l) offsets[first + l] = start[bucket] + next[l];
      order_packed_bucket(a, width, next.data(), end.data());  // next[l]: now where l's end
      for (std::size_t r = 0; r < rows; ++r) a[r] &= 0xffff;
      for (std::size_t l = 0; l < width; ++l)
        dropped += sort_unique_list(a + (l == 0 ? Offset{0} : next[l - 1]), a + next[l]);
    }
  }
  offsets[nu] = start[b.count];
  return dropped;
}

/// Each of the `nu` learners' sorted, unique courses in the rows of `sets`, written to `taken`
/// (room for a value per row of all the sets), their CSR offsets to `offsets` (`nu + 1` values,
/// zero on entry; the last is the courses kept). `Offset` holds the number of rows.
template <class Offset>
void learner_courses(std::span<const data::interactions* const> sets, std::size_t nu,
                     Offset* offsets, std::int32_t* taken) {
  if (!packs_courses(sets)) {
    group_courses_by_learner(sets, nu, offsets, taken);
    sort_unique_lists(offsets, nu, taken);
  } else if (sorted_courses_in_buckets(sets, nu, offsets, taken) > 0) {
    close_list_gaps(offsets, nu, taken);
  }
}

/// Each learner's sorted, unique courses of `train`, as above.
template <class Offset>
void learner_courses(const data::interactions& train, Offset* offsets, std::int32_t* taken) {
  const data::interactions* sets[] = {&train};
  learner_courses(std::span<const data::interactions* const>(sets),
                  static_cast<std::size_t>(train.n_users()), offsets, taken);
}

/// As above, the offsets returned (64 bits).
inline std::vector<std::uint64_t> learner_courses(const data::interactions& train,
                                                  std::int32_t* taken) {
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(train.n_users()) + 1, 0);
  learner_courses(train, offsets.data(), taken);
  return offsets;
}

}  // namespace tutti::detail
