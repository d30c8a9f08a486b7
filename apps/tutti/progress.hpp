// SPDX-License-Identifier: Apache-2.0
// `tutti train`'s progress line on stderr: epoch, share of the run done, samples per second and
// the time left. On a terminal it redraws one line, which the epoch's row then replaces; with
// --progress and stderr not a terminal (a pipe, a file) it writes a plain line every few
// seconds instead; --quiet silences it. It never reaches stdout, the JSON report or the log.
#pragma once

#include <tutti/trainer.hpp>

#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace tutti::cli {

/// When to show progress: `forced` (--progress) or stderr a terminal, and never when `quiet`.
class progress_line {
 public:
  progress_line(bool forced, bool quiet, std::size_t global_batch)
      : m_terminal(::isatty(2) == 1),
        m_enabled(!quiet && (forced || m_terminal)),
        m_batch(global_batch) {}

  /// Rank 0's step `p` is done.
  void update(const step_progress& p) {
    if (!m_enabled) return;
    const auto now = std::chrono::steady_clock::now();
    if (!m_started) {
      m_started = true;
      m_start = now;
      m_first_step = p.global_step;
      m_last = now;
      return;  // the first step sets the clock: it may have waited for the data or warm-up
    }
    const auto every = m_terminal ? std::chrono::milliseconds(100) : std::chrono::seconds(5);
    if (p.step + 1 != p.steps && now - m_last < every) return;
    m_last = now;
    const double elapsed = std::chrono::duration<double>(now - m_start).count();
    const double done = double(p.global_step - m_first_step);
    const double per_step = done > 0 ? elapsed / done : 0;
    const double left = double(p.total_steps - p.global_step - 1) * per_step;
    const std::string line = format(p, per_step > 0 ? double(m_batch) / per_step : 0, left);
    if (m_terminal)
      std::fprintf(stderr, "\r%-78s", line.c_str());
    else
      std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }

  /// Clears the redrawn line (before the epoch's row is printed).
  void clear() {
    if (m_enabled && m_terminal) std::fprintf(stderr, "\r%*s\r", 78, "");
  }

 private:
  static std::string format(const step_progress& p, double samples_per_s, double left_s) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "  progress: epoch %zu/%zu, %5.1f%% done, %.3g samples/s, ETA %s, lr %.3g",
                  p.epoch + 1, p.total_steps / (p.steps ? p.steps : 1),
                  100.0 * double(p.global_step + 1) / double(p.total_steps), samples_per_s,
                  duration(left_s).c_str(), p.lr);
    return buf;
  }
  static std::string duration(double s) {
    char buf[32];
    if (s < 60)
      std::snprintf(buf, sizeof buf, "%.0f s", s);
    else if (s < 3600)
      std::snprintf(buf, sizeof buf, "%d min %02d s", int(s) / 60, int(s) % 60);
    else
      std::snprintf(buf, sizeof buf, "%d h %02d min", int(s) / 3600, int(s) / 60 % 60);
    return buf;
  }

  bool m_terminal;
  bool m_enabled;
  std::size_t m_batch;
  bool m_started = false;
  std::size_t m_first_step = 0;
  std::chrono::steady_clock::time_point m_start{}, m_last{};
};

}  // namespace tutti::cli
