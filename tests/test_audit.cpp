// SPDX-License-Identifier: Apache-2.0
/// @file test_audit.cpp
/// @brief Tests of the audit trail: a trail written from a real sampler verifies; every kind of
/// edit is reported at its file and line; coverage faults are found per epoch.
#include <doctest/doctest.h>

#include "scratch_dir.hpp"
#include "skip.hpp"

#if __has_include(<sodium.h>)

#include <tutti/data/audit.hpp>
#include <tutti/samplers/contiguous_shards.hpp>
#include <tutti/samplers/shuffled_shards.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace test_audit {

namespace {

namespace fs = std::filesystem;
using tutti::data::audit_log;
using tutti::data::audit_report;
using lines_t = std::vector<std::string>;

struct scratch_dir : tutti_test::scratch_dir {
  scratch_dir() : tutti_test::scratch_dir("tutti-audit") {}
};

constexpr std::uint64_t rows = 1000;
constexpr int world = 3;
constexpr std::size_t batch = 16;  // per rank
constexpr std::size_t log_every = 2;
constexpr std::uint64_t epochs = 3;
constexpr std::uint64_t seed = 11;

/// Lets a test corrupt what a rank records: (rank, epoch, ids of one record) -> new ids.
using meddle = std::function<void(int, std::uint64_t, std::vector<std::uint64_t>&)>;

/// Runs the sampler as a trainer would, one audit_log per rank, a record per `log_every` steps
/// holding the real samples of those steps. Returns each rank's head hash.
template <class Sampler>
std::vector<std::string> write_trail(const fs::path& dir, const Sampler& sampler,
                                     bool with_sat_out = false, const meddle& change = {},
                                     bool include_padding = false) {
  std::vector<std::optional<audit_log>> logs(world);
  for (int r = 0; r < world; ++r)
    logs[static_cast<std::size_t>(r)].emplace(
        dir, tutti::data::audit_header{.rank = r,
                                       .world_size = world,
                                       .train_rows = rows,
                                       .seed = seed,
                                       .dataset_digest = 0x1234abcdULL,
                                       .key_id = "00112233445566778899aabbccddeeff",
                                       .sampler = "test"});
  for (std::uint64_t e = 0; e < epochs; ++e) {
    std::vector<bool> used(rows, false);
    for (int r = 0; r < world; ++r) {
      const tutti::shard sh = sampler.shard(rows, world, r, seed, e);
      const std::size_t steps = (sh.size() + batch - 1) / batch;
      std::vector<std::uint64_t> ids;
      std::size_t first_step = 0;
      for (std::size_t step = 0; step < steps; ++step) {
        for (std::size_t j = step * batch; j < std::min(sh.size(), (step + 1) * batch); ++j)
          if (sh.weight(j) > 0 || include_padding) {
            ids.push_back(sh.indices[j]);
            used[sh.indices[j]] = true;
          }
        if ((step + 1) % log_every == 0 || step + 1 == steps) {
          if (change) change(r, e, ids);
          logs[static_cast<std::size_t>(r)]->record(e, first_step, step, ids);
          ids.clear();
          first_step = step + 1;
        }
      }
    }
    for (int r = 0; r < world; ++r) {
      std::vector<std::uint64_t> out;
      if (with_sat_out && r == 0)
        for (std::uint64_t i = 0; i < rows; ++i)
          if (!used[i]) out.push_back(i);
      logs[static_cast<std::size_t>(r)]->end_epoch(e, out);
    }
  }
  std::vector<std::string> heads;
  for (auto& log : logs) {
    log->finish();
    heads.push_back(log->head());
  }
  return heads;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p, std::ios::trunc);
  for (const auto& l : lines) out << l << "\n";
}

/// Re-hashes line `i` (0-based) after an edit, as a forger who knows the format would.
void rehash(std::vector<std::string>& lines, std::size_t i) {
  auto j = nlohmann::json::parse(lines[i]);
  j["hash"] = tutti::detail::audit_line_hash(j);
  lines[i] = j.dump();
}

/// True when some problem names `file` at `line` and says `what`.
bool reported(const audit_report& rep, const std::string& file, std::size_t line,
              const std::string& what) {
  return std::any_of(rep.problems.begin(), rep.problems.end(), [&](const auto& p) {
    return p.file == file && p.line == line && p.what.find(what) != std::string::npos;
  });
}

std::string list(const audit_report& rep) {
  std::string s;
  for (const auto& p : rep.problems)
    s += p.file + ":" + std::to_string(p.line) + ": " + p.what + "\n";
  return s;
}

// Lines of each file: 1 header, then per epoch 11 records (21 steps, 2 per record) and a
// summary, then the end line: 1 + 3 * 12 + 1 = 38.
constexpr std::size_t lines_per_file = 38;

}  // namespace

TEST_CASE("audit: a trail written from shuffled_shards over 3 ranks verifies") {
  scratch_dir dir;
  const auto heads = write_trail(dir.path, tutti::shuffled_shards{});
  const audit_report rep = tutti::data::verify_audit(dir.path);
  CHECK_MESSAGE(rep.ok(), list(rep));
  CHECK(rep.world_size == world);
  CHECK(rep.train_rows == rows);
  CHECK(rep.lines == world * lines_per_file);
  CHECK(rep.records == world * 3 * 11);
  CHECK(rep.heads == heads);
  REQUIRE(rep.epochs.size() == epochs);
  for (const auto& e : rep.epochs) {
    CHECK(e.consumed == rows);
    CHECK(e.sat_out == 0);
    CHECK(e.exactly_once);
  }
  const auto lines = read_lines(dir.path / "audit-rank-1.jsonl");
  REQUIRE(lines.size() == lines_per_file);
  auto rec = nlohmann::json::parse(lines[1]);
  CHECK(rec["type"] == "record");
  CHECK(rec["key_id"] == "00112233445566778899aabbccddeeff");
  CHECK(rec["ids_digest"].get<std::string>().size() == 64);
  // The same sampler gives the same trail content (time aside): ids_digest is a pure function.
  scratch_dir again;
  write_trail(again.path, tutti::shuffled_shards{});
  CHECK(nlohmann::json::parse(read_lines(again.path / "audit-rank-1.jsonl")[1])["ids_digest"] ==
        rec["ids_digest"]);
}

TEST_CASE("audit: contiguous_shards too, and drop tails verify with their sat-out samples") {
  scratch_dir a, b, c;
  write_trail(a.path, tutti::contiguous_shards{});
  CHECK_MESSAGE(tutti::data::verify_audit(a.path).ok(), list(tutti::data::verify_audit(a.path)));

  // 1000 = 3 * 333 + 1: with drop one sample sits out each epoch.
  write_trail(b.path, tutti::shuffled_shards{.tail = tutti::tail_policy::drop}, true);
  audit_report rep = tutti::data::verify_audit(b.path);
  CHECK_MESSAGE(rep.ok(), list(rep));
  for (const auto& e : rep.epochs) {
    CHECK(e.consumed == rows - 1);
    CHECK(e.sat_out == 1);
  }
  // Without saying which sample sat out, the epoch is not exactly-once.
  write_trail(c.path, tutti::shuffled_shards{.tail = tutti::tail_policy::drop}, false);
  rep = tutti::data::verify_audit(c.path);
  CHECK_FALSE(rep.ok());
  CHECK(reported(rep, "", 0, "epoch 1: the ranks consumed 999 samples"));
}

TEST_CASE("audit: coverage faults are found in the epoch where they happen") {
  SUBCASE("a sample consumed twice, another never") {
    scratch_dir dir;
    write_trail(dir.path, tutti::shuffled_shards{}, false,
                [](int r, std::uint64_t e, std::vector<std::uint64_t>& ids) {
                  if (r == 1 && e == 2 && ids.size() > 3 && ids[0] != ids[1]) ids[0] = ids[1];
                });
    const audit_report rep = tutti::data::verify_audit(dir.path);
    CHECK_FALSE(rep.ok());
    CHECK(reported(rep, "", 0, "epoch 2: 1000 samples, but not 0..999 each once"));
    CHECK(rep.epochs[0].exactly_once);
    CHECK(rep.epochs[1].exactly_once);
    CHECK_FALSE(rep.epochs[2].exactly_once);
    CHECK(rep.problems.size() == 1);  // the chains themselves are sound
  }
  SUBCASE("padded slots recorded as samples") {
    scratch_dir dir;
    write_trail(dir.path, tutti::shuffled_shards{}, false, {}, true);
    const audit_report rep = tutti::data::verify_audit(dir.path);
    CHECK(reported(rep, "", 0, "epoch 0: the ranks consumed 1002 samples"));
  }
  SUBCASE("a sample lost") {
    scratch_dir dir;
    write_trail(dir.path, tutti::shuffled_shards{}, false,
                [](int r, std::uint64_t e, std::vector<std::uint64_t>& ids) {
                  if (r == 0 && e == 1 && !ids.empty()) ids.pop_back();
                });
    const audit_report rep = tutti::data::verify_audit(dir.path);
    CHECK(reported(rep, "", 0, "epoch 1: the ranks consumed"));
    CHECK(rep.epochs[1].consumed == rows - 11);  // every record of rank 0 lost one
  }
}

TEST_CASE("audit: every kind of edit is reported with its file and line") {
  scratch_dir clean;
  const auto heads = write_trail(clean.path, tutti::shuffled_shards{});
  const std::string name = "audit-rank-2.jsonl";
  const auto original = read_lines(clean.path / name);
  REQUIRE(original.size() == lines_per_file);

  scratch_dir dir;
  auto trial = [&](const std::function<void(std::vector<std::string>&)>& edit,
                   tutti::data::audit_verify_options opt = {}) {
    for (const auto& f : fs::directory_iterator(clean.path))
      fs::copy_file(f.path(), dir.path / f.path().filename(), fs::copy_options::overwrite_existing);
    auto lines = original;
    edit(lines);
    write_lines(dir.path / name, lines);
    return tutti::data::verify_audit(dir.path, opt);
  };

  SUBCASE("untouched copy") {
    CHECK(trial([](lines_t&) {}).ok());
  }
  SUBCASE("a field edited") {
    auto rep = trial([](lines_t& l) {
      auto j = nlohmann::json::parse(l[4]);
      j["count"] = j["count"].get<std::uint64_t>() + 1;
      l[4] = j.dump();
    });
    CHECK_MESSAGE(reported(rep, name, 5, "hash does not match its content"), list(rep));
    // The summary no longer agrees with its records either.
    CHECK(reported(rep, name, 13, "disagrees with the epoch's 11 record lines"));
  }
  SUBCASE("a field edited and its hash recomputed") {
    auto rep = trial([](lines_t& l) {
      auto j = nlohmann::json::parse(l[4]);
      j["first_step"] = 99;
      l[4] = j.dump();
      rehash(l, 4);
    });
    CHECK_MESSAGE(reported(rep, name, 6, "prev is not the hash of line 5"), list(rep));
    CHECK_FALSE(reported(rep, name, 5, "hash does not match"));
  }
  SUBCASE("a line dropped") {
    auto rep = trial([](lines_t& l) { l.erase(l.begin() + 7); });
    CHECK_MESSAGE(reported(rep, name, 8, "dropped, inserted or reordered"), list(rep));
    CHECK(reported(rep, name, 12, "disagrees with the epoch's 10 record lines"));
  }
  SUBCASE("two lines swapped") {
    auto rep = trial([](lines_t& l) { std::swap(l[15], l[16]); });
    CHECK_MESSAGE(reported(rep, name, 16, "prev is not the hash of line 15"), list(rep));
    CHECK(reported(rep, name, 17, "reordered or repeated"));
  }
  SUBCASE("a line inserted (repeated)") {
    auto rep = trial([](lines_t& l) { l.insert(l.begin() + 20, l[19]); });
    CHECK_MESSAGE(reported(rep, name, 21, "prev is not the hash of line 20"), list(rep));
  }
  SUBCASE("the first line replaced by another rank's") {
    auto rep = trial([&](lines_t& l) { l[0] = read_lines(clean.path / "audit-rank-1.jsonl")[0]; });
    CHECK_MESSAGE(reported(rep, name, 1, "genesis"), list(rep));
  }
  SUBCASE("the end line dropped") {
    auto rep = trial([](lines_t& l) { l.pop_back(); });
    CHECK(reported(rep, name, lines_per_file - 1, "no end line"));
    CHECK(rep.problems.size() == 1);
    tutti::data::audit_verify_options lenient;
    lenient.allow_incomplete = true;
    CHECK(trial([](lines_t& l) { l.pop_back(); }, lenient).ok());
  }
  SUBCASE("the last epoch cut off") {
    auto rep = trial([](lines_t& l) { l.resize(30); });
    CHECK(reported(rep, name, 30, "epoch 2 has no summary"));
    CHECK(reported(rep, "audit-rank-2.jsonl", 0, "has no summary of epoch 2"));
  }
  SUBCASE("spaces added inside a line") {
    auto rep = trial([](lines_t& l) {
      auto pos = l[3].find("\",\"");
      l[3].replace(pos, 3, "\", \"");
    });
    CHECK_MESSAGE(reported(rep, name, 4, "canonical form"), list(rep));
  }
  SUBCASE("garbage appended") {
    auto rep = trial([](lines_t& l) { l.push_back("{not json"); });
    CHECK(reported(rep, name, lines_per_file + 1, "not a JSON object"));
  }
  SUBCASE("a whole rank's file removed") {
    auto rep = trial([](lines_t&) {});
    fs::remove(dir.path / "audit-rank-0.jsonl");
    rep = tutti::data::verify_audit(dir.path);
    CHECK(reported(rep, "audit-rank-0.jsonl", 0, "missing: world size 3"));
    CHECK(reported(rep, "", 0, "epoch 0: the ranks consumed"));
  }
  SUBCASE("a rewrite of a whole file with a fresh chain changes its head") {
    // The chain cannot tell a complete, consistent forgery from the truth; the head hash, kept
    // elsewhere (the run's report), can.
    auto rep = trial([](lines_t& l) {
      for (std::size_t i = 0; i < l.size(); ++i) {
        auto j = nlohmann::json::parse(l[i]);
        if (i == 2) j["time"] = "2000-01-01T00:00:00.000Z";
        if (i > 0) j["prev"] = nlohmann::json::parse(l[i - 1])["hash"];
        l[i] = j.dump();
        rehash(l, i);
      }
    });
    CHECK(rep.ok());
    CHECK(rep.heads[2] != heads[2]);
    CHECK(rep.heads[1] == heads[1]);
  }
}

TEST_CASE("audit: the writer refuses misuse and never overwrites a trail") {
  scratch_dir dir;
  tutti::data::audit_header h{.rank = 0, .world_size = 2, .train_rows = 10};
  audit_log log(dir.path, h);
  const std::uint64_t ids[] = {1, 2, 3};
  log.record(0, 0, 1, ids);
  CHECK_THROWS_AS(log.record(0, 1, 2, ids), tutti::invalid_argument);  // overlapping steps
  CHECK_THROWS_AS(log.record(1, 0, 0, ids), tutti::invalid_argument);  // epoch 0 still open
  CHECK_THROWS_AS(log.record(0, 5, 4, ids), tutti::invalid_argument);  // backwards
  const std::uint64_t bad[] = {10};
  CHECK_THROWS_AS(log.record(0, 2, 2, bad), tutti::invalid_argument);  // beyond train_rows
  CHECK_THROWS_AS(log.finish(), tutti::invalid_argument);              // epoch open
  log.end_epoch(0);
  CHECK_THROWS_AS(log.record(0, 9, 9, ids), tutti::invalid_argument);  // epoch closed
  log.finish();
  CHECK_THROWS_AS(log.record(1, 0, 0, ids), tutti::invalid_argument);
  CHECK_THROWS_AS(audit_log(dir.path, h), tutti::error);
  CHECK_THROWS_AS(audit_log(dir.path, {.rank = 2, .world_size = 2, .train_rows = 10}),
                  tutti::invalid_argument);
  // Rank 1 never wrote: the trail is incomplete and does not cover the epoch.
  const auto rep = tutti::data::verify_audit(dir.path);
  CHECK(reported(rep, "audit-rank-1.jsonl", 0, "missing"));
  CHECK(tutti::data::verify_audit(dir.path / "nothing-here").problems.size() == 1);
}

}  // namespace test_audit
#else

TEST_CASE("audit trail: its tests need libsodium") {
  TUTTI_TEST_SKIP("no <sodium.h> in this build: the audit trail is compiled out");
}

#endif  // __has_include(<sodium.h>)
