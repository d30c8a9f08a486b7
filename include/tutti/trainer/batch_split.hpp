// SPDX-License-Identifier: Apache-2.0
/// @file trainer/batch_split.hpp
/// @brief How a global batch is split over the ranks step by step, when it is not a multiple of
/// the world size as when it is.
#pragma once

#include <tutti/error.hpp>
#include <tutti/shard.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tutti::detail {

/// The slots each rank visits in each step of an epoch, for a global batch of `batch` samples
/// over `world` ranks.
///
/// The shard samplers deal positions like cards: position p of the epoch goes to rank p mod W,
/// slot p / W. Step s takes positions [s·B, (s+1)·B) — on one rank and on W alike — so rank r's
/// slots in step s are those of the positions below (s+1)·B dealt to it and not below s·B:
/// [first(r, s), first(r, s + 1)) with first(r, s) = ⌈(s·B − r) / W⌉. That is ⌈B/W⌉ or ⌊B/W⌋
/// slots per step (B/W each when W divides B), and W ranks visit the same samples per step as
/// one rank does. A sampler that deals otherwise still has every slot visited exactly once.
struct batch_split {
  std::size_t batch = 1;  ///< samples per step over all ranks, >= world
  std::size_t world = 1;  ///< ranks

  /// Whether every rank takes the same number of slots in every step.
  bool even() const noexcept { return batch % world == 0; }
  /// The most slots a rank takes in one step: ⌈B/W⌉.
  std::size_t largest() const noexcept { return (batch + world - 1) / world; }
  /// The fewest slots a rank takes in one step: ⌊B/W⌋.
  std::size_t smallest() const noexcept { return batch / world; }
  /// Rank `rank`'s first slot of step `step` (the slots it visits before that step).
  std::size_t first(std::size_t rank, std::size_t step) const noexcept {
    return (step * batch + world - 1 - rank) / world;
  }
  /// Steps until every rank has visited `slots[r]` slots (the first step whose start is at or
  /// past each rank's last slot).
  std::size_t steps_to_cover(std::span<const std::uint64_t> slots) const noexcept {
    std::size_t steps = 0;
    for (std::size_t r = 0; r < slots.size(); ++r) {
      if (slots[r] == 0) continue;
      // first(r, S) >= slots[r]  <=>  S·B >= (slots[r] − 1)·W + r + 1
      const std::size_t need = static_cast<std::size_t>(slots[r] - 1) * world + r + 1;
      steps = std::max(steps, (need + batch - 1) / batch);
    }
    return steps;
  }
  /// Real samples over all ranks in step `step`, given each rank's count of real slots (real
  /// slots lead each rank's shard; see `real_slots`).
  std::uint64_t global_real(std::span<const std::uint64_t> real, std::size_t step) const noexcept {
    std::uint64_t sum = 0;
    for (std::size_t r = 0; r < real.size(); ++r)
      sum += std::min<std::uint64_t>(first(r, step + 1), real[r]) -
             std::min<std::uint64_t>(first(r, step), real[r]);
    return sum;
  }
};

/// The number of real slots of `sh` (weight > 0) when they lead the shard, real slots first
/// and padding after, as every tutti sampler deals them; `misplaced` otherwise (a real slot after
/// a padded one), since the weight of a step split unevenly could then not be known without
/// communicating.
inline constexpr std::uint64_t misplaced = ~std::uint64_t{0};
inline std::uint64_t leading_real_slots(const shard& sh) {
  if (sh.weights.empty()) return std::min(sh.real_slots, sh.slot_count);  // real slots first
  std::size_t real = 0;
  while (real < sh.size() && sh.weights[real] > 0.f) ++real;
  for (std::size_t j = real; j < sh.size(); ++j)
    if (sh.weights[j] > 0.f) return misplaced;
  return real;
}

}  // namespace tutti::detail
