// SPDX-License-Identifier: Apache-2.0
/// @file detail/bf16.hpp
/// @brief bfloat16 on `std::uint16_t` storage: float → bf16 rounding to nearest even, bf16 →
/// float, and the `tutti::bf16` format tag.
///
/// bf16 is the upper half of an IEEE float: the same 8-bit exponent (so the same range, down to
/// the subnormals) and 7 stored mantissa bits instead of 23 (8 significant bits), so rounding
/// errs by at most 2^-8 relative. Widening is exact; narrowing rounds.
#pragma once

#include <tutti/config.hpp>

#include <cstdint>
#include <cstring>

namespace tutti {

/// The bfloat16 format tag, e.g. `tutti::compressed<R, tutti::bf16>`.
struct bf16 {};

namespace detail {

/// The bits of `v`, on host and device.
TUTTI_HOST_DEVICE inline std::uint32_t bf16_float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

/// The float whose bits are `u`, on host and device.
TUTTI_HOST_DEVICE inline float bf16_bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

/// `v` rounded to the nearest bf16, ties to even. ±inf stay ±inf, finite values beyond bf16's
/// largest (3.3895e38) round to ±inf as IEEE rounding says, and a NaN stays a NaN: its sign and
/// top payload bits are kept and the quiet bit is set, because adding the rounding increment to
/// a NaN's mantissa could carry into the exponent and turn it into an infinity (or a zero).
TUTTI_HOST_DEVICE inline std::uint16_t float_to_bf16(float v) {
  const std::uint32_t u = bf16_float_bits(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff rounds halves down and above-halves up; the low kept bit turns an exact half
  // into a round-up exactly when the kept part is odd, which is ties-to-even.
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

/// The float `b` stands for (exact: every bf16 is a float).
TUTTI_HOST_DEVICE inline float bf16_to_float(std::uint16_t b) {
  return bf16_bits_float(static_cast<std::uint32_t>(b) << 16);
}

/// `a + b` of two bf16 values, added in fp32 and rounded once: one hop of a bf16 reduction.
TUTTI_HOST_DEVICE inline std::uint16_t bf16_add(std::uint16_t a, std::uint16_t b) {
  return float_to_bf16(bf16_to_float(a) + bf16_to_float(b));
}

}  // namespace detail
}  // namespace tutti
