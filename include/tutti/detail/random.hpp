// SPDX-License-Identifier: Apache-2.0
/// @file detail/random.hpp
/// @brief Counter-based random numbers usable inside kernels on every space.
///
/// A value depends only on (seed, counter), never on thread scheduling, so initialisation and
/// shuffles are identical on every space, thread count and world size.
#pragma once

#include <tutti/config.hpp>

#include <cmath>
#include <cstdint>

namespace tutti::detail {

/// SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
TUTTI_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Hash of a (seed, counter) pair.
TUTTI_HOST_DEVICE inline std::uint64_t hash2(std::uint64_t seed, std::uint64_t counter) {
  return mix64(mix64(seed) ^ (counter + 0x632be59bd9b4e019ULL));
}

/// Uniform double in [0, 1) from (seed, counter), 53 random bits.
TUTTI_HOST_DEVICE inline double uniform01(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(hash2(seed, counter) >> 11) * 0x1.0p-53;
}

/// Standard normal from (seed, counter) by Box-Muller on two derived uniforms.
TUTTI_HOST_DEVICE inline double normal01(std::uint64_t seed, std::uint64_t counter) {
  double u1 = uniform01(seed, 2 * counter);
  double u2 = uniform01(seed, 2 * counter + 1);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

/// Sequential generator for host-side loops (SplitMix64 stream); deterministic and portable,
/// unlike the standard distributions whose output varies between library implementations.
class splitmix {
 public:
  explicit splitmix(std::uint64_t seed) : m_state(seed) {}
  /// Next 64 random bits.
  std::uint64_t next() { return mix64(m_state++ * 0x9e3779b97f4a7c15ULL + 1); }
  /// Uniform double in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n) (n > 0), by Lemire's multiply-shift (bias below 2^-64 * n).
  std::uint64_t below(std::uint64_t n) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<std::uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
  /// Standard normal (Box-Muller, one value per call).
  double normal() {
    double u1 = uniform();
    double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  /// The generator's whole state (for checkpoints).
  std::uint64_t state() const noexcept { return m_state; }

 private:
  std::uint64_t m_state;
};

}  // namespace tutti::detail
