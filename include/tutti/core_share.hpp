// SPDX-License-Identifier: Apache-2.0
/// @file core_share.hpp
/// @brief `tutti::core_share`: one rank's OpenMP threads follow what else runs on the machine,
/// step by step, so a spinning wait stays fast when another process starts beside the run.
#pragma once

#include <tutti/error.hpp>
#include <tutti/openmp_wait.hpp>

#include <sys/sysinfo.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <deque>
#include <functional>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace tutti {

/// The threads one rank runs while `others` tasks outside it are runnable on a machine of
/// `cores`: the cores the others leave, at least one and at most `most`. Spinning threads that
/// share a core with other work wait for a thread the kernel has put aside (measured on 2
/// cores with one CPU-bound neighbour: 2 spinning threads 2.1-3.9 M samples/s, 1 thread 4.6).
constexpr int threads_for(int cores, int others, int most) {
  if (others < 0) return most;  // nothing known of the machine: as started
  return std::clamp(cores - others, 1, std::max(1, most));
}

/// Follows the machine between steps: at most once a `period` it looks at the runnable tasks
/// outside the process, and sets the threads of the next parallel regions to `threads_for` the
/// least of the last `window` looks (a neighbour must be seen in each of them before a thread
/// is given up; one look at an idle machine takes it back). Call `poll()` outside any parallel
/// region, e.g. from `train_options::on_step`. The host kernels give the same bits on any
/// number of threads, so a run's result does not depend on what the machine did.
///
/// The look and the setter are handed in: tests give counts and record what is set.
class core_share {
 public:
  using clock = std::chrono::steady_clock;

  struct options {
    int cores = static_cast<int>(::get_nprocs());  ///< CPUs of the machine (what loadavg counts)
    int most = 1;                                  ///< the rank's threads on an idle machine
    clock::duration period = std::chrono::milliseconds(100);  ///< between two looks
    std::size_t window = 3;                                   ///< looks a decision takes
  };

  /// The defaults: the machine's CPUs, the calling thread's OpenMP threads as the most.
  static options defaults() {
    options o;
#if defined(_OPENMP)
    o.most = omp_get_max_threads();
#endif
    return o;
  }

  explicit core_share(options o = defaults(), std::function<int()> look = other_runnable_now,
                      std::function<void(int)> set = set_openmp_threads)
      : m_options(o),
        m_look(std::move(look)),
        m_set(std::move(set)),
        m_threads(o.most),
        m_fewest(o.most) {
    TUTTI_EXPECTS(o.cores >= 1 && o.most >= 1 && o.window >= 1, "tutti::core_share",
                  "expected at least one core, one thread and one look in a window");
  }

  /// Counts a step at the current threads, looks at the machine if a period has passed since
  /// the last look, and sets the threads when the decision changes.
  void poll(clock::time_point now = clock::now()) {
    ++m_steps;
    if (m_threads < m_options.most) ++m_steps_below;
    if (m_looked && now - m_last < m_options.period) return;
    m_looked = true;
    m_last = now;
    m_seen.push_back(m_look());
    if (m_seen.size() > m_options.window) m_seen.pop_front();
    const int others = *std::min_element(m_seen.begin(), m_seen.end());
    const int threads = threads_for(m_options.cores, others, m_options.most);
    if (threads == m_threads) return;
    m_threads = threads;
    m_fewest = std::min(m_fewest, threads);
    ++m_changes;
    m_set(threads);
  }

  int threads() const {
    return m_threads;
  }  ///< the threads set now
  int most() const {
    return m_options.most;
  }  ///< the threads on an idle machine
  int fewest() const {
    return m_fewest;
  }  ///< the fewest set so far
  std::size_t changes() const {
    return m_changes;
  }  ///< times the threads were set
  std::size_t steps() const {
    return m_steps;
  }  ///< polls (steps) counted
  std::size_t steps_below() const {
    return m_steps_below;
  }  ///< of them, on fewer than most

  /// `omp_set_num_threads` where OpenMP is on; nothing otherwise.
  static void set_openmp_threads([[maybe_unused]] int threads) {
#if defined(_OPENMP)
    omp_set_num_threads(threads);
#endif
  }

 private:
  options m_options;
  std::function<int()> m_look;
  std::function<void(int)> m_set;
  int m_threads;
  int m_fewest;
  std::size_t m_changes = 0, m_steps = 0, m_steps_below = 0;
  bool m_looked = false;
  clock::time_point m_last{};
  std::deque<int> m_seen;
};

}  // namespace tutti
