// SPDX-License-Identifier: Apache-2.0
// The process's resident memory: its peak so far (what `tutti train` reports, and what `tutti
// plan` takes as the program's own footprint before any data: the same binary and libraries).
#pragma once

#include <sys/resource.h>

#include <cstdint>

namespace tutti::cli::detail {

/// The process's peak resident memory, bytes (Linux reports it in KiB); 0 where unknown.
inline std::uint64_t peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace tutti::cli::detail
