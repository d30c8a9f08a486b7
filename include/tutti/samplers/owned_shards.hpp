// SPDX-License-Identifier: Apache-2.0
/// @file samplers/owned_shards.hpp
/// @brief `tutti::owned_shards`: each rank visits only the rows it holds, in a fresh order each
/// epoch, and all ranks still take the same number of steps.
#pragma once

#include <tutti/detail/permutation.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>
#include <tutti/shard.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace tutti {

/// Shard sampler for data that is already split between the ranks, each rank holding only its
/// own rows (models `shard_sampler`; a rank-local one, see `rank_local`). Rank r holds
/// `rows[r]` rows, which are positions `offset(r) .. offset(r) + rows[r] - 1` of the training
/// set the ranks hold together, in rank order.
///
/// Every epoch rank r visits its rows once each in a keyed permutation seeded from (seed,
/// epoch, r). All ranks get max(rows) slots so they take the same steps; a rank with fewer rows
/// pads its last slots with weight-0 repeats, and `rank_real` counts the real samples of every
/// rank, so the trainer weighs each step exactly. This is the sampler for sealed shards opened
/// with per-rank shard keys: no rank ever needs another rank's rows.
struct owned_shards {
  /// Rows held by each rank, indexed by rank (every entry >= 1).
  std::vector<std::uint64_t> rows;

  /// Marks the sampler as rank-local: the trainer's `fit` receives only this rank's rows.
  static constexpr bool rank_local = true;

  /// Rows held by `rank`.
  std::uint64_t rows_of(int rank) const {
    check_rank("tutti::owned_shards::rows_of", rank);
    return rows[static_cast<std::size_t>(rank)];
  }
  /// The training-set position of `rank`'s first row: the rows of the ranks before it.
  std::uint64_t offset(int rank) const {
    check_rank("tutti::owned_shards::offset", rank);
    return std::accumulate(rows.begin(), rows.begin() + rank, std::uint64_t{0});
  }
  /// Rows held by all ranks together: the training set's size.
  std::uint64_t total() const {
    return std::accumulate(rows.begin(), rows.end(), std::uint64_t{0});
  }

  /// Rank `rank`'s slots for `epoch`. `n` is the number of rows this rank holds and must equal
  /// `rows[rank]`; indices are training-set positions (`first` = `offset(rank)`).
  /// Throws `tutti::invalid_argument` when `rows` does not describe `world_size` ranks with at
  /// least one row each, or when `n` differs from `rows[rank]`.
  tutti::shard shard(std::size_t n, int world_size, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    static constexpr const char* fn = "tutti::owned_shards::shard";
    TUTTI_EXPECTS(world_size >= 1 && rows.size() == static_cast<std::size_t>(world_size), fn,
                  "rows lists " + std::to_string(rows.size()) + " rank(s), the world has " +
                      std::to_string(world_size) + "; expected one entry per rank");
    check_rank(fn, rank);
    for (std::size_t r = 0; r < rows.size(); ++r)
      TUTTI_EXPECTS(rows[r] >= 1, fn,
                    "rank " + std::to_string(r) + " holds no rows; expected at least one per rank");
    const std::uint64_t mine = rows[static_cast<std::size_t>(rank)];
    TUTTI_EXPECTS(n == mine, fn,
                  "rank " + std::to_string(rank) + " was given " + std::to_string(n) +
                      " rows, but rows[" + std::to_string(rank) + "] = " + std::to_string(mine) +
                      "; expected the rows this rank holds");

    const std::uint64_t slots = *std::max_element(rows.begin(), rows.end());
    const std::uint64_t first = offset(rank);
    const detail::feistel_permutation perm(
        mine, detail::hash2(detail::hash2(seed, epoch), static_cast<std::uint64_t>(rank)));
    tutti::shard out;
    out.first = first;
    out.indices.resize(slots);
    // A padded slot repeats one of this rank's rows with weight 0, so a batch gathers rows the
    // rank holds and the padding counts in neither the loss nor the gradient.
    for (std::uint64_t j = 0; j < slots; ++j)
      out.indices[j] = first + perm(j < mine ? j : j % mine);
    out.slot_count = slots;
    out.real_slots = mine;
    // Rank r's rows are its first rows[r] slots, all real.
    out.longest_slots = slots;
    out.rank_real = rows;
    return out;
  }

 private:
  void check_rank(const char* fn, int rank) const {
    TUTTI_EXPECTS(rank >= 0 && static_cast<std::size_t>(rank) < rows.size(), fn,
                  "rank = " + std::to_string(rank) + "; expected 0 <= rank < " +
                      std::to_string(rows.size()) + " (the ranks listed in rows)");
  }
};

}  // namespace tutti
