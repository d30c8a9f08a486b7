// SPDX-License-Identifier: Apache-2.0
/// @file samplers/contiguous_shards.hpp
/// @brief `tutti::contiguous_shards`: each rank reads one contiguous block of the dataset.
#pragma once

#include <tutti/detail/random.hpp>
#include <tutti/detail/sharding.hpp>
#include <tutti/shard.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

namespace tutti {

/// Shard sampler that gives rank r one contiguous block of the dataset, in rank order
/// (models `shard_sampler`). Suits data stored in per-rank files or sorted by time, where
/// locality matters more than mixing; `shuffle_within` still varies the visiting order per epoch.
///
/// With `pad` the first n mod W ranks hold ceil(n/W) samples and the others floor(n/W) plus one
/// padded slot at the end, so no rank is left with a block of padding. With `drop` every rank
/// holds floor(n/W) samples and the last n mod W samples of the dataset sit out every epoch.
/// Each rank costs O(n / W) time and memory.
struct contiguous_shards {
  /// What to do with the last n mod W samples.
  tail_policy tail = tail_policy::pad;
  /// Visit the block in an order shuffled by (seed, epoch, rank) instead of dataset order.
  bool shuffle_within = true;

  /// This rank's slots for `epoch` of a dataset of `n` samples split over `world_size` ranks.
  /// Throws `tutti::invalid_argument` unless n >= 1 and 0 <= rank < world_size.
  tutti::shard shard(std::size_t n, int world_size, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    detail::check_shard_arguments("tutti::contiguous_shards::shard", n, world_size, rank);
    const std::size_t w = static_cast<std::size_t>(world_size);
    const std::size_t r = static_cast<std::size_t>(rank);
    const std::size_t base = n / w;
    const std::size_t extra = tail == tail_policy::drop ? 0 : n % w;
    const std::size_t slots = base + (extra > 0 ? 1 : 0);
    const std::size_t real = base + (r < extra ? 1 : 0);
    const std::size_t begin = r * base + (r < extra ? r : extra);
    // `none`: no padded slot; the prefix still spans the longest rank's slots.
    const std::size_t mine = tail == tail_policy::none ? real : slots;

    tutti::shard out;
    out.indices.resize(mine);
    std::iota(out.indices.begin(), out.indices.begin() + static_cast<std::ptrdiff_t>(real),
              std::uint64_t{begin});
    if (shuffle_within)
      detail::seeded_shuffle(std::span<std::uint64_t>(out.indices.data(), real),
                             detail::hash2(detail::hash2(seed, epoch), r));
    out.slot_count = mine;  // real slots first (weight 1), then padding (0)
    out.real_slots = real;
    // A padded slot still names a valid sample so a batch gathers real data; weight 0 keeps it
    // out of the loss. Ranks past the end of a tiny dataset have no sample of their own.
    for (std::size_t j = real; j < mine; ++j) out.indices[j] = real > 0 ? out.indices[0] : r % n;

    // The first `extra` ranks hold base + 1 real slots, the others base, each real slots first.
    out.longest_slots = slots;
    out.rank_real.resize(w);
    for (std::size_t q = 0; q < w; ++q) out.rank_real[q] = base + (q < extra ? 1 : 0);
    return out;
  }
};

}  // namespace tutti
