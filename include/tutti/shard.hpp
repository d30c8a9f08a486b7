// SPDX-License-Identifier: Apache-2.0
/// @file shard.hpp
/// @brief `tutti::shard`: one rank's share of an epoch, and the tail policies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tutti {

/// What to do when the dataset size is not a multiple of the world size.
enum class tail_policy : std::uint8_t {
  pad,   ///< every rank gets ceil(n / W) slots; padded slots repeat a sample with weight 0
  drop,  ///< every rank gets floor(n / W) slots; the last n mod W samples sit out this epoch
  /// uneven inputs: each rank gets its own share, ceil or floor(n / W), no padding; a rank
  /// whose shard runs out keeps joining the step's reductions with nothing to add (weight 0),
  /// so no rank hangs and every sample counts once
  none,
};

/// One rank's samples for one epoch, in the order it visits them.
/// All ranks of a group receive the same `real_prefix` length, so they run the same number of
/// steps; `size()` is that length − 1, or less for a rank with fewer samples (tail `none`).
struct shard {
  /// Dataset positions, one per slot (a padded slot repeats a real position).
  std::vector<std::uint64_t> indices;
  /// 1 for a real sample, 0 for a padded slot.
  std::vector<float> weights;
  /// `real_prefix[j]` = real samples over all ranks in local slots [0, j); as many entries as the
  /// longest rank's slots + 1, the same on every rank. Lets each rank know the global weight of
  /// a step without communicating.
  std::vector<std::uint64_t> real_prefix;
  /// The dataset position of the first row this rank holds. Zero when every rank holds the
  /// whole training set; a rank-local sampler (one whose ranks hold only their own rows) sets
  /// it, and the rank reads local row `indices[j] - first`.
  std::uint64_t first = 0;

  /// Slots in this shard (the same on every rank, unless the tail policy is `none`): one weight
  /// per slot. `indices` holds as many positions, or none in an outline (a shard whose positions
  /// a sampler writes into a device's memory: `tutti::sampler_fills_on_space`).
  std::size_t size() const noexcept { return weights.size(); }
  /// Real samples over all ranks in local slots [begin, end).
  std::uint64_t global_real(std::size_t begin, std::size_t end) const {
    return real_prefix[end] - real_prefix[begin];
  }
};

namespace detail {

/// Bytes `s` holds (its vectors' capacities).
inline std::uint64_t shard_bytes(const shard& s) noexcept {
  return s.indices.capacity() * sizeof(std::uint64_t) + s.weights.capacity() * sizeof(float) +
         s.real_prefix.capacity() * sizeof(std::uint64_t);
}

}  // namespace detail

}  // namespace tutti
