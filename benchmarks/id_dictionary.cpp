// SPDX-License-Identifier: Apache-2.0
/// @file benchmarks/id_dictionary.cpp
/// @brief What ids that are names cost: `tutti::data::parse_csv` on a file of N distinct
/// learners named by UUID (36 bytes each), against the same file with integer ids. Reports the
/// load time, the memory the dictionary keeps (names, their offsets and codes), and the peak
/// resident memory of the load above the text itself (Linux: /proc/self/clear_refs and VmHWM).
///
///     tutti_bench_id_dictionary [--learners 1000000] [--courses 5000] [--json out.json]
#include "common.hpp"

#include <tutti/data/csv.hpp>
#include <tutti/detail/random.hpp>

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace {

/// Resident-memory high-water mark of this process in bytes (0 where /proc is missing).
std::uint64_t peak_rss() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      std::uint64_t kb = 0;
      in >> kb;
      return kb * 1024;
    }
    std::getline(in, key);
  }
  return 0;
}

/// Resets the high-water mark to the current resident memory (Linux 4.0 and later).
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return static_cast<bool>(out);
}

/// A UUID-shaped name for learner `k`: 8-4-4-4-12 hex digits.
std::string uuid_of(std::uint64_t k) {
  const std::uint64_t a = tutti::detail::hash2(7, k), b = tutti::detail::hash2(11, k);
  char s[40];
  std::snprintf(s, sizeof s, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(a >> 32),
                static_cast<unsigned>(a >> 16) & 0xffff, static_cast<unsigned>(a) & 0xffff,
                static_cast<unsigned>(b >> 48),
                static_cast<unsigned long long>(b & 0xffffffffffffULL));
  return s;
}

/// One row per learner: "user,course,rating"; learners by UUID or by integer, courses "c-<k>".
std::string make_text(std::uint64_t learners, std::uint64_t courses, bool names) {
  std::string text = "user,course,rating\n";
  text.reserve(learners * (names ? 52 : 24));
  for (std::uint64_t k = 0; k < learners; ++k) {
    text += names ? uuid_of(k) : std::to_string(1000000000ULL + k);
    text += ",c-";
    text += std::to_string(tutti::detail::hash2(3, k) % courses);
    text += ",1\n";
  }
  return text;
}

struct measured {
  double seconds = 0;
  std::uint64_t text_bytes = 0;
  std::uint64_t dictionary_bytes = 0;  // names, offsets and codes kept with the data
  std::uint64_t peak_above_text = 0;   // resident peak of the load above the text
  std::int32_t users = 0;
};

measured run(std::uint64_t learners, std::uint64_t courses, bool names) {
  measured m;
  const std::string text = make_text(learners, courses, names);
  m.text_bytes = text.size();
  const bool reset = reset_peak_rss();
  const std::uint64_t before = peak_rss();
  const auto t0 = std::chrono::steady_clock::now();
  tutti::data::interactions d = tutti::data::parse_csv(
      text, {.user_col = "user", .item_col = "course", .implicit = true}, "bench.csv");
  m.seconds = tutti::bench::seconds_since(t0);
  m.peak_above_text = reset && peak_rss() > before ? peak_rss() - before : 0;
  m.users = d.n_users();
  m.dictionary_bytes = d.user_ids.capacity() * sizeof(std::int64_t) +
                       (d.user_names ? d.user_names->memory_bytes() : 0);
  if (static_cast<std::uint64_t>(m.users) != learners)
    throw std::runtime_error("loaded " + std::to_string(m.users) + " learners; expected " +
                             std::to_string(learners));
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tutti_bench_id_dictionary: the cost of ids that are names"};
  std::uint64_t learners = 1000000, courses = 5000;
  std::string json;
  app.add_option("--learners", learners, "distinct learners (one row each)")->capture_default_str();
  app.add_option("--courses", courses, "distinct courses")->capture_default_str();
  app.add_option("--json", json, "write the report here");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json results = nlohmann::json::array();
  std::printf("%-8s %10s %9s %12s %14s %14s %12s\n", "ids", "learners", "load s", "text MB",
              "dictionary MB", "B per learner", "peak MB");
  for (const bool names : {false, true}) {
    const measured m = run(learners, courses, names);
    const double per = double(m.dictionary_bytes) / double(learners);
    std::printf("%-8s %10llu %9.2f %12.1f %14.1f %14.1f %12.1f\n", names ? "uuid" : "integer",
                static_cast<unsigned long long>(learners), m.seconds, m.text_bytes / 1e6,
                m.dictionary_bytes / 1e6, per, m.peak_above_text / 1e6);
    results.push_back({{"ids", names ? "uuid" : "integer"},
                       {"learners", learners},
                       {"courses", courses},
                       {"load_seconds", m.seconds},
                       {"text_bytes", m.text_bytes},
                       {"dictionary_bytes", m.dictionary_bytes},
                       {"dictionary_bytes_per_learner", per},
                       {"peak_bytes_above_text", m.peak_above_text}});
  }
  if (!json.empty()) tutti::bench::write_json(json, results);
  return 0;
}
