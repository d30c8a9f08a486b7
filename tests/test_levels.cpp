// SPDX-License-Identifier: Apache-2.0
// The library's levels depend one way (docs/layout.md). From the ground up: the vocabulary and
// the helpers every level shares (the ground level: config, errors, the parameter layout, the
// batch, the shard, the state map, `space/`, `detail/`); the policy contracts (`concepts/`); the
// data (`data/`); the policies (models, optimizers, samplers, reducers, schedules), none reaching
// another; the trainer, whose own parts under `trainer/` nothing else includes. The planning
// maths (plan/) reaches neither the step accounts (ledger/) nor the benchmark harness (bench/);
// the accounts and the trainer reach neither; the harness takes from plan/ only links.hpp and
// what it includes. The benchmarks and examples compose the library by type, never through the
// program's sources (apps/). The check follows every `#include <tutti/...>` of the source tree,
// whatever #if guards it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace test_levels {

namespace {

namespace fs = std::filesystem;

const fs::path include_dir = fs::path(TUTTI_TEST_DATA_DIR) / ".." / ".." / "include";

// The tutti headers `header` ("tutti/plan/links.hpp") includes, directly or through others.
std::set<std::string> reached_from(const std::string& header) {
  static const std::regex include_line(R"(^\s*#\s*include\s*<(tutti/[^>]+)>)");
  std::set<std::string> seen;
  std::vector<std::string> todo{header};
  while (!todo.empty()) {
    const std::string h = todo.back();
    todo.pop_back();
    std::ifstream in(include_dir / h);
    REQUIRE_MESSAGE(in, "cannot read " << (include_dir / h).string());
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, include_line) && seen.insert(m[1].str()).second)
        todo.push_back(m[1].str());
    }
  }
  return seen;
}

// The headers under include/tutti/<folder>/, as "tutti/<folder>/...".
std::vector<std::string> headers_in(const std::string& folder) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(include_dir / "tutti" / folder))
    if (e.is_regular_file() && e.path().extension() == ".hpp")
      out.push_back(e.path().lexically_relative(include_dir).generic_string());
  REQUIRE_MESSAGE(!out.empty(), "no headers under include/tutti/" << folder);
  return out;
}

bool in_folder(const std::string& header, const std::string& folder) {
  return header.rfind("tutti/" + folder + "/", 0) == 0;
}

// The ground level: what every other level may use and which uses nothing above it.
bool ground_level(const std::string& header) {
  static const std::set<std::string> files{
      "tutti/config.hpp", "tutti/error.hpp",     "tutti/layout.hpp",        "tutti/batch.hpp",
      "tutti/shard.hpp",  "tutti/state_map.hpp", "tutti/gradient_ready.hpp"};
  return files.count(header) == 1 || in_folder(header, "detail") || in_folder(header, "space");
}

// Every header of the library, as "tutti/...".
std::vector<std::string> all_headers() {
  return headers_in("");
}

// The headers `header` includes itself (not through others).
std::vector<std::string> included_by(const std::string& header) {
  static const std::regex include_line(R"(^\s*#\s*include\s*<(tutti/[^>]+)>)");
  std::vector<std::string> out;
  std::ifstream in(include_dir / header);
  REQUIRE_MESSAGE(in, "cannot read " << (include_dir / header).string());
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, include_line)) out.push_back(m[1].str());
  }
  return out;
}

}  // namespace

TEST_CASE("levels: plan/ reaches neither ledger/ nor bench/") {
  for (const auto& h : headers_in("plan"))
    for (const auto& r : reached_from(h)) {
      INFO(h << " includes " << r);
      CHECK_FALSE(in_folder(r, "ledger"));
      CHECK_FALSE(in_folder(r, "bench"));
    }
}

TEST_CASE("levels: ledger/ and the trainer reach neither plan/ nor bench/") {
  std::vector<std::string> headers = headers_in("ledger");
  headers.push_back("tutti/trainer.hpp");
  for (const auto& h : headers)
    for (const auto& r : reached_from(h)) {
      INFO(h << " includes " << r);
      CHECK_FALSE(in_folder(r, "plan"));
      CHECK_FALSE(in_folder(r, "bench"));
    }
}

TEST_CASE("levels: bench/ takes from plan/ only links.hpp, and nothing from ledger/") {
  const std::set<std::string> allowed = reached_from("tutti/plan/links.hpp");
  for (const auto& h : headers_in("bench"))
    for (const auto& r : reached_from(h)) {
      INFO(h << " includes " << r);
      CHECK_FALSE(in_folder(r, "ledger"));
      if (in_folder(r, "plan")) CHECK((r == "tutti/plan/links.hpp" || allowed.count(r) == 1));
    }
}

TEST_CASE("levels: the ground level reaches nothing above it") {
  std::size_t ground = 0;
  for (const auto& h : all_headers()) {
    if (!ground_level(h)) continue;
    ++ground;
    for (const auto& r : reached_from(h)) {
      INFO(h << " includes " << r);
      CHECK(ground_level(r));
    }
  }
  CHECK(ground > 20);  // the helpers, the spaces and the vocabulary were all found
}

TEST_CASE("levels: the contracts and the data reach only the ground level") {
  for (const std::string folder : {"concepts", "data"})
    for (const auto& h : headers_in(folder))
      for (const auto& r : reached_from(h)) {
        INFO(h << " includes " << r);
        CHECK((ground_level(r) || in_folder(r, folder)));
      }
}

TEST_CASE("levels: a policy reaches no other policy, nor the trainer") {
  for (const std::string folder : {"models", "optimizers", "samplers", "reducers", "schedules"})
    for (const auto& h : headers_in(folder))
      for (const auto& r : reached_from(h)) {
        INFO(h << " includes " << r);
        CHECK((ground_level(r) || in_folder(r, folder) || in_folder(r, "concepts") ||
               r == "tutti/concepts.hpp" || in_folder(r, "data")));
      }
}

TEST_CASE("levels: the trainer's own parts are included by the trainer alone") {
  for (const auto& h : all_headers()) {
    if (in_folder(h, "trainer") || h == "tutti/trainer.hpp" || h == "tutti/tutti.hpp") continue;
    for (const auto& r : included_by(h)) {
      INFO(h << " includes " << r);
      CHECK_FALSE(in_folder(r, "trainer"));
    }
  }
}

TEST_CASE("levels: the benchmarks and examples include nothing of the program's sources") {
  static const std::regex apps_include(R"(^\s*#\s*include\s*"[^"]*apps/)");
  const fs::path root = include_dir / "..";
  std::size_t files = 0;
  for (const char* folder : {"benchmarks", "examples"})
    for (const auto& e : fs::recursive_directory_iterator(root / folder)) {
      const auto ext = e.path().extension();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu")) continue;
      ++files;
      std::ifstream in(e.path());
      std::size_t n = 0;
      for (std::string line; std::getline(in, line);) {
        ++n;
        INFO(e.path().string() << ":" << n << ": " << line);
        CHECK_FALSE(std::regex_search(line, apps_include));
      }
    }
  CHECK(files > 5);
}

}  // namespace test_levels
