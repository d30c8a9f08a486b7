// SPDX-License-Identifier: Apache-2.0
/// @file data/detail/learner_lists.hpp
/// @brief Each learner's distinct courses of a set of rows as CSR (offsets, then the courses
/// ascending), grouped by all threads: what the negatives' tables and an export's seen lists hold.
#pragma once

#include <tutti/data/interactions.hpp>
#include <tutti/detail/thread_range.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
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

/// Sorts and deduplicates each of the `nu` learners' lists of `offsets`/`taken` in place
/// (learners in parallel); where a list lost a course, the places it freed are marked (-1, never
/// a course) and one pass closes the gaps (`offsets[nu]` courses kept). Nothing is allocated.
template <class Offset>
void sort_unique_lists(Offset* offsets, std::size_t nu, std::int32_t* taken) {
  std::uint64_t dropped = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : dropped)
  for (std::ptrdiff_t l = 0; l < static_cast<std::ptrdiff_t>(nu); ++l) {
    std::int32_t* b = taken + offsets[l];
    std::int32_t* e = taken + offsets[l + 1];
    std::sort(b, e);
    std::int32_t* kept = std::unique(b, e);
    std::fill(kept, e, std::int32_t{-1});
    dropped += static_cast<std::uint64_t>(e - kept);
  }
  if (dropped == 0) return;
  Offset out = 0;
  for (std::size_t u = 0; u < nu; ++u) {
    const Offset from = offsets[u], to = offsets[u + 1];
    offsets[u] = out;
    for (Offset k = from; k < to && taken[k] >= 0; ++k) taken[out++] = taken[k];
  }
  offsets[nu] = out;
}

/// Each of the `nu` learners' sorted, unique courses in the rows of `sets`, written to `taken`
/// (room for a value per row of all the sets), their CSR offsets to `offsets` (`nu + 1` values,
/// zero on entry; the last is the courses kept). `Offset` holds the number of rows.
template <class Offset>
void learner_courses(std::span<const data::interactions* const> sets, std::size_t nu,
                     Offset* offsets, std::int32_t* taken) {
  group_courses_by_learner(sets, nu, offsets, taken);
  sort_unique_lists(offsets, nu, taken);
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
