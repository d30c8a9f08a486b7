// SPDX-License-Identifier: Apache-2.0
/// @file openmp_wait.hpp
/// @brief Choosing libgomp's wait policy for how a program's ranks use the cores:
/// `tutti::choose_openmp_wait` and `tutti::prefer_passive_openmp_wait`.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tutti {

/// libgomp's wait policy between parallel regions (`OMP_WAIT_POLICY`).
enum class openmp_wait {
  /// Threads sleep between regions: right when ranks share the cores (threads of one process,
  /// or several processes on one machine), where spinning threads starve the ranks.
  passive,
  /// Threads spin between regions: right when one rank has the cores to itself, where waking a
  /// sleeping thread for every short parallel region costs tens of microseconds.
  active
};

/// The processes of this job on this machine, as the MPI launcher says
/// (`OMPI_COMM_WORLD_LOCAL_SIZE` for Open MPI, `MPI_LOCALNRANKS` for MPICH); 1 outside MPI.
inline int local_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(name)) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      if (end != v && n >= 1) return static_cast<int>(n);
    }
  }
  return 1;
}

/// The policy for a process that runs `ranks_here` ranks: active only for one rank in one
/// process on this machine, passive otherwise.
inline openmp_wait wait_policy_for(int ranks_here) {
  return ranks_here == 1 && local_processes() == 1 ? openmp_wait::active : openmp_wait::passive;
}

/// Re-executes the running program with `OMP_WAIT_POLICY` set to `policy` unless the user chose
/// a policy (then nothing happens). libgomp reads the variable once, when it loads, so this is
/// the only way to choose it from inside the program; call it before any parallel region. If
/// the re-exec fails the program carries on with libgomp's default policy.
///
/// Measured on a 2-core VM: ranks as threads with the default (spinning) policy took 30 s where
/// the passive one took 2.8 s; one rank alone with the passive policy ran its training step at
/// less than half the speed of the active one (a wake-up per region, ~20 short regions a step).
inline void choose_openmp_wait(char** argv, openmp_wait policy) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", policy == openmp_wait::active ? "active" : "passive", 1);
  ::execv("/proc/self/exe", argv);
}

/// `choose_openmp_wait(argv, openmp_wait::passive)`: for programs whose ranks share the cores.
/// Call it first thing in `main`.
inline void prefer_passive_openmp_wait(char** argv) {
  choose_openmp_wait(argv, openmp_wait::passive);
}

}  // namespace tutti
