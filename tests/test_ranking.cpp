// SPDX-License-Identifier: Apache-2.0
// The leave-one-out protocol and the ranking metrics: the held-out rows, the sampled candidates,
// and HR@K / NDCG@K against a brute-force reference that sorts each list.
#include <tutti/data/leave_one_out.hpp>
#include <tutti/data/synthetic.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/ranking.hpp>

#include "model_harness.hpp"
#include "spaces.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>
#include <vector>

namespace test_ranking {

namespace {

using tutti::data::interactions;

// A row as a comparable value, source ids and all.
using row_t = std::tuple<std::int64_t, std::int64_t, float, std::int64_t>;
std::multiset<row_t> rows_of(const interactions& d) {
  std::multiset<row_t> s;
  for (std::size_t i = 0; i < d.size(); ++i)
    s.emplace(d.user_ids[std::size_t(d.users[i])], d.item_ids[std::size_t(d.items[i])], d.labels[i],
              d.has_timestamps() ? d.timestamps[i] : 0);
  return s;
}

interactions reversed(const interactions& d) {
  interactions r = d;
  std::reverse(r.users.begin(), r.users.end());
  std::reverse(r.items.begin(), r.items.end());
  std::reverse(r.labels.begin(), r.labels.end());
  std::reverse(r.timestamps.begin(), r.timestamps.end());
  return r;
}

interactions courses() {
  return tutti::data::synthetic_courses({.learners = 300, .courses = 80, .seed = 5});
}

// The reference: sort the list by score, highest first, the held-out item after every candidate
// it ties with; its position is its rank.
tutti::ranking_result brute_force(const std::vector<float>& scores,
                                  const std::vector<std::uint32_t>& negatives, std::size_t width,
                                  std::size_t k) {
  tutti::ranking_result r;
  r.k = k;
  r.lists = negatives.size();
  r.hits.assign(k, 0);
  double hits = 0, gain = 0;
  for (std::size_t u = 0; u < negatives.size(); ++u) {
    std::vector<std::pair<float, int>> list;  // (score, 1 for the held-out item)
    list.emplace_back(scores[u * width], 1);
    for (std::size_t j = 1; j <= negatives[u]; ++j) list.emplace_back(scores[u * width + j], 0);
    std::sort(list.begin(), list.end(), [](auto a, auto b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    const auto pos =
        std::size_t(std::find_if(list.begin(), list.end(), [](auto e) { return e.second == 1; }) -
                    list.begin());
    if (pos < k) {
      ++r.hits[pos];
      hits += 1;
      gain += 1.0 / std::log2(double(pos) + 2.0);
    }
  }
  r.hit_rate = hits / double(r.lists);
  r.ndcg = gain / double(r.lists);
  return r;
}

template <class Space>
tutti::ranking_result metrics_on(const std::vector<float>& scores,
                                 const std::vector<std::uint32_t>& negatives, std::size_t width,
                                 std::size_t k) {
  Space space{};
  auto s = tutti::make_buffer(space, std::span<const float>(scores));
  auto n = tutti::make_buffer(space, std::span<const std::uint32_t>(negatives));
  return tutti::ranking_metrics(space, std::span<const float>(s.span()),
                                std::span<const std::uint32_t>(n.span()), width, k);
}

}  // namespace

TEST_CASE("leave_one_out: each user's latest positive is held out, every other row is kept") {
  const interactions d = courses();
  REQUIRE(d.has_timestamps());
  REQUIRE(d.implicit);
  const auto s = tutti::data::leave_one_out(d);

  // Nothing lost, nothing added.
  std::multiset<row_t> both = rows_of(s.train);
  for (const auto& r : rows_of(s.test)) both.insert(r);
  CHECK(both == rows_of(d));

  std::vector<std::size_t> count(std::size_t(d.n_users()), 0);
  std::vector<std::int64_t> latest(std::size_t(d.n_users()),
                                   std::numeric_limits<std::int64_t>::min());
  for (std::size_t i = 0; i < d.size(); ++i) {
    const auto u = std::size_t(d.users[i]);
    ++count[u];
    if (d.labels[i] > 0.5f) latest[u] = std::max(latest[u], d.timestamps[i]);
  }
  std::vector<int> held(std::size_t(d.n_users()), 0);
  for (std::size_t i = 0; i < s.test.size(); ++i) {
    const auto u = std::size_t(s.test.users[i]);
    ++held[u];
    CHECK(s.test.timestamps[i] == latest[u]);
    CHECK(s.test.labels[i] == 1.f);
    if (i > 0) CHECK(s.test.users[i - 1] < s.test.users[i]);  // in user order
  }
  for (std::size_t u = 0; u < held.size(); ++u) {
    CAPTURE(u);
    const bool positive = latest[u] != std::numeric_limits<std::int64_t>::min();
    CHECK(held[u] == (count[u] >= 2 && positive ? 1 : 0));
  }
  CHECK(s.test.size() > std::size_t(d.n_users()) * 9 / 10);
  CHECK(s.train.user_ids == d.user_ids);
  CHECK(s.test.item_ids == d.item_ids);
}

TEST_CASE("leave_one_out: independent of row order, and a user's only interaction stays in train") {
  interactions d;
  d.user_ids = {10, 20, 30};
  d.item_ids = {100, 200, 300, 400};
  // User 10: two rows at the same latest time: the larger source item id (400) is held out.
  // User 20: a single row. User 30: the latest (t = 9) is held out.
  d.users = {0, 0, 0, 1, 2, 2};
  d.items = {0, 3, 1, 2, 2, 0};
  d.labels = {1, 1, 1, 1, 1, 1};
  d.timestamps = {5, 7, 7, 1, 9, 3};
  for (const interactions& in : {d, reversed(d)}) {
    const auto s = tutti::data::leave_one_out(in);
    REQUIRE(s.test.size() == 2);
    CHECK(s.test.users == std::vector<std::int32_t>{0, 2});
    CHECK(s.test.items == std::vector<std::int32_t>{3, 2});
    CHECK(s.train.size() == 4);
  }
}

TEST_CASE("leave_one_out: in implicit data only a positive row is held out") {
  interactions d;
  d.implicit = true;
  d.user_ids = {1, 2, 3};
  d.item_ids = {10, 20, 30};
  // User 1: the latest row is a 0: the earlier positive is held out. User 2: no positive.
  // User 3: the positive is the latest.
  d.users = {0, 0, 1, 1, 2, 2};
  d.items = {0, 1, 0, 2, 1, 2};
  d.labels = {1, 0, 0, 0, 0, 1};
  d.timestamps = {1, 2, 1, 2, 1, 2};
  const auto s = tutti::data::leave_one_out(d);
  CHECK(s.test.users == std::vector<std::int32_t>{0, 2});
  CHECK(s.test.items == std::vector<std::int32_t>{0, 2});
  CHECK(s.test.labels == std::vector<float>{1, 1});
  CHECK(s.train.size() == 4);
  d.implicit = false;  // ratings: the latest row, whatever its value
  CHECK(tutti::data::leave_one_out(d).test.items == std::vector<std::int32_t>{1, 2, 2});
}

TEST_CASE("leave_one_out: without timestamps a seeded draw chooses, the same for any row order") {
  interactions d = courses();
  d.timestamps.clear();
  const auto a = tutti::data::leave_one_out(d, {.seed = 3});
  const auto b = tutti::data::leave_one_out(reversed(d), {.seed = 3});
  const auto c = tutti::data::leave_one_out(d, {.seed = 4});
  CHECK(rows_of(a.test) == rows_of(b.test));
  CHECK(a.test.size() == c.test.size());
  CHECK(rows_of(a.test) != rows_of(c.test));
}

TEST_CASE("sample_candidates: distinct unseen items, fixed by the seed, whatever the row order") {
  const interactions d = courses();
  const auto s = tutti::data::leave_one_out(d);
  const auto c = tutti::data::sample_candidates(s.train, s.test, {.negatives = 20, .seed = 9});
  REQUIRE(c.size() == s.test.size());
  REQUIRE(c.width() == 21);
  std::vector<std::set<std::int32_t>> seen(std::size_t(d.n_users()));
  for (std::size_t i = 0; i < d.size(); ++i) seen[std::size_t(d.users[i])].insert(d.items[i]);
  for (std::size_t r = 0; r < c.size(); ++r) {
    const auto u = std::size_t(c.users[r]);
    CAPTURE(u);
    CHECK(c.items[r * c.width()] == s.test.items[r]);
    const std::size_t unseen = std::size_t(d.n_items()) - seen[u].size();
    CHECK(c.negatives[r] == std::min<std::size_t>(20, unseen));
    std::set<std::int32_t> drawn;
    for (std::size_t j = 1; j <= c.negatives[r]; ++j) {
      const std::int32_t v = c.items[r * c.width() + j];
      CHECK((v >= 0 && v < d.n_items()));
      CHECK(seen[u].count(v) == 0);
      drawn.insert(v);
    }
    CHECK(drawn.size() == c.negatives[r]);
  }
  const auto again =
      tutti::data::sample_candidates(reversed(s.train), s.test, {.negatives = 20, .seed = 9});
  CHECK(again.items == c.items);
  const auto other = tutti::data::sample_candidates(s.train, s.test, {.negatives = 20, .seed = 10});
  CHECK(other.items != c.items);
}

// The documented draw, learner by learner: the c-th candidate is hash2(key, c) mod the courses,
// kept when the learner never took it and it is not yet in the list; where fewer than four times
// the negatives are unseen, a seeded partial shuffle of all the unseen courses.
std::vector<std::int32_t> reference_draw(const std::set<std::int32_t>& seen, std::int32_t n_items,
                                         std::size_t n, std::uint64_t key) {
  std::vector<std::int32_t> out;
  if (std::size_t(n_items) - seen.size() >= 4 * n) {
    for (std::uint64_t c = 0; out.size() < n; ++c) {
      const auto v = std::int32_t(tutti::detail::hash2(key, c) % std::uint64_t(n_items));
      if (!seen.count(v) && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    return out;
  }
  for (std::int32_t v = 0; v < n_items; ++v)
    if (!seen.count(v)) out.push_back(v);
  const std::size_t take = std::min(n, out.size());
  for (std::size_t i = 0; i < take; ++i)
    std::swap(out[i], out[i + tutti::detail::hash2(key, i) % (out.size() - i)]);
  out.resize(take);
  return out;
}

TEST_CASE("sample_candidates: each list is the documented draw, learner after learner") {
  // 400 learners over 120 courses: most took a few (rejection draws that often repeat a course),
  // some took nearly all (the shuffle); one thread draws many lists in a row.
  interactions d;
  const std::int32_t n_items = 120, n_users = 400;
  for (std::int32_t i = 0; i < n_items; ++i) d.item_ids.push_back(1000 + i);
  for (std::int32_t u = 0; u < n_users; ++u) {
    d.user_ids.push_back(7 * u + 3);
    const std::int32_t took = u % 10 == 0 ? 100 : 2 + u % 7;
    for (std::int32_t k = 0; k < took; ++k) {
      d.users.push_back(u);
      d.items.push_back((u * 37 + k * 11) % n_items);
      d.labels.push_back(1.f);
      d.timestamps.push_back(k);
    }
  }
  const auto s = tutti::data::leave_one_out(d);
  const std::size_t negatives = 25;
  const std::uint64_t seed = 4;
  const auto c =
      tutti::data::sample_candidates(s.train, s.test, {.negatives = negatives, .seed = seed});
  std::vector<std::set<std::int32_t>> seen(static_cast<std::size_t>(n_users));
  for (std::size_t i = 0; i < d.size(); ++i) seen[std::size_t(d.users[i])].insert(d.items[i]);
  std::size_t shuffled = 0;
  REQUIRE(c.size() == s.test.size());
  for (std::size_t r = 0; r < c.size(); ++r) {
    const auto u = std::size_t(c.users[r]);
    CAPTURE(u);
    const std::uint64_t key =
        tutti::detail::hash2(seed ^ 0x6e65676174697665ull, std::uint64_t(s.test.user_ids[u]));
    const auto want = reference_draw(seen[u], n_items, negatives, key);
    shuffled += std::size_t(n_items) - seen[u].size() < 4 * negatives;
    REQUIRE(c.negatives[r] == want.size());
    const auto row = c.items.begin() + std::ptrdiff_t(r * c.width());
    CHECK(row[0] == s.test.items[r]);
    CHECK(std::vector<std::int32_t>(row + 1, row + 1 + std::ptrdiff_t(want.size())) == want);
    CHECK(std::all_of(row + 1 + std::ptrdiff_t(want.size()), row + std::ptrdiff_t(c.width()),
                      [&](std::int32_t v) { return v == s.test.items[r]; }));
  }
  CHECK(shuffled == 40);
}

TEST_CASE(
    "sample_candidates: a user with few unseen items gets all of them, and bad input is named") {
  interactions d;
  d.user_ids = {1, 2};
  d.item_ids = {11, 12, 13, 14, 15};
  d.users = {0, 0, 0, 1, 1};
  d.items = {0, 1, 2, 0, 4};
  d.labels = {1, 1, 1, 1, 1};
  d.timestamps = {1, 2, 3, 1, 2};
  const auto s = tutti::data::leave_one_out(d);
  const auto c = tutti::data::sample_candidates(s.train, s.test, {.negatives = 100});
  REQUIRE(c.size() == 2);
  CHECK(c.negatives == std::vector<std::uint32_t>{2, 3});
  std::set<std::int32_t> first(c.items.begin() + 1, c.items.begin() + 3);
  CHECK(first == std::set<std::int32_t>{3, 4});

  interactions twice = s.test;
  twice.users.push_back(0);
  twice.items.push_back(3);
  twice.labels.push_back(1);
  twice.timestamps.push_back(4);
  CHECK_THROWS_WITH_AS(tutti::data::sample_candidates(s.train, twice),
                       doctest::Contains("user 1 has more than one held-out row"),
                       tutti::invalid_argument);
  interactions other = s.test;
  other.item_ids.push_back(16);
  CHECK_THROWS_WITH_AS(tutti::data::sample_candidates(s.train, other),
                       doctest::Contains("expected the same index spaces"),
                       tutti::invalid_argument);
}

TEST_CASE_TEMPLATE("ranking_metrics: HR@K and NDCG@K equal a brute-force sort, ties included",
                   Space, TUTTI_TEST_SPACES) {
  const std::size_t lists = 500, width = 11;
  std::vector<float> scores(lists * width);
  std::vector<std::uint32_t> negatives(lists);
  for (std::size_t u = 0; u < lists; ++u) {
    negatives[u] = std::uint32_t(10 - (u % 4 == 0 ? u % 7 : 0));  // some shorter lists
    for (std::size_t j = 0; j < width; ++j)                       // few distinct values: many ties
      scores[u * width + j] = float(tutti::detail::hash2(u, j) % 6) * 0.25f;
  }
  for (std::size_t k : {1u, 3u, 5u, 10u}) {
    CAPTURE(k);
    const auto want = brute_force(scores, negatives, width, k);
    const auto got = metrics_on<Space>(scores, negatives, width, k);
    CHECK(got.lists == lists);
    CHECK(got.hits == want.hits);
    CHECK(got.hit_rate == want.hit_rate);
    CHECK(got.ndcg == doctest::Approx(want.ndcg).epsilon(1e-14));
    CHECK(got.hit_rate > 0);
    CHECK(got.hit_rate < 1);
  }
}

TEST_CASE_TEMPLATE("ranking_metrics: a perfect, a constant and a second-place scorer", Space,
                   TUTTI_TEST_SPACES) {
  const std::size_t lists = 4, width = 5;
  const std::vector<std::uint32_t> negatives(lists, 4);
  std::vector<float> perfect(lists * width, 0.f), constant(lists * width, 0.5f),
      second(lists * width, 0.f);
  for (std::size_t u = 0; u < lists; ++u) {
    perfect[u * width] = 1.f;
    second[u * width] = 1.f;
    second[u * width + 1 + u % 4] = 2.f;  // one candidate above the held-out item
  }
  auto r = metrics_on<Space>(perfect, negatives, width, 1);
  CHECK(r.hit_rate == 1.0);
  CHECK(r.ndcg == 1.0);
  r = metrics_on<Space>(constant, negatives, width, 4);  // ties count against: rank 4, not 0
  CHECK(r.hit_rate == 0.0);
  CHECK(r.ndcg == 0.0);
  r = metrics_on<Space>(second, negatives, width, 1);
  CHECK(r.hit_rate == 0.0);
  r = metrics_on<Space>(second, negatives, width, 2);
  CHECK(r.hit_rate == 1.0);
  CHECK(r.ndcg == doctest::Approx(1.0 / std::log2(3.0)));

  std::vector<float> bad = perfect;
  bad[2 * width + 3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(metrics_on<Space>(bad, negatives, width, 1),
                       doctest::Contains("1 list(s) hold a score that is not finite"),
                       tutti::invalid_argument);
  CHECK_THROWS_AS(metrics_on<Space>(perfect, negatives, width, 0), tutti::invalid_argument);
  CHECK_THROWS_AS(metrics_on<Space>(perfect, negatives, width + 1, 1), tutti::invalid_argument);
}

TEST_CASE_TEMPLATE("evaluate_ranking: a model's scores of every candidate, ranked", Space,
                   TUTTI_TEST_SPACES) {
  const interactions d = courses();
  const auto s = tutti::data::leave_one_out(d);
  const auto c = tutti::data::sample_candidates(s.train, s.test, {.negatives = 30, .seed = 2});
  using mf = tutti::models::matrix_factorization<Space>;
  mf model({.dim = 8, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items());
  const auto params = tutti_test::run_initialize(model, 4);

  std::vector<std::int32_t> users, items;
  for (std::size_t r = 0; r < c.size(); ++r)
    for (std::size_t j = 0; j < c.width(); ++j) {
      users.push_back(c.users[r]);
      items.push_back(c.items[r * c.width() + j]);
    }
  const auto scores = tutti_test::run_predict(model, params, users, items);
  const auto want = brute_force(scores, c.negatives, c.width(), 10);

  auto p = tutti::make_buffer(model.space(), std::span<const float>(params));
  const auto got =
      tutti::evaluate_ranking(model, std::span<const float>(p.span()), c, std::size_t{10});
  CHECK(got.lists == s.test.size());
  CHECK(got.hits == want.hits);
  CHECK(got.hit_rate == want.hit_rate);
  CHECK(got.ndcg == doctest::Approx(want.ndcg).epsilon(1e-14));
  // Scored a chunk of lists at a time: one list (a chunk smaller than a list too), two, and
  // chunks that do not divide the lists; the same ranks.
  REQUIRE(c.size() >= 3);
  const tutti::ranking_lists_on<Space> on(model.space(), c);
  for (const std::size_t chunk :
       {std::size_t{1}, c.width(), 2 * c.width(), 2 * c.width() + 5, c.size() * c.width() - 1}) {
    CAPTURE(chunk);
    const auto part = tutti::evaluate_ranking(model, std::span<const float>(p.span()), on,
                                              std::size_t{10}, chunk);
    CHECK(part.lists == want.lists);
    CHECK(part.hits == want.hits);
  }
}

}  // namespace test_ranking
