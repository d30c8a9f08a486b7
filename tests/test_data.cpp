// SPDX-License-Identifier: Apache-2.0
/// @file test_data.cpp
/// @brief Tests of the CSV/TSV loader, the synthetic course data and the train/test split.
#include <doctest/doctest.h>

#include "corrupt_text.hpp"
#include "scratch_dir.hpp"
#include "skip.hpp"

#include <tutti/data/csv.hpp>
#include <tutti/data/detail/file_text.hpp>
#include <tutti/data/split.hpp>
#include <tutti/data/synthetic.hpp>
#include <tutti/detail/spare_capacity.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace test_data {

namespace {

using tutti::data::csv_options;
using tutti::data::interactions;

const std::string sample_csv = std::string(TUTTI_TEST_DATA_DIR) + "/ratings_sample.csv";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// Parses `text` and returns the data_error it must raise.
tutti::data_error parse_error(const std::string& text, const csv_options& opt = {},
                              const std::string& source = "ratings.csv") {
  try {
    (void)tutti::data::parse_csv(text, opt, source);
  } catch (const tutti::data_error& e) {
    return e;
  }
  FAIL("parse_csv accepted malformed input:\n" << text);
  return tutti::data_error(source, 0, 0, "unreachable");
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// One row as source ids, for comparing datasets whose dense indices may differ.
using row = std::tuple<std::int64_t, std::int64_t, float, std::int64_t>;

std::vector<row> source_rows(const interactions& d) {
  std::vector<row> out;
  for (std::size_t i = 0; i < d.size(); ++i)
    out.emplace_back(d.user_ids[static_cast<std::size_t>(d.users[i])],
                     d.item_ids[static_cast<std::size_t>(d.items[i])], d.labels[i],
                     d.has_timestamps() ? d.timestamps[i] : 0);
  return out;
}

/// Area under the ROC curve of `score` for 0/1 `labels`, ties counted half.
double auc(const std::vector<double>& score, const std::vector<float>& labels) {
  std::vector<std::size_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::sort(idx.begin(), idx.end(),
            [&](std::size_t a, std::size_t b) { return score[a] < score[b]; });
  double pos_rank_sum = 0, n_pos = 0;
  for (std::size_t i = 0; i < idx.size();) {
    std::size_t j = i;
    while (j < idx.size() && score[idx[j]] == score[idx[i]]) ++j;
    double mid_rank = static_cast<double>(i + j + 1) / 2.0;
    for (std::size_t k = i; k < j; ++k)
      if (labels[idx[k]] > 0.5f) {
        pos_rank_sum += mid_rank;
        n_pos += 1;
      }
    i = j;
  }
  double n_neg = static_cast<double>(score.size()) - n_pos;
  return (pos_rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// CSV / TSV loader

TEST_CASE("load_csv reads InstEval") {
  const std::string path = std::string(TUTTI_DATASETS_DIR) + "/insteval.tsv";
  if (!std::filesystem::exists(path)) TUTTI_TEST_SKIP(path << " is absent");
  interactions d =
      tutti::data::load_csv(path, {.user_col = "s", .item_col = "d", .label_col = "y"});
  CHECK(d.size() == 73421);
  CHECK(d.n_users() == 2972);
  CHECK(d.n_items() == 1128);
  CHECK_FALSE(d.implicit);
  CHECK_FALSE(d.has_timestamps());
  REQUIRE(d.items.size() == d.size());
  REQUIRE(d.labels.size() == d.size());

  auto check_row = [&](std::size_t i, std::int64_t s, std::int64_t course, float y) {
    CAPTURE(i);
    CHECK(d.user_ids[static_cast<std::size_t>(d.users[i])] == s);
    CHECK(d.item_ids[static_cast<std::size_t>(d.items[i])] == course);
    CHECK(d.labels[i] == y);
  };
  check_row(0, 1, 1002, 5.0f);
  check_row(1, 1, 1050, 2.0f);
  check_row(998, 49, 1699, 4.0f);  // line 1000 of the file
  check_row(d.size() - 1, 2972, 2121, 3.0f);
  // First appearance order: the first row defines dense index 0 on both sides.
  CHECK(d.users[0] == 0);
  CHECK(d.items[0] == 0);
  CHECK(d.items[1] == 1);
  CHECK(std::all_of(d.labels.begin(), d.labels.end(),
                    [](float y) { return y >= 1 && y <= 5 && y == std::round(y); }));
}

TEST_CASE("load_csv reads a MovieLens-style file and remaps ids densely") {
  interactions d = tutti::data::load_csv(sample_csv, {.timestamp_col = "timestamp"});
  REQUIRE(d.size() == 20);
  CHECK(d.user_ids == std::vector<std::int64_t>{7, 42, 3, 100000});
  CHECK(d.item_ids == std::vector<std::int64_t>{318, 1029, 1061, 296, 2959, 50});
  CHECK(d.n_users() == 4);
  CHECK(d.n_items() == 6);
  CHECK(d.users[0] == 0);
  CHECK(d.users[3] == 1);
  CHECK(d.users[6] == 2);
  CHECK(d.users[10] == 3);
  CHECK(d.items[3] == 0);   // 42,318 reuses the index movie 318 got on row 1
  CHECK(d.items[4] == 3);   // 296 is the fourth distinct movie
  CHECK(d.items[10] == 5);  // 50 is the last new one
  CHECK(d.labels[0] == 4.5f);
  CHECK(d.labels[11] == 0.5f);
  REQUIRE(d.has_timestamps());
  CHECK(d.timestamps[0] == 1260759144);
  CHECK(d.timestamps[19] == 1260759205);
  for (std::size_t i = 0; i < d.size(); ++i) {
    CHECK(d.users[i] >= 0);
    CHECK(d.users[i] < d.n_users());
    CHECK(d.items[i] >= 0);
    CHECK(d.items[i] < d.n_items());
  }

  SUBCASE("timestamp column off, auto, and absent under auto") {
    interactions none = tutti::data::load_csv(sample_csv);
    CHECK_FALSE(none.has_timestamps());
    CHECK(none.digest() == d.digest());
    interactions automatic = tutti::data::load_csv(sample_csv, {.timestamp_col = "auto"});
    CHECK(automatic.timestamps == d.timestamps);
    interactions no_column = tutti::data::parse_csv("userId,movieId,rating\n1,2,3\n",
                                                    {.timestamp_col = "auto"}, "x.csv");
    CHECK_FALSE(no_column.has_timestamps());
    CHECK(no_column.size() == 1);
  }
}

TEST_CASE("load_csv accepts CRLF, a UTF-8 BOM, and blank lines at the end") {
  const std::string plain = read_all(sample_csv);
  REQUIRE(!plain.empty());
  std::string crlf = "\xEF\xBB\xBF";
  for (char c : plain) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  crlf += "\r\n\n  \r\n";
  const tutti_test::scratch_dir tmp("tutti-data-crlf");
  const auto path = tmp.path / "crlf_bom.csv";
  {
    std::ofstream out(path, std::ios::binary);
    out << crlf;
  }
  interactions a = tutti::data::load_csv(sample_csv, {.timestamp_col = "timestamp"});
  interactions b = tutti::data::load_csv(path.string(), {.timestamp_col = "timestamp"});
  CHECK(b.size() == 20);
  CHECK(a.digest() == b.digest());
  CHECK(a.user_ids == b.user_ids);
  CHECK(a.item_ids == b.item_ids);
  CHECK(a.timestamps == b.timestamps);

  SUBCASE("no trailing newline") {
    std::string cut = plain.substr(0, plain.size() - 1);
    REQUIRE(cut.back() != '\n');
    CHECK(tutti::data::parse_csv(cut, {}, "r.csv").digest() == a.digest());
  }
}

TEST_CASE("parse_csv picks the delimiter from the extension, or as told") {
  const std::string tsv = "u\ti\tr\n5\t6\t1\n5\t7\t0\n";
  csv_options opt{.user_col = "u", .item_col = "i", .label_col = "r", .implicit = true};
  interactions d = tutti::data::parse_csv(tsv, opt, "clicks.TSV");
  CHECK(d.size() == 2);
  CHECK(d.implicit);
  CHECK(d.labels == std::vector<float>{1, 0});
  opt.delimiter = ';';
  interactions e = tutti::data::parse_csv("u;i;r\n5;6;1\n5;7;0\n", opt, "clicks.txt");
  CHECK(e.digest() == d.digest());
  // A tab file read with ',' has one column: the error says so and suggests tabs.
  auto err = parse_error(tsv, {.user_col = "u", .item_col = "i", .label_col = "r"}, "clicks.csv");
  CHECK(contains(err.what(), "tab-separated"));
}

TEST_CASE("load_csv: the file mapped where it can be, read where it cannot, the same rows") {
  tutti_test::scratch_dir dir("tutti-file-text");
  const std::string text = read_all(sample_csv);
  {
    const tutti::detail::file_text file(sample_csv, "test");
    CHECK(file.view() == text);
#if defined(__linux__)
    CHECK(file.mapped());  // a regular, non-empty file
#endif
  }
  // The rows of the mapped file are those of its text parsed from memory.
  const interactions loaded = tutti::data::load_csv(sample_csv, {.timestamp_col = "timestamp"});
  const interactions parsed =
      tutti::data::parse_csv(text, {.timestamp_col = "timestamp"}, sample_csv);
  CHECK(loaded.digest() == parsed.digest());
  CHECK(loaded.timestamps == parsed.timestamps);
  // An empty file has nothing to map: it is read (and the parser says it is empty).
  const std::string empty = dir / "empty.csv";
  std::ofstream(empty).close();
  const tutti::detail::file_text none(empty, "test");
  CHECK_FALSE(none.mapped());
  CHECK(none.view().empty());
  CHECK_THROWS_AS(tutti::data::load_csv(empty), tutti::data_error);
  // A moved file_text keeps the bytes (and unmaps them once).
  tutti::detail::file_text first(sample_csv, "test");
  const tutti::detail::file_text second(std::move(first));
  CHECK(second.view() == text);
  CHECK(first.view().empty());
}

TEST_CASE("load_csv: a missing file is a tutti::error naming the path and the reason") {
  const std::string path = "/nonexistent/tutti/ratings.csv";
  CHECK_THROWS_AS(tutti::data::load_csv(path), tutti::error);
  try {
    (void)tutti::data::load_csv(path);
  } catch (const tutti::data_error&) {
    FAIL("a missing file is not a data_error");
  } catch (const tutti::error& e) {
    CHECK(contains(e.what(), path));
    CHECK(contains(e.what(), std::strerror(ENOENT)));
  }
  // The mapped route and the read route word the refusal alike.
  const auto refusal = [&](auto open) {
    try {
      open();
    } catch (const tutti::error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string mapped = refusal([&] { (void)tutti::detail::file_text(path, "load_csv"); });
  const std::string read = refusal([&] { (void)tutti::detail::csv_read_file(path, "load_csv"); });
  CHECK(mapped == read);
  CHECK(contains(mapped, "load_csv(): cannot open '" + path + "': " + std::strerror(ENOENT)));
}

TEST_CASE("load_csv: a malformed file names file, line and column") {
  const std::string path = std::string(TUTTI_TEST_DATA_DIR) + "/bad_rating.csv";
  CHECK_THROWS_AS(tutti::data::load_csv(path, {.item_col = "movieId"}), tutti::data_error);
  try {
    (void)tutti::data::load_csv(path);
  } catch (const tutti::data_error& e) {
    CHECK(e.file() == path);
    CHECK(e.line() == 4);
    CHECK(e.column() == 3);
    CHECK(contains(e.what(), path + ":4:3: column 'rating': expected a number, got 'abc'"));
  }
}

TEST_CASE("parse_csv: empty file") {
  for (std::string text : {"", "\n", "\xEF\xBB\xBF", "\r\n\r\n"}) {
    auto e = parse_error(text);
    CHECK(e.line() == 1);
    CHECK(e.column() == 0);
    CHECK(contains(e.what(), "empty file"));
  }
}

TEST_CASE("parse_csv: header lacking a requested column lists the columns it has") {
  auto e = parse_error("user,movieId,rating\n1,2,3\n");
  CHECK(e.line() == 1);
  CHECK(e.column() == 0);
  CHECK(contains(e.what(), "no column 'userId'"));
  CHECK(contains(e.what(), "'user', 'movieId', 'rating'"));
  auto t = parse_error("userId,movieId,rating\n1,2,3\n", {.timestamp_col = "time"});
  CHECK(contains(t.what(), "no column 'time'"));
  auto twice = parse_error("userId,movieId,rating,userId\n1,2,3,4\n");
  CHECK(twice.line() == 1);
  CHECK(twice.column() == 4);
}

TEST_CASE("parse_csv: too few fields") {
  auto e = parse_error("userId,movieId,rating,timestamp\n1,2,3,4\n1,2,3\n");
  CHECK(e.line() == 3);
  CHECK(e.column() == 4);
  CHECK(contains(e.what(), "too few fields: expected 4"));
  CHECK(contains(e.what(), "got 3"));
}

TEST_CASE("parse_csv: too many fields") {
  auto e = parse_error("userId,movieId,rating\n1,2,3\n4,5,6\n7,8,9,10\n");
  CHECK(e.line() == 4);
  CHECK(e.column() == 4);
  CHECK(contains(e.what(), "too many fields: expected 3"));
}

TEST_CASE("parse_csv: non-integer id") {
  auto u = parse_error("userId,movieId,rating\n1,2,3\nx7,2,3\n");
  CHECK(u.line() == 3);
  CHECK(u.column() == 1);
  CHECK(contains(u.what(), "column 'userId': expected an integer id, got 'x7'"));
  // One row whose id is not an integer would read as a name; integers only refuse it.
  auto i =
      parse_error("rating,movieId,userId\n3,2.5,1\n", {.ids = tutti::data::id_format::integers});
  CHECK(i.line() == 2);
  CHECK(i.column() == 2);
  CHECK(contains(i.what(), "column 'movieId': expected an integer id, got '2.5'"));
  auto empty = parse_error("userId,movieId,rating\n,2,3\n");
  CHECK(empty.column() == 1);
  CHECK(contains(empty.what(), "got an empty field"));
  auto huge = parse_error("userId,movieId,rating\n99999999999999999999,2,3\n");
  CHECK(huge.column() == 1);
  CHECK(contains(huge.what(), "64-bit range"));
}

TEST_CASE("parse_csv: non-numeric label") {
  auto e = parse_error("userId,movieId,rating\n1,2,4.5\n1,3,abc\n");
  CHECK(e.line() == 3);
  CHECK(e.column() == 3);
  CHECK(contains(e.what(), "ratings.csv:3:3: column 'rating': expected a number, got 'abc'"));
  auto tail = parse_error("userId,movieId,rating\n1,2,4.5x\n");
  CHECK(tail.column() == 3);
  // A leading '+' and blanks around a field are accepted.
  interactions d = tutti::data::parse_csv("userId,movieId,rating\n +1 , 2,+4.5\n", {}, "p.csv");
  CHECK(d.user_ids[0] == 1);
  CHECK(d.labels[0] == 4.5f);
}

TEST_CASE("parse_csv: non-finite label") {
  for (std::string bad : {"nan", "inf", "-inf", "1e999", "1e39"}) {
    CAPTURE(bad);
    auto e = parse_error("userId,movieId,rating\n1,2," + bad + "\n");
    CHECK(e.line() == 2);
    CHECK(e.column() == 3);
    CHECK(contains(e.what(), "expected a finite number"));
  }
}

TEST_CASE("parse_csv: implicit labels must be 0 or 1") {
  csv_options opt{.implicit = true};
  CHECK(tutti::data::parse_csv("userId,movieId,rating\n1,2,1\n1,3,0.0\n", opt, "c.csv").size() ==
        2);
  auto e = parse_error("userId,movieId,rating\n1,2,1\n1,3,0.5\n", opt);
  CHECK(e.line() == 3);
  CHECK(e.column() == 3);
  CHECK(contains(e.what(), "expected 0 or 1"));
}

TEST_CASE("parse_csv: embedded NUL") {
  std::string text = "userId,movieId,rating\n1,2,3\n1,3";
  text += '\0';
  text += ",4\n";
  auto e = parse_error(text);
  CHECK(e.line() == 3);
  CHECK(e.column() == 2);
  CHECK(contains(e.what(), "NUL"));
}

TEST_CASE("parse_csv: a blank line before more rows is an error") {
  auto e = parse_error("userId,movieId,rating\n1,2,3\n\n1,3,4\n");
  CHECK(e.line() == 3);
  CHECK(e.column() == 0);
}

TEST_CASE("parse_csv: non-integer timestamp") {
  auto e = parse_error("userId,movieId,rating,timestamp\n1,2,3,2021-01-01\n",
                       {.timestamp_col = "timestamp"});
  CHECK(e.line() == 2);
  CHECK(e.column() == 4);
  CHECK(contains(e.what(), "column 'timestamp': expected an integer timestamp"));
}

TEST_CASE("parse_csv: quoted fields read like unquoted ones (RFC 4180)") {
  const interactions plain =
      tutti::data::parse_csv("userId,movieId,rating\n1,31,2.5\n2,7,4\n1,7,3\n", {}, "p.csv");
  SUBCASE("quoted ids and labels, blanks inside the quotes as around a number") {
    interactions q = tutti::data::parse_csv(
        "\"userId\",\"movieId\",\"rating\"\n\"1\",31,2.5\n2,\"+7\",\" 4 \"\n"
        "  \"1\" ,\"7\",\"3.0\"\n",
        {}, "q.csv");
    CHECK(q.digest() == plain.digest());
    CHECK(q.user_ids == plain.user_ids);
    CHECK(q.item_ids == plain.item_ids);
  }
  SUBCASE("separator and doubled quotes inside an extra column, an empty quoted extra field") {
    interactions q = tutti::data::parse_csv(
        "userId,note,movieId,rating\n1,\"said \"\"hi\"\", twice\",31,2.5\n2,\"\",7,4\n"
        "1,\"a,b,c\",7,3\n",
        {}, "q.csv");
    CHECK(q.digest() == plain.digest());
  }
  SUBCASE("quoted header names, doubled quotes unescaped; inner blanks kept") {
    csv_options opt{.user_col = "user", .item_col = "item", .label_col = "the \"rating\""};
    interactions q = tutti::data::parse_csv(
        "\"user\",\"item\",\"the \"\"rating\"\"\"\n1,31,2.5\n2,7,4\n1,7,3\n", opt, "q.csv");
    CHECK(q.digest() == plain.digest());
    auto e = parse_error("\" userId\",movieId,rating\n1,31,2.5\n");
    CHECK(contains(e.what(), "ratings.csv:1:0: header has no column 'userId'"));
    CHECK(contains(e.what(), "' userId', 'movieId', 'rating'"));
  }
  SUBCASE("an empty quoted id is an empty field; a doubled quote in a number is not a number") {
    auto e = parse_error("userId,movieId,rating\n1,\"\",2.5\n");
    CHECK(contains(e.what(),
                   "ratings.csv:2:2: column 'movieId': expected an integer id, got an "
                   "empty field"));
    auto d = parse_error("userId,movieId,rating\n1,2,\"4\"\"5\"\n");
    CHECK(contains(d.what(), "ratings.csv:2:3: column 'rating': expected a number, got '4\"\"5'"));
  }
  SUBCASE("CRLF, a UTF-8 BOM and quotes together") {
    interactions q = tutti::data::parse_csv(
        "\xEF\xBB\xBF\"userId\",\"movieId\",\"rating\"\r\n\"1\",\"31\",\"2.5\"\r\n"
        "2,\"7\",4\r\n\"1\",7,\"3\"\r\n\r\n",
        {}, "q.csv");
    CHECK(q.digest() == plain.digest());
  }
  SUBCASE("tab-separated with quotes: a tab inside quotes, quoted numbers") {
    interactions q = tutti::data::parse_csv(
        "\"userId\"\tnote\tmovieId\trating\n\"1\"\t\"a\tb\"\t31\t\"2.5\"\n"
        "2\t\"x \"\"y\"\"\"\t\"7\"\t4\n1\t\t7\t3\n",
        {}, "q.tsv");
    CHECK(q.digest() == plain.digest());
  }
  SUBCASE("a NUL after a separator inside quotes is reported at its field") {
    std::string text = "userId,movieId,note,rating\n1,31,\"a,b\",2.5\n1,7,\"c,d\",";
    text += '\0';
    text += "\n";
    auto e = parse_error(text);
    CHECK(e.line() == 3);
    CHECK(e.column() == 4);
  }
  SUBCASE("the quote character cannot be the delimiter") {
    CHECK_THROWS_AS(tutti::data::parse_csv("userId\"movieId\"rating\n", {.delimiter = '"'}, "q"),
                    tutti::invalid_argument);
  }
}

TEST_CASE("parse_csv: bad quoting names file, line and field") {
  const std::string header = "userId,movieId,rating\n1,31,2.5\n\"2\",\"7\",\"4\"\n";
  SUBCASE("an unterminated quote") {
    auto e = parse_error(header + "1,\"7,3\n");
    CHECK(e.line() == 4);
    CHECK(e.column() == 2);
    CHECK(contains(e.what(),
                   "ratings.csv:4:2: unterminated quoted field: expected a closing '\"' "
                   "on the same line (line breaks inside quoted fields are not "
                   "supported), got '\"7,3'"));
  }
  SUBCASE("a line break inside quotes is refused at the line the quote opens") {
    auto e = parse_error("userId,movieId,rating,note\n1,31,2.5,\"two\nlines\"\n2,7,4,x\n");
    CHECK(contains(e.what(), "ratings.csv:2:4: unterminated quoted field"));
    CHECK(contains(e.what(), "got '\"two'"));
  }
  SUBCASE("text after the closing quote") {
    auto e = parse_error(header + "1,\"7\"x,3\n");
    CHECK(e.line() == 4);
    CHECK(e.column() == 2);
    CHECK(contains(e.what(),
                   "ratings.csv:4:2: text after a closing quote: expected ',' or the "
                   "end of the line, got '\"7\"x'"));
    auto two = parse_error(header + "1,7,\"3\" \"4\"\n");
    CHECK(contains(two.what(),
                   "ratings.csv:4:3: text after a closing quote: expected ',' or the "
                   "end of the line, got '\"3\" \"4\"'"));
  }
  SUBCASE("a quote in the middle of an unquoted field") {
    auto e = parse_error(header + "1,7\",3\n");
    CHECK(e.line() == 4);
    CHECK(e.column() == 2);
    CHECK(contains(e.what(),
                   "ratings.csv:4:2: quote inside an unquoted field: expected the whole "
                   "field in quotes, with each '\"' in it doubled, got '7\"'"));
    auto mid = parse_error(header + "1,7,3 \"x\"\n");
    CHECK(contains(mid.what(), "ratings.csv:4:3: quote inside an unquoted field"));
  }
  SUBCASE("in the header") {
    auto e = parse_error("userId,\"movieId,rating\n1,31,2.5\n");
    CHECK(e.line() == 1);
    CHECK(e.column() == 2);
    CHECK(contains(e.what(), "ratings.csv:1:2: unterminated quoted field"));
  }
  SUBCASE("tab-separated: the separator is named") {
    auto e = parse_error("userId\tmovieId\trating\n1\t\"31\",\t2.5\n", {}, "r.tsv");
    CHECK(contains(e.what(),
                   "r.tsv:2:2: text after a closing quote: expected a tab or the end of "
                   "the line, got '\"31\",'"));
  }
  SUBCASE("CRLF: the line's '\\r' is not part of the last field") {
    auto e = parse_error("userId,movieId,rating\r\n1,31,\"2.5\r\n");
    CHECK(contains(e.what(), "ratings.csv:2:3: unterminated quoted field"));
    CHECK(contains(e.what(), "got '\"2.5'"));
  }
}

// ---------------------------------------------------------------------------------------------
// Synthetic course data

TEST_CASE("synthetic_courses is deterministic per seed") {
  tutti::data::synthetic_options opt{.learners = 500, .courses = 200};
  interactions a = tutti::data::synthetic_courses(opt);
  interactions b = tutti::data::synthetic_courses(opt);
  CHECK(a.digest() == b.digest());
  CHECK(a.timestamps == b.timestamps);
  opt.seed = 43;
  CHECK(tutti::data::synthetic_courses(opt).digest() != a.digest());
  opt.implicit = false;
  interactions c = tutti::data::synthetic_courses(opt);
  CHECK(c.digest() == tutti::data::synthetic_courses(opt).digest());
  // Pinned: the data must not drift between compilers, standard libraries or releases (every
  // experiment built on it would change); update only with a deliberate change of generator.
  CHECK(tutti::data::synthetic_courses({.learners = 50, .courses = 40}).digest() ==
        0x685bbf6cdb1116d3ULL);
  CHECK(
      tutti::data::synthetic_courses({.learners = 50, .courses = 40, .implicit = false}).digest() ==
      0xc0fc85010dd52283ULL);
}

TEST_CASE("synthetic_courses: shape, ids, timestamps, no duplicate pairs") {
  tutti::data::synthetic_options opt{};
  interactions d = tutti::data::synthetic_courses(opt);
  CHECK(d.implicit);
  CHECK(d.n_users() == opt.learners);
  CHECK(d.n_items() == opt.courses);
  CHECK(d.user_ids.front() == 1);
  CHECK(d.user_ids.back() == opt.learners);
  CHECK(d.item_ids.front() == 1);
  CHECK(d.item_ids.back() == opt.courses);
  // Mean taken courses per learner near the option (positives are half the rows).
  double per_learner = static_cast<double>(d.size()) / 2.0 / opt.learners;
  CHECK(per_learner == doctest::Approx(opt.interactions_per_learner).epsilon(0.1));
  REQUIRE(d.has_timestamps());

  std::set<std::pair<std::int32_t, std::int32_t>> pairs;
  std::vector<std::size_t> rows_of(static_cast<std::size_t>(opt.learners));
  bool increasing = true;
  for (std::size_t i = 0; i < d.size(); ++i) {
    pairs.emplace(d.users[i], d.items[i]);
    ++rows_of[static_cast<std::size_t>(d.users[i])];
    if (i > 0 && d.users[i] == d.users[i - 1] && d.timestamps[i] <= d.timestamps[i - 1])
      increasing = false;
  }
  CHECK(pairs.size() == d.size());
  CHECK(increasing);
  // Learners differ in how much they take.
  auto [lo, hi] = std::minmax_element(rows_of.begin(), rows_of.end());
  CHECK(*hi >= 3 * *lo);
}

TEST_CASE("synthetic_courses: popularity follows a power law") {
  interactions d = tutti::data::synthetic_courses({});
  std::vector<std::size_t> taken(static_cast<std::size_t>(d.n_items()));
  for (std::size_t i = 0; i < d.size(); ++i)
    if (d.labels[i] == 1.0f) ++taken[static_cast<std::size_t>(d.items[i])];
  std::vector<std::size_t> sorted = taken;
  std::sort(sorted.begin(), sorted.end());
  std::size_t median = sorted[sorted.size() / 2];
  CHECK(sorted.back() >= 8 * std::max<std::size_t>(median, 1));
  // Rank 1 (id 1) is taken more than rank 10, which is taken more than rank 100.
  CHECK(taken[0] > taken[9]);
  CHECK(taken[9] > taken[99]);
}

TEST_CASE("synthetic_courses: implicit labels are balanced and separable by taste only") {
  tutti::data::synthetic_options opt{};
  interactions d = tutti::data::synthetic_courses(opt);
  std::size_t positives = 0, others = 0;
  for (float y : d.labels) {
    positives += y == 1.0f;
    others += y != 0.0f && y != 1.0f;
  }
  CHECK(others == 0);
  double share = static_cast<double>(positives) / static_cast<double>(d.size());
  CHECK(share == doctest::Approx(0.5).epsilon(0.02));

  std::vector<double> affinity(d.size()), popularity(d.size());
  std::vector<double> rows_per_course(static_cast<std::size_t>(d.n_items()));
  for (std::size_t i = 0; i < d.size(); ++i) {
    affinity[i] = tutti::data::synthetic_affinity(opt, d.users[i], d.items[i]);
    ++rows_per_course[static_cast<std::size_t>(d.items[i])];
  }
  for (std::size_t i = 0; i < d.size(); ++i)
    popularity[i] = rows_per_course[static_cast<std::size_t>(d.items[i])];
  double taste_auc = auc(affinity, d.labels);
  double popularity_auc = auc(popularity, d.labels);
  MESSAGE("AUC of the true affinity " << taste_auc << ", of course popularity " << popularity_auc);
  CHECK(taste_auc > 0.85);
  CHECK(popularity_auc > 0.4);
  CHECK(popularity_auc < 0.6);

  // With no taste in the choice, nothing separates the labels.
  opt.taste_strength = 0;
  opt.learners = 1000;
  interactions flat = tutti::data::synthetic_courses(opt);
  tutti::data::synthetic_options scored = opt;
  scored.taste_strength = 1;
  std::vector<double> flat_affinity(flat.size());
  for (std::size_t i = 0; i < flat.size(); ++i)
    flat_affinity[i] = tutti::data::synthetic_affinity(scored, flat.users[i], flat.items[i]);
  CHECK(auc(flat_affinity, flat.labels) == doctest::Approx(0.5).epsilon(0.05));
}

TEST_CASE("synthetic_courses: explicit ratings are integers 1-5 that follow affinity") {
  tutti::data::synthetic_options opt{.implicit = false};
  interactions d = tutti::data::synthetic_courses(opt);
  CHECK_FALSE(d.implicit);
  std::map<float, std::size_t> histogram;
  double mean = 0;
  for (float y : d.labels) {
    ++histogram[y];
    mean += y;
  }
  mean /= static_cast<double>(d.size());
  CHECK(histogram.size() == 5);
  CHECK(histogram.begin()->first == 1.0f);
  CHECK(histogram.rbegin()->first == 5.0f);
  for (auto [y, n] : histogram) CHECK(y == std::round(y));
  CHECK(mean == doctest::Approx(3.5).epsilon(0.05));
  // High-affinity pairs are rated higher than low-affinity ones.
  double high = 0, low = 0, n_high = 0, n_low = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    double a = tutti::data::synthetic_affinity(opt, d.users[i], d.items[i]);
    if (a > 3) high += d.labels[i], ++n_high;
    if (a < 0) low += d.labels[i], ++n_low;
  }
  REQUIRE(n_high > 100);
  REQUIRE(n_low > 100);
  CHECK(high / n_high > low / n_low + 1.0);
}

TEST_CASE("synthetic_courses rejects options out of range") {
  using tutti::data::synthetic_courses;
  CHECK_THROWS_AS(synthetic_courses({.learners = 0}), tutti::invalid_argument);
  CHECK_THROWS_AS(synthetic_courses({.courses = 1}), tutti::invalid_argument);
  CHECK_THROWS_AS(synthetic_courses({.interactions_per_learner = 0}), tutti::invalid_argument);
  CHECK_THROWS_AS(synthetic_courses({.latent_dim = 0}), tutti::invalid_argument);
  CHECK_THROWS_AS(synthetic_courses({.popularity_exponent = -1}), tutti::invalid_argument);
  CHECK_THROWS_AS(synthetic_courses({.negatives_per_positive = -0.5}), tutti::invalid_argument);
  CHECK_THROWS_AS(synthetic_courses({.noise = std::nan("")}), tutti::invalid_argument);
  // More taken courses than the catalogue holds is capped, not an error.
  interactions d =
      synthetic_courses({.learners = 10, .courses = 20, .interactions_per_learner = 50});
  std::vector<std::size_t> rows_of(10);
  for (auto u : d.users) ++rows_of[static_cast<std::size_t>(u)];
  CHECK(*std::max_element(rows_of.begin(), rows_of.end()) <= 20);
}

// ---------------------------------------------------------------------------------------------
// Split

TEST_CASE("split: disjoint halves whose union is the input") {
  interactions d = tutti::data::synthetic_courses({.learners = 2000});
  auto [train, test] = tutti::data::split(d, {.test_fraction = 0.2, .seed = 9});
  CHECK(train.size() + test.size() == d.size());
  CHECK(train.user_ids == d.user_ids);
  CHECK(test.item_ids == d.item_ids);
  CHECK(train.implicit);
  CHECK(test.implicit);
  CHECK(train.timestamps.size() == train.size());
  CHECK(test.timestamps.size() == test.size());

  auto all = source_rows(d);
  auto joined = source_rows(train);
  auto held = source_rows(test);
  joined.insert(joined.end(), held.begin(), held.end());
  std::sort(all.begin(), all.end());
  std::sort(joined.begin(), joined.end());
  CHECK(all == joined);

  std::set<std::pair<std::int32_t, std::int32_t>> train_pairs;
  for (std::size_t i = 0; i < train.size(); ++i)
    train_pairs.emplace(train.users[i], train.items[i]);
  std::size_t shared = 0;
  for (std::size_t i = 0; i < test.size(); ++i)
    shared += train_pairs.count({test.users[i], test.items[i]});
  CHECK(shared == 0);

  double fraction = static_cast<double>(test.size()) / static_cast<double>(d.size());
  CHECK(fraction == doctest::Approx(0.2).epsilon(0.05));
}

TEST_CASE("split: the same pairs land in test whatever the row order") {
  interactions d = tutti::data::synthetic_courses({.learners = 1000});
  interactions shuffled = d;
  tutti::detail::splitmix rng(5);
  for (std::size_t i = d.size(); i > 1; --i) {
    std::size_t j = rng.below(i);
    std::swap(shuffled.users[i - 1], shuffled.users[j]);
    std::swap(shuffled.items[i - 1], shuffled.items[j]);
    std::swap(shuffled.labels[i - 1], shuffled.labels[j]);
    std::swap(shuffled.timestamps[i - 1], shuffled.timestamps[j]);
  }
  REQUIRE(shuffled.digest() != d.digest());
  auto test_rows = [](const interactions& data) {
    auto rows = source_rows(tutti::data::split(data, {.test_fraction = 0.3, .seed = 4}).test);
    std::sort(rows.begin(), rows.end());
    return rows;
  };
  auto a = test_rows(d);
  CHECK(!a.empty());
  CHECK(a == test_rows(shuffled));
  // A different seed holds out different pairs.
  auto other = source_rows(tutti::data::split(d, {.test_fraction = 0.3, .seed = 5}).test);
  std::sort(other.begin(), other.end());
  CHECK(other != a);
}

TEST_CASE("split: edge fractions and validation") {
  interactions d = tutti::data::load_csv(sample_csv, {.timestamp_col = "timestamp"});
  auto [train, test] = tutti::data::split(d, {.test_fraction = 0.0});
  CHECK(test.size() == 0);
  CHECK(train.digest() == d.digest());
  CHECK(train.timestamps == d.timestamps);
  CHECK(test.n_users() == d.n_users());
  CHECK_THROWS_AS(tutti::data::split(d, {.test_fraction = 1.0}), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::data::split(d, {.test_fraction = -0.1}), tutti::invalid_argument);
  CHECK_THROWS_AS(tutti::data::split(d, {.test_fraction = std::nan("")}), tutti::invalid_argument);
  interactions broken = d;
  broken.labels.pop_back();
  CHECK_THROWS_AS(tutti::data::split(broken, {}), tutti::invalid_argument);
}

#if defined(__linux__)
/// The process's resident bytes now (/proc/self/statm's second field, in pages).
std::size_t resident_now() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  REQUIRE(f != nullptr);
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  REQUIRE(got == 2);
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}
#endif

TEST_CASE("keep_rows_in_place: the kept rows in order, the labels moved or left as told") {
  // Rows 0..n-1 whose columns name their row; each keep rule is checked against the filtered
  // list of rows, with and without timestamps, with the labels moved and with them left.
  const std::size_t n = 97;
  const auto rows_of = [&](bool times) {
    tutti::data::interactions d;
    for (std::size_t i = 0; i < n; ++i) {
      d.users.push_back(static_cast<std::int32_t>(i));
      d.items.push_back(static_cast<std::int32_t>(1000 + i));
      d.labels.push_back(static_cast<float>(i) + 0.5f);
      if (times) d.timestamps.push_back(static_cast<std::int64_t>(5000 + i));
    }
    return d;
  };
  const std::vector<std::pair<const char*, bool (*)(std::size_t)>> rules = {
      {"all",
       [](std::size_t) {
         return true;
       }},
      {"none",
       [](std::size_t) {
         return false;
       }},
      {"all but the first",
       [](std::size_t i) {
         return i != 0;
       }},
      {"all but the last",
       [](std::size_t i) {
         return i != n - 1;
       }},
      {"every third from 40 on",
       [](std::size_t i) {
         return i < 40 || i % 3 == 0;
       }},
  };
  for (const auto& [name, keep] : rules) {
    for (const bool times : {false, true}) {
      for (const auto labels :
           {tutti::detail::kept_labels::moved, tutti::detail::kept_labels::left}) {
        CAPTURE(name);
        CAPTURE(times);
        const bool moved = labels == tutti::detail::kept_labels::moved;
        CAPTURE(moved);
        tutti::data::interactions d = rows_of(times);
        std::vector<std::size_t> asked;  // keep is asked once a row, in order
        tutti::detail::keep_rows_in_place(
            d,
            [&, keep = keep](std::size_t i) {
              asked.push_back(i);
              return keep(i);
            },
            labels);
        std::vector<std::size_t> every(n);
        std::iota(every.begin(), every.end(), std::size_t{0});
        CHECK(asked == every);
        std::vector<std::size_t> expected;
        for (std::size_t i = 0; i < n; ++i)
          if (keep(i)) expected.push_back(i);
        REQUIRE(d.users.size() == expected.size());
        REQUIRE(d.items.size() == expected.size());
        REQUIRE(d.timestamps.size() == (times ? expected.size() : 0));
        for (std::size_t r = 0; r < expected.size(); ++r) {
          CHECK(d.users[r] == static_cast<std::int32_t>(expected[r]));
          CHECK(d.items[r] == static_cast<std::int32_t>(1000 + expected[r]));
          if (times) CHECK(d.timestamps[r] == static_cast<std::int64_t>(5000 + expected[r]));
        }
        if (moved) {
          REQUIRE(d.labels.size() == expected.size());
          for (std::size_t r = 0; r < expected.size(); ++r)
            CHECK(d.labels[r] == static_cast<float>(expected[r]) + 0.5f);
        } else {
          // Left as they were: every row's label, in the row's first place.
          REQUIRE(d.labels.size() == n);
          for (std::size_t i = 0; i < n; ++i) CHECK(d.labels[i] == static_cast<float>(i) + 0.5f);
        }
      }
    }
  }
}

TEST_CASE("release_spare_capacity: the rows stay where they are, the spare pages go back") {
  // A training set's arrays after a split: the log's length as capacity, a tenth of it used.
  std::vector<std::int32_t> rows(std::size_t{16} << 20);  // 64 MiB, every page touched
  std::iota(rows.begin(), rows.end(), 7);
  rows.resize(std::size_t{1} << 20);
  const std::int32_t* where = rows.data();
  const std::size_t capacity = rows.capacity();
#if defined(__linux__)
  const std::size_t before = resident_now();
#endif
  const std::size_t released = tutti::detail::release_spare_capacity(rows);
  CHECK(rows.data() == where);  // no copy
  CHECK(rows.capacity() == capacity);
  REQUIRE(rows.size() == std::size_t{1} << 20);
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] != static_cast<std::int32_t>(i) + 7) FAIL("row " << i << " changed");
#if defined(__linux__)
  CHECK(released >= (std::size_t{59} << 20));  // 60 MiB spare, less the pages it shares
  // The process's resident memory fell by (nearly) what was released.
  CHECK(before - std::min(before, resident_now()) >= released / 2);
#else
  CHECK(released == 0);
#endif
  // Grown again, the vector writes into the released pages: its new rows hold what it wrote.
  rows.resize(std::size_t{3} << 20, -1);
  CHECK(rows.data() == where);
  CHECK(rows[(std::size_t{1} << 20) - 1] == (std::int32_t{1} << 20) + 6);
  CHECK(std::all_of(rows.begin() + (std::int64_t{1} << 20), rows.end(),
                    [](std::int32_t v) { return v == -1; }));
  // Less than a page spare: nothing to release, nothing copied.
  std::vector<std::int32_t> small(100);
  small.pop_back();
  const std::int32_t* small_at = small.data();
  CHECK(tutti::detail::release_spare_capacity(small) == 0);
  CHECK(small.data() == small_at);
}

TEST_CASE("parse_csv: corrupted input either parses whole or raises data_error") {
  const std::string plain = read_all(sample_csv);
  REQUIRE(!plain.empty());
  const char alphabet[] = {',', '\n', '\r', '\0', '.', '-', '+',
                           'e', 'x',  ' ',  '\t', '9', '0', '"'};
  tutti::detail::splitmix rng(11);
  std::size_t parsed = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string text =
        tutti_test::corrupt_text(plain, std::string_view(alphabet, sizeof alphabet), 0, rng);
    try {
      interactions d = tutti::data::parse_csv(text, {.timestamp_col = "auto"}, "fuzz.csv");
      ++parsed;
      bool consistent = d.items.size() == d.size() && d.labels.size() == d.size() &&
                        (d.timestamps.empty() || d.timestamps.size() == d.size());
      for (std::size_t i = 0; consistent && i < d.size(); ++i)
        consistent = d.users[i] >= 0 && d.users[i] < d.n_users() && d.items[i] >= 0 &&
                     d.items[i] < d.n_items() && std::isfinite(d.labels[i]);
      CHECK(consistent);
    } catch (const tutti::data_error& e) {
      ++rejected;
      CHECK(e.line() >= 1);
    }
  }
  MESSAGE(parsed << " corrupted inputs parsed, " << rejected << " rejected");
  CHECK(parsed > 0);
  CHECK(rejected > 0);
}

}  // namespace test_data
