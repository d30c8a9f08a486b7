// SPDX-License-Identifier: Apache-2.0
/// @file openmp_wait.hpp
/// @brief Choosing libgomp's wait policy for how a program's ranks use the cores:
/// `tutti::choose_openmp_wait` and `tutti::prefer_passive_openmp_wait`.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace tutti {

/// libgomp's wait policy between parallel regions (`OMP_WAIT_POLICY`).
enum class openmp_wait {
  /// Threads sleep between regions: right when ranks share the cores (threads of one process,
  /// or several processes on one machine), where spinning threads starve the ranks.
  passive,
  /// Threads spin between regions: right when one rank has the cores to itself, where waking a
  /// sleeping thread for every short parallel region costs tens of microseconds.
  active,
  /// Threads spin between regions for a while (`GOMP_SPINCOUNT`, `bounded_spins`), then sleep:
  /// as fast as `active` between a step's regions, and a thread left out of the team
  /// (`tutti::core_share` gives cores up to other work) stops spinning instead of taking the
  /// core it gave up.
  spin_then_sleep
};

/// The spins of `openmp_wait::spin_then_sleep`: libgomp's own count where no policy is set
/// (about 3 ms by its estimate). Measured with `tutti::core_share` on 2 cores: 30,000 and
/// 300,000 both ran the idle step as fast as `active`; an unbounded spin kept the thread that
/// was left out spinning beside the work it had made room for.
inline constexpr const char* bounded_spins = "300000";

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

/// Threads of this process that are running or runnable now (`R` in /proc/self/task/*/stat):
/// libraries start their own at load time (OpenBLAS's pool spins for a while after it starts).
inline int own_runnable_threads() {
  int running = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');  // the name, in parentheses, may hold spaces
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'R') ++running;
  }
  return running;
}

/// Runnable tasks on this machine outside this process, from one look: the running count in
/// `/proc/loadavg` less this process's own runnable threads; -1 where there is no such file.
/// `TUTTI_OTHER_RUNNABLE` set to a count replaces the look (tests, or a user who knows the
/// machine). In a container the count is the host's, so a shared host reads as busy.
inline int other_runnable_now() {
  if (const char* v = std::getenv("TUTTI_OTHER_RUNNABLE")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end != v && n >= 0) return static_cast<int>(std::min<long>(n, INT_MAX));
  }
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return -1;
  double avg[3];
  int running = 0, total = 0;
  const bool read =
      std::fscanf(f, "%lf %lf %lf %d/%d", &avg[0], &avg[1], &avg[2], &running, &total) == 5;
  std::fclose(f);
  return read ? std::max(0, running - own_runnable_threads()) : -1;
}

/// Runnable tasks on this machine outside this process: the least of 8 looks
/// (`other_runnable_now`), 2 ms apart; -1 where there is no `/proc/loadavg`.
inline int other_runnable_tasks() {
  int least = INT_MAX;
  for (int k = 0; k < 8; ++k) {
    if (k > 0) ::usleep(2000);
    const int now = other_runnable_now();
    if (now < 0) return -1;
    least = std::min(least, now);
    if (std::getenv("TUTTI_OTHER_RUNNABLE") != nullptr) break;  // a count given: one look
  }
  return least;
}

/// The policy for a process that runs `ranks_here` ranks: active only for one rank in one
/// process on this machine while nothing else runs on it (`other_runnable_tasks() == 0`),
/// passive otherwise. Spinning threads that share their cores with other work slow a step
/// down several times (measured: 0.8–1.7 M samples/s against 5.0 M passive at 4,000 learners
/// while a build ran on both cores), so a busy machine keeps the passive wait.
inline openmp_wait wait_policy_for(int ranks_here) {
  if (ranks_here != 1 || local_processes() != 1) return openmp_wait::passive;
  return other_runnable_tasks() == 0 ? openmp_wait::active : openmp_wait::passive;
}

/// Re-executes the running program with `OMP_WAIT_POLICY` set to `policy` (and for
/// `spin_then_sleep`, `GOMP_SPINCOUNT` where the user did not set it) unless the user chose a
/// policy (then nothing happens). libgomp reads the variable once, when it loads, so this is
/// the only way to choose it from inside the program; call it before any parallel region. If
/// the re-exec fails the program carries on with libgomp's default policy.
///
/// Measured on a 2-core VM: ranks as threads with the default (spinning) policy took 30 s where
/// the passive one took 2.8 s; one rank alone with the passive policy ran its training step at
/// less than half the speed of the active one (a wake-up per region, ~20 short regions a step).
inline void choose_openmp_wait(char** argv, openmp_wait policy) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", policy == openmp_wait::passive ? "passive" : "active", 1);
  if (policy == openmp_wait::spin_then_sleep) ::setenv("GOMP_SPINCOUNT", bounded_spins, 0);
  ::execv("/proc/self/exe", argv);
}

/// `choose_openmp_wait(argv, openmp_wait::passive)`: for programs whose ranks share the cores.
/// Call it first thing in `main`.
inline void prefer_passive_openmp_wait(char** argv) {
  choose_openmp_wait(argv, openmp_wait::passive);
}

}  // namespace tutti
