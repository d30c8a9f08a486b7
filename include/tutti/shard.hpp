// SPDX-License-Identifier: Apache-2.0
/// @file shard.hpp
/// @brief `tutti::shard`: one rank's share of an epoch, and the tail policies.
#pragma once

#include <algorithm>
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
/// All ranks of a group describe the same prefix of real samples over the same number of local
/// slots (`longest()`), so they run the same number of steps; `size()` is `longest()`, or less
/// for a rank with fewer samples (tail `none`). The prefix comes in one of two forms: per slot
/// (`real_prefix`, any sampler's), or per rank (`rank_real`, when every rank's real slots lead
/// its shard, as the tutti samplers deal them: W numbers instead of a number a slot).
struct shard {
  /// Dataset positions, one per slot (a padded slot repeats a real position).
  std::vector<std::uint64_t> indices;
  /// 1 for a real sample, 0 for a padded slot; or empty, where `slot_count` and `real_slots`
  /// say the same in two numbers (the tutti samplers' form: 4 bytes a slot less).
  std::vector<float> weights;
  /// Where `weights` is empty: this rank's slots, of which the first `real_slots` weigh 1 and
  /// the rest 0. Not read while `weights` holds a weight per slot.
  std::size_t slot_count = 0, real_slots = 0;
  /// `real_prefix[j]` = real samples over all ranks in local slots [0, j); as many entries as the
  /// longest rank's slots + 1, the same on every rank. Lets each rank know the global weight of
  /// a step without communicating. Empty where `rank_real` describes the same.
  std::vector<std::uint64_t> real_prefix;
  /// The per-rank form of `real_prefix`: rank r's first `rank_real[r]` slots are real and any
  /// after them padded, so real_prefix[j] = sum over r of min(j, rank_real[r]); one entry per
  /// rank, the same on every rank. Read only while `real_prefix` is empty.
  std::vector<std::uint64_t> rank_real;
  /// The longest rank's slots, where `rank_real` describes the prefix.
  std::size_t longest_slots = 0;
  /// The dataset position of the first row this rank holds. Zero when every rank holds the
  /// whole training set; a rank-local sampler (one whose ranks hold only their own rows) sets
  /// it, and the rank reads local row `indices[j] - first`.
  std::uint64_t first = 0;

  /// Slots in this shard (the same on every rank, unless the tail policy is `none`): one weight
  /// per slot, or `slot_count`. `indices` holds as many positions, or none in an outline (a
  /// shard whose positions a sampler writes into a device's memory:
  /// `tutti::sampler_fills_on_space`).
  std::size_t size() const noexcept { return weights.empty() ? slot_count : weights.size(); }
  /// Slot j's weight in either form.
  float weight(std::size_t j) const noexcept {
    return weights.empty() ? (j < real_slots ? 1.0f : 0.0f) : weights[j];
  }
  /// The weights of slots [begin, end), summed in slot order.
  double weight_sum(std::size_t begin, std::size_t end) const noexcept {
    if (weights.empty()) {
      const std::size_t real_end = std::min(end, real_slots);
      return real_end > begin ? double(real_end - begin) : 0.0;
    }
    double sum = 0;
    for (std::size_t j = begin; j < end; ++j) sum += weights[j];
    return sum;
  }
  /// The weights of slots [begin, end), one a slot, in either form.
  std::vector<float> weights_in(std::size_t begin, std::size_t end) const {
    std::vector<float> w(end > begin ? end - begin : 0);
    for (std::size_t j = begin; j < end; ++j) w[j - begin] = weight(j);
    return w;
  }
  /// Local slots the prefix spans: the longest rank's shard, the same on every rank.
  std::size_t longest() const noexcept {
    return real_prefix.empty() ? longest_slots : real_prefix.size() - 1;
  }
  /// `real_prefix[j]` in either form: real samples over all ranks in local slots [0, j).
  std::uint64_t real_before(std::size_t j) const noexcept {
    if (!real_prefix.empty()) return real_prefix[j];
    std::uint64_t sum = 0;
    for (const std::uint64_t r : rank_real) sum += r < j ? r : j;
    return sum;
  }
  /// Real samples over all ranks in local slots [begin, end).
  std::uint64_t global_real(std::size_t begin, std::size_t end) const {
    return real_before(end) - real_before(begin);
  }
};

namespace detail {

/// Bytes `s` holds (its vectors' capacities).
inline std::uint64_t shard_bytes(const shard& s) noexcept {
  return s.indices.capacity() * sizeof(std::uint64_t) + s.weights.capacity() * sizeof(float) +
         (s.real_prefix.capacity() + s.rank_real.capacity()) * sizeof(std::uint64_t);
}

}  // namespace detail

}  // namespace tutti
