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

/// The double whose bits are `b`.
TUTTI_HOST_DEVICE inline double double_of_bits(std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
#endif
}

/// The bits of the double `d`.
TUTTI_HOST_DEVICE inline std::uint64_t bits_of_double(double d) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(d));
#else
  std::uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
#endif
}

/// `v` (below 2^52) as a double, exactly: 2^52 + v has v as its mantissa. Integer operations
/// and one subtraction, which a vectorised loop has where an int64 -> double conversion is
/// missing (x86-64 before AVX-512).
TUTTI_HOST_DEVICE inline double exact_double(std::uint64_t v) {
  return double_of_bits(0x4330000000000000ULL | v) - 0x1.0p52;
}

/// √y for y > 0 (a normal double): 1/√y from its bits' estimate (within 3.5 %), four Newton
/// steps (each squares the relative error: below 1e-16 after four), times y. Within 4 ulp of
/// std::sqrt; from × and - alone, so a vectorised loop needs no call (std::sqrt may have to set
/// errno, which keeps g++ from vectorising a loop that calls it).
TUTTI_HOST_DEVICE inline double sqrt_positive(double y) {
  double r = double_of_bits(0x5fe6eb50c7b537a9ULL - (bits_of_double(y) >> 1));
  const double half = 0.5 * y;
  r = r * (1.5 - half * r * r);
  r = r * (1.5 - half * r * r);
  r = r * (1.5 - half * r * r);
  r = r * (1.5 - half * r * r);
  return y * r;
}

/// ln(x) for x in (0, 1]: x = 2^e·m with m in [√½, √2), ln m = 2·atanh(s), s = (m - 1) / (m + 1)
/// (|s| < 0.172), by its series to s^11: within 1e-12 of the math library's, from +, ×, ÷ and
/// the bits of a double alone (no branch: a vectorised loop runs it as it is).
TUTTI_HOST_DEVICE inline double log_unit(double x) {
  const std::uint64_t bits = bits_of_double(x);
  const std::uint64_t mantissa = bits & 0x000fffffffffffffULL;
  // 1.mantissa > √2 exactly when the mantissa's bits are above √2's: then m is halved (its
  // exponent 2^-1) and e goes up by one.
  const std::uint64_t big = mantissa > 0x6a09e667f3bcdULL ? 1u : 0u;
  const double e = exact_double(((bits >> 52) & 0x7ff) + big) - 1023.0;
  const double m = double_of_bits(mantissa | ((0x3ffULL - big) << 52));
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  const double series =
      1.0 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 * (1.0 / 11)))));
  return e * 0.6931471805599453 + 2.0 * s * series;
}

/// `init_normal_pair(seed, pair, ...)` given mix64(seed) (`hash2`'s first half, the same for
/// every pair of a seed).
TUTTI_HOST_DEVICE inline void init_normal_pair_mixed(std::uint64_t mixed_seed, std::uint64_t pair,
                                                     double& first, double& second) {
  const std::uint64_t h = mix64(mixed_seed ^ (pair + 0x632be59bd9b4e019ULL));
  const double u1 = (exact_double(h >> 32) + 0.5) * 0x1.0p-32;
  const std::uint64_t low = h & 0xffffffffULL;
  const std::uint64_t quadrant = low >> 30;
  const double phi = exact_double(low & 0x3fffffffULL) * (0x1.0p-30 * 1.5707963267948966);
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
  const double odd = exact_double(quadrant & 1u);
  const double cos_sign = 1.0 - 2.0 * exact_double(((quadrant + 1u) >> 1) & 1u);
  const double sin_sign = 1.0 - 2.0 * exact_double(quadrant >> 1);
  const double r = sqrt_positive(-2.0 * log_unit(u1));
  first = r * cos_sign * (c * (1.0 - odd) + sn * odd);
  second = r * sin_sign * (sn * (1.0 - odd) + c * odd);
}

/// The pair of standard normal values `init_normal` gives counters 2·pair and 2·pair + 1:
/// Box-Muller on the two uniforms of one 64-bit hash h = hash2(seed, pair), u1 = (h's high 32 bits
/// + ½)·2^-32 and u2 = h's low 32 bits·2^-32: `first` = √(-2 ln u1)·cos(2π u2), `second` = √(-2 ln
/// u1)·sin(2π u2) (independent of each other). The logarithm is `log_unit`, the square root
/// `sqrt_positive`; the cosine and sine are Taylor polynomials on a quarter turn, the quadrant
/// from u2's top two bits. Within 1e-7 of the math library's formula, the same on every space,
/// and |value| < 6.8 (u1 > 2^-33). Integer, +, ×, ÷ alone and no branch: a host loop over pairs
/// vectorises (`fill_normal_pairs`).
TUTTI_HOST_DEVICE inline void init_normal_pair(std::uint64_t seed, std::uint64_t pair,
                                               double& first, double& second) {
  init_normal_pair_mixed(mix64(seed), pair, first, second);
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
