// SPDX-License-Identifier: Apache-2.0
/// @file detail/prefetch.hpp
/// @brief Software prefetch of the rows a host loop will read a few iterations ahead.
///
/// A step of a large table reads a few thousand rows scattered over hundreds of megabytes: each
/// is a cache miss, and a loop that reads one row per iteration waits for each in turn. Asking
/// for the rows of iteration i + k while computing iteration i overlaps those waits. A prefetch
/// never faults and changes no value; on a device it compiles to nothing.
#pragma once

#include <tutti/config.hpp>

#include <cstddef>

namespace tutti::detail {

/// Iterations ahead that the host loops prefetch: enough to cover a memory latency with the
/// work of a few rows, few enough that the lines are still cached when they are used.
inline constexpr std::size_t prefetch_ahead = 8;

/// Asks for the cache lines of `bytes` bytes from `p` (at most `max_lines` of them) to be brought
/// into the cache; a hint only. `write` says the lines will be written (on x86-64 the hint is the
/// same: PREFETCHW is not on every x86-64). On x86-64 the hint is an `asm volatile`: GCC 12 drops
/// a `__builtin_prefetch` that sits under a branch in an out-of-line kernel.
TUTTI_HOST_DEVICE inline void prefetch_bytes(const void* p, std::size_t bytes, bool write = false,
                                             std::size_t max_lines = 4) {
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
  const char* c = static_cast<const char*>(p);
  const std::size_t lines = (bytes + 63) / 64 < max_lines ? (bytes + 63) / 64 : max_lines;
  for (std::size_t k = 0; k < lines; ++k) {
#if defined(__x86_64__)
    (void)write;
    asm volatile("prefetcht0 %0" : : "m"(*(c + 64 * k)));
#else
    if (write)
      __builtin_prefetch(c + 64 * k, 1, 3);
    else
      __builtin_prefetch(c + 64 * k, 0, 3);
#endif
  }
#else
  (void)p, (void)bytes, (void)write, (void)max_lines;
#endif
}

}  // namespace tutti::detail
