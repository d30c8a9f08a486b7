// SPDX-License-Identifier: Apache-2.0
// Interaction logs and sampled negatives: a log read as positives, each learner's courses and the
// popularity weights the draw reads, a draw that never returns a learner's own course and follows
// its distribution, and the trainer with negatives: 1 rank = W ranks, resumed = uninterrupted,
// every positive once an epoch, and a model that ranks where positives alone learn popularity.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <omp.h>

namespace test_negatives {

using tutti_test::relative_difference;

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;
using tutti::data::interactions;

// `rows` as (user, item) pairs over `users` x `items`, every label 1.
interactions log_of(std::int32_t users, std::int32_t items,
                    const std::vector<std::pair<std::int32_t, std::int32_t>>& rows) {
  interactions d;
  for (std::int32_t u = 0; u < users; ++u) d.user_ids.push_back(u + 1);
  for (std::int32_t i = 0; i < items; ++i) d.item_ids.push_back(i + 1);
  for (auto [u, i] : rows) {
    d.users.push_back(u);
    d.items.push_back(i);
    d.labels.push_back(1.f);
  }
  d.implicit = true;
  return d;
}

// A log with repeats: `rows` rows over `learners` x `courses` drawn at random, every `every`-th
// row learner `heavy`'s (a long list), one row in `zero_in` labelled 0 and the others `label`,
// with the row's number as its timestamp when `times`.
struct repeat_log_shape {
  std::int32_t learners, courses, rows, heavy, every, zero_in;
  float label = 1.f;
  bool times = false;
};
interactions repeat_log(std::uint64_t seed, const repeat_log_shape& s) {
  tutti::detail::splitmix rng(seed);
  interactions d;
  for (std::int32_t u = 0; u < s.learners; ++u) d.user_ids.push_back(u);
  for (std::int32_t i = 0; i < s.courses; ++i) d.item_ids.push_back(i);
  for (std::int32_t r = 0; r < s.rows; ++r) {
    d.users.push_back(r % s.every == 0 ? s.heavy
                                       : static_cast<std::int32_t>(rng.below(s.learners)));
    d.items.push_back(static_cast<std::int32_t>(rng.below(s.courses)));
    d.labels.push_back(rng.below(s.zero_in) == 0 ? 0.f : s.label);
    if (s.times) d.timestamps.push_back(1000 + r);
  }
  return d;
}

// The OpenMP thread counts a test compares: 1 to 3, or 1 alone under ThreadSanitizer, which does
// not see libgomp's barriers (scripts/sanitize.sh runs it on one OpenMP thread).
std::vector<int> compared_thread_counts() {
#if defined(__SANITIZE_THREAD__)
  return {1};
#else
  return {1, 2, 3};
#endif
}

// The synthetic courses as a platform logs them: positives only.
interactions positive_log(std::int32_t learners, std::int32_t courses, std::uint64_t seed) {
  return tutti::data::synthetic_courses({.learners = learners,
                                         .courses = courses,
                                         .interactions_per_learner = 12,
                                         .implicit = true,
                                         .negatives_per_positive = 0,
                                         .seed = seed});
}

tutti::detail::negative_draw<> draw_of(const tutti::detail::negative_tables& t, std::int32_t items,
                                       const tutti::negative_options& o) {
  return {
      t.offsets.data(), t.taken.data(), t.cumulative.empty() ? nullptr : t.cumulative.data(), items,
      o.per_positive,   o.max_draws};
}

mf model_of(const interactions& d, std::int32_t dim = 8,
            tutti::loss_kind loss = tutti::loss_kind::logistic) {
  return mf({.dim = dim, .l2 = 1e-4f, .loss = loss}, d.n_users(), d.n_items());
}

struct outcome {
  std::vector<float> params;
  tutti::fit_result result;
  bool interrupted = false;
};

// Trains `world` ranks of MF with Adam on `train`; `hook(rank, global step)` after each step.
outcome train(int world, const interactions& train, const interactions& test,
              tutti::train_options opt, std::int32_t dim = 8,
              const std::function<void(int, std::size_t)>& hook = {},
              tutti::loss_kind loss = tutti::loss_kind::logistic) {
  outcome out;
  std::mutex mu;
  auto body = [&](auto reducer) {
    tutti::train_options o = opt;
    const int rank = reducer.rank();
    if (hook)
      o.on_step = [&, rank](const tutti::step_progress& p) {
        hook(rank, p.global_step);
      };
    tutti::trainer<mf, tutti::shuffled_shards, decltype(reducer), tutti::constant, tutti::adam> t(
        model_of(train, dim, loss), {}, reducer, {}, {}, o);
    try {
      auto r = t.fit(train, test);
      if (rank == 0) {
        std::lock_guard lock(mu);
        out.params = t.parameters_on_host();
        out.result = std::move(r);
      }
    } catch (const tutti::interrupted_error&) {
      std::lock_guard lock(mu);
      out.interrupted = true;
    }
  };
  if (world == 1)
    body(tutti::single_rank{});
  else
    tutti::run_local(world, [&](tutti::local_ring ring) { body(ring); });
  return out;
}

// A positive-only log split leave-one-out, each held-out course ranked among 99 sampled ones, and
// the popularity ranking of those lists.
struct ranked_log {
  tutti::data::split_result parts;
  std::shared_ptr<const tutti::data::ranking_candidates> lists;
  tutti::ranking_result popular;
};
ranked_log ranked_positive_log() {
  ranked_log r;
  r.parts = tutti::data::leave_one_out(positive_log(600, 120, 12));
  r.lists = std::make_shared<const tutti::data::ranking_candidates>(
      tutti::data::sample_candidates(r.parts.train, r.parts.test, {.negatives = 99}));
  r.popular = tutti::popularity_ranking(r.parts.train, *r.lists, 10);
  return r;
}

}  // namespace

TEST_CASE("a log read as positives: labels above the bar kept as 1, a repeated pair once or each") {
  interactions d = log_of(3, 4, {{0, 1}, {1, 2}, {0, 1}, {2, 3}, {1, 0}, {0, 1}});
  d.labels = {1.f, 0.f, 1.f, 2.f, 1.f, 3.f};
  tutti::data::positive_counts c;
  const interactions once = tutti::data::as_positives(d, {}, &c);
  CHECK(once.users == std::vector<std::int32_t>{0, 2, 1});
  CHECK(once.items == std::vector<std::int32_t>{1, 3, 0});
  CHECK(once.labels == std::vector<float>{1.f, 1.f, 1.f});
  CHECK(once.implicit);
  CHECK(c.rows == 6);
  CHECK(c.kept == 3);
  CHECK(c.not_positive == 1);
  CHECK(c.repeated == 2);
  const interactions each =
      tutti::data::as_positives(d, {.repeats = tutti::data::repeated_pairs::each}, &c);
  CHECK(each.size() == 5);
  CHECK(c.repeated == 0);
  CHECK(each.n_users() == 3);  // the index spaces are kept whole
  CHECK(each.n_items() == 4);
  CHECK(tutti::data::labels_all_equal(each));
  CHECK_FALSE(tutti::data::labels_all_equal(d));
}

TEST_CASE("a log read as positives: the first row of each pair kept, for short and long users") {
  // Learner 0 has hundreds of rows (sorted by course), the others a few (scanned): the kept rows
  // are those a brute-force reference keeps, the first positive row of each pair in file order.
  const interactions d = repeat_log(
      9, {.learners = 40, .courses = 30, .rows = 3000, .heavy = 0, .every = 3, .zero_in = 5});
  std::set<std::pair<std::int32_t, std::int32_t>> seen;
  std::vector<std::int32_t> users, items;
  for (std::size_t r = 0; r < d.size(); ++r)
    if (d.labels[r] > 0.f && seen.insert({d.users[r], d.items[r]}).second) {
      users.push_back(d.users[r]);
      items.push_back(d.items[r]);
    }
  tutti::data::positive_counts c;
  const interactions once = tutti::data::as_positives(d, {}, &c);
  CHECK(once.users == users);
  CHECK(once.items == items);
  CHECK(c.kept == users.size());
  CHECK(c.rows == c.kept + c.not_positive + c.repeated);
  CHECK(std::count(d.users.begin(), d.users.end(), 0) > 500);
}

TEST_CASE("a log read as positives: learners over many buckets keep the reference's rows") {
  // 20,000 learners (the repeats are grouped in buckets of consecutive learners, several
  // learners a bucket), one of them with hundreds of rows; on 1 to 3 threads the kept rows are
  // those a brute-force reference keeps, in file order.
  const interactions d = repeat_log(21, {.learners = 20000,
                                         .courses = 12,
                                         .rows = 60000,
                                         .heavy = 19999,
                                         .every = 100,
                                         .zero_in = 7});
  std::set<std::pair<std::int32_t, std::int32_t>> seen;
  std::vector<char> reference(d.size(), 0);
  for (std::size_t r = 0; r < d.size(); ++r)
    reference[r] = d.labels[r] > 0.f && seen.insert({d.users[r], d.items[r]}).second;
  const auto kept = static_cast<std::size_t>(std::count(reference.begin(), reference.end(), 1));
  REQUIRE(kept + 1000 <
          d.size() - static_cast<std::size_t>(std::count(d.labels.begin(), d.labels.end(), 0.f)));
  const int saved = omp_get_max_threads();
  for (const int threads : compared_thread_counts()) {
    CAPTURE(threads);
    omp_set_num_threads(threads);
    tutti::data::positive_counts c;
    const std::vector<char> keep = tutti::detail::positive_rows(d, {}, c);
    CHECK(keep == reference);
    CHECK(c.kept == kept);
    CHECK(c.rows == c.kept + c.not_positive + c.repeated);
  }
  omp_set_num_threads(saved);
}

TEST_CASE("a log read as positives in its own arrays: the rows, times and counts of a copy") {
  // The in-place form (an rvalue) against the copying one, on 1 to 3 threads: the same rows in
  // the same order, their timestamps with them, the same counts; the index spaces kept.
  const interactions d = repeat_log(4, {.learners = 57,
                                        .courses = 25,
                                        .rows = 4000,
                                        .heavy = 3,
                                        .every = 4,
                                        .zero_in = 6,
                                        .label = 2.f,
                                        .times = true});
  tutti::data::positive_counts copied_counts;
  const interactions copied = tutti::data::as_positives(d, {}, &copied_counts);
  REQUIRE(copied_counts.repeated > 0);
  REQUIRE(copied_counts.not_positive > 0);
  const int saved = omp_get_max_threads();
  for (const int threads : compared_thread_counts()) {
    CAPTURE(threads);
    omp_set_num_threads(threads);
    interactions own = d;
    tutti::data::positive_counts c;
    const interactions moved = tutti::data::as_positives(std::move(own), {}, &c);
    CHECK(moved.users == copied.users);
    CHECK(moved.items == copied.items);
    CHECK(moved.timestamps == copied.timestamps);
    CHECK(moved.labels == copied.labels);
    CHECK(moved.implicit);
    CHECK(moved.n_users() == 57);
    CHECK(moved.n_items() == 25);
    CHECK(c.kept == copied_counts.kept);
    CHECK(c.repeated == copied_counts.repeated);
    CHECK(c.not_positive == copied_counts.not_positive);
    // The timestamps travel with their rows: each kept row's time is that of its first row.
    for (std::size_t r = 0; r < moved.size(); ++r) {
      const auto src = static_cast<std::size_t>(moved.timestamps[r] - 1000);
      CHECK(d.users[src] == moved.users[r]);
      CHECK(d.items[src] == moved.items[r]);
    }
  }
  omp_set_num_threads(saved);
}

TEST_CASE("negative tables: each learner's courses sorted and unique, popularity summing to 2^32") {
  const interactions d = log_of(3, 5, {{2, 4}, {0, 3}, {0, 1}, {2, 0}, {0, 3}, {2, 4}, {2, 2}});
  const auto t = tutti::detail::make_negative_tables(
      d, {.per_positive = 2, .sampler = tutti::negative_sampler::popularity, .alpha = 1.f});
  CHECK(t.offsets == std::vector<std::uint64_t>{0, 2, 2, 5});
  CHECK(t.taken == std::vector<std::int32_t>{1, 3, 0, 2, 4});
  // Counts 1, 1, 1, 2, 2 of 7 rows, alpha 1.
  REQUIRE(t.cumulative.size() == 5);
  CHECK(t.cumulative.back() == std::uint64_t(1) << 32);
  CHECK(std::fabs(double(t.cumulative[2]) - std::ldexp(3.0 / 7.0, 32)) <= 1.0);
  const auto step = [&](std::size_t i) {
    return double(t.cumulative[i] - t.cumulative[i - 1]);
  };
  CHECK(std::fabs(step(3) - step(4)) <= 1.0);
  CHECK(std::fabs(step(3) - 2 * step(2)) <= 2.0);
  CHECK_THROWS_WITH_AS(tutti::detail::make_negative_tables(d, {.per_positive = 1, .alpha = -1.f}),
                       doctest::Contains("alpha is -1"), tutti::invalid_argument);
}

TEST_CASE("negative tables: every thread count gives the one-thread tables") {
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not see libgomp's barriers (scripts/sanitize.sh runs it on one OpenMP
  // thread): there the one-thread tables are checked against the reference only.
  const std::vector<int> more_threads;
#else
  const std::vector<int> more_threads{2, 3, 4};
#endif
  // Learners split in ranges, one per thread: fewer learners than threads, repeats or none.
  std::mt19937 gen(9);
  for (const std::int32_t users : {1, 3, 1000}) {
    for (const bool repeats : {false, true}) {
      CAPTURE(users);
      CAPTURE(repeats);
      std::vector<std::pair<std::int32_t, std::int32_t>> rows;
      std::set<std::pair<std::int32_t, std::int32_t>> seen;
      const auto target = std::min<std::size_t>(5000, static_cast<std::size_t>(users) * 150);
      while (rows.size() < target) {
        const std::pair<std::int32_t, std::int32_t> r{
            static_cast<std::int32_t>(gen() % static_cast<unsigned>(users)),
            static_cast<std::int32_t>(gen() % 300)};
        if (seen.insert(r).second || repeats) rows.push_back(r);
      }
      const interactions d = log_of(users, 300, rows);
      const int before = omp_get_max_threads();
      omp_set_num_threads(1);
      const auto one = tutti::detail::make_negative_tables(d, {.per_positive = 1});
      for (const int threads : more_threads) {
        CAPTURE(threads);
        omp_set_num_threads(threads);
        const auto t = tutti::detail::make_negative_tables(d, {.per_positive = 1});
        CHECK(t.offsets == one.offsets);
        CHECK(t.taken == one.taken);
      }
      // The trainer's form on a host: the lists and their 32-bit offsets written where the step
      // reads them (a value per row, the kept ones first), at every thread count.
      for (const int threads : more_threads.empty() ? std::vector<int>{1} : more_threads) {
        CAPTURE(threads);
        omp_set_num_threads(threads);
        std::vector<std::int32_t> taken(d.size(), 7);
        std::vector<std::uint32_t> offsets(static_cast<std::size_t>(users) + 1, 0);
        const auto t = tutti::detail::make_negative_tables(d, {.per_positive = 1}, taken.data(),
                                                           offsets.data());
        CHECK(t.offsets.empty());
        CHECK(std::equal(offsets.begin(), offsets.end(), one.offsets.begin(), one.offsets.end()));
        taken.resize(offsets.back());
        CHECK(taken == one.taken);
      }
      omp_set_num_threads(before);
      // The one-thread tables: each learner's distinct courses, ascending.
      std::map<std::int32_t, std::set<std::int32_t>> by_learner;
      for (const auto& [u, i] : rows) by_learner[u].insert(i);
      std::vector<std::int32_t> expected;
      for (std::int32_t u = 0; u < users; ++u)
        expected.insert(expected.end(), by_learner[u].begin(), by_learner[u].end());
      CHECK(one.taken == expected);
      CHECK(one.offsets.back() == expected.size());
    }
  }
}

TEST_CASE("each learner's courses: packed buckets and one pass give the reference's lists") {
  // Courses that fit 16 bits are grouped in buckets of packed values, more courses in one pass
  // over the rows: both over one learner and over many buckets, with a heavy learner, repeats
  // and two sets of rows, at every thread count, with 32- and 64-bit offsets.
  for (const std::int32_t courses : {300, 65536, 65537}) {
    for (const std::int32_t learners : {1, 20000}) {
      CAPTURE(courses);
      CAPTURE(learners);
      const auto seed = static_cast<std::uint64_t>(courses + learners);
      const repeat_log_shape shape{.learners = learners,
                                   .courses = courses,
                                   .rows = 30000,
                                   .heavy = learners / 2,
                                   .every = 7,
                                   .zero_in = 1000};
      const interactions a = repeat_log(seed, shape);
      const interactions b = repeat_log(seed + 1, {.learners = learners,
                                                   .courses = courses,
                                                   .rows = 5000,
                                                   .heavy = 0,
                                                   .every = 3,
                                                   .zero_in = 1000});
      const interactions* both[] = {&a, &b};
      const std::span<const interactions* const> sets(both);
      const auto nu = static_cast<std::size_t>(learners);
      std::vector<std::set<std::int32_t>> by_learner(nu);
      for (const interactions* d : sets)
        for (std::size_t r = 0; r < d->size(); ++r)
          by_learner[static_cast<std::size_t>(d->users[r])].insert(d->items[r]);
      std::vector<std::uint64_t> offsets{0};
      std::vector<std::int32_t> expected;
      for (const auto& courses_of : by_learner) {
        expected.insert(expected.end(), courses_of.begin(), courses_of.end());
        offsets.push_back(expected.size());
      }
      const std::size_t rows = a.size() + b.size();
      CHECK(tutti::detail::packs_courses(sets) == (courses <= 65536));
      const int before = omp_get_max_threads();
      for (const int threads : compared_thread_counts()) {
        CAPTURE(threads);
        omp_set_num_threads(threads);
        std::vector<std::uint32_t> at(nu + 1, 0);
        std::vector<std::int32_t> taken(rows, 7);
        tutti::detail::learner_courses(sets, nu, at.data(), taken.data());
        CHECK(std::equal(at.begin(), at.end(), offsets.begin(), offsets.end()));
        taken.resize(at.back());
        CHECK(taken == expected);
        // Each path on its own.
        std::vector<std::uint64_t> one_at(nu + 1, 0);
        std::vector<std::int32_t> one(rows);
        tutti::detail::group_courses_by_learner(sets, nu, one_at.data(), one.data());
        tutti::detail::sort_unique_lists(one_at.data(), nu, one.data());
        CHECK(one_at == offsets);
        one.resize(one_at.back());
        CHECK(one == expected);
        if (courses > 65536) continue;
        std::vector<std::uint64_t> packed_at(nu + 1, 0);
        std::vector<std::int32_t> packed(rows);
        const std::size_t dropped =
            tutti::detail::sorted_courses_in_buckets(sets, nu, packed_at.data(), packed.data());
        CHECK(dropped == rows - expected.size());
        tutti::detail::close_list_gaps(packed_at.data(), nu, packed.data());
        CHECK(packed_at == offsets);
        packed.resize(packed_at.back());
        CHECK(packed == expected);
      }
      omp_set_num_threads(before);
    }
  }
}

TEST_CASE("a packed bucket put in order of place: every place of 16 bits, each value kept") {
  // Places up to 65535 set the packed value's sign bit: the order reads them unsigned.
  tutti::detail::splitmix rng(41);
  const std::size_t width = 65536;
  std::vector<std::int32_t> a;
  for (int r = 0; r < 200000; ++r)
    a.push_back(tutti::detail::pack_course(static_cast<std::uint16_t>(rng.below(width)),
                                           static_cast<std::int32_t>(rng.below(65536))));
  std::vector<std::uint32_t> next(width + 1, 0), end(width);
  for (const std::int32_t v : a) ++next[tutti::detail::packed_place(v) + 1];
  for (std::size_t l = 0; l < width; ++l) next[l + 1] += next[l];
  const std::vector<std::uint32_t> starts = next;
  std::vector<std::int32_t> sorted_before = a;
  std::sort(sorted_before.begin(), sorted_before.end());
  tutti::detail::order_packed_bucket(a.data(), width, next.data(), end.data());
  // Each place filled to its end, and holding its own values only.
  CHECK(std::equal(next.begin(), next.begin() + width, starts.begin() + 1));
  std::size_t misplaced = 0;
  for (std::size_t l = 0; l < width; ++l)
    for (std::uint32_t k = starts[l]; k < starts[l + 1]; ++k)
      misplaced += tutti::detail::packed_place(a[k]) != l;
  CHECK(misplaced == 0);
  std::sort(a.begin(), a.end());
  CHECK(a == sorted_before);
}

TEST_CASE("a sampled negative is never its learner's course, and uniform over the others") {
  // Learner u took courses u, u + 1, ..., u + 9 of 40 (mod 40): 30 left for each.
  std::vector<std::pair<std::int32_t, std::int32_t>> rows;
  for (std::int32_t u = 0; u < 8; ++u)
    for (std::int32_t j = 0; j < 10; ++j) rows.emplace_back(u, (u + j) % 40);
  const interactions d = log_of(8, 40, rows);
  const tutti::negative_options o{.per_positive = 4};
  const auto t = tutti::detail::make_negative_tables(d, o);
  const auto draw = draw_of(t, 40, o);
  const std::uint64_t key = tutti::detail::negative_epoch_key(7, 0);
  std::map<std::int32_t, int> seen;  // learner 3's negatives
  for (std::int32_t u = 0; u < 8; ++u)
    for (std::uint64_t pos = 0; pos < 3000; ++pos)
      for (std::uint32_t k = 0; k < 4; ++k) {
        const std::int32_t item = draw(key, u, pos, k);
        REQUIRE(item >= 0);
        REQUIRE(item < 40);
        const std::int32_t offset = (item - u + 40) % 40;
        REQUIRE(offset >= 10);  // not one of u's courses
        if (u == 3) ++seen[item];
      }
  // 12,000 draws over 30 courses: 400 expected each (a standard deviation of ~20).
  CHECK(seen.size() == 30);
  for (auto [item, n] : seen) {
    CAPTURE(item);
    CHECK(n > 300);
    CHECK(n < 500);
  }
  // A function of (key, learner, position, k) alone, and another epoch draws others.
  CHECK(draw(key, 5, 123, 2) == draw(key, 5, 123, 2));
  int same = 0;
  const std::uint64_t next = tutti::detail::negative_epoch_key(7, 1);
  for (std::uint64_t pos = 0; pos < 200; ++pos)
    same += draw(key, 0, pos, 0) == draw(next, 0, pos, 0);
  CHECK(same < 30);  // 1 in 30 by chance: ~7 of 200
}

TEST_CASE("negative draws: offsets in 32 bits draw what offsets in 64 draw, 2^32 pairs keep 64") {
  std::mt19937 gen(5);
  std::vector<std::pair<std::int32_t, std::int32_t>> rows;
  for (int r = 0; r < 3000; ++r)
    rows.emplace_back(static_cast<std::int32_t>(gen() % 200),
                      static_cast<std::int32_t>(gen() % 50));
  const interactions d = log_of(200, 50, rows);
  for (const auto sampler :
       {tutti::negative_sampler::uniform, tutti::negative_sampler::popularity}) {
    const tutti::negative_options o{.per_positive = 3, .sampler = sampler};
    const auto t = tutti::detail::make_negative_tables(d, o);
    const std::vector<std::uint32_t> narrow = tutti::detail::narrow_offsets(t.offsets);
    REQUIRE(narrow.size() == t.offsets.size());
    CHECK(std::equal(narrow.begin(), narrow.end(), t.offsets.begin()));
    const auto wide = draw_of(t, 50, o);
    const tutti::detail::negative_draw<std::uint32_t> narrowed{narrow.data(),     wide.taken,
                                                               wide.cumulative,   wide.n_items,
                                                               wide.per_positive, wide.max_draws};
    const std::uint64_t key = tutti::detail::negative_epoch_key(3, 2);
    for (std::int32_t u = 0; u < 200; ++u) {
      for (std::int32_t i = 0; i < 50; ++i) REQUIRE(narrowed.took(u, i) == wide.took(u, i));
      for (std::uint64_t pos = 0; pos < 20; ++pos)
        REQUIRE(narrowed(key, u, pos, 1) == wide(key, u, pos, 1));
    }
  }
  // A table of 2^32 - 1 pairs narrows; of 2^32 it keeps its 64-bit offsets.
  CHECK(tutti::detail::narrow_offsets({0, 7, 0xffffffffULL}) ==
        std::vector<std::uint32_t>{0, 7, 0xffffffffU});
  CHECK(tutti::detail::narrow_offsets({0, 7, 0x100000000ULL}).empty());
  CHECK(tutti::detail::offset_bytes(0xffffffffULL) == 4);
  CHECK(tutti::detail::offset_bytes(0x100000000ULL) == 8);
}

TEST_CASE("the popularity sampler draws a course in proportion to its count^alpha") {
  // Learner 0 took nothing; the others' rows give course c the count c + 1 (c < 6).
  std::vector<std::pair<std::int32_t, std::int32_t>> rows;
  for (std::int32_t c = 0; c < 6; ++c)
    for (std::int32_t n = 0; n <= c; ++n) rows.emplace_back(1 + n, c);
  const interactions d = log_of(7, 6, rows);
  const tutti::negative_options o{
      .per_positive = 1, .sampler = tutti::negative_sampler::popularity, .alpha = 0.75f};
  const auto t = tutti::detail::make_negative_tables(d, o);
  const auto draw = draw_of(t, 6, o);
  std::vector<double> got(6, 0.0);
  const int n = 60000;
  for (int pos = 0; pos < n; ++pos) got[std::size_t(draw(99, 0, std::uint64_t(pos), 0))] += 1.0;
  double total = 0;
  for (int c = 0; c < 6; ++c) total += std::pow(c + 1.0, 0.75);
  for (int c = 0; c < 6; ++c) {
    CAPTURE(c);
    const double expected = std::pow(c + 1.0, 0.75) / total;
    CHECK(got[std::size_t(c)] / n == doctest::Approx(expected).epsilon(0.06));
  }
}

TEST_CASE("with sampled negatives W ranks train to the parameters of 1 rank, each positive once") {
  const auto parts =
      tutti::data::split(positive_log(240, 50, 4), {.test_fraction = 0.1, .seed = 1});
  const tutti::train_options opt{.batch = 240,
                                 .epochs = 2,
                                 .base_lr = 0.01,
                                 .seed = 5,
                                 .evaluate_each_epoch = false,
                                 .negatives = {.per_positive = 3}};
  REQUIRE(parts.train.size() % 240 != 0);  // a padded last step
  const outcome one = train(1, parts.train, parts.test, opt);
  for (int world : {2, 4}) {
    CAPTURE(world);
    const outcome many = train(world, parts.train, parts.test, opt);
    CHECK(relative_difference(many.params, one.params) <= 1e-5);
    CHECK(many.result.epochs.back().train_loss ==
          doctest::Approx(one.result.epochs.back().train_loss).epsilon(1e-5));
    // Samples are the positives: every training row once an epoch, the negatives beside them.
    CHECK(many.result.epochs.front().weighted_samples == double(parts.train.size()));
  }
  // The negatives change what is learnt: without them the same run ends elsewhere.
  tutti::train_options none = opt;
  none.negatives = {};
  CHECK(relative_difference(train(1, parts.train, parts.test, none).params, one.params) > 1e-2);
}

TEST_CASE(
    "with sampled negatives a run stopped and resumed ends bitwise equal to an unbroken one") {
  const auto parts =
      tutti::data::split(positive_log(200, 40, 6), {.test_fraction = 0.1, .seed = 2});
  const tutti::train_options opt{
      .batch = 120,
      .epochs = 2,
      .base_lr = 0.02,
      .seed = 8,
      .evaluate_each_epoch = false,
      .negatives = {.per_positive = 2, .sampler = tutti::negative_sampler::popularity}};
  const std::size_t spe = (parts.train.size() + 119) / 120;
  const outcome whole = train(2, parts.train, parts.test, opt);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tutti-negatives-resume-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::atomic<bool> stop{false};
  tutti::train_options first = opt;
  first.checkpoint_dir = dir.string();
  first.stop = &stop;
  const outcome broken = train(2, parts.train, parts.test, first, 8, [&](int rank, std::size_t s) {
    if (rank == 0 && s == spe + 1) stop = true;  // in the second epoch: its own key
  });
  REQUIRE(broken.interrupted);
  const auto found = tutti::find_latest_checkpoint(dir);
  REQUIRE(found);
  tutti::train_options again = opt;
  again.resume = &found->state;
  const outcome rest = train(2, parts.train, parts.test, again);
  CHECK(rest.params == whole.params);
  // Another number of negatives is another run: refused, named.
  tutti::train_options other = again;
  other.negatives.per_positive = 3;
  CHECK_THROWS_WITH(train(2, parts.train, parts.test, other), doctest::Contains("negatives"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("positives alone learn popularity, with sampled negatives the model ranks above it") {
  const ranked_log r = ranked_positive_log();
  const auto& [parts, lists, popular] = r;
  tutti::train_options opt{
      .batch = 512, .epochs = 12, .base_lr = 0.01, .seed = 3, .ranking = lists};
  const outcome alone = train(1, parts.train, parts.test, opt, 16);
  opt.negatives = {.per_positive = 4};
  const outcome sampled = train(1, parts.train, parts.test, opt, 16);
  REQUIRE(alone.result.ranking);
  REQUIRE(sampled.result.ranking);
  const double hr_alone = alone.result.ranking->hit_rate;
  const double hr_sampled = sampled.result.ranking->hit_rate;
  MESSAGE("HR@10: popularity ", popular.hit_rate, ", positives alone ", hr_alone,
          ", 4 sampled negatives ", hr_sampled);
  CHECK(hr_alone < popular.hit_rate + 0.03);
  CHECK(hr_sampled > popular.hit_rate + 0.05);
  CHECK(sampled.result.ranking->ndcg > alone.result.ranking->ndcg);
}

TEST_CASE("sampled negatives with the squared loss are refused, named") {
  const interactions d = positive_log(20, 10, 1);
  tutti::train_options opt{.negatives = {.per_positive = 2}};
  using trainer = tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank>;
  CHECK_THROWS_WITH_AS(
      trainer(mf({.dim = 4, .loss = tutti::loss_kind::squared}, d.n_users(), d.n_items()), {}, {},
              {}, {}, opt),
      doctest::Contains("negatives.per_positive is 2 but the model's loss is squared"),
      tutti::invalid_argument);
}

TEST_CASE("with a list loss W ranks train to the parameters of 1 rank, resumed = unbroken") {
  const auto parts =
      tutti::data::split(positive_log(240, 50, 4), {.test_fraction = 0.1, .seed = 1});
  for (const auto sampler : {tutti::negative_sampler::uniform, tutti::negative_sampler::popularity})
    for (const auto loss : {tutti::loss_kind::bpr, tutti::loss_kind::softmax}) {
      CAPTURE(std::string(tutti::to_string(loss)));
      CAPTURE(std::string(tutti::to_string(sampler)));
      const tutti::train_options opt{.batch = 240,
                                     .epochs = 2,
                                     .base_lr = 0.01,
                                     .seed = 5,
                                     .evaluate_each_epoch = false,
                                     .negatives = {.per_positive = 3, .sampler = sampler}};
      const outcome one = train(1, parts.train, parts.test, opt, 8, {}, loss);
      const outcome many = train(3, parts.train, parts.test, opt, 8, {}, loss);
      CHECK(relative_difference(many.params, one.params) <= 1e-5);
      CHECK(many.result.epochs.back().train_loss ==
            doctest::Approx(one.result.epochs.back().train_loss).epsilon(1e-5));
      // Another loss learns other parameters from the same draws.
      const outcome pointwise = train(1, parts.train, parts.test, opt);
      CHECK(relative_difference(pointwise.params, one.params) > 1e-2);
    }
}

TEST_CASE("the list losses rank above popularity on a log of positives") {
  const ranked_log r = ranked_positive_log();
  const auto& [parts, lists, popular] = r;
  const tutti::train_options opt{.batch = 512,
                                 .epochs = 12,
                                 .base_lr = 0.01,
                                 .seed = 3,
                                 .ranking = lists,
                                 .negatives = {.per_positive = 4}};
  for (const auto loss : {tutti::loss_kind::bpr, tutti::loss_kind::softmax}) {
    CAPTURE(std::string(tutti::to_string(loss)));
    const outcome o = train(1, parts.train, parts.test, opt, 16, {}, loss);
    REQUIRE(o.result.ranking);
    MESSAGE(tutti::to_string(loss), " HR@10 ", o.result.ranking->hit_rate, " (popularity ",
            popular.hit_rate, ")");
    CHECK(o.result.ranking->hit_rate > popular.hit_rate + 0.05);
  }
}

TEST_CASE("a list loss without sampled negatives is refused, named") {
  const interactions d = positive_log(20, 10, 1);
  using trainer = tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank>;
  CHECK_THROWS_WITH_AS(
      trainer(mf({.dim = 4, .loss = tutti::loss_kind::bpr}, d.n_users(), d.n_items()), {}, {}, {},
              {}, tutti::train_options{}),
      doctest::Contains("the model's loss is bpr and negatives.per_positive is 0"),
      tutti::invalid_argument);
}

}  // namespace test_negatives
