// SPDX-License-Identifier: Apache-2.0
/// @file samplers/shuffled_shards.hpp
/// @brief `tutti::shuffled_shards`: a fresh global permutation per epoch, dealt round-robin.
#pragma once

#include <tutti/detail/permutation.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/detail/sharding.hpp>
#include <tutti/error.hpp>
#include <tutti/shard.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/traits.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace tutti {

namespace detail {

/// Slot j of a rank: permutation position start + j·W + rank. A padded slot (position >= n)
/// still names a valid sample, so a batch gathers real data; weight 0 keeps it out of the loss
/// and the gradient.
struct shuffled_slot_fn {
  feistel_permutation perm;
  std::uint64_t n, start, world, rank;
  TUTTI_HOST_DEVICE std::uint64_t position(std::size_t j) const {
    const std::uint64_t pos = start + j * world + rank;
    return pos < n ? pos : pos % n;
  }
  TUTTI_HOST_DEVICE float weight(std::size_t j) const {
    return start + j * world + rank < n ? 1.0f : 0.0f;
  }
};

/// Kernel over slots j: slot j's dataset position and weight.
struct shuffled_fill_fn {
  shuffled_slot_fn f;
  std::uint64_t* indices;
  float* weights;
  TUTTI_HOST_DEVICE void operator()(std::size_t j) const {
    indices[j] = f.perm(f.position(j));
    weights[j] = f.weight(j);
  }
};

}  // namespace detail

/// Shard sampler that permutes the whole dataset every epoch and deals the permutation like
/// cards: rank r takes permutation positions r, r + W, r + 2W, ... (models `shard_sampler`).
///
/// The permutation is a keyed bijection of [0, n) (detail::feistel_permutation) seeded from
/// (seed, epoch) alone, so every rank computes the same one without communicating, and each
/// rank evaluates only its own positions: O(n / W) time and memory per epoch, in parallel.
/// Dealing round-robin leaves at most one padded slot per rank and puts the padding in the last
/// slot, where `rank_real` accounts for it.
struct shuffled_shards {
  /// What to do with the last n mod W samples.
  tail_policy tail = tail_policy::pad;

  /// This rank's slots for `epoch` of a dataset of `n` samples split over `world_size` ranks.
  /// Throws `tutti::invalid_argument` unless n >= 1 and 0 <= rank < world_size.
  tutti::shard shard(std::size_t n, int world_size, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    return shard_from(n, world_size, rank, seed, epoch, 0);
  }

  /// The slots of the rest of an epoch whose first `start` permutation positions were already
  /// consumed: positions start, start + 1, ... are dealt round-robin as above. A run that took
  /// s steps at global batch B on any world size consumed exactly positions [0, s·B), so a
  /// resume on another world size continues with `shard_from(..., start = s·B)` and every
  /// sample still counts once; on the same world size its slots are the original shard's from
  /// slot s·B/W on. Throws like `shard`, and unless start <= n.
  tutti::shard shard_from(std::size_t n, int world_size, int rank, std::uint64_t seed,
                          std::uint64_t epoch, std::size_t start) const {
    tutti::shard out = outline_from(n, world_size, rank, seed, epoch, start);
    const std::size_t mine = out.size();
    out.indices.resize(mine);
    const detail::shuffled_slot_fn f = slots(n, world_size, rank, seed, epoch, start);
    std::uint64_t* indices = out.indices.data();
    // Blocks of slots: the positions written, then the whole block through the permutation.
    constexpr std::size_t block = 4096;
    const auto blocks = static_cast<std::int64_t>((mine + block - 1) / block);
#pragma omp parallel for schedule(static)
    for (std::int64_t bb = 0; bb < blocks; ++bb) {
      const std::size_t lo = static_cast<std::size_t>(bb) * block;
      const std::size_t hi = std::min(mine, lo + block);
      for (std::size_t j = lo; j < hi; ++j) indices[j] = f.position(j);
      f.perm.apply(std::span<std::uint64_t>(indices + lo, hi - lo));
    }
    return out;
  }

  /// `shard_from`'s shard without its dataset positions (`indices` empty): its slots, real ones
  /// first, and `rank_real`, the host's part of a shard whose positions `fill_on_space` writes into
  /// a device's memory. Costs a pass over the slots, no permutation. Throws like `shard_from`.
  tutti::shard outline_from(std::size_t n, int world_size, int rank, std::uint64_t seed,
                            std::uint64_t epoch, std::size_t start) const {
    const detail::shuffled_slot_fn f = slots(n, world_size, rank, seed, epoch, start);
    const std::size_t w = f.world;
    const std::size_t left = n - start;
    // `none`: this rank's own share, no padding; the prefix spans the longest rank's share.
    const std::size_t longest = longest_share(left, w);
    tutti::shard out;
    // Rank q's slot j is real (f.weight(j) = 1) while j·W + q < left, so its real slots lead:
    // ceil((left − q) / W) of them, or fewer where its share ends first (`drop`).
    out.longest_slots = longest;
    out.rank_real.resize(w);
    for (std::size_t q = 0; q < w; ++q)
      out.rank_real[q] = std::min<std::size_t>(left > q ? (left - q + w - 1) / w : 0,
                                               slots_of(n, world_size, static_cast<int>(q), start));
    out.slot_count = slots_of(n, world_size, rank, start);
    out.real_slots = out.rank_real[static_cast<std::size_t>(rank)];
    return out;
  }

  /// Writes the positions and weights of `shard_from(n, world_size, rank, seed, epoch, start)`
  /// into memory of `space` (room for `outline_from(...).size()` values each) by one kernel over
  /// the slots, each slot's permutation evaluated alone: nothing is computed on the host or
  /// copied to the space (`tutti::sampler_fills_on_space`). Throws like `shard_from`.
  template <execution_space Space>
  void fill_on_space(const Space& space, std::size_t n, int world_size, int rank,
                     std::uint64_t seed, std::uint64_t epoch, std::size_t start,
                     std::uint64_t* indices, float* weights) const {
    const detail::shuffled_slot_fn f = slots(n, world_size, rank, seed, epoch, start);
    parallel_for(space, slots_of(n, world_size, rank, start),
                 detail::shuffled_fill_fn{f, indices, weights});
  }

  /// Writes the positions of slots [first, first + count) of `shard_from(n, world_size, rank,
  /// seed, epoch, start)` into `indices` (host memory), each slot's permutation evaluated alone
  /// (`tutti::sampler_fills_slots`): a step's slots cost a step's work. Throws like `shard_from`,
  /// and unless the slots lie within the shard.
  void fill_slots(std::size_t n, int world_size, int rank, std::uint64_t seed, std::uint64_t epoch,
                  std::size_t start, std::size_t first, std::size_t count,
                  std::uint64_t* indices) const {
    const detail::shuffled_slot_fn f = slots(n, world_size, rank, seed, epoch, start);
    const std::size_t mine = slots_of(n, world_size, rank, start);
    TUTTI_EXPECTS(first <= mine && count <= mine - first, "tutti::shuffled_shards::fill_slots",
                  "slots [" + std::to_string(first) + ", " + std::to_string(first + count) +
                      ") of a shard of " + std::to_string(mine) + "; expected slots within it");
    // Blocks of slots: the positions written, then the whole block through the permutation.
    constexpr std::size_t block = 1024;
    const auto blocks = static_cast<std::int64_t>((count + block - 1) / block);
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (std::int64_t bb = 0; bb < blocks; ++bb) {
      const std::size_t lo = static_cast<std::size_t>(bb) * block;
      const std::size_t hi = std::min(count, lo + block);
      for (std::size_t j = lo; j < hi; ++j) indices[j] = f.position(first + j);
      f.perm.apply(std::span<std::uint64_t>(indices + lo, hi - lo));
    }
  }

  /// Slots of rank `rank`'s shard from `shard_from(n, world_size, rank, ..., start)`.
  std::size_t slots_of(std::size_t n, int world_size, int rank, std::size_t start) const {
    const auto w = static_cast<std::size_t>(world_size);
    const auto r = static_cast<std::size_t>(rank);
    const std::size_t left = n - start;
    if (tail == tail_policy::none) return left > r ? (left - r + w - 1) / w : 0;
    return longest_share(left, w);
  }

 private:
  /// Slots of the longest rank's share of `left` positions dealt to `w` ranks.
  std::size_t longest_share(std::size_t left, std::size_t w) const {
    return tail == tail_policy::drop ? left / w : (left + w - 1) / w;
  }

  detail::shuffled_slot_fn slots(std::size_t n, int world_size, int rank, std::uint64_t seed,
                                 std::uint64_t epoch, std::size_t start) const {
    detail::check_shard_arguments("tutti::shuffled_shards::shard", n, world_size, rank);
    TUTTI_EXPECTS(start <= n, "tutti::shuffled_shards::shard_from",
                  "start = " + std::to_string(start) + " > n = " + std::to_string(n) +
                      "; expected the positions already consumed, at most n");
    return detail::shuffled_slot_fn{detail::feistel_permutation(n, detail::hash2(seed, epoch)), n,
                                    start, static_cast<std::uint64_t>(world_size),
                                    static_cast<std::uint64_t>(rank)};
  }
};

}  // namespace tutti
