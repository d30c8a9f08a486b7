// SPDX-License-Identifier: Apache-2.0
// Logs of several days read as one: a file appended to another gives the rows, ids and
// dictionaries of the two joined into one file (integer ids and names, with and without
// timestamps); files of another kind are refused naming the file; the replay keeps every pair
// of the newest day and a share of the others, by pair, the same in every run.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include <cmath>
#include <set>
#include <string>
#include <utility>

namespace test_append {

namespace {

namespace data = tutti::data;

data::interactions read(const std::string& text, bool stamped = false) {
  data::csv_options o{.user_col = "u", .item_col = "i", .label_col = "y"};
  if (stamped) o.timestamp_col = "t";
  return data::parse_csv(text, o, "day.csv");
}

void check_same(const data::interactions& a, const data::interactions& b) {
  CHECK(a.users == b.users);
  CHECK(a.items == b.items);
  CHECK(a.labels == b.labels);
  CHECK(a.timestamps == b.timestamps);
  CHECK(a.user_ids == b.user_ids);
  CHECK(a.item_ids == b.item_ids);
  CHECK(bool(a.user_names) == bool(b.user_names));
  if (a.user_names && b.user_names) {
    REQUIRE(a.user_names->size() == b.user_names->size());
    for (std::size_t k = 0; k < a.user_names->size(); ++k)
      CHECK((*a.user_names)[k] == (*b.user_names)[k]);
  }
  CHECK(a.digest() == b.digest());
}

}  // namespace

TEST_CASE("append: two days read one after the other are the two joined into one file") {
  SUBCASE("integer ids, timestamps") {
    const std::string head = "u,i,y,t\n";
    const std::string day1 = "7,100,4,1\n3,200,5,2\n7,300,3,3\n";
    const std::string day2 = "9,200,2,4\n3,400,1,5\n7,100,5,6\n11,500,4,7\n";
    data::interactions joined = read(head + day1, true);
    const std::size_t before = joined.user_ids.size();
    data::append_rows(joined, read(head + day2, true), "day2.csv");
    check_same(joined, read(head + day1 + day2, true));
    CHECK(before == 2);
    CHECK(joined.n_users() == 4);  // 7 and 3 kept their indices; 9 and 11 after them
    CHECK(joined.user_ids[0] == 7);
    CHECK(joined.user_ids[3] == 11);
  }
  SUBCASE("names") {
    const std::string head = "u,i,y\n";
    const std::string day1 = "ann,cs101,1\nbob,ma201,1\n";
    const std::string day2 = "cy,cs101,1\nann,ph301,1\n";
    data::interactions joined = read(head + day1);
    REQUIRE(joined.user_names);
    const data::interactions second = read(head + day2);
    data::append_rows(joined, second, "day2.csv");
    check_same(joined, read(head + day1 + day2));
    CHECK(joined.user_text(2) == "cy");
    CHECK(second.user_names->size() == 2);  // the appended file is left as it was
  }
}

TEST_CASE("append: a file of another kind is refused, naming it") {
  const data::interactions stamped = read("u,i,y,t\n1,2,3,4\n", true);
  data::interactions plain = read("u,i,y\n1,2,3\n");
  CHECK_THROWS_WITH_AS(data::append_rows(plain, stamped, "day2.csv"),
                       doctest::Contains("day2.csv has timestamps"), tutti::invalid_argument);
  const data::interactions named = read("u,i,y\nann,cs101,1\n");
  CHECK_THROWS_WITH_AS(data::append_rows(plain, named, "day2.csv"),
                       doctest::Contains("day2.csv's ids are names"), tutti::invalid_argument);
  CHECK(plain.size() == 1);  // nothing appended
}

TEST_CASE("replay: every pair of the newest day, a share of the others by pair") {
  std::string history = "u,i,y\n", day = "u,i,y\n";
  for (int u = 0; u < 200; ++u)
    for (int i = 0; i < 10; ++i) history += std::to_string(u) + "," + std::to_string(i) + ",1\n";
  for (int u = 150; u < 250; ++u)  // learners 150-199 again (courses 5-14), and new ones
    for (int i = 5; i < 15; ++i) day += std::to_string(u) + "," + std::to_string(i) + ",1\n";
  data::interactions all = read(history);
  const data::interactions newest = read(day);
  data::append_rows(all, newest, "day2.csv");
  const data::pair_set pairs(newest);
  CHECK(pairs.size() == 1000);
  std::size_t in_newest = 0;
  for (std::size_t r = 0; r < all.size(); ++r)
    in_newest += pairs.contains(all.user_ids[std::size_t(all.users[r])],
                                all.item_ids[std::size_t(all.items[r])]);
  CHECK(in_newest == 1000 + 50 * 5);  // the day's rows and the history's rows of its pairs
  for (const double share : {0.0, 0.3, 1.0}) {
    CAPTURE(share);
    data::interactions rows = all;
    const data::replay_counts c = data::replay_history(rows, pairs, share, 11);
    CHECK(c.history == all.size() - in_newest);
    CHECK(rows.size() == c.kept + in_newest);
    if (share == 0.0) CHECK(c.kept == 0);
    if (share == 1.0) CHECK(c.kept == c.history);
    if (share == 0.3) CHECK(std::abs(double(c.kept) / double(c.history) - 0.3) < 0.05);
    // Every row of the newest day's pairs kept, in order; the others a subsequence.
    std::size_t k = 0, newest_seen = 0;
    for (std::size_t r = 0; r < all.size() && k < rows.size(); ++r)
      if (rows.users[k] == all.users[r] && rows.items[k] == all.items[r]) {
        newest_seen += pairs.contains(all.user_ids[std::size_t(all.users[r])],
                                      all.item_ids[std::size_t(all.items[r])]);
        ++k;
      }
    CHECK(k == rows.size());
    CHECK(newest_seen == in_newest);
    // The same rows in another run; the dictionaries keep every id.
    data::interactions again = all;
    data::replay_history(again, pairs, share, 11);
    CHECK(again.users == rows.users);
    CHECK(again.items == rows.items);
    CHECK(rows.n_users() == all.n_users());
  }
  data::interactions rows = all;
  CHECK_THROWS_AS(data::replay_history(rows, pairs, 1.5, 11), tutti::invalid_argument);
}

}  // namespace test_append
