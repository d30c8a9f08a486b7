// SPDX-License-Identifier: Apache-2.0
// Ids of any kind: names (`u1`, course slugs, UUIDs, quoted ids) load as they are, keep their
// text, and stand for one stable 64-bit code wherever tutti needs a number.
#include <doctest/doctest.h>

#include <tutti/data/clean.hpp>
#include <tutti/data/csv.hpp>
#include <tutti/data/id_names.hpp>
#include <tutti/data/leave_one_out.hpp>
#include <tutti/data/split.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/detail/utf8.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace test_id_names {

namespace {

using tutti::data::csv_options;
using tutti::data::id_format;
using tutti::data::interactions;

std::vector<std::string> names_of(const tutti::data::id_names& n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n.size(); ++i) out.emplace_back(n[i]);
  return out;
}

std::string what_of(const std::string& text, const csv_options& opt = {}) {
  try {
    (void)tutti::data::parse_csv(text, opt, "ids.csv");
  } catch (const tutti::data_error& e) {
    return e.what();
  }
  return "";
}

// Every name collides with every other of its length.
std::int64_t length_code(std::string_view s) noexcept {
  return std::int64_t(s.size());
}

}  // namespace

TEST_CASE("name_code: the same code on every machine, from the bytes alone") {
  // Fixed values: a change here changes every split, sealed shard and checkpoint of named data.
  CHECK(tutti::data::name_code("") == -5262765681958762703);
  CHECK(tutti::data::name_code("u1") == 2573860793404446849);
  CHECK(tutti::data::name_code("cs101") == 7301751250781190609);
  CHECK(tutti::data::name_code("3f2504e0-4f89-11d3-9a0c-0305e82c3301") == 1875664597668404350);
  CHECK(tutti::data::name_code("u1") != tutti::data::name_code("u1 "));
  CHECK(tutti::data::name_code(std::string_view("a\0", 2)) != tutti::data::name_code("a"));
}

TEST_CASE("parse_csv: string ids load with their names, in order of first appearance") {
  const interactions d = tutti::data::parse_csv(
      "user,course,done\nu1,c-3,1\nu2,cs101,0\nu1,cs101,1\n",
      {.user_col = "user", .item_col = "course", .label_col = "done", .implicit = true}, "ids.csv");
  REQUIRE(d.user_names);
  REQUIRE(d.item_names);
  CHECK(names_of(*d.user_names) == std::vector<std::string>{"u1", "u2"});
  CHECK(names_of(*d.item_names) == std::vector<std::string>{"c-3", "cs101"});
  CHECK(d.users == std::vector<std::int32_t>{0, 1, 0});
  CHECK(d.items == std::vector<std::int32_t>{0, 1, 1});
  CHECK(d.user_ids ==
        std::vector<std::int64_t>{tutti::data::name_code("u1"), tutti::data::name_code("u2")});
  CHECK(d.user_text(1) == "u2");
  CHECK(d.item_text(0) == "c-3");
}

TEST_CASE("parse_csv: quoted names keep what is inside their quotes") {
  const interactions d = tutti::data::parse_csv(
      "userId,movieId,rating\n\"u, 1\",\" m\"\"1\"\" \",4\n  u2  ,m2,3\n\"u2\",m2,5\n", {},
      "q.csv");
  REQUIRE(d.user_names);
  // A separator and a doubled quote inside quotes; blanks inside quotes kept, outside trimmed.
  CHECK(names_of(*d.user_names) == std::vector<std::string>{"u, 1", "u2"});
  CHECK(names_of(*d.item_names) == std::vector<std::string>{" m\"1\" ", "m2"});
  CHECK(d.users == std::vector<std::int32_t>{0, 1, 1});
}

TEST_CASE("parse_csv: automatic ids read a mostly integer column as integers") {
  const interactions ints =
      tutti::data::parse_csv("userId,movieId,rating\n1,31,2.5\n2,7,4\n", {}, "i.csv");
  CHECK_FALSE(ints.user_names);
  CHECK_FALSE(ints.item_names);
  CHECK(ints.user_ids == std::vector<std::int64_t>{1, 2});
  // Names in one column, integers in the other.
  const interactions mixed =
      tutti::data::parse_csv("userId,movieId,rating\nann,31,2.5\nbob,7,4\n", {}, "m.csv");
  CHECK(mixed.user_names);
  CHECK_FALSE(mixed.item_names);
  CHECK(mixed.item_ids == std::vector<std::int64_t>{31, 7});
  // An integer column with one stray id: the stray row is the error, at its line and field.
  const std::string e = what_of("userId,movieId,rating\n1,31,2.5\n2,7,4\nx7,7,4\n");
  CHECK(e.find("ids.csv:4:1: column 'userId': expected an integer id, got 'x7'") !=
        std::string::npos);
  // A column of names whose ids look like numbers now and then: all names.
  const interactions slugs = tutti::data::parse_csv(
      "userId,movieId,rating\n1,cs101,2.5\n1,101,4\n2,db-2,3\n", {}, "s.csv");
  REQUIRE(slugs.item_names);
  CHECK(names_of(*slugs.item_names) == std::vector<std::string>{"cs101", "101", "db-2"});
}

TEST_CASE("parse_csv: ids = names keeps digits as written, ids = integers refuses names") {
  const interactions d = tutti::data::parse_csv("userId,movieId,rating\n007,1,2\n7,1,3\n",
                                                {.ids = id_format::names}, "n.csv");
  REQUIRE(d.user_names);
  CHECK(d.n_users() == 2);
  CHECK(names_of(*d.user_names) == std::vector<std::string>{"007", "7"});
  const std::string e = what_of("userId,movieId,rating\nu1,1,2\n", {.ids = id_format::integers});
  CHECK(e.find("ids.csv:2:1: column 'userId': expected an integer id, got 'u1'") !=
        std::string::npos);
  const std::string empty = what_of("userId,movieId,rating\nu1,1,2\n\"\",1,2\n");
  CHECK(empty.find("ids.csv:3:1: column 'userId': expected an id, got an empty field") !=
        std::string::npos);
}

TEST_CASE("utf8_error_at: the first byte that is not well-formed UTF-8") {
  using tutti::detail::utf8_error_at;
  constexpr auto none = std::string_view::npos;
  CHECK(utf8_error_at("") == none);
  CHECK(utf8_error_at("cs101") == none);
  CHECK(utf8_error_at("G\xC3\xB6"
                      "del \xE2\x82\xAC \xF0\x9F\x8E\x93") == none);  // Gödel € 🎓
  CHECK(utf8_error_at("\xF4\x8F\xBF\xBF") == none);                   // U+10FFFF
  CHECK(utf8_error_at("u\xFF"
                      "1") == 1);                 // never UTF-8
  CHECK(utf8_error_at("ab\xE9") == 2);            // Latin-1 é: a lead cut short
  CHECK(utf8_error_at("a\xC3") == 1);             // cut at the end
  CHECK(utf8_error_at("\x80") == 0);              // a continuation byte alone
  CHECK(utf8_error_at("\xC0\xAF") == 0);          // overlong '/'
  CHECK(utf8_error_at("x\xE0\x80\xAF") == 1);     // overlong, three bytes
  CHECK(utf8_error_at("\xED\xA0\x80") == 0);      // a surrogate (U+D800)
  CHECK(utf8_error_at("\xF4\x90\x80\x80") == 0);  // above U+10FFFF
  CHECK(utf8_error_at("ok\xE2\x82") == 2);        // three bytes cut at two
}

TEST_CASE("parse_csv: a name that is not UTF-8 is refused at its line and field") {
  // Strict: the file's line and the column, the bytes shown escaped.
  const std::string e = what_of(
      "user,course,rating\nu1,c1,3\nu\xFF"
      "1,c2,4\n",
      {.user_col = "user", .item_col = "course", .label_col = "rating"});
  CHECK(e.find("ids.csv:3:1: column 'user': expected UTF-8 text") != std::string::npos);
  CHECK(e.find("got 'u\\xff1'") != std::string::npos);
  const std::string item = what_of(
      "user,course,rating\nu1,c\xE9,3\n",
      {.user_col = "user", .item_col = "course", .label_col = "rating", .ids = id_format::names});
  CHECK(item.find("ids.csv:2:2: column 'course': expected UTF-8 text") != std::string::npos);
  // Cleaning: the row is set aside as malformed, the others load.
  const auto c = tutti::data::parse_csv_clean(
      "userId,movieId,rating\nann,m1,4\nb\xF8"
      "b,m2,3\n",
      {}, {.max_rejected_share = 1}, "c.csv");
  CHECK(c.report.rows_used == 1);
  REQUIRE(c.rejected.size() == 1);
  CHECK(c.rejected[0].reason == "malformed");
  CHECK(c.rejected[0].line == 3);
}

TEST_CASE("named ids give the rows of integer ids, with different codes") {
  const interactions ints = tutti::data::parse_csv(
      "userId,movieId,rating\n5,31,2.5\n9,7,4\n5,7,3\n9,31,1\n", {}, "i.csv");
  const interactions named = tutti::data::parse_csv(
      "userId,movieId,rating\nu5,m31,2.5\nu9,m7,4\nu5,m7,3\nu9,m31,1\n", {}, "n.csv");
  CHECK(named.users == ints.users);
  CHECK(named.items == ints.items);
  CHECK(named.labels == ints.labels);
  CHECK(named.digest() != ints.digest());  // the names are part of the dataset
  // Renaming one id changes the digest: ranks and checkpoints tell the two apart.
  const interactions renamed = tutti::data::parse_csv(
      "userId,movieId,rating\nu5,m31,2.5\nu8,m7,4\nu5,m7,3\nu8,m31,1\n", {}, "r.csv");
  CHECK(renamed.users == named.users);
  CHECK(renamed.digest() != named.digest());
}

TEST_CASE("dense_name_map: two names with one code are refused, naming the other") {
  tutti::detail::dense_name_map m(length_code);
  CHECK(m("ab").dense == 0);
  CHECK(m("abc").dense == 1);
  CHECK(m("ab").dense == 0);
  const auto clash = m("xy");
  CHECK(clash.dense == -1);
  CHECK(clash.other == 0);
  CHECK(m.size() == 2);
  const std::string msg = tutti::detail::csv_collision_message("user", "xy", m.name(clash.other));
  CHECK(msg.find("user ids 'xy' and 'ab' have the same 64-bit code") != std::string::npos);
}

TEST_CASE("parse_csv_clean: names are deduplicated by name, only used rows get an index") {
  const auto c = tutti::data::parse_csv_clean(
      "userId,movieId,rating\nann,m1,4\n-5,m2,3\nbob,,2\nann,m1,5\ncid,m3,1\n", {},
      {.max_rejected_share = 1}, "c.csv");
  REQUIRE(c.data.user_names);
  // "-5" is a name here, not a negative id; bob's row lacks its item; ann/m1 is a duplicate.
  CHECK(names_of(*c.data.user_names) == std::vector<std::string>{"ann", "-5", "cid"});
  CHECK(names_of(*c.data.item_names) == std::vector<std::string>{"m1", "m2", "m3"});
  CHECK(c.data.user_ids[2] == tutti::data::name_code("cid"));
  CHECK(c.report.rows_used == 3);
  REQUIRE(c.rejected.size() == 2);
  CHECK(c.rejected[0].reason == "missing_field");
  CHECK(c.rejected[1].reason == "duplicate");
  CHECK(c.rejected[1].text == "ann,m1,5");
  // The strict loader reads the clean rows alike.
  const interactions strict =
      tutti::data::parse_csv("userId,movieId,rating\nann,m1,4\n-5,m2,3\ncid,m3,1\n", {}, "s.csv");
  CHECK(strict.digest() == c.data.digest());
}

TEST_CASE("split and leave_one_out keep the names of both halves") {
  std::string text = "userId,movieId,rating,timestamp\n";
  for (int u = 0; u < 30; ++u)
    for (int i = 0; i < 4; ++i)
      text += "learner-" + std::to_string(u) + ",course-" + std::to_string((u + i) % 9) + ",1," +
              std::to_string(i) + "\n";
  const interactions d =
      tutti::data::parse_csv(text, {.timestamp_col = "timestamp", .implicit = true}, "l.csv");
  const auto halves = tutti::data::split(d, {.test_fraction = 0.3});
  CHECK(halves.train.user_names == d.user_names);
  CHECK(halves.test.item_names == d.item_names);
  const auto loo = tutti::data::leave_one_out(d);
  CHECK(loo.test.user_names == d.user_names);
  CHECK(loo.train.item_names == d.item_names);
  CHECK(loo.test.size() == 30);  // each learner's last course
}

TEST_CASE("split and leave_one_out in the log's own arrays give the halves of a copy") {
  // The in-place forms (an rvalue) against the copying ones: every row, label, timestamp, id and
  // name of both halves, with timestamps and without (a seeded held-out row per learner).
  std::string text = "userId,movieId,rating,timestamp\n";
  tutti::detail::splitmix rng(3);
  for (int r = 0; r < 900; ++r)
    text += "learner-" + std::to_string(rng.below(70)) + ",course-" +
            std::to_string(rng.below(40)) + "," + std::to_string(1 + rng.below(5)) + "," +
            std::to_string(rng.below(50)) + "\n";
  const interactions timed = tutti::data::parse_csv(text, {.timestamp_col = "timestamp"}, "l.csv");
  interactions untimed = timed;
  untimed.timestamps.clear();
  const auto same = [](const tutti::data::split_result& a, const tutti::data::split_result& b) {
    CHECK(a.train.digest() == b.train.digest());
    CHECK(a.test.digest() == b.test.digest());
    CHECK(a.train.timestamps == b.train.timestamps);
    CHECK(a.test.timestamps == b.test.timestamps);
    CHECK(a.train.user_names == b.train.user_names);
    CHECK(a.test.item_names == b.test.item_names);
    CHECK(a.train.size() + a.test.size() == 900);
    CHECK(a.test.size() > 0);
  };
  interactions positives = timed;  // implicit: only a positive row may be held out
  positives.implicit = true;
  for (float& y : positives.labels) y = y > 2.f ? 1.f : 0.f;
  for (const interactions* d : {&timed, static_cast<const interactions*>(&untimed),
                                static_cast<const interactions*>(&positives)}) {
    CAPTURE(d->has_timestamps());
    CAPTURE(d->implicit);
    const tutti::data::split_options o{.test_fraction = 0.25, .seed = 8};
    same(tutti::data::split(interactions(*d), o), tutti::data::split(*d, o));
    const auto loo = tutti::data::leave_one_out(*d, {.seed = 8});
    same(tutti::data::leave_one_out(interactions(*d), {.seed = 8}), loo);
    // Against one user at a time by the order's definition (timestamps tie often here: 50 values
    // over 900 rows).
    const tutti::detail::held_out_order order{*d, 8};
    std::vector<std::int32_t> users, items;
    for (std::int32_t u = 0; u < d->n_users(); ++u) {
      std::size_t rows = 0, best = d->size();
      for (std::size_t i = 0; i < d->size(); ++i) {
        if (d->users[i] != u) continue;
        ++rows;
        if ((!d->implicit || d->labels[i] > 0.5f) && (best == d->size() || order.beats(i, best)))
          best = i;
      }
      if (rows >= 2 && best != d->size()) {
        users.push_back(u);
        items.push_back(d->items[best]);
      }
    }
    CHECK(loo.test.users == users);
    CHECK(loo.test.items == items);
  }
}

}  // namespace test_id_names
