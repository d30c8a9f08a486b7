// SPDX-License-Identifier: Apache-2.0
/// @file detail/sharding.hpp
/// @brief Argument checks and the seeded Fisher–Yates shuffle shared by the shard samplers.
#pragma once

#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace tutti::detail {

/// Throws `tutti::invalid_argument` from `fn` unless n >= 1 and 0 <= rank < world_size.
inline void check_shard_arguments(const char* fn, std::size_t n, int world_size, int rank) {
  TUTTI_EXPECTS(world_size >= 1, fn,
                "world_size = " + std::to_string(world_size) + "; expected world_size >= 1");
  TUTTI_EXPECTS(rank >= 0 && rank < world_size, fn,
                "rank = " + std::to_string(rank) +
                    "; expected 0 <= rank < world_size = " + std::to_string(world_size));
  TUTTI_EXPECTS(n >= 1, fn, "dataset size n = 0; expected at least one sample");
}

/// Shuffles `values` in place by Fisher–Yates driven by a SplitMix64 stream seeded with `seed`;
/// the result depends on nothing else, so every rank computes the same permutation.
inline void seeded_shuffle(std::span<std::uint64_t> values, std::uint64_t seed) {
  splitmix rng(seed);
  for (std::size_t i = values.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(values[i - 1], values[j]);
  }
}

}  // namespace tutti::detail
