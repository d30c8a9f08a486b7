// SPDX-License-Identifier: Apache-2.0
// The library's levels depend one way (docs/layout.md): the planning maths (plan/) reaches neither
// the step accounts (ledger/) nor the benchmark harness (bench/); the accounts and the trainer
// reach neither; the harness takes from plan/ only links.hpp and what it includes. The check
// follows every `#include <tutti/...>` of the source tree, whatever #if guards it.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

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
