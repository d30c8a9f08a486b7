// SPDX-License-Identifier: Apache-2.0
/// @file test_clean.cpp
/// @brief Tests of the cleaning loader: counts by reason, duplicate policies, the quarantine
/// file, the share limit, agreement with the strict loader; replays the fuzz regressions (of
/// the CSV loader, the sealed-shard reader and the checkpoint reader).
#include <doctest/doctest.h>

#include <tutti/data/clean.hpp>
#include <tutti/data/csv.hpp>

#include "../fuzz/checkpoint_fuzz.hpp"
#include "../fuzz/csv_fuzz.hpp"
#include "scratch_dir.hpp"
#include "skip.hpp"
#if __has_include(<sodium.h>)
#include "../fuzz/sealed_fuzz.hpp"
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace test_clean {

namespace {

namespace fs = std::filesystem;
using tutti::data::clean_options;
using tutti::data::cleaned_data;
using tutti::data::csv_options;
using tutti::data::duplicate_policy;
using tutti::data::interactions;
using tutti::data::rejected_row;

const std::string data_dir = TUTTI_TEST_DATA_DIR;
const std::string dirty_csv = data_dir + "/dirty.csv";
const csv_options with_time{.timestamp_col = "timestamp"};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// A scratch folder of its own per test, removed at the end.
struct scratch : tutti_test::scratch_dir {
  explicit scratch(const std::string& name) : tutti_test::scratch_dir("tutti-clean-" + name) {}
};

/// Line `n` (1-based) of `text`, without its "\n" or "\r\n".
std::string source_line(const std::string& text, std::size_t n) {
  std::size_t pos = 0;
  for (std::size_t i = 1; i < n; ++i) pos = text.find('\n', pos) + 1;
  std::size_t end = text.find('\n', pos);
  std::string line = text.substr(pos, end == std::string::npos ? end : end - pos);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

/// (source user, source item, label, timestamp) per row, in row order.
std::vector<std::tuple<std::int64_t, std::int64_t, float, std::int64_t>> rows_of(
    const interactions& d) {
  std::vector<std::tuple<std::int64_t, std::int64_t, float, std::int64_t>> out;
  for (std::size_t i = 0; i < d.size(); ++i)
    out.emplace_back(d.user_ids[static_cast<std::size_t>(d.users[i])],
                     d.item_ids[static_cast<std::size_t>(d.items[i])], d.labels[i],
                     d.has_timestamps() ? d.timestamps[i] : -1);
  return out;
}

/// The rejections of tests/data/dirty.csv other than duplicates, by line (see the file).
const std::map<std::size_t, std::string> dirty_rejections = {{4, "malformed"},
                                                             {5, "malformed"},
                                                             {6, "non_finite_label"},
                                                             {7, "negative_id"},
                                                             {8, "negative_id"},
                                                             {9, "id_out_of_range"},
                                                             {10, "label_out_of_domain"},
                                                             {11, "label_out_of_domain"},
                                                             {12, "missing_field"},
                                                             {13, "missing_field"},
                                                             {18, "malformed"},
                                                             {19, "non_finite_label"},
                                                             {20, "malformed"},
                                                             {21, "malformed"},
                                                             {22, "id_out_of_range"},
                                                             {23, "non_finite_label"},
                                                             {24, "malformed"},
                                                             {25, "malformed"},
                                                             {28, "malformed"}};

const clean_options dirty_rules{
    .label_min = 1.0, .label_max = 5.0, .max_rejected_share = 1.0, .max_item_id = 1000};

/// Checks a cleaning of dirty.csv under `policy`: counts, rows used, quarantine file.
void check_dirty(
    duplicate_policy policy, const std::vector<std::size_t>& duplicate_lines,
    const std::vector<std::tuple<std::int64_t, std::int64_t, float, std::int64_t>>& expected_rows) {
  scratch tmp("dirty");
  clean_options opt = dirty_rules;
  opt.dup = policy;
  opt.quarantine_path = tmp / "quarantine.tsv";
  const cleaned_data c = tutti::data::load_csv_clean(dirty_csv, with_time, opt);
  const auto& rep = c.report;

  CHECK(rep.rows_read == 29);
  CHECK(rep.rows_used == 7);
  CHECK(rep.rows_rejected == 22);
  CHECK(rep.rows_read == rep.rows_used + rep.rows_rejected);
  const std::map<std::string, std::size_t> by_reason = {
      {"malformed", 8},       {"missing_field", 2},    {"negative_id", 2},
      {"id_out_of_range", 2}, {"non_finite_label", 3}, {"label_out_of_domain", 2},
      {"duplicate", 3}};
  CHECK(rep.rejected == by_reason);
  CHECK(rep.duplicates_merged == 3);
  CHECK(rows_of(c.data) == expected_rows);
  CHECK(c.data.size() == rep.rows_used);

  // The quarantine file holds exactly the rejected lines: number, reason and text.
  std::map<std::size_t, std::string> want = dirty_rejections;
  for (std::size_t l : duplicate_lines) want[l] = "duplicate";
  const std::string source = read_all(dirty_csv);
  std::vector<rejected_row> expected_quarantine;
  for (const auto& [line, reason] : want)
    expected_quarantine.push_back({line, reason, source_line(source, line)});
  const std::vector<rejected_row> got = tutti::data::read_quarantine(opt.quarantine_path);
  REQUIRE(got.size() == expected_quarantine.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].line == expected_quarantine[i].line);
    CHECK(got[i].reason == expected_quarantine[i].reason);
    CHECK(got[i].text == expected_quarantine[i].text);
  }
  CHECK(c.rejected == got);

  // One file line per rejected row; the tab inside line 25 is escaped, not a fourth field.
  const std::string raw = read_all(opt.quarantine_path);
  CHECK(static_cast<std::size_t>(std::count(raw.begin(), raw.end(), '\n')) == rep.rows_rejected);
  CHECK(raw.find("25\tmalformed\t8,3,4.0,120\\ttab\n") != std::string::npos);
  CHECK(raw.find("28\tmalformed\t8,6,4\\\\x,123\n") != std::string::npos);
  CHECK(raw.find("18\tmalformed\t\n") != std::string::npos);
}

}  // namespace

TEST_CASE("load_csv_clean: counts by reason, rows used and quarantine under keep_first") {
  // (1,10) is on lines 2, 14, 16 and (6,20) on lines 15, 17: the first rows stay.
  check_dirty(duplicate_policy::keep_first, {14, 16, 17},
              {{1, 10, 4.0f, 100},
               {1, 11, 3.5f, 101},
               {6, 20, 5.0f, 112},
               {8, 4, 5.0f, 121},
               {8, 5, 4.0f, 122},
               {9, 7, 2.5f, 124},
               {9, 8, 3.0f, 125}});
}

TEST_CASE("load_csv_clean: keep_last uses the pair's last row, in its place in the file") {
  check_dirty(duplicate_policy::keep_last, {2, 14, 15},
              {{1, 11, 3.5f, 101},
               {1, 10, 4.5f, 113},
               {6, 20, 1.0f, 114},
               {8, 4, 5.0f, 121},
               {8, 5, 4.0f, 122},
               {9, 7, 2.5f, 124},
               {9, 8, 3.0f, 125}});
}

TEST_CASE("load_csv_clean: average keeps the first row with the mean label") {
  // (4.0 + 2.0 + 4.5) / 3 = 3.5 and (5 + 1) / 2 = 3; the first rows' timestamps.
  check_dirty(duplicate_policy::average, {14, 16, 17},
              {{1, 10, 3.5f, 100},
               {1, 11, 3.5f, 101},
               {6, 20, 3.0f, 112},
               {8, 4, 5.0f, 121},
               {8, 5, 4.0f, 122},
               {9, 7, 2.5f, 124},
               {9, 8, 3.0f, 125}});
}

TEST_CASE("load_csv_clean: the cleaned data are what load_csv reads without the rejected lines") {
  for (auto policy : {duplicate_policy::keep_first, duplicate_policy::keep_last}) {
    clean_options opt = dirty_rules;
    opt.dup = policy;
    const cleaned_data c = tutti::data::load_csv_clean(dirty_csv, with_time, opt);
    const std::string source = read_all(dirty_csv);
    std::string kept = source_line(source, 1) + "\n";
    std::size_t next = 0;
    for (std::size_t line = 2; line <= 30; ++line) {
      if (next < c.rejected.size() && c.rejected[next].line == line) {
        ++next;
        continue;
      }
      kept += source_line(source, line) + "\n";
    }
    CHECK(next == c.rejected.size());
    const interactions strict = tutti::data::parse_csv(kept, with_time, "kept.csv");
    CHECK(strict.digest() == c.data.digest());
    CHECK(strict.user_ids == c.data.user_ids);
    CHECK(strict.item_ids == c.data.item_ids);
    CHECK(strict.timestamps == c.data.timestamps);
  }
}

TEST_CASE("load_csv_clean: above the rejected share, training is refused with the counts") {
  scratch tmp("share");
  clean_options opt = dirty_rules;
  opt.max_rejected_share = 0.05;  // 22 of 29 rejected
  opt.quarantine_path = tmp / "q.tsv";
  try {
    (void)tutti::data::load_csv_clean(dirty_csv, with_time, opt);
    FAIL("a file with 76% rejected rows was accepted");
  } catch (const tutti::data::rejected_share_error& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("22 of 29 rows rejected (75.86%)") != std::string::npos);
    CHECK(what.find("above the limit of 5.00%") != std::string::npos);
    CHECK(what.find("malformed 8, missing_field 2, negative_id 2, id_out_of_range 2, "
                    "non_finite_label 3, label_out_of_domain 2, duplicate 3") != std::string::npos);
    CHECK(what.find(dirty_csv) != std::string::npos);
    CHECK(what.find(opt.quarantine_path) != std::string::npos);
    CHECK(e.report().rows_rejected == 22);
    CHECK(e.limit() == 0.05);
    CHECK(e.file() == dirty_csv);
  }
  // The refusal still leaves the rejected rows for inspection.
  CHECK(tutti::data::read_quarantine(opt.quarantine_path).size() == 22);

  // The limit is inclusive: exactly at it is accepted, one row more is refused.
  const std::string text = "userId,movieId,rating\n1,1,3\n1,2,3\n1,3,3\nx,4,3\n";
  CHECK(tutti::data::parse_csv_clean(text, {}, {.max_rejected_share = 0.25}, "s.csv")
            .report.rows_rejected == 1);
  CHECK_THROWS_AS(tutti::data::parse_csv_clean(text, {}, {.max_rejected_share = 0.24}, "s.csv"),
                  tutti::data::rejected_share_error);
  CHECK_THROWS_AS(tutti::data::parse_csv_clean(text, {}, {}, "s.csv"), tutti::error);
}

TEST_CASE("load_csv_clean: clean input gives exactly what load_csv gives") {
  scratch tmp("clean_input");
  const std::string sample = data_dir + "/ratings_sample.csv";
  const interactions strict = tutti::data::load_csv(sample, with_time);
  const cleaned_data c =
      tutti::data::load_csv_clean(sample, with_time, {.quarantine_path = tmp / "q.tsv"});
  CHECK(c.data.digest() == strict.digest());
  CHECK(c.data.users == strict.users);
  CHECK(c.data.items == strict.items);
  CHECK(c.data.labels == strict.labels);
  CHECK(c.data.timestamps == strict.timestamps);
  CHECK(c.data.user_ids == strict.user_ids);
  CHECK(c.data.item_ids == strict.item_ids);
  CHECK(c.report.rows_read == strict.size());
  CHECK(c.report.rows_used == strict.size());
  CHECK(c.report.rows_rejected == 0);
  CHECK(c.report.rejected.size() == tutti::data::reject_reason_count);
  for (const auto& [reason, n] : c.report.rejected) CHECK(n == 0);
  CHECK(c.report.summary() == std::to_string(strict.size()) + " rows read, " +
                                  std::to_string(strict.size()) + " used, 0 rejected (0.00%)");
  // The quarantine file is written, and empty.
  REQUIRE(fs::exists(tmp / "q.tsv"));
  CHECK(fs::file_size(tmp / "q.tsv") == 0);

  const std::string insteval = std::string(TUTTI_DATASETS_DIR) + "/insteval.tsv";
  if (fs::exists(insteval)) {
    const csv_options opt{.user_col = "s", .item_col = "d", .label_col = "y"};
    const interactions a = tutti::data::load_csv(insteval, opt);
    const cleaned_data b = tutti::data::load_csv_clean(
        insteval, opt, {.label_min = 1.0, .label_max = 5.0, .max_rejected_share = 0.0});
    CHECK(a.size() == 73421);
    CHECK(b.data.digest() == a.digest());
    CHECK(b.report.rows_rejected == 0);
  }
}

TEST_CASE("parse_csv_clean: implicit labels outside 0/1 and TSV input") {
  const std::string text = read_all(data_dir + "/dirty_implicit.csv");
  const csv_options opt{
      .user_col = "user", .item_col = "item", .label_col = "click", .implicit = true};
  const cleaned_data c = tutti::data::parse_csv_clean(
      text, opt, {.dup = duplicate_policy::keep_last, .max_rejected_share = 1.0}, "clicks.csv");
  // 0.5, 2 and -1 are not 0/1; (1,1) on lines 2 and 7: the last one (label 0) stays.
  CHECK(c.report.rows_read == 8);
  CHECK(c.report.rejected.at("label_out_of_domain") == 3);
  CHECK(c.report.rejected.at("duplicate") == 1);
  CHECK(c.report.rows_used == 4);
  CHECK(c.rejected[0].line == 2);
  CHECK(c.rejected[0].reason == "duplicate");
  CHECK(rows_of(c.data) ==
        std::vector<std::tuple<std::int64_t, std::int64_t, float, std::int64_t>>{
            {1, 2, 0.0f, -1}, {2, 2, 1.0f, -1}, {1, 1, 0.0f, -1}, {3, 1, 1.0f, -1}});
  CHECK(c.data.implicit);

  // The same rows tab-separated, picked by the .tsv extension.
  std::string tsv = text;
  std::replace(tsv.begin(), tsv.end(), ',', '\t');
  const cleaned_data t = tutti::data::parse_csv_clean(
      tsv, opt, {.dup = duplicate_policy::keep_last, .max_rejected_share = 1.0}, "clicks.tsv");
  CHECK(t.report.rejected == c.report.rejected);
  CHECK(t.data.digest() == c.data.digest());

  // Averaging 0/1 labels would make fractions: refused up front.
  CHECK_THROWS_AS(
      tutti::data::parse_csv_clean(text, opt, {.dup = duplicate_policy::average}, "c.csv"),
      tutti::invalid_argument);
}

TEST_CASE("parse_csv_clean: a NUL byte rejects its line only, the header stays fatal") {
  std::string text = "userId,movieId,rating\n1,2,3\n1,3";
  text += '\0';
  text += ",4\n4,5,3\n";
  const cleaned_data c = tutti::data::parse_csv_clean(text, {}, {.max_rejected_share = 1}, "n.csv");
  CHECK(c.report.rows_read == 3);
  CHECK(c.report.rows_used == 2);
  REQUIRE(c.rejected.size() == 1);
  CHECK(c.rejected[0].line == 3);
  CHECK(c.rejected[0].reason == "malformed");
  CHECK(c.rejected[0].text == std::string("1,3\0,4", 6));
  CHECK(tutti::data::format_quarantine(c.rejected) == "3\tmalformed\t1,3\\0,4\n");

  std::string bad_header = "userId,movieId";
  bad_header += '\0';
  bad_header += ",rating\n1,2,3\n";
  CHECK_THROWS_AS(tutti::data::parse_csv_clean(bad_header, {}, {}, "h.csv"), tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_csv_clean("user,item\n1,2\n", {}, {}, "h.csv"),
                  tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_csv_clean("", {}, {}, "h.csv"), tutti::data_error);
  // A header alone is an empty dataset, nothing rejected.
  const cleaned_data empty = tutti::data::parse_csv_clean("userId,movieId,rating\n\n", {}, {}, "e");
  CHECK(empty.report.rows_read == 0);
  CHECK(empty.data.size() == 0);
}

TEST_CASE("parse_csv_clean: max_user_id bounds user ids, a huge negative id is negative") {
  const std::string text =
      "userId,movieId,rating\n1000,1,3\n1001,1,3\n-99999999999999999999,1,3\n+5,1,3\n";
  const cleaned_data c = tutti::data::parse_csv_clean(
      text, {}, {.max_rejected_share = 1, .max_user_id = 1000}, "ids.csv");
  CHECK(c.report.rejected.at("id_out_of_range") == 1);
  CHECK(c.report.rejected.at("negative_id") == 1);
  CHECK(c.data.user_ids == std::vector<std::int64_t>{1000, 5});
}

TEST_CASE("clean_options are validated") {
  const std::string text = "userId,movieId,rating\n1,2,3\n";
  auto run = [&](const clean_options& o) {
    (void)tutti::data::parse_csv_clean(text, {}, o, "o");
  };
  CHECK_THROWS_AS(run({.max_rejected_share = 1.5}), tutti::invalid_argument);
  CHECK_THROWS_AS(run({.max_rejected_share = -0.1}), tutti::invalid_argument);
  CHECK_THROWS_AS(run({.label_min = 5.0, .label_max = 1.0}), tutti::invalid_argument);
  CHECK_THROWS_AS(run({.max_user_id = -1}), tutti::invalid_argument);
  CHECK_NOTHROW(run({.label_min = 3.0, .label_max = 3.0}));
  // The quarantine file must not overwrite the input.
  CHECK_THROWS_AS(
      (void)tutti::data::load_csv_clean(dirty_csv, with_time, {.quarantine_path = dirty_csv}),
      tutti::invalid_argument);
  CHECK_THROWS_AS((void)tutti::data::load_csv_clean(data_dir + "/no_such_file.csv"), tutti::error);
}

TEST_CASE("quarantine format: escapes round-trip, a damaged file is a data_error") {
  const std::vector<rejected_row> rows = {
      {2, "malformed", "a\tb\\c\rd"}, {7, "duplicate", ""}, {9, "missing_field", "\\n"}};
  const std::string text = tutti::data::format_quarantine(rows);
  CHECK(text == "2\tmalformed\ta\\tb\\\\c\\rd\n7\tduplicate\t\n9\tmissing_field\t\\\\n\n");
  CHECK(tutti::data::parse_quarantine(text, "q.tsv") == rows);
  CHECK_THROWS_AS(tutti::data::parse_quarantine("2\tmalformed\tx\\q\n", "q"), tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_quarantine("2\tmalformed\tx\\\n", "q"), tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_quarantine("2\tbad_reason\tx\n", "q"), tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_quarantine("0\tmalformed\tx\n", "q"), tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_quarantine("2 malformed x\n", "q"), tutti::data_error);
  CHECK_THROWS_AS(tutti::data::parse_quarantine("2\tmalformed\tx", "q"), tutti::data_error);
}

namespace {

/// Runs `check` over every file of fuzz/regressions/<target>/ and fuzz/corpus/<target>/;
/// returns how many it ran.
template <class Check>
std::size_t replay_fuzz_inputs(const std::string& target, Check check) {
  const fs::path root = fs::path(data_dir) / ".." / ".." / "fuzz";
  std::size_t replayed = 0;
  for (const std::string& dir : {"regressions/" + target, "corpus/" + target}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& entry : fs::directory_iterator(root / dir)) {
      if (!entry.is_regular_file()) continue;
      const std::string bytes = read_all(entry.path().string());
      CAPTURE(entry.path().string());
      CHECK(check(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()) == "");
      ++replayed;
    }
  }
  return replayed;
}

}  // namespace

TEST_CASE("fuzz regressions and seeds of csv_fuzz still hold every property") {
  CHECK(replay_fuzz_inputs("csv_fuzz", tutti_fuzz::csv_check) >= 10);
}

TEST_CASE("fuzz regressions and seeds of checkpoint_fuzz still hold every property") {
  CHECK(replay_fuzz_inputs("checkpoint_fuzz", tutti_fuzz::checkpoint_check) >= 2);
}

#if __has_include(<sodium.h>)
TEST_CASE("fuzz regressions and seeds of sealed_fuzz still hold every property") {
  CHECK(replay_fuzz_inputs("sealed_fuzz", tutti_fuzz::sealed_check) >= 5);
}
#else
TEST_CASE("fuzz regressions and seeds of sealed_fuzz still hold every property") {
  TUTTI_TEST_SKIP("no <sodium.h> in this build: sealed shards are compiled out");
}
#endif

}  // namespace test_clean
