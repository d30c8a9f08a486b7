// SPDX-License-Identifier: Apache-2.0
// `tutti train --trace FILE`: the step phases of every rank as Chrome trace events, one track per
// rank, which Perfetto (ui.perfetto.dev) and chrome://tracing open: the format PyTorch's profiler
// and Horovod's timeline write.
#pragma once

#include "json_output.hpp"

#include <tutti/error.hpp>
#include <tutti/ledger/accounts.hpp>
#include <tutti/trainer.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <fstream>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace tutti::cli {

/// Collects the phases of global steps [first, first + count) that are multiples of `every`
/// apart from `first`, from every rank of this process (thread-safe), and writes them.
class trace_recorder {
 public:
  trace_recorder(std::size_t first, std::size_t count, std::size_t every)
      : m_first(first), m_count(count), m_every(every == 0 ? 1 : every) {}

  /// True when global step `g` is traced.
  bool wants(std::size_t g) const {
    return g >= m_first && g - m_first < m_count * m_every && (g - m_first) % m_every == 0;
  }

  void add(const phase_event& e) {
    if (!wants(e.global_step)) return;
    std::lock_guard lock(m_mutex);
    m_events.push_back(e);
  }

  std::size_t size() const {
    std::lock_guard lock(m_mutex);
    return m_events.size();
  }

  /// The trace-event JSON: one complete ("X") event per interval, microseconds since the run
  /// began, `pid` the process, `tid` the rank, named "rank N".
  nlohmann::json to_json(int process) const {
    std::lock_guard lock(m_mutex);
    nlohmann::json events = nlohmann::json::array();
    std::set<int> ranks;
    for (const phase_event& e : m_events) {
      ranks.insert(e.rank);
      events.push_back(
          {{"name", to_string(e.phase)},
           {"cat", "step"},
           {"ph", "X"},
           {"ts", std::round(e.start * 1e7) / 10},
           {"dur", std::round(e.seconds * 1e7) / 10},
           {"pid", process},
           {"tid", e.rank},
           {"args",
            {{"epoch", e.epoch + 1}, {"step", e.step + 1}, {"global_step", e.global_step + 1}}}});
    }
    for (const int r : ranks)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", process},
                        {"tid", r},
                        {"args", {{"name", "rank " + std::to_string(r)}}}});
    return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  }

  /// Writes the trace to `path`; throws `tutti::error` when it cannot.
  void write(const std::string& path, int process) const {
    write_json_file(path, to_json(process), "tutti train --trace", -1);
  }

 private:
  std::size_t m_first, m_count, m_every;
  mutable std::mutex m_mutex;
  std::vector<phase_event> m_events;
};

}  // namespace tutti::cli
