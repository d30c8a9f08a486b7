// SPDX-License-Identifier: Apache-2.0
// Memory in the books: the forecast `tutti plan` makes before a run (the trainer's accounts from
// the model's layout, the optimizer, the options and the data's shape) equals, byte for byte,
// what the fit reports it held: for dense and row-sparse optimizers, a gradient in slots or the
// table-sized arena, sampled negatives (uniform and by popularity) or none, accumulation, a
// batch that does not divide the data, and two ranks.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace test_memory_forecast {

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;
using tutti_test::implicit_courses;

std::uint64_t distinct_pairs(const tutti::data::interactions& d) {
  std::set<std::pair<std::int32_t, std::int32_t>> pairs;
  for (std::size_t i = 0; i < d.size(); ++i) pairs.emplace(d.users[i], d.items[i]);
  return pairs.size();
}

tutti::memory_run run_of(const tutti::data::interactions& train, int world = 1) {
  return {.train_rows = train.size(),
          .distinct_pairs = distinct_pairs(train),
          .learners = static_cast<std::uint64_t>(train.n_users()),
          .one_label = tutti::detail::all_equal(std::span<const float>(train.labels)),
          .courses = static_cast<std::uint64_t>(train.n_items()),
          .world = world};
}

mf model_for(const tutti::data::interactions& train, tutti::loss_kind loss) {
  return mf({.dim = 7, .loss = loss}, train.n_users(), train.n_items());
}

void check_equal(const tutti::memory_accounts& forecast, const tutti::memory_accounts& held) {
  CHECK(forecast.parameters == held.parameters);
  CHECK(forecast.gradients == held.gradients);
  CHECK(forecast.optimizer_state == held.optimizer_state);
  CHECK(forecast.rows == held.rows);
  CHECK(forecast.step_buffers == held.step_buffers);
  CHECK(forecast.shard == held.shard);
  CHECK(forecast.total() == held.total());
}

// One rank: the fit's accounts against the forecast made before the trainer was built.
template <class Optimizer>
void check_one_rank(const tutti::data::interactions& train, Optimizer optimizer,
                    tutti::train_options opt, tutti::loss_kind loss = tutti::loss_kind::logistic) {
  const tutti::memory_accounts forecast =
      tutti::forecast_trainer_memory(model_for(train, loss), optimizer, opt, run_of(train));
  tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant, Optimizer> t(
      model_for(train, loss), {}, {}, {}, optimizer, opt);
  const tutti::fit_result r = t.fit(train, {});
  check_equal(forecast, r.memory);
}

struct setting {
  const char* name;
  std::size_t batch;
  std::uint32_t negatives;
  bool compact;
  bool rows_in_place = false;
};

constexpr setting settings[] = {
    {"positives only, batch 64, gradient in slots", 64, 0, true},
    {"4 uniform negatives, batch 100 (does not divide the data), slots", 100, 4, true},
    {"4 uniform negatives, batch 64, the table-sized arena", 64, 4, false},
    {"1 negative, a batch larger than a table's rows", 512, 1, true},
    {"4 uniform negatives, batch 64, the rows read in place", 64, 4, true, true},
};

template <class Optimizer>
void check_settings(Optimizer optimizer) {
  const auto parts = implicit_courses(300, 120);
  for (const setting& s : settings) {
    CAPTURE(s.name);
    tutti::train_options opt{
        .batch = s.batch, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
    opt.negatives.per_positive = s.negatives;
    opt.compact_gradient = s.compact;
    opt.rows_in_place = s.rows_in_place;
    check_one_rank(parts.train, optimizer, opt);
  }
}

}  // namespace

TEST_CASE("memory forecast: one rank's accounts are the fit's, byte for byte") {
  SUBCASE("row-wise Adagrad") {
    check_settings(tutti::rowwise_adagrad{});
  }
  SUBCASE("lazy Adam") {
    check_settings(tutti::lazy_adam{});
  }
  SUBCASE("row-sparse SGD with momentum") {
    check_settings(tutti::row_sparse_sgd{.momentum = 0.9f});
  }
  SUBCASE("dense Adam") {
    check_settings(tutti::adam{});
  }
  SUBCASE("plain SGD (no state)") {
    check_settings(tutti::sgd{});
  }
}

TEST_CASE("memory forecast: a log with repeated pairs lists each pair once, as forecast") {
  auto train = implicit_courses(300, 120).train;
  const std::size_t n = train.size();
  for (std::size_t r = 0; r < n; r += 3) {  // a third of the rows twice
    train.users.push_back(train.users[r]);
    train.items.push_back(train.items[r]);
    train.labels.push_back(train.labels[r]);
    if (train.has_timestamps()) train.timestamps.push_back(train.timestamps[r]);
  }
  REQUIRE(distinct_pairs(train) < train.size());
  tutti::train_options opt{
      .batch = 64, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  opt.negatives.per_positive = 4;
  check_one_rank(train, tutti::rowwise_adagrad{}, opt);
}

TEST_CASE("memory forecast: ratings copy a label a row, a log of positives does not") {
  auto train = tutti::data::as_positives(implicit_courses(300, 120).train);
  REQUIRE(tutti::data::labels_all_equal(train));
  tutti::train_options opt{
      .batch = 64, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  const auto pairs = tutti::forecast_trainer_memory(model_for(train, tutti::loss_kind::squared),
                                                    tutti::rowwise_adagrad{}, opt, run_of(train));
  CHECK(pairs.rows == train.size() * 2 * sizeof(std::int32_t));
  check_one_rank(train, tutti::rowwise_adagrad{}, opt, tutti::loss_kind::squared);
  for (std::size_t r = 0; r < train.size(); r += 2) train.labels[r] = 4.f;  // ratings now
  REQUIRE_FALSE(tutti::data::labels_all_equal(train));
  train.implicit = false;
  check_one_rank(train, tutti::rowwise_adagrad{}, opt, tutti::loss_kind::squared);
  CHECK(run_of(train).one_label == false);
}

TEST_CASE(
    "memory forecast: the negatives' offsets take 4 bytes a learner below 2^32 pairs, 8 from it") {
  const auto parts = implicit_courses(300, 120);
  tutti::train_options opt{.batch = 64, .epochs = 1};
  opt.negatives.per_positive = 2;
  tutti::memory_run run = run_of(parts.train);
  const auto with_pairs = [&](std::uint64_t pairs) {
    run.distinct_pairs = pairs;
    return tutti::forecast_trainer_memory(model_for(parts.train, tutti::loss_kind::logistic),
                                          tutti::rowwise_adagrad{}, opt, run)
        .step_buffers;
  };
  const std::uint64_t offsets = run.learners + 1;
  // One pair more adds its course (4 bytes) and, across 2^32, doubles every offset.
  CHECK(with_pairs(0xffffffffULL) - with_pairs(0xfffffffeULL) == sizeof(std::int32_t));
  CHECK(with_pairs(0x100000000ULL) - with_pairs(0xffffffffULL) ==
        sizeof(std::int32_t) + offsets * sizeof(std::uint32_t));
}

TEST_CASE("memory forecast: popularity negatives, a list loss and accumulation") {
  const auto parts = implicit_courses(300, 120);
  tutti::train_options opt{
      .batch = 64, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  opt.negatives.per_positive = 3;
  opt.negatives.sampler = tutti::negative_sampler::popularity;
  SUBCASE("popularity, logistic") {
    check_one_rank(parts.train, tutti::rowwise_adagrad{}, opt);
  }
  SUBCASE("popularity, softmax (the draws' odds too)") {
    check_one_rank(parts.train, tutti::rowwise_adagrad{}, opt, tutti::loss_kind::softmax);
  }
  SUBCASE("accumulation 2 keeps the table-sized arena") {
    opt.accumulation = 2;
    opt.negatives.sampler = tutti::negative_sampler::uniform;
    check_one_rank(parts.train, tutti::adam{}, opt);
    check_one_rank(parts.train, tutti::rowwise_adagrad{}, opt);
  }
}

TEST_CASE("memory forecast: each of two ranks holds what the forecast says") {
  const auto parts = implicit_courses(300, 120);
  tutti::train_options opt{
      .batch = 96, .epochs = 1, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  opt.negatives.per_positive = 2;
  const tutti::memory_accounts forecast =
      tutti::forecast_trainer_memory(model_for(parts.train, tutti::loss_kind::logistic),
                                     tutti::rowwise_adagrad{}, opt, run_of(parts.train, 2));
  const auto runs = tutti_test::train_ranks<mf>(
      2, parts.train, opt, [&] { return model_for(parts.train, tutti::loss_kind::logistic); },
      tutti::rowwise_adagrad{});
  for (const auto& r : runs) check_equal(forecast, r.result.memory);
  // Two ranks keep the table-sized gradient (the exchange merges ranks' rows into it).
  const tutti::memory_accounts one =
      tutti::forecast_trainer_memory(model_for(parts.train, tutti::loss_kind::logistic),
                                     tutti::rowwise_adagrad{}, opt, run_of(parts.train, 1));
  CHECK(forecast.gradients > one.gradients);
  // Each step deals its own positions: the shard is each rank's count of real slots alone.
  CHECK(forecast.shard == 2 * sizeof(std::uint64_t));
  CHECK(one.shard == sizeof(std::uint64_t));
  // Dealt whole (a sampler without `fill_slots`): a position a slot, half as many on two ranks.
  tutti::memory_run whole_one = run_of(parts.train, 1), whole_two = run_of(parts.train, 2);
  whole_one.positions_by_step = whole_two.positions_by_step = false;
  const auto model = model_for(parts.train, tutti::loss_kind::logistic);
  const auto dealt_one =
      tutti::forecast_trainer_memory(model, tutti::rowwise_adagrad{}, opt, whole_one);
  const auto dealt_two =
      tutti::forecast_trainer_memory(model, tutti::rowwise_adagrad{}, opt, whole_two);
  CHECK(dealt_one.shard == (parts.train.size() + 1) * sizeof(std::uint64_t));
  CHECK(dealt_two.shard < dealt_one.shard);
  CHECK(dealt_one.step_buffers + 96 * sizeof(std::uint64_t) == one.step_buffers);
}

}  // namespace test_memory_forecast
