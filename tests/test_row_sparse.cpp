// SPDX-License-Identifier: Apache-2.0
// The row-sparse step: optimizers that visit only the rows a step touched (lazy_adam,
// rowwise_adagrad, row_sparse_sgd) and the trainer's step that costs O(batch). Each optimizer
// matches its dense formula on the rows it visits and leaves the others alone, bit for bit; the
// trainer's row-sparse SGD is dense SGD bit for bit on 1 to 3 ranks, sparse exchange or not,
// through a skipped non-finite step; lazy Adam never moves a row after its last touch.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"
#include "wrapped_model.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <omp.h>

namespace test_row_sparse {

namespace {

using tutti_test::count_differing;
using tutti_test::implicit_courses;
using tutti_test::rank_run;
using tutti_test::train_ranks;
using mf = tutti::models::matrix_factorization<tutti::host_space>;
using tutti::segment_kind;
using tutti::segment_rows;
using tutti::sparse_exchange_policy;

// An embedding table of odd width (rows straddle vector lanes), a bias vector, a dense matrix.
tutti::parameter_layout small_layout() {
  tutti::parameter_layout l;
  l.add("table", 300, 7, segment_kind::embedding);
  l.add("bias", 300, 1, segment_kind::bias);
  l.add("weight", 5, 3, segment_kind::dense);
  return l;
}

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 1.f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// A gradient that is zero outside `rows` of segments 0 and 1 (the sparse ones), random inside
// them and over segment 2.
std::vector<float> gradient_on(const tutti::parameter_layout& l,
                               const std::vector<std::int32_t>& rows, unsigned seed) {
  std::vector<float> g(l.total(), 0.f);
  const auto r = random_values(l.total(), seed);
  for (std::size_t s = 0; s < 2; ++s)
    for (auto row : rows)
      for (std::size_t c = 0; c < l[s].cols; ++c) {
        const std::size_t i = l[s].offset + static_cast<std::size_t>(row) * l[s].cols + c;
        g[i] = r[i];
      }
  for (std::size_t i = l[2].offset; i < l[2].offset + l[2].size(); ++i) g[i] = r[i];
  return g;
}

std::vector<segment_rows> select(const std::vector<std::int32_t>& rows) {
  return {segment_rows{false, rows}, segment_rows{false, rows}, segment_rows{}};
}

bool in(const std::vector<std::int32_t>& rows, std::size_t r) {
  return std::binary_search(rows.begin(), rows.end(), static_cast<std::int32_t>(r));
}

}  // namespace

TEST_CASE("lazy_adam: the touched rows take Adam's bits, the others keep value and moments") {
  const tutti::host_space space;
  const auto l = small_layout();
  const std::size_t n = l.total();
  // Contiguous runs, single rows, the first and the last row.
  const std::vector<std::int32_t> rows = {0, 1, 2, 3, 17, 40, 41, 150, 298, 299};
  std::vector<float> p_dense = random_values(n, 1), p_lazy = p_dense;
  std::vector<float> s_dense(2 * n, 0.f), s_lazy(2 * n, 0.f);
  // Three steps: the moments of the earlier steps must survive the later ones untouched.
  for (std::uint64_t t = 1; t <= 3; ++t) {
    const auto step_rows = t == 2 ? std::vector<std::int32_t>{5, 6, 299} : rows;
    const auto g = gradient_on(l, step_rows, 10 + unsigned(t));
    const std::vector<float> before_p = p_lazy, before_s = s_lazy;
    const auto sel = select(step_rows);
    tutti::lazy_adam{}.step_rows(space, l, std::span<float>(p_lazy), std::span<const float>(g),
                                 std::span<float>(s_lazy), sel, 0.01f, t);
    // Dense Adam on a copy: what a touched row must equal.
    std::vector<float> p_ref = before_p, s_ref = before_s;
    tutti::adam{}.step(space, std::span<float>(p_ref), std::span<const float>(g),
                       std::span<float>(s_ref), 0.01f, t);
    std::size_t checked_rows = 0;
    for (std::size_t s = 0; s < 3; ++s)
      for (std::size_t r = 0; r < l[s].rows; ++r) {
        const bool touched = s == 2 || in(step_rows, r);
        checked_rows += touched;
        for (std::size_t c = 0; c < l[s].cols; ++c) {
          const std::size_t i = l[s].offset + r * l[s].cols + c;
          const auto& want_p = touched ? p_ref : before_p;
          const auto& want_s = touched ? s_ref : before_s;
          REQUIRE(p_lazy[i] == want_p[i]);
          REQUIRE(s_lazy[i] == want_s[i]);
          REQUIRE(s_lazy[n + i] == want_s[n + i]);
        }
      }
    CHECK(checked_rows == 2 * step_rows.size() + l[2].rows);
  }
  // Every row selected: dense Adam, bit for bit.
  const std::vector<float> g = random_values(n, 99);
  std::vector<float> p_all = p_lazy, s_all = s_lazy;
  const std::vector<segment_rows> whole(3);
  tutti::lazy_adam{}.step_rows(space, l, std::span<float>(p_all), std::span<const float>(g),
                               std::span<float>(s_all), whole, 0.01f, 4);
  // The padding after each segment is not a row: dense Adam with a zero gradient leaves it too.
  std::vector<float> g_no_pad(n, 0.f);
  for (std::size_t s = 0; s < 3; ++s)
    std::copy(g.begin() + std::ptrdiff_t(l[s].offset),
              g.begin() + std::ptrdiff_t(l[s].offset + l[s].size()),
              g_no_pad.begin() + std::ptrdiff_t(l[s].offset));
  std::vector<float> p_all_lazy(p_lazy), s_all_lazy(s_lazy);
  tutti::lazy_adam{}.step_rows(space, l, std::span<float>(p_all_lazy),
                               std::span<const float>(g_no_pad), std::span<float>(s_all_lazy),
                               whole, 0.01f, 4);
  tutti::adam{}.step(space, std::span<float>(p_lazy), std::span<const float>(g_no_pad),
                     std::span<float>(s_lazy), 0.01f, 4);
  CHECK(count_differing(p_all_lazy, p_lazy) == 0);
  CHECK(count_differing(s_all_lazy, s_lazy) == 0);
}

TEST_CASE("rowwise_adagrad: one accumulator per embedding row, Adagrad elsewhere") {
  const tutti::host_space space;
  const auto l = small_layout();
  const tutti::rowwise_adagrad opt{.eps = 1e-8f};
  // 300 table rows + 300 biases + 15 dense values.
  REQUIRE(opt.state_size(l) == 300 + 300 + 15);
  const std::vector<std::int32_t> rows = {2, 3, 4, 100, 299};
  std::vector<float> p = random_values(l.total(), 3), state(opt.state_size(l), 0.f);
  const std::vector<float> p0 = p;
  std::vector<float> acc_table(300, 0.f), acc_bias(300, 0.f), acc_dense(15, 0.f);
  std::vector<float> want = p0;
  for (std::uint64_t t = 1; t <= 2; ++t) {
    const auto g = gradient_on(l, rows, 20 + unsigned(t));
    const auto sel = select(rows);
    opt.step_rows(space, l, std::span<float>(p), std::span<const float>(g), std::span<float>(state),
                  sel, 0.1f, t);
    // The reference, written out from the formulas.
    for (auto r : rows) {
      const std::size_t at = l[0].offset + std::size_t(r) * 7;
      float sq = 0.f;
      for (std::size_t c = 0; c < 7; ++c) sq += g[at + c] * g[at + c];
      acc_table[std::size_t(r)] += sq / 7.f;
      const float rate = 0.1f / (std::sqrt(acc_table[std::size_t(r)]) + 1e-8f);
      for (std::size_t c = 0; c < 7; ++c) want[at + c] -= rate * g[at + c];
      const std::size_t b = l[1].offset + std::size_t(r);
      acc_bias[std::size_t(r)] += g[b] * g[b];
      want[b] -= 0.1f * g[b] / (std::sqrt(acc_bias[std::size_t(r)]) + 1e-8f);
    }
    for (std::size_t i = 0; i < 15; ++i) {
      const std::size_t at = l[2].offset + i;
      acc_dense[i] += g[at] * g[at];
      want[at] -= 0.1f * g[at] / (std::sqrt(acc_dense[i]) + 1e-8f);
    }
  }
  CHECK(count_differing(p, want) == 0);
  for (std::size_t r = 0; r < 300; ++r) {
    CHECK(state[r] == acc_table[r]);
    CHECK(state[300 + r] == acc_bias[r]);
  }
  for (std::size_t i = 0; i < 15; ++i) CHECK(state[600 + i] == acc_dense[i]);

  // The dense layout step over every row equals the row step with every row selected.
  const auto g = random_values(l.total(), 77);
  std::vector<float> p_dense = p, s_dense = state;
  opt.step(space, l, std::span<float>(p_dense), std::span<const float>(g),
           std::span<float>(s_dense), 0.1f, 3);
  const std::vector<segment_rows> whole(3);
  opt.step_rows(space, l, std::span<float>(p), std::span<const float>(g), std::span<float>(state),
                whole, 0.1f, 3);
  CHECK(count_differing(p, p_dense) == 0);
  CHECK(count_differing(state, s_dense) == 0);
}

TEST_CASE("row-sparse optimizers: a selection that does not match the layout is refused") {
  const tutti::host_space space;
  const auto l = small_layout();
  std::vector<float> p(l.total()), g(l.total()), s(2 * l.total());
  const std::vector<segment_rows> two(2);
  CHECK_THROWS_WITH_AS(
      tutti::lazy_adam{}.step_rows(space, l, std::span<float>(p), std::span<const float>(g),
                                   std::span<float>(s), two, 0.1f, 1),
      doctest::Contains("the row selection has 2 entries for a layout of 3 segments"),
      tutti::invalid_argument);
}

namespace {

mf make_mf(const tutti::data::interactions& d) {
  return mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items());
}

template <class Optimizer, class Model = mf>
std::vector<rank_run> train_with(int world, const tutti::data::interactions& train,
                                 tutti::train_options opt, Optimizer optimizer) {
  return train_ranks<Model>(
      world, train, opt, [&] { return make_mf(train); }, optimizer);
}

}  // namespace

TEST_CASE("row-sparse step: row_sparse_sgd is sgd bit for bit on 1, 2 and 3 ranks") {
  const auto parts = implicit_courses(900, 300);
  for (int world : {1, 2, 3})
    for (auto policy : {sparse_exchange_policy::off, sparse_exchange_policy::on}) {
      CAPTURE(world);
      CAPTURE(to_string(policy));
      const tutti::train_options opt{.batch = 96,
                                     .epochs = 2,
                                     .base_lr = 0.1,
                                     .seed = 3,
                                     .evaluate_each_epoch = false,
                                     .sparse_exchange = policy};
      const auto dense = train_with(world, parts.train, opt, tutti::sgd{});
      const auto rows = train_with(world, parts.train, opt, tutti::row_sparse_sgd{});
      for (std::size_t r = 0; r < rows.size(); ++r) {
        CHECK(count_differing(rows[r].params, dense[r].params) == 0);
        CHECK(rows[r].result.epochs.back().train_loss == dense[r].result.epochs.back().train_loss);
      }
    }
}

namespace {

// Matrix factorisation whose gradient turns NaN at one call, in a touched user row.
using poisoned_mf = tutti_test::poisoned_model<mf>;

}  // namespace

TEST_CASE("row-sparse step: a skipped non-finite step leaves no trace in the next steps") {
  const auto parts = implicit_courses(600, 200);
  const tutti::train_options opt{
      .batch = 64, .epochs = 1, .base_lr = 0.1, .seed = 4, .evaluate_each_epoch = false};
  auto run = [&](auto optimizer) {
    tutti::trainer<poisoned_mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant,
                   decltype(optimizer)>
        t(poisoned_mf(make_mf(parts.train), 5), {}, {}, {}, optimizer, opt);
    auto r = t.fit(parts.train, {});
    return rank_run{t.parameters_on_host(), std::move(r)};
  };
  const auto dense = run(tutti::sgd{});
  const auto rows = run(tutti::row_sparse_sgd{});
  REQUIRE(rows.result.skipped_steps == 1);
  CHECK(rows.result.nonfinite.at(0).global_step == 5);
  CHECK(std::all_of(rows.params.begin(), rows.params.end(),
                    [](float v) { return std::isfinite(v); }));
  // The NaN row was zeroed with the rest: every later step is dense SGD's.
  CHECK(count_differing(rows.params, dense.params) == 0);
}

TEST_CASE("row-sparse step: lazy Adam leaves a row where its last touch put it") {
  // User 0's only samples are in the first step (contiguous shards, no shuffling); a run on the
  // whole data and a run on that first step alone must end with the same row 0, bit for bit.
  auto all = implicit_courses(400, 150).train;
  std::vector<std::size_t> order(all.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(),
                        [&](std::size_t i) { return all.users[i] == 0; });
  tutti::data::interactions d = all;
  for (std::size_t k = 0; k < order.size(); ++k) {
    d.users[k] = all.users[order[k]];
    d.items[k] = all.items[order[k]];
    d.labels[k] = all.labels[order[k]];
  }
  const std::size_t batch = 32;
  std::size_t zeros = 0;
  while (zeros < d.size() && d.users[zeros] == 0) ++zeros;
  REQUIRE(zeros > 0);
  REQUIRE(zeros <= batch);
  tutti::data::interactions first = d;
  first.users.resize(batch);
  first.items.resize(batch);
  first.labels.resize(batch);
  first.timestamps.clear();
  d.timestamps.clear();
  const tutti::train_options opt{
      .batch = batch, .epochs = 1, .base_lr = 0.05, .seed = 6, .evaluate_each_epoch = false};
  auto row0 = [&](const tutti::data::interactions& train, auto optimizer) {
    // The same table sizes for both runs: the model is sized by the whole data.
    tutti::trainer<mf, tutti::contiguous_shards, tutti::single_rank, tutti::constant,
                   decltype(optimizer)>
        t(make_mf(d), tutti::contiguous_shards{.shuffle_within = false}, {}, {}, optimizer, opt);
    t.fit(train, {});
    const auto p = t.parameters_on_host();
    const tutti::segment seg = make_mf(d).layout()[0];  // a copy: the model is a temporary
    return std::vector<float>(p.begin() + std::ptrdiff_t(seg.offset),
                              p.begin() + std::ptrdiff_t(seg.offset + seg.cols));
  };
  CHECK(row0(d, tutti::lazy_adam{}) == row0(first, tutti::lazy_adam{}));
  // Dense Adam keeps moving the row by its momentum: the property is not a tautology.
  CHECK(row0(d, tutti::adam{}) != row0(first, tutti::adam{}));
}

TEST_CASE("row-sparse step: W ranks train as one rank at the same global batch (lazy Adam)") {
  const auto parts = implicit_courses(900, 300);
  const tutti::train_options opt{
      .batch = 96, .epochs = 2, .base_lr = 0.01, .seed = 8, .evaluate_each_epoch = false};
  const auto one = train_with(1, parts.train, opt, tutti::lazy_adam{});
  for (int world : {2, 3}) {
    CAPTURE(world);
    const auto many = train_with(world, parts.train, opt, tutti::lazy_adam{});
    tutti_test::check_replicas_agree(many);
    // Different sums (rank shares of the batch) of the same gradient: rounding only.
    CHECK(tutti_test::relative_difference(many[0].params, one[0].params) < 1e-5);
  }
}

namespace {

// Matrix factorisation that does not say which rows it touched.
using silent_mf = tutti_test::silent_model<mf>;

}  // namespace

TEST_CASE("row-sparse step: refused where it cannot run, with the reason") {
  const auto parts = implicit_courses(200, 50);
  tutti::train_options opt{.batch = 32, .epochs = 1};
  opt.overlap_reduce = true;
  CHECK_THROWS_WITH_AS(
      (tutti::trainer<mf, tutti::shuffled_shards, tutti::single_rank, tutti::constant,
                      tutti::lazy_adam>(make_mf(parts.train), {}, {}, {}, {}, opt)),
      doctest::Contains("overlap_reduce with a row-sparse optimizer"), tutti::invalid_argument);
  opt.overlap_reduce = false;
  CHECK_THROWS_WITH_AS((tutti::trainer<silent_mf, tutti::shuffled_shards, tutti::single_rank,
                                       tutti::constant, tutti::rowwise_adagrad>(
                           silent_mf(make_mf(parts.train)), {}, {}, {}, {}, opt)),
                       doctest::Contains("the model reports no row-sparse segment"),
                       tutti::invalid_argument);
}

namespace {

// A row-sparse optimizer without `with_row_update`: the trainer takes its `step_rows`, then a
// pass of its own that zeroes the touched gradient rows.
template <class O>
struct step_rows_only {
  O inner;
  std::size_t state_size(std::size_t n) const { return inner.state_size(n); }
  std::size_t state_size(const tutti::parameter_layout& l) const {
    return tutti::detail::optimizer_state_floats(inner, l);
  }
  bool row_sparse() const noexcept { return true; }
  template <class Space>
  void step(const Space& space, std::span<float> p, std::span<const float> g,
            std::span<float> state, float lr, std::uint64_t t) const {
    inner.step(space, p, g, state, lr, t);
  }
  template <class Space>
  requires(Space::host_accessible) void step_rows(const Space& space,
                                                  const tutti::parameter_layout& layout,
                                                  std::span<float> p, std::span<const float> g,
                                                  std::span<float> state, tutti::row_selection rows,
                                                  float lr, std::uint64_t t) const {
    inner.step_rows(space, layout, p, g, state, rows, lr, t);
  }
};

static_assert(tutti::optimizer_fuses_rows<tutti::lazy_adam, tutti::host_space>);
static_assert(tutti::optimizer_fuses_rows<tutti::rowwise_adagrad, tutti::host_space>);
static_assert(tutti::optimizer_fuses_rows<tutti::row_sparse_sgd, tutti::host_space>);
static_assert(!tutti::optimizer_fuses_rows<step_rows_only<tutti::lazy_adam>, tutti::host_space>);

template <class O>
void check_fused_pass_matches(O optimizer) {
  const auto parts = implicit_courses(900, 300);
  const tutti::train_options opt{
      .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 6, .evaluate_each_epoch = false};
  for (int world : {1, 2}) {
    CAPTURE(world);
    const auto fused = train_with(world, parts.train, opt, optimizer);
    const auto apart = train_with(world, parts.train, opt, step_rows_only<O>{optimizer});
    for (std::size_t r = 0; r < fused.size(); ++r) {
      CHECK(count_differing(fused[r].params, apart[r].params) == 0);
      CHECK(fused[r].result.epochs.back().train_loss == apart[r].result.epochs.back().train_loss);
    }
  }
}

}  // namespace

TEST_CASE("row-sparse step: the update and the zeroing in one pass give step_rows' bits") {
  // The trainer runs `with_row_update`'s run function and zeroes each run's gradient right
  // after; a stale gradient row left unzeroed, or a run updated twice, changes the parameters.
  SUBCASE("lazy Adam") {
    check_fused_pass_matches(tutti::lazy_adam{});
  }
  SUBCASE("row-wise Adagrad") {
    check_fused_pass_matches(tutti::rowwise_adagrad{});
  }
  SUBCASE("row-sparse SGD, momentum") {
    check_fused_pass_matches(tutti::row_sparse_sgd{.momentum = 0.9f});
  }
}

TEST_CASE("row-sparse step: one parallel pass visits every value of the selection exactly once") {
  // Segments of very different widths and selections: a wide table with scattered rows and a
  // long run, a bias vector, a dense segment of several pieces, an empty selection.
  tutti::parameter_layout l;
  l.add("wide", 20000, 9, segment_kind::embedding);
  l.add("bias", 20000, 1, segment_kind::bias);
  l.add("dense", 4000, 5, segment_kind::dense);
  l.add("unused", 50, 3, segment_kind::embedding);
  std::vector<std::int32_t> rows;
  for (std::int32_t r = 0; r < 20000; r += 7) rows.push_back(r);
  for (std::int32_t r = 6001; r < 9000; ++r)
    if (r % 7 != 0) rows.push_back(r);
  std::sort(rows.begin(), rows.end());
  const std::vector<segment_rows> sel = {segment_rows{false, rows}, segment_rows{false, rows},
                                         segment_rows{}, segment_rows{false, {}}};
  tutti::detail::row_runs runs;
  runs.build(l, sel);
  CHECK(runs.values() == rows.size() * 10 + 4000 * 5);
  for (int threads : {1, 2, 3, 4}) {
    CAPTURE(threads);
    std::vector<std::atomic<int>> visits(l.total());
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    runs.for_each(tutti::host_space{}, [&](const tutti::detail::row_run& r) {
      const auto& s = l[r.segment];
      for (std::size_t i = s.offset + std::size_t(r.first) * s.cols;
           i < s.offset + std::size_t(r.last) * s.cols; ++i)
        visits[i].fetch_add(1, std::memory_order_relaxed);
    });
    omp_set_num_threads(before);
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < l.segments().size(); ++k)
      for (std::size_t r = 0; r < l[k].rows; ++r) {
        const int want = k == 2 || (k < 2 && in(rows, r)) ? 1 : 0;
        for (std::size_t c = 0; c < l[k].cols; ++c)
          wrong += visits[l[k].offset + r * l[k].cols + c].load() != want;
      }
    CHECK(wrong == 0);
  }
}

namespace {

// MF's row_gradient_finite() after one loss_and_gradient call on `users` (item k for slot k),
// with zero embeddings and biases, no l2, squared loss, scale 1 and the global bias `g`: each
// slot adds 2g to its user's and its item's bias gradient, finite on its own.
struct written_check {
  bool model_says_finite;
  bool rows_finite;  // a scan of every touched row of the four row-sparse segments
};
written_check check_written(const std::vector<std::int32_t>& users, float g) {
  const std::size_t n = users.size();
  mf m({.dim = 4, .l2 = 0.f, .loss = tutti::loss_kind::squared}, 8, static_cast<std::int32_t>(n));
  std::vector<float> params(m.layout().total(), 0.f), grads(m.layout().total(), 0.f);
  params[m.layout()[4].offset] = g;  // the global bias
  std::vector<std::int32_t> items(n);
  for (std::size_t k = 0; k < n; ++k) items[k] = static_cast<std::int32_t>(k);
  const std::vector<float> labels(n, 0.f), weights(n, 1.f);
  float loss = 0;
  m.loss_and_gradient(params, {users, items, labels, weights}, grads, 1.f, &loss);
  bool finite = true;
  for (std::size_t s = 0; s < 4; ++s)
    for (std::int32_t r : m.touched_rows(s))
      for (std::size_t c = 0; c < m.layout()[s].cols; ++c)
        finite =
            finite &&
            std::isfinite(
                grads[m.layout()[s].offset + static_cast<std::size_t>(r) * m.layout()[s].cols + c]);
  return {m.row_gradient_finite(), finite};
}

}  // namespace

TEST_CASE("row-sparse step: MF says its rows are finite exactly when they are, as it writes them") {
  static_assert(tutti::model_checks_row_gradient<mf>);
  // Three slots of users 0, 1, 2: every bias gradient 3e38, finite.
  auto c = check_written({0, 1, 2}, 1.5e38f);
  CHECK(c.rows_finite);
  CHECK(c.model_says_finite);
  // Users 0, 0, 1: user 0's bias gradient 3e38 + 3e38 overflows, from finite contributions.
  c = check_written({0, 0, 1}, 1.5e38f);
  CHECK_FALSE(c.rows_finite);
  CHECK_FALSE(c.model_says_finite);
  // 600 slots of user 0, 1e36 each: every chunk's piece is finite, the chained sum is not.
  c = check_written(std::vector<std::int32_t>(600, 0), 5e35f);
  CHECK_FALSE(c.rows_finite);
  CHECK_FALSE(c.model_says_finite);
  // The same 600 slots at 1e35 each: 6e37, finite.
  c = check_written(std::vector<std::int32_t>(600, 0), 5e34f);
  CHECK(c.rows_finite);
  CHECK(c.model_says_finite);
}

namespace {

// Every learner once, every row the same course: a step of B samples over W ranks touches B / W
// learners on each rank (the shard is a permutation of distinct learners) and one course.
tutti::data::interactions one_row_per_learner(std::int32_t learners) {
  tutti::data::interactions d;
  for (std::int32_t u = 0; u < learners; ++u) {
    d.users.push_back(u);
    d.items.push_back(0);
    d.labels.push_back(1.f);
    d.user_ids.push_back(1000 + u);
  }
  d.item_ids.push_back(7);
  d.implicit = true;
  return d;
}

}  // namespace

TEST_CASE("row-sparse step: each rank counts the rows its steps touched, per row-sparse segment") {
  const auto train = one_row_per_learner(960);
  const tutti::parameter_layout layout = make_mf(train).layout();
  const auto extent = [&](std::size_t s) {
    const std::size_t end =
        s + 1 < layout.segments().size() ? layout[s + 1].offset : layout.total();
    return (end - layout[s].offset) * sizeof(float);
  };
  for (int world : {1, 2, 3, 4}) {
    CAPTURE(world);
    const tutti::train_options opt{
        .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 5, .evaluate_each_epoch = false};
    const auto runs = train_with(world, train, opt, tutti::rowwise_adagrad{});
    for (const rank_run& run : runs) {
      const auto& segs = run.result.row_segments;
      REQUIRE(segs.size() == 4);  // the two tables and the two per-row biases
      for (const tutti::row_segment_traffic& t : segs) {
        CAPTURE(layout[t.segment].name);
        // The learners' segments: B / W rows a step on every rank; the courses': the one course.
        const double expected = layout[t.segment].rows == 960 ? 96.0 / world : 1.0;
        CHECK(t.rows_per_step == expected);
        CHECK(t.words == (layout[t.segment].cols + 2) / 2);
        CHECK(t.dense_bytes == extent(t.segment));
        CHECK(t.row_bytes() == expected * double(t.words) * 8.0);
        // The step gathers the touched ids, two to a 64-bit word.
        CHECK(t.ids_gathered);
        CHECK(t.id_bytes() == expected * 4.0);
        // Every rank updates the union: the B learners of the step, the one course.
        CHECK(t.table_rows == layout[t.segment].rows);
        CHECK(t.cols == layout[t.segment].cols);
        CHECK(t.updated_rows_per_step == (layout[t.segment].rows == 960 ? 96.0 : 1.0));
      }
    }
  }
}

TEST_CASE("row-sparse step: a dense step lists no rows, a sparse exchange lists them") {
  const auto train = one_row_per_learner(960);
  tutti::train_options opt{
      .batch = 96, .epochs = 1, .base_lr = 0.05, .seed = 5, .evaluate_each_epoch = false};
  CHECK(train_with(2, train, opt, tutti::sgd{})[0].result.row_segments.empty());
  opt.sparse_exchange = sparse_exchange_policy::on;
  const auto runs = train_with(2, train, opt, tutti::sgd{});
  const tutti::parameter_layout layout = make_mf(train).layout();
  for (const rank_run& run : runs) {
    REQUIRE(run.result.row_segments.size() == 4);
    for (const tutti::row_segment_traffic& t : run.result.row_segments) {
      CHECK(t.rows_per_step == (layout[t.segment].rows == 960 ? 48.0 : 1.0));
      CHECK(t.id_bytes() == 0.0);             // sgd's dense update needs no union of the rows
      CHECK(t.updated_rows_per_step == 0.0);  // and updates the whole table
    }
  }
}

}  // namespace test_row_sparse
