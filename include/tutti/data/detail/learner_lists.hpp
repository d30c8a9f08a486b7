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
#include <vector>

namespace tutti::detail {

/// Each learner's courses, in row order: `offsets` (n_users + 1, zero) becomes the CSR offsets
/// and `taken` (a value per row) the courses. Threads split the learners in equal ranges; each
/// reads every row and keeps those of its range, so the result is the serial one. The offsets are
/// their own cursors: counted one place ahead, summed, advanced by the rows, then shifted back.
inline void group_courses_by_learner(const data::interactions& train,
                                     std::vector<std::uint64_t>& offsets, std::int32_t* taken) {
  const std::size_t nu = offsets.size() - 1, n = train.size();
  const std::int32_t* users = train.users.data();
  const std::int32_t* items = train.items.data();
  std::uint64_t* at = offsets.data() + 1;  // at[u]: learner u's count, then the end of its list
#pragma omp parallel
  {
    const thread_share mine = thread_share_of(nu);
    for (std::size_t r = 0; r < n; ++r)
      if (mine.holds(users[r])) ++at[users[r]];
#pragma omp barrier
#pragma omp single
    {  // at[u] = the start of learner u + 1's list, so at[u - 1] is u's: the cursor
      for (std::size_t u = 1; u < nu; ++u) at[u] += at[u - 1];
      for (std::size_t u = nu; u-- > 1;) at[u] = at[u - 1];
      if (nu > 0) at[0] = 0;
    }
    for (std::size_t r = 0; r < n; ++r)
      if (mine.holds(users[r])) taken[at[users[r]]++] = items[r];
  }
}

/// Sorts and deduplicates each learner's list of `offsets`/`taken` in place (learners in
/// parallel), then closes the gaps in one pass where a list lost a course (`offsets.back()`
/// courses kept).
inline void sort_unique_lists(std::vector<std::uint64_t>& offsets, std::int32_t* taken) {
  const std::size_t nu = offsets.size() - 1;
  std::vector<std::uint64_t> kept(nu);
  std::uint64_t dropped = 0;
#pragma omp parallel for schedule(dynamic, 4096) reduction(+ : dropped)
  for (std::ptrdiff_t l = 0; l < static_cast<std::ptrdiff_t>(nu); ++l) {
    const auto u = static_cast<std::size_t>(l);
    std::int32_t* b = taken + offsets[u];
    std::int32_t* e = taken + offsets[u + 1];
    std::sort(b, e);
    kept[u] = static_cast<std::uint64_t>(std::unique(b, e) - b);
    dropped += static_cast<std::uint64_t>(e - b) - kept[u];
  }
  if (dropped > 0) {
    std::uint64_t out = 0;
    for (std::size_t u = 0; u < nu; ++u) {
      const std::uint64_t from = offsets[u];
      offsets[u] = out;
      for (std::uint64_t k = 0; k < kept[u]; ++k) taken[out++] = taken[from + k];
    }
    offsets[nu] = out;
  }
}

/// Each learner's sorted, unique courses of `train`, written to `taken` (room for a value per
/// row of `train`); returns the CSR offsets into it (n_users + 1; the last is the courses kept).
inline std::vector<std::uint64_t> learner_courses(const data::interactions& train,
                                                  std::int32_t* taken) {
  std::vector<std::uint64_t> offsets(static_cast<std::size_t>(train.n_users()) + 1, 0);
  group_courses_by_learner(train, offsets, taken);
  sort_unique_lists(offsets, taken);
  return offsets;
}

}  // namespace tutti::detail
