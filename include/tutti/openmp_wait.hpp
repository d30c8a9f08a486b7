// SPDX-License-Identifier: Apache-2.0
/// @file openmp_wait.hpp
/// @brief `tutti::prefer_passive_openmp_wait`: for programs whose ranks share few cores.
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace tutti {

/// Re-executes the running program with `OMP_WAIT_POLICY=passive` unless the user chose a
/// policy. Call it first thing in `main`.
///
/// libgomp reads OMP_WAIT_POLICY once, when it loads, and by default spins between parallel
/// regions. When ranks are threads on a few shared cores (a 2-core CI machine, other jobs) the
/// spinning threads starve the ranks and a run gets several times slower; measured here, a
/// 1-rank `tutti train` took 30 s with the default and 2.8 s with the passive policy.
/// If the re-exec fails the program carries on with the default policy.
inline void prefer_passive_openmp_wait(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", "passive", 1);
  ::execv("/proc/self/exe", argv);
}

}  // namespace tutti
