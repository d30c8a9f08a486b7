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
#include <cstring>

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

/// ln(x) for x in (0, 1]: x = 2^e·m with m in [√½, √2), ln m = 2·atanh(s), s = (m - 1) / (m + 1)
/// (|s| < 0.172), by its series to s^11: within 1e-12 of the math library's, from +, ×, ÷ and
/// the bits of a double alone.
TUTTI_HOST_DEVICE inline double log_unit(double x) {
#if defined(__CUDA_ARCH__)
  auto bits = static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  std::uint64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
#endif
  int e = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;  // m in [1, 2)
#if defined(__CUDA_ARCH__)
  double m = __longlong_as_double(static_cast<long long>(bits));
#else
  double m;
  std::memcpy(&m, &bits, sizeof m);
#endif
  // Without a branch: the comparison goes either way at random.
  const int big = m > 1.4142135623730951 ? 1 : 0;
  m *= 1.0 - 0.5 * big;
  e += big;
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  const double series =
      1.0 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11)))));
  return e * 0.6931471805599453 + 2.0 * s * series;
}

/// The pair of standard normal values `init_normal` gives counters 2·pair and 2·pair + 1:
/// Box-Muller on the two uniforms of one 64-bit hash h = hash2(seed, pair), u1 = (h's high 32 bits
/// + ½)·2^-32 and u2 = h's low 32 bits·2^-32: `first` = √(-2 ln u1)·cos(2π u2), `second` = √(-2 ln
/// u1)·sin(2π u2) (independent of each other). The logarithm is `log_unit`; the cosine and sine are
/// Taylor polynomials on a quarter turn, the quadrant from u2's top two bits. Within 1e-7 of the
/// math library's formula, the same on every space, and |value| < 6.8 (u1 > 2^-33).
TUTTI_HOST_DEVICE inline void init_normal_pair(std::uint64_t seed, std::uint64_t pair,
                                               double& first, double& second) {
  const std::uint64_t h = hash2(seed, pair);
  const double u1 = (static_cast<double>(h >> 32) + 0.5) * 0x1.0p-32;
  const auto low = static_cast<std::uint32_t>(h);
  const std::uint32_t quadrant = low >> 30;
  const double phi = static_cast<double>(low & 0x3fffffffu) * (0x1.0p-30 * 1.5707963267948966);
  const double p2 = phi * phi;
  // Remainders below 7e-9 (cosine) and 7e-10 (sine) on [0, π/2).
  const double c =
      1.0 + p2 * (-1.0 / 2 +
                  p2 * (1.0 / 24 +
                        p2 * (-1.0 / 720 + p2 * (1.0 / 40320 +
                                                 p2 * (-1.0 / 3628800 + p2 * (1.0 / 479001600))))));
  const double sn =
      phi * (1.0 + p2 * (-1.0 / 6 +
                         p2 * (1.0 / 120 +
                               p2 * (-1.0 / 5040 +
                                     p2 * (1.0 / 362880 +
                                           p2 * (-1.0 / 39916800 + p2 * (1.0 / 6227020800.0)))))));
  // θ = (quadrant + φ/(π/2))·π/2: (cos θ, sin θ) is (c, s), (-s, c), (-c, -s) or (s, -c). By
  // arithmetic, not branches (the quadrant is random): x·1 + y·0 is x exactly.
  const double odd = static_cast<double>(quadrant & 1u);
  const double cos_sign = 1.0 - 2.0 * static_cast<double>(((quadrant + 1u) >> 1) & 1u);
  const double sin_sign = 1.0 - 2.0 * static_cast<double>(quadrant >> 1);
  const double r = std::sqrt(-2.0 * log_unit(u1));
  first = r * cos_sign * (c * (1.0 - odd) + sn * odd);
  second = r * sin_sign * (sn * (1.0 - odd) + c * odd);
}

/// A standard normal value for initialising parameters, from (seed, counter): the first
/// (even counter) or second (odd) of `init_normal_pair(seed, counter / 2)`. About half the cost
/// of `normal01` per value, a quarter when a kernel writes both of a pair.
TUTTI_HOST_DEVICE inline double init_normal(std::uint64_t seed, std::uint64_t counter) {
  double first = 0, second = 0;
  init_normal_pair(seed, counter >> 1, first, second);
  return (counter & 1) ? second : first;
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
