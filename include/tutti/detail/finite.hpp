// SPDX-License-Identifier: Apache-2.0
/// @file detail/finite.hpp
/// @brief A float's bits and whether it is finite, on host and device, immune to fast-math.
#pragma once

#include <tutti/config.hpp>

#include <cstdint>
#include <cstring>

namespace tutti::detail {

/// The bits of a float, on host and device.
TUTTI_HOST_DEVICE inline std::uint32_t float_bits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  std::uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

/// False for infinities and NaNs; by the exponent bits, so fast-math cannot fold it away.
TUTTI_HOST_DEVICE inline bool finite_value(float v) {
  return (float_bits(v) & 0x7f800000u) != 0x7f800000u;
}

}  // namespace tutti::detail
