// SPDX-License-Identifier: Apache-2.0
/// @file detail/permutation.hpp
/// @brief A keyed pseudo-random bijection of [0, n), evaluated element by element.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/random.hpp>

#include <cstdint>

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
