// SPDX-License-Identifier: Apache-2.0
/// @file detail/permutation.hpp
/// @brief A keyed pseudo-random bijection of [0, n), evaluated element by element.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/random.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti::detail {

/// A pseudo-random permutation of [0, n) from a key: a balanced Feistel network over the
/// smallest even-bit power-of-two domain holding n, with cycle walking back into [0, n).
///
/// Unlike a Fisher–Yates shuffle, any position's image is computed alone, so a rank computes
/// only its own share of an epoch's permutation, in parallel, in O(n / W) time and memory,
/// and the same code runs inside a kernel. The domain is at most 4n, so a position takes
/// fewer than four walks on average. Four rounds of a keyed multiplicative-hash round function
/// (Luby–Rackoff: four rounds of a pseudo-random function give a strong pseudo-random
/// permutation) are ample for shuffling training data, at a few nanoseconds a position.
class feistel_permutation {
 public:
  feistel_permutation(std::uint64_t n, std::uint64_t key) : m_n(n) {
    m_half_bits = 1;
    while ((std::uint64_t{1} << (2 * m_half_bits)) < n) ++m_half_bits;
    m_mask = (std::uint64_t{1} << m_half_bits) - 1;
    for (int r = 0; r < rounds; ++r) m_keys[r] = hash2(key, static_cast<std::uint64_t>(r));
  }

  /// The image of position `i` (< n).
  TUTTI_HOST_DEVICE std::uint64_t operator()(std::uint64_t i) const {
    std::uint64_t x = i;
    do {
      x = encrypt(x);
    } while (x >= m_n);
    return x;
  }

  /// Host: replaces every value of `xs` (each < n) by its image, the same values as
  /// `operator()`. Blocks of positions go through the network together, and those whose image
  /// fell outside [0, n) walk again together, so the work has no data-dependent branch per
  /// position and independent positions overlap in the core (a position walks 1 to ~10 times,
  /// which one at a time is a mispredicted branch per walk).
  void apply(std::span<std::uint64_t> xs) const {
    constexpr std::size_t block = 512;
    std::uint16_t walking[block];
    for (std::size_t b = 0; b < xs.size(); b += block) {
      std::uint64_t* x = xs.data() + b;
      const std::size_t m = std::min(block, xs.size() - b);
      std::size_t left = 0;
      for (std::size_t k = 0; k < m; ++k) {
        x[k] = encrypt(x[k]);
        walking[left] = static_cast<std::uint16_t>(k);
        left += x[k] >= m_n ? 1 : 0;
      }
      while (left > 0) {
        std::size_t still = 0;
        for (std::size_t q = 0; q < left; ++q) {
          const std::uint16_t k = walking[q];
          x[k] = encrypt(x[k]);
          walking[still] = k;
          still += x[k] >= m_n ? 1 : 0;
        }
        left = still;
      }
    }
  }

  /// Size of the permuted range.
  TUTTI_HOST_DEVICE std::uint64_t size() const { return m_n; }

 private:
  static constexpr int rounds = 4;

  TUTTI_HOST_DEVICE std::uint64_t encrypt(std::uint64_t x) const {
    std::uint64_t left = x >> m_half_bits;
    std::uint64_t right = x & m_mask;
    for (int r = 0; r < rounds; ++r) {
      // One multiply per round: the high bits of (right ^ key) * odd constant, folded.
      const std::uint64_t h = (right ^ m_keys[r]) * 0x9e3779b97f4a7c15ULL;
      const std::uint64_t f = (h ^ (h >> 29)) >> (64 - m_half_bits);
      const std::uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    return (left << m_half_bits) | right;
  }

  std::uint64_t m_n;
  int m_half_bits;
  std::uint64_t m_mask;
  std::uint64_t m_keys[rounds];
};

}  // namespace tutti::detail
