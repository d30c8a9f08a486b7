// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file benchmarks/common.hpp
/// @brief What every tutti benchmark shares: the OpenMP wait policy, machine facts, medians
/// and the JSON envelope {machine, date, results}.

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <tutti/detail/median.hpp>
#include <tutti/openmp_wait.hpp>

namespace tutti::bench {

using tutti::detail::median;

/// Seconds elapsed since `t`.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// Hardware threads and host name of this machine.
inline nlohmann::json machine_json() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return {{"cores", std::thread::hardware_concurrency()}, {"hostname", std::string(host)}};
}

/// The current UTC time as ISO 8601 (2026-11-30T12:00:00Z).
inline std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// Writes {machine, date, results, ...extra} to `path`; throws std::runtime_error on failure.
inline void write_json(const std::string& path, const nlohmann::json& results,
                       const nlohmann::json& extra = nlohmann::json::object()) {
  nlohmann::json j = {{"machine", machine_json()}, {"date", utc_now()}, {"results", results}};
  for (const auto& [key, value] : extra.items()) j[key] = value;
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write the JSON report '" + path + "'");
  f << j.dump(2) << '\n';
  if (!f) throw std::runtime_error("could not finish writing the JSON report '" + path + "'");
}

}  // namespace tutti::bench
