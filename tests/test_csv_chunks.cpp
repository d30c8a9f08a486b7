// SPDX-License-Identifier: Apache-2.0
/// @file test_csv_chunks.cpp
/// @brief Tests of the reader that cuts a file with integer ids into chunks read by all
/// threads: for every cut, the rows, indices and errors of the one-pass reader.
#include <doctest/doctest.h>

#include "corrupt_text.hpp"

#include <tutti/data/csv.hpp>
#include <tutti/detail/random.hpp>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace test_csv_chunks {

namespace {

using tutti::data::csv_options;
using tutti::data::interactions;

/// What a reader made of a text: its rows, or its error.
struct outcome {
  std::optional<interactions> rows;
  std::size_t line = 0, column = 0;
  std::string message;
};

template <class Read>
outcome read_with(const std::string& text, const csv_options& opt, Read read) {
  const std::string source = "t.csv";
  outcome o;
  try {
    const char delim = tutti::detail::csv_check_options(opt, source, "test");
    const std::string_view body_text = tutti::detail::csv_strip_bom(text);
    std::size_t body = 0;
    const auto lay = tutti::detail::csv_read_header(body_text, opt, delim, source, body);
    REQUIRE(!lay.user_names);
    REQUIRE(!lay.item_names);
    o.rows = read(body_text, body, lay, source);
  } catch (const tutti::data_error& e) {
    o.line = e.line();
    o.column = e.column();
    o.message = e.what();
  }
  return o;
}

/// Checks that the chunked reader, with chunks of `bytes`, gives what the one-pass reader gives.
void check_same(const std::string& text, const csv_options& opt, std::size_t bytes) {
  CAPTURE(bytes);
  const outcome one = read_with(
      text, opt, [&](auto t, std::size_t body, const auto& lay, const std::string& source) {
        return tutti::detail::csv_parse_rows(t, body, lay, opt, source);
      });
  const outcome cut = read_with(
      text, opt, [&](auto t, std::size_t body, const auto& lay, const std::string& source) {
        return tutti::detail::csv_parse_rows_chunked(t, body, lay, opt, source, bytes);
      });
  REQUIRE(one.rows.has_value() == cut.rows.has_value());
  if (!one.rows) {
    CHECK(cut.line == one.line);
    CHECK(cut.column == one.column);
    CHECK(cut.message == one.message);
    return;
  }
  const interactions& a = *one.rows;
  const interactions& b = *cut.rows;
  CHECK(b.users == a.users);
  CHECK(b.items == a.items);
  CHECK(b.labels == a.labels);
  CHECK(b.timestamps == a.timestamps);
  CHECK(b.user_ids == a.user_ids);
  CHECK(b.item_ids == a.item_ids);
  CHECK(b.implicit == a.implicit);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::size_t cuts[] = {1, 2, 7, 64, 1000, std::size_t{1} << 22};

TEST_CASE("csv chunks: every cut reads the rows and ids of the one-pass reader") {
  const std::string plain = read_all(std::string(TUTTI_TEST_DATA_DIR) + "/ratings_sample.csv");
  REQUIRE(plain.size() > 100);
  for (std::size_t bytes : cuts) {
    check_same(plain, {.timestamp_col = "auto"}, bytes);
    check_same(plain, {}, bytes);
  }
  // CRLF lines, a byte order mark, blank lines at the end (a cut can fall between '\r' and '\n').
  std::string crlf = "\xEF\xBB\xBF";
  for (char c : plain) {
    if (c == '\n') crlf += '\r';
    crlf += c;
  }
  crlf += "\r\n \n\t\r\n";
  for (std::size_t bytes : cuts) check_same(crlf, {.timestamp_col = "auto"}, bytes);
}

TEST_CASE("csv chunks: a malformed line is the same error, whichever chunk it falls in") {
  const std::string good = "userId,movieId,rating\n1,10,4.5\n2,10,3\n1,11,2\n3,12,5\n";
  const std::vector<std::string> bad = {
      good + "4,13\n5,14,1\n",                              // too few fields
      good + "4,13,1,9\n",                                  // too many fields
      good + "4,x,1\n",                                     // not an integer id
      good + "4,13,nan\n",                                  // non-finite label
      good + "\n4,13,1\n",                                  // a blank line before more rows
      "userId,movieId,rating\n1,10,x\n" + good.substr(22),  // the first row
      good + "4,\"13,1\n",                                  // unterminated quote
      good + "4,1\"3,1\n",                                  // stray quote
  };
  for (const std::string& text : bad) {
    CAPTURE(text);
    for (std::size_t bytes : cuts) check_same(text, {}, bytes);
  }
}

TEST_CASE("csv chunks: corrupted input gives the one-pass reader's rows or error") {
  const std::string plain = read_all(std::string(TUTTI_TEST_DATA_DIR) + "/ratings_sample.csv");
  const char alphabet[] = {',', '\n', '\r', '.', '-', '+', 'e', 'x', ' ', '\t', '9', '0', '"'};
  tutti::detail::splitmix rng(23);
  for (int trial = 0; trial < 300; ++trial) {
    // The header (its first 40 bytes) stays readable.
    const std::string text =
        tutti_test::corrupt_text(plain, std::string_view(alphabet, sizeof alphabet), 40, rng);
    CAPTURE(trial);
    check_same(text, {.timestamp_col = "auto", .ids = tutti::data::id_format::integers},
               1 + rng.below(200));
  }
}

TEST_CASE("csv chunks: ids beyond the table go on in a hash map under the same indices") {
  // Small counters first, then a negative id and one near 2^62: the table gives way to the
  // hash map mid-file, and indices stay in order of first appearance.
  std::string text = "userId,movieId,rating\n";
  const std::int64_t users[] = {5, 3, 5, 9, -4, 3, 4611686018427387904LL, 9, -4, 0};
  for (std::size_t r = 0; r < std::size(users); ++r)
    text += std::to_string(users[r]) + "," + std::to_string(100 + r % 3) + ",1\n";
  for (std::size_t bytes : cuts) check_same(text, {}, bytes);

  // Room for 2 ids expected: the list grows past it like any vector.
  tutti::detail::first_seen_ids ids(16, 2);
  CHECK(ids(5) == 0);
  CHECK(ids(3) == 1);
  CHECK(ids(5) == 0);
  CHECK(ids(15) == 2);
  CHECK(ids(16) == 3);  // at the limit: the hash map from here
  CHECK(ids(3) == 1);
  CHECK(ids(15) == 2);
  CHECK(ids(-1) == 4);
  CHECK(ids.size() == 5);
  CHECK(ids.release() == std::vector<std::int64_t>{5, 3, 15, 16, -1});
}

TEST_CASE("csv chunks: parse_csv reads integer ids in chunks and names in one pass, alike") {
  const std::string text = "user,item,rating\n7,1,1\n8,2,0\n7,2,1\n";
  const interactions by_int = tutti::data::parse_csv(
      text, {.user_col = "user", .item_col = "item", .implicit = true}, "t.csv");
  const interactions by_name = tutti::data::parse_csv(text,
                                                      {.user_col = "user",
                                                       .item_col = "item",
                                                       .implicit = true,
                                                       .ids = tutti::data::id_format::names},
                                                      "t.csv");
  CHECK(by_int.users == by_name.users);
  CHECK(by_int.items == by_name.items);
  CHECK(by_int.labels == by_name.labels);
  CHECK(by_int.user_ids == std::vector<std::int64_t>{7, 8});
  REQUIRE(by_name.user_names);
  CHECK(by_int.user_names == nullptr);
}

}  // namespace

}  // namespace test_csv_chunks
