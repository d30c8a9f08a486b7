// SPDX-License-Identifier: Apache-2.0
// A gradient in slots: the row-sparse step of one rank keeps the gradient of the rows a step
// touched in an arena sized by the batch (the k-th touched row of a table at row k) instead of
// one the size of the tables. The accumulator's sums to slots are its sums to rows, bit for
// bit; matrix factorisation writes the same gradient in slots as in its layout; the trainer
// ends with the same parameters and losses either way, for every row-sparse optimizer, with
// sampled negatives and a list loss; the finite check and the zeroing cover the slots.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace test_gradient_slots {

namespace {

using tutti_test::count_differing;
using tutti_test::implicit_courses;
using mf = tutti::models::matrix_factorization<tutti::host_space>;
using accumulator = tutti::detail::sparse_accumulator<float, tutti::host_space>;

// n slots of ids in [0, rows): one hot id in about a third of them (its run crosses many
// chunks), the rest uniform, every seventh slot padding (weight 0).
struct slot_batch {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
  std::vector<float> contrib;  // cols per slot
};

slot_batch make_batch(std::size_t n, std::int32_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> id(0, rows - 1);
  std::normal_distribution<float> value(0.f, 1.f);
  slot_batch b;
  for (std::size_t i = 0; i < n; ++i) {
    b.ids.push_back(i % 3 == 0 ? rows / 2 : id(gen));
    b.weights.push_back(i % 7 == 6 ? 0.f : 1.f);
    for (std::size_t c = 0; c < cols; ++c) b.contrib.push_back(i % 7 == 6 ? 0.f : value(gen));
  }
  return b;
}

}  // namespace

TEST_CASE("gradient slots: the accumulator's sum to slot k is its sum to the k-th row, bitwise") {
  const tutti::host_space space;
  for (const std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{256}, std::size_t{257},
                              std::size_t{3000}, std::size_t{20000}}) {
    CAPTURE(n);
    const std::int32_t rows = 5000;
    const std::size_t cols = 9, split = 8;  // an embedding of 8 and its bias, in one pass
    const slot_batch b = make_batch(n, rows, cols, static_cast<unsigned>(n));
    accumulator acc(space);
    acc.group(space, b.ids.data(), b.weights.data(), n, rows);
    std::vector<float> table(static_cast<std::size_t>(rows) * split, 0.f), bias(rows, 0.f);
    acc.scatter_add_split(space, b.contrib.data(), cols, cols, table.data(), split, split,
                          bias.data(), 1);
    std::vector<std::int32_t> touched;
    acc.rows(space, touched);
    std::vector<float> slots(touched.size() * split, 0.f), slot_bias(touched.size(), 0.f);
    const std::size_t written = acc.scatter_add_split_to_slots(
        space, b.contrib.data(), cols, cols, slots.data(), split, split, slot_bias.data(), 1);
    REQUIRE(written == touched.size());
    std::size_t differing = 0;
    for (std::size_t k = 0; k < touched.size(); ++k) {
      const auto r = static_cast<std::size_t>(touched[k]);
      for (std::size_t c = 0; c < split; ++c)
        differing += slots[k * split + c] != table[r * split + c] ? 1 : 0;
      differing += slot_bias[k] != bias[r] ? 1 : 0;
    }
    CHECK(differing == 0);
    // Rows nobody touched got nothing: the table holds exactly the slots' values.
    double table_sum = 0, slot_sum = 0;
    for (float v : table) table_sum += std::abs(v);
    for (float v : slots) slot_sum += std::abs(v);
    CHECK(table_sum == doctest::Approx(slot_sum).epsilon(1e-12));
  }
}

TEST_CASE("gradient slots: a non-finite sum written to a slot is seen as it is written") {
  const tutti::host_space space;
  const std::size_t n = 3000, cols = 4;
  const slot_batch b = make_batch(n, 400, cols, 3);
  const auto written_finite = [&](const slot_batch& p) {
    accumulator acc(space);
    acc.group(space, p.ids.data(), p.weights.data(), n, 400);
    std::vector<float> slots(n * cols, 0.f);
    acc.scatter_add_split_to_slots(space, p.contrib.data(), cols, cols, slots.data(), cols, cols,
                                   nullptr, 0);
    return acc.written_finite();
  };
  for (const std::size_t poisoned : {std::size_t{0}, std::size_t{3}, std::size_t{1001}}) {
    CAPTURE(poisoned);  // slot 3 holds the hot id: its run is chained across chunks
    slot_batch p = b;
    p.weights[poisoned] = 1.f;
    p.contrib[poisoned * cols + 1] = std::numeric_limits<float>::quiet_NaN();
    CHECK_FALSE(written_finite(p));
  }
  CHECK(written_finite(b));
}

namespace {

// The slots' layout of `model` for batches of up to `batch_rows` rows.
tutti::parameter_layout slots_of(const mf& model, std::size_t batch_rows) {
  tutti::parameter_layout slots;
  for (std::size_t s = 0; s < model.layout().segments().size(); ++s) {
    const tutti::segment& g = model.layout().segments()[s];
    slots.add(g.name, model.row_sparse(s) ? std::min(g.rows, batch_rows) : g.rows, g.cols, g.kind);
  }
  return slots;
}

}  // namespace

TEST_CASE("gradient slots: matrix factorisation writes its layout's gradient into slots") {
  const std::int32_t users = 300, items = 80;
  const std::size_t n = 512;
  for (const auto loss : {tutti::loss_kind::logistic, tutti::loss_kind::bpr}) {
    CAPTURE(to_string(loss));
    mf model({.dim = 8, .l2 = 1e-3f, .loss = loss}, users, items);
    std::vector<float> params(model.layout().total(), 0.f);
    model.initialize(params, 7);
    std::mt19937 gen(11);
    std::vector<std::int32_t> u(n), it(n);
    std::vector<float> labels(n), weights(n, 1.f);
    for (std::size_t i = 0; i < n; ++i) {
      u[i] = static_cast<std::int32_t>(gen() % 40) * (i % 2 == 0 ? 1 : 7);  // repeats, gaps
      it[i] = static_cast<std::int32_t>(gen() % items);
      labels[i] = i % 2 == 0 ? 1.f : 0.f;
    }
    if (loss == tutti::loss_kind::bpr)
      for (std::size_t i = 0; i < n; ++i) u[i] = u[i - i % 2];  // a list is one learner's
    const tutti::batch_view batch{u, it, labels, weights,
                                  loss == tutti::loss_kind::bpr ? std::size_t{2} : std::size_t{1}};
    std::vector<float> dense(model.layout().total(), 0.f);
    float dense_loss = 0;
    model.loss_and_gradient(params, batch, dense, 0.5f, &dense_loss);
    std::vector<std::int32_t> touched[4];
    for (std::size_t s = 0; s < 4; ++s) {
      const auto t = model.touched_rows(s);
      touched[s].assign(t.begin(), t.end());
    }

    const tutti::parameter_layout slots = slots_of(model, n);
    model.write_gradient_to_slots(slots);
    std::vector<float> compact(slots.total(), 0.f);
    float slot_loss = 0;
    model.loss_and_gradient(params, batch, compact, 0.5f, &slot_loss);
    CHECK(slot_loss == dense_loss);
    std::size_t differing = 0, values = 0;
    for (std::size_t s = 0; s < 4; ++s) {
      const auto t = model.touched_rows(s);
      REQUIRE(std::vector<std::int32_t>(t.begin(), t.end()) == touched[s]);
      const tutti::segment& mine = model.layout().segments()[s];
      const tutti::segment& slot = slots.segments()[s];
      for (std::size_t k = 0; k < t.size(); ++k)
        for (std::size_t c = 0; c < mine.cols; ++c, ++values)
          differing += compact[slot.offset + k * slot.cols + c] !=
                               dense[mine.offset + static_cast<std::size_t>(t[k]) * mine.cols + c]
                           ? 1
                           : 0;
    }
    CHECK(values > 100);
    CHECK(differing == 0);
    CHECK(compact[slots.segments()[4].offset] == dense[model.layout().segments()[4].offset]);

    model.write_gradient_to_slots(std::nullopt);  // the layout's arena again
    std::vector<float> again(model.layout().total(), 0.f);
    model.loss_and_gradient(params, batch, again, 0.5f, nullptr);
    CHECK(count_differing(again, dense) == 0);
  }
}

TEST_CASE("gradient slots: a layout that does not fit the model or the batch is refused") {
  mf model({.dim = 4}, 50, 20);
  tutti::parameter_layout wrong;
  wrong.add("user_embedding", 10, 5, tutti::segment_kind::embedding);
  CHECK_THROWS_WITH_AS(model.write_gradient_to_slots(wrong),
                       doctest::Contains("segments; expected the model's 5"),
                       tutti::invalid_argument);
  const tutti::parameter_layout slots = slots_of(model, 8);
  model.write_gradient_to_slots(slots);
  std::vector<float> params(model.layout().total(), 0.f), grads(slots.total(), 0.f);
  std::vector<std::int32_t> u(16, 1), it(16, 2);
  std::vector<float> labels(16, 1.f), weights(16, 1.f);
  CHECK_THROWS_WITH_AS(
      model.loss_and_gradient(params, {u, it, labels, weights}, grads, 1.f, nullptr),
      doctest::Contains("8 slots for 'user_embedding' and the batch has 16 slots"),
      tutti::invalid_argument);
  std::vector<float> full(model.layout().total(), 0.f);
  CHECK_THROWS_WITH_AS(
      model.loss_and_gradient(params, {u, it, labels, weights}, full, 1.f, nullptr),
      doctest::Contains("expected the gradient slots' total"), tutti::invalid_argument);
}

TEST_CASE("gradient slots: only the fused row update takes a gradient smaller than the arena") {
  tutti::parameter_layout layout;
  layout.add("user_embedding", 8, 4, tutti::segment_kind::embedding);
  std::vector<float> params(layout.total(), 0.f), slots(layout.total() / 2, 0.f),
      state(2 * layout.total(), 0.f);
  int used = 0;
  const auto use = [&](const auto&) {
    ++used;
  };
  // A device step's kernel (row_step_values) reads the arena's gradient: a smaller one is refused.
  CHECK_THROWS_AS(tutti::lazy_adam{}.row_step_values(layout, params, slots, state, 0.1f, 1),
                  tutti::invalid_argument);
  CHECK_THROWS_AS(
      tutti::row_sparse_sgd{.momentum = 0.9f}.row_step_values(
          layout, params, slots, std::span<float>(state).first(layout.total()), 0.1f, 1),
      tutti::invalid_argument);
  // The host's fused update takes a gradient in slots.
  tutti::lazy_adam{}.with_row_update(layout, params, slots, state, 0.1f, 1, use);
  tutti::row_sparse_sgd{.momentum = 0.9f}.with_row_update(
      layout, params, slots, std::span<float>(state).first(layout.total()), 0.1f, 1, use);
  CHECK(used == 2);
}

namespace {

struct slots_run {
  tutti_test::rank_run run;
  std::uint64_t gradient_bytes;
};

template <class Optimizer>
slots_run train_one(const tutti::data::interactions& train, tutti::train_options opt,
                    Optimizer optimizer, bool compact, tutti::loss_kind loss) {
  opt.compact_gradient = compact;
  tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant, Optimizer> t(
      mf({.dim = 8, .l2 = 1e-3f, .loss = loss}, train.n_users(), train.n_items()), {}, {}, {},
      optimizer, opt);
  auto r = t.fit(train, {});
  const std::uint64_t bytes = r.memory.gradients;
  return {{t.parameters_on_host(), std::move(r)}, bytes};
}

template <class Optimizer>
void check_slots_match(Optimizer optimizer) {
  const auto parts = implicit_courses(900, 300);
  struct setting {
    const char* name;
    tutti::loss_kind loss;
    std::uint32_t negatives;
  };
  for (const setting& s : {setting{"logistic, positives only", tutti::loss_kind::logistic, 0},
                           setting{"logistic, 4 sampled negatives", tutti::loss_kind::logistic, 4},
                           setting{"bpr, 1 sampled negative", tutti::loss_kind::bpr, 1}}) {
    CAPTURE(s.name);
    tutti::train_options opt{
        .batch = 64, .epochs = 2, .base_lr = 0.05, .seed = 6, .evaluate_each_epoch = false};
    opt.negatives.per_positive = s.negatives;
    const slots_run table = train_one(parts.train, opt, optimizer, false, s.loss);
    const slots_run slots = train_one(parts.train, opt, optimizer, true, s.loss);
    CHECK(count_differing(slots.run.params, table.run.params) == 0);
    CHECK(slots.run.result.epochs.back().train_loss == table.run.result.epochs.back().train_loss);
    // The slots hold a batch's rows (64 x (1 + K) at most per table), not the tables' 1,200.
    CHECK(slots.gradient_bytes < table.gradient_bytes);
    CHECK(table.gradient_bytes >= table.run.params.size() * sizeof(float));
  }
}

}  // namespace

TEST_CASE("gradient slots: the trainer ends with the table-sized arena's parameters, bitwise") {
  SUBCASE("lazy Adam") {
    check_slots_match(tutti::lazy_adam{});
  }
  SUBCASE("row-wise Adagrad") {
    check_slots_match(tutti::rowwise_adagrad{});
  }
  SUBCASE("row-sparse SGD, momentum") {
    check_slots_match(tutti::row_sparse_sgd{.momentum = 0.9f});
  }
}

TEST_CASE("gradient slots: the step's finite check and zeroing cover the slots, no other value") {
  // Two tables of 1,000 rows, a dense segment; slots for 6 rows per table.
  tutti::parameter_layout layout;
  layout.add("a", 1000, 3, tutti::segment_kind::embedding);
  layout.add("b", 1000, 1, tutti::segment_kind::bias);
  layout.add("dense", 2, 5, tutti::segment_kind::dense);
  tutti::parameter_layout slots;
  slots.add("a", 6, 3, tutti::segment_kind::embedding);
  slots.add("b", 6, 1, tutti::segment_kind::bias);
  slots.add("dense", 2, 5, tutti::segment_kind::dense);
  tutti::detail::row_step step;
  step.plan(layout, {0, 1}, &slots);
  const std::vector<std::vector<std::int32_t>> touched{{4, 5, 6, 900}, {17}};
  step.select(touched);
  CHECK(step.values() == 4 * 3 + 1 + 10);
  const tutti::host_space space;
  std::vector<float> g(slots.total(), 0.f);
  CHECK_FALSE(step.any_nonfinite(space, g.data()));
  const std::size_t a = slots.segments()[0].offset, b = slots.segments()[1].offset;
  const std::size_t dense = slots.segments()[2].offset;
  // Slot 4 of "a" and slot 1 of "b" hold no touched row: a NaN there is no step's.
  g[a + 4 * 3] = std::numeric_limits<float>::quiet_NaN();
  g[b + 1] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(step.any_nonfinite(space, g.data()));
  for (const std::size_t at : {a + 3 * 3 + 2, b, dense + 9}) {
    CAPTURE(at);
    std::vector<float> h = g;
    h[at] = std::numeric_limits<float>::quiet_NaN();
    CHECK(step.any_nonfinite(space, h.data()));
  }
  std::fill(g.begin(), g.end(), 1.f);
  step.zero(space, g.data());
  std::size_t zeros = 0;
  for (float v : g) zeros += v == 0.f ? 1 : 0;
  CHECK(zeros == step.values());
  CHECK(g[a + 3 * 3 + 2] == 0.f);
  CHECK(g[a + 4 * 3] == 1.f);
  CHECK(step.squared_norm(space, g.data()) == 0.0);
}

}  // namespace test_gradient_slots
