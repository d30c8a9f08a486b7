// SPDX-License-Identifier: Apache-2.0
// Sparse embedding exchange: the rows a step touched travel instead of whole tables. The result
// equals the dense reduce's, the ledger counts what moved, `automatic` picks the cheaper path,
// and the guards, gradient accumulation and replica checks still hold.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"
#include "skip.hpp"
#include "wrapped_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#if __has_include(<cblas.h>)
#include <tutti/models/neural_cf.hpp>
#endif

namespace test_sparse_exchange {

namespace {

using tutti_test::check_replicas_agree;
using tutti_test::count_differing;
using tutti_test::rank_run;
using tutti_test::relative_difference;
using tutti_test::train_ranks;
using mf = tutti::models::matrix_factorization<tutti::host_space>;
using tutti::sparse_exchange_policy;

tutti::data::split_result sparse_data(std::int32_t learners, std::int32_t courses,
                                      double per_learner) {
  auto all = tutti::data::synthetic_courses({.learners = learners,
                                             .courses = courses,
                                             .interactions_per_learner = per_learner,
                                             .implicit = true,
                                             .seed = 17});
  return tutti::data::split(all, {.test_fraction = 0.1, .seed = 4});
}

// The training rows cut to a multiple of `batch`, so every step of an epoch is full.
tutti::data::interactions whole_steps(tutti::data::interactions d, std::size_t batch) {
  const std::size_t n = d.size() / batch * batch;
  d.users.resize(n);
  d.items.resize(n);
  d.labels.resize(n);
  if (!d.timestamps.empty()) d.timestamps.resize(n);
  return d;
}

mf make_mf(const tutti::data::interactions& d, std::int32_t dim = 8) {
  return mf({.dim = dim, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, d.n_users(),
            d.n_items());
}

std::vector<rank_run> train_mf(int world, const tutti::data::interactions& train,
                               const tutti::train_options& opt) {
  return train_ranks<mf>(world, train, opt, [&] { return make_mf(train); });
}

// The bytes per step the documented rule charges with matrix factorisation (four row-sparse
// segments), recomputed from the sampler's shards: per segment the most rows any rank touched,
// then rows when `on`, or when W·max·words·8 / 2 < the segment's dense bytes.
struct predicted {
  std::uint64_t total_bytes = 0;
  std::size_t steps = 0;
  std::size_t sparse_steps = 0;
};

predicted predict_bytes(const tutti::data::interactions& train, const mf& model, int world,
                        const tutti::train_options& opt) {
  const auto& layout = model.layout();
  const auto w = static_cast<std::size_t>(world);
  const std::size_t local = opt.batch / w;
  std::vector<tutti::shard> shards;
  predicted p;
  for (std::size_t epoch = 0; epoch < opt.epochs; ++epoch) {
    shards.clear();
    for (int r = 0; r < world; ++r)
      shards.push_back(tutti::shuffled_shards{}.shard(train.size(), world, r, opt.seed, epoch));
    const std::size_t steps = (shards[0].size() + local - 1) / local;
    for (std::size_t s = 0; s < steps; ++s) {
      std::uint64_t max_rows[4] = {0, 0, 0, 0};
      for (const auto& sh : shards) {
        std::set<std::int32_t> users, items;
        for (std::size_t i = s * local; i < std::min(sh.size(), (s + 1) * local); ++i)
          if (sh.weight(i) != 0.f) {
            users.insert(train.users[sh.indices[i]]);
            items.insert(train.items[sh.indices[i]]);
          }
        const std::uint64_t counts[4] = {users.size(), items.size(), users.size(), items.size()};
        for (int k = 0; k < 4; ++k) max_rows[k] = std::max(max_rows[k], counts[k]);
      }
      std::uint64_t bytes = w * 4 * 8 / 2;  // the counts' gather
      std::size_t dense = layout.total() + tutti::gradient_trailing_floats;
      bool any = false;
      for (std::size_t k = 0; k < 4; ++k) {
        const auto& seg = layout[k];
        const std::size_t extent = layout[k + 1].offset - seg.offset;
        const std::uint64_t as_rows = w * max_rows[k] * ((seg.cols + 2) / 2) * 8 / 2;
        if (opt.sparse_exchange == sparse_exchange_policy::on || as_rows < extent * 4) {
          bytes += as_rows;
          dense -= extent;
          any = true;
        }
      }
      p.total_bytes += bytes + dense * 4;
      p.sparse_steps += any ? 1 : 0;
      ++p.steps;
    }
  }
  return p;
}

// Matrix factorisation whose loss or gradient turns non-finite on one rank at one call, in the
// first row of the user table that call touched; it reports touched rows like the model it wraps.
class poisoned_mf : public tutti_test::wrapped_model<mf> {
 public:
  poisoned_mf(mf inner, int poison_rank, std::size_t poison_call, int rank)
      : wrapped_model(std::move(inner)),
        m_poison_rank(poison_rank),
        m_call(poison_call),
        m_rank(rank) {}

  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum) {
    m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
    if (m_rank == m_poison_rank && m_calls == m_call) {
      const auto rows = m_inner.touched_rows(0);
      if (!rows.empty())
        grads[layout()[0].offset + static_cast<std::size_t>(rows[0]) * layout()[0].cols] =
            std::numeric_limits<float>::quiet_NaN();
    }
    ++m_calls;
  }
  bool row_sparse(std::size_t segment) const { return m_inner.row_sparse(segment); }
  std::span<const std::int32_t> touched_rows(std::size_t segment) const {
    return m_inner.touched_rows(segment);
  }

 private:
  int m_poison_rank;
  std::size_t m_call;
  int m_rank;
  std::size_t m_calls = 0;
};

// Matrix factorisation that does not say which rows it touched.
using silent_mf = tutti_test::silent_model<mf>;

}  // namespace

TEST_CASE("sparse exchange: matrix_factorization reports the rows a batch touched") {
  mf model({.dim = 4}, 50, 30);
  std::vector<float> params(model.layout().total());
  model.initialize(params, 3);
  // Ids with repeats, out of order, and a padding slot whose ids must not count.
  const std::vector<std::int32_t> users = {7, 3, 7, 41, 0, 19};
  const std::vector<std::int32_t> items = {2, 2, 29, 5, 11, 8};
  const std::vector<float> labels = {1, 0, 1, 0, 1, 0};
  const std::vector<float> weights = {1, 1, 1, 1, 0, 1};
  std::vector<float> grads(params.size(), 0.f);
  float loss = 0;
  model.loss_and_gradient(params, {users, items, labels, weights}, grads, 1.f, &loss);
  const std::vector<std::int32_t> want_users = {3, 7, 19, 41}, want_items = {2, 5, 8, 29};
  for (std::size_t seg : {0u, 2u}) {
    const auto rows = model.touched_rows(seg);
    CHECK(std::vector<std::int32_t>(rows.begin(), rows.end()) == want_users);
  }
  for (std::size_t seg : {1u, 3u}) {
    const auto rows = model.touched_rows(seg);
    CHECK(std::vector<std::int32_t>(rows.begin(), rows.end()) == want_items);
  }
  CHECK(!model.row_sparse(4));
  CHECK_THROWS_AS(model.touched_rows(4), tutti::invalid_argument);
  // Every row outside the reported ones has no gradient: what lets the exchange skip them.
  for (std::size_t seg = 0; seg < 4; ++seg) {
    const auto& s = model.layout()[seg];
    const auto rows = model.touched_rows(seg);
    const std::set<std::int32_t> touched(rows.begin(), rows.end());
    for (std::size_t r = 0; r < s.rows; ++r)
      if (!touched.contains(static_cast<std::int32_t>(r)))
        for (std::size_t c = 0; c < s.cols; ++c) CHECK(grads[s.offset + r * s.cols + c] == 0.f);
  }
  // A call without slots touches no row: not the last call's rows again.
  const std::vector<std::int32_t> no_ids;
  const std::vector<float> no_values;
  model.loss_and_gradient(params, {no_ids, no_ids, no_values, no_values}, grads, 1.f, &loss);
  for (std::size_t seg = 0; seg < 4; ++seg) CHECK(model.touched_rows(seg).empty());
}

TEST_CASE("sparse exchange: on gives the parameters and losses of the dense reduce") {
  const auto parts = sparse_data(1500, 800, 4);
  tutti::train_options opt{
      .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 5, .evaluate_each_epoch = false};
  for (int world : {2, 3, 4}) {
    CAPTURE(world);
    opt.sparse_exchange = sparse_exchange_policy::off;
    const auto dense = train_mf(world, parts.train, opt);
    opt.sparse_exchange = sparse_exchange_policy::on;
    const auto sparse = train_mf(world, parts.train, opt);
    const auto& a = sparse[0].result;
    const auto& b = dense[0].result;
    // Exact by construction: rows are summed in rank order, as local_ring sums every value
    // (the ranks that did not touch a row add exact zeros there), and divided by W alike.
    CHECK(count_differing(sparse[0].params, dense[0].params) == 0);
    for (std::size_t e = 0; e < opt.epochs; ++e)
      CHECK(a.epochs[e].train_loss == b.epochs[e].train_loss);
    CHECK(a.sparse_steps == a.steps);
    CHECK(b.sparse_steps == 0);
    CHECK(a.bytes_reduced_per_step < b.bytes_reduced_per_step);
    CHECK(a.dense_bytes_per_step == b.bytes_reduced_per_step);
    check_replicas_agree(sparse);
  }
}

TEST_CASE("sparse exchange: the ledger counts the bytes the rows moved, fewer than dense") {
  const auto parts = sparse_data(1500, 800, 4);
  const tutti::data::interactions train = whole_steps(parts.train, 64);
  const mf model = make_mf(train);
  for (auto policy : {sparse_exchange_policy::on, sparse_exchange_policy::automatic}) {
    CAPTURE(tutti::to_string(policy));
    const tutti::train_options opt{.batch = 64,
                                   .epochs = 1,
                                   .base_lr = 0.05,
                                   .seed = 9,
                                   .evaluate_each_epoch = false,
                                   .sparse_exchange = policy};
    const auto runs = train_mf(2, train, opt);
    const auto& r = runs[0].result;
    const predicted want = predict_bytes(train, model, 2, opt);
    REQUIRE(want.steps == r.steps);
    CHECK(r.sparse_steps == want.sparse_steps);
    CHECK(r.sparse_steps == r.steps);  // a large table, a small batch: rows every step
    CHECK(r.ledger.bytes_reduced_per_step == want.total_bytes / want.steps);
    CHECK(r.bytes_reduced_per_step == r.ledger.bytes_reduced_per_step);
    CHECK(r.dense_bytes_per_step ==
          (model.layout().total() + tutti::gradient_trailing_floats) * sizeof(float));
    CHECK(r.bytes_saved_per_step ==
          std::int64_t(r.dense_bytes_per_step) - std::int64_t(r.bytes_reduced_per_step));
    // 32 samples per rank touch at most 32 of 1500 users and 800 items.
    CHECK(r.bytes_reduced_per_step * 10 < r.dense_bytes_per_step);
  }
}

TEST_CASE("sparse exchange: automatic keeps the dense reduce for a small table and a big batch") {
  // 80 learners and 12 courses, 60 samples on each of 4 ranks: every rank touches half the
  // learners and all courses, so the rows of all ranks together would outweigh the tables.
  const auto parts = sparse_data(80, 12, 12);
  const tutti::data::interactions train = whole_steps(parts.train, 240);
  REQUIRE(train.size() >= 480);
  tutti::train_options opt{
      .batch = 240, .epochs = 3, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  const auto dense = train_mf(4, train, opt);
  opt.sparse_exchange = sparse_exchange_policy::automatic;
  const auto chosen = train_mf(4, train, opt);
  const auto& r = chosen[0].result;
  const predicted want = predict_bytes(train, make_mf(train), 4, opt);
  CHECK(want.sparse_steps == 0);
  CHECK(r.sparse_steps == 0);
  // Only the counts' gather (4 words per rank, charged as 4·4·8/2 bytes) was added.
  CHECK(r.bytes_reduced_per_step == dense[0].result.bytes_reduced_per_step + 4 * 4 * 8 / 2);
  CHECK(r.bytes_saved_per_step == -std::int64_t(4 * 4 * 8 / 2));
  CHECK(chosen[0].params == dense[0].params);  // the same dense reduce: bitwise
}

TEST_CASE("sparse exchange: a NaN in a touched row on one rank skips the step everywhere") {
  const auto parts = sparse_data(800, 400, 4);
  tutti::train_options opt{
      .batch = 64, .epochs = 1, .base_lr = 0.05, .seed = 2, .evaluate_each_epoch = false};
  const int world = 4;
  auto run_with = [&](sparse_exchange_policy policy) {
    opt.sparse_exchange = policy;
    std::vector<rank_run> out(world);
    tutti::run_local(world, [&](tutti::local_ring ring) {
      tutti::trainer<poisoned_mf, tutti::shuffled_shards, tutti::local_ring> t(
          poisoned_mf(make_mf(parts.train), 1, 3, ring.rank()), {}, ring, {},
          tutti::sgd{.momentum = 0.9f}, opt);
      auto r = t.fit(parts.train, tutti::data::interactions{});
      auto& mine = out[static_cast<std::size_t>(ring.rank())];
      mine.params = t.parameters_on_host();
      mine.result = std::move(r);
    });
    return out;
  };
  const auto sparse = run_with(sparse_exchange_policy::on);
  const auto dense = run_with(sparse_exchange_policy::off);
  for (const auto& r : sparse) {
    CHECK(r.result.skipped_steps == 1);
    REQUIRE(r.result.nonfinite.size() == 1);
    CHECK(r.result.nonfinite[0].rank == 1);
    CHECK(r.result.nonfinite[0].global_step == 3);
    CHECK(std::all_of(r.params.begin(), r.params.end(), [](float v) { return std::isfinite(v); }));
    CHECK(r.result.sparse_steps == r.result.steps);
  }
  check_replicas_agree(sparse);
  CHECK(count_differing(sparse[0].params, dense[0].params) == 0);  // rank-order sums on both
}

TEST_CASE("sparse exchange: with accumulation 3 the rows of every micro-batch travel") {
  const auto parts = sparse_data(1500, 800, 4);
  tutti::train_options opt{.batch = 96,
                           .epochs = 2,
                           .base_lr = 0.05,
                           .seed = 8,
                           .evaluate_each_epoch = false,
                           .accumulation = 3};
  for (int world : {2, 4}) {
    CAPTURE(world);
    opt.sparse_exchange = sparse_exchange_policy::off;
    const auto dense = train_mf(world, parts.train, opt);
    opt.sparse_exchange = sparse_exchange_policy::on;
    const auto sparse = train_mf(world, parts.train, opt);
    // Rows only the first micro-batches touched would be missing (zero) if only the last
    // call's rows were sent.
    CHECK(count_differing(sparse[0].params, dense[0].params) == 0);  // rank-order sums on both
    CHECK(sparse[0].result.epochs.back().train_loss == dense[0].result.epochs.back().train_loss);
    CHECK(sparse[0].result.sparse_steps == sparse[0].result.steps);
    check_replicas_agree(sparse);
  }
}

TEST_CASE("sparse exchange: with Adam and periodic replica checks the replicas stay identical") {
  const auto parts = sparse_data(1500, 800, 4);
  tutti::train_options opt{.batch = 128,
                           .epochs = 2,
                           .base_lr = 0.01,
                           .seed = 6,
                           .evaluate_each_epoch = false,
                           .replica_check_every = 5};
  opt.sparse_exchange = sparse_exchange_policy::automatic;
  const auto sparse = train_ranks<mf, tutti::adam>(
      4, parts.train, opt, [&] { return make_mf(parts.train); }, tutti::adam{});
  opt.sparse_exchange = sparse_exchange_policy::off;
  const auto dense = train_ranks<mf, tutti::adam>(
      4, parts.train, opt, [&] { return make_mf(parts.train); }, tutti::adam{});
  check_replicas_agree(sparse);
  CHECK(sparse[0].result.replica_checks > 1);
  CHECK(sparse[0].result.replica_events.empty());
  CHECK(sparse[0].result.sparse_steps == sparse[0].result.steps);
  // Adam divides by the root of a gradient's square, so a rounding difference in a gradient
  // near zero would become a whole step: the paths must be, and are, the same arithmetic.
  CHECK(count_differing(sparse[0].params, dense[0].params) == 0);
}

TEST_CASE("sparse exchange: a compressing reducer compresses only the dense remainder") {
  const auto parts = sparse_data(1500, 800, 4);
  tutti::train_options opt{.batch = 64,
                           .epochs = 1,
                           .base_lr = 0.05,
                           .seed = 4,
                           .evaluate_each_epoch = false,
                           .sparse_exchange = sparse_exchange_policy::on};
  const auto bf16 = [](tutti::local_ring ring) {
    return tutti::compressed<tutti::local_ring>(ring);
  };
  const auto compressed = train_ranks<mf, tutti::sgd>(
      2, parts.train, opt, [&] { return make_mf(parts.train); }, tutti::sgd{.momentum = 0.9f},
      bf16);
  const auto exact = train_mf(2, parts.train, opt);
  const auto& r = compressed[0].result;
  const std::size_t arena = make_mf(parts.train).layout().total();
  CHECK(r.dense_bytes_per_step == (arena + tutti::gradient_trailing_floats) * 2);
  CHECK(r.sparse_steps == r.steps);
  CHECK(r.bytes_saved_per_step > 0);
  // The rows travel exact; only the biases' remainder was rounded to bf16.
  CHECK(exact[0].result.bytes_reduced_per_step > r.bytes_reduced_per_step);
  CHECK(relative_difference(compressed[0].params, exact[0].params) < 1e-2);
  check_replicas_agree(compressed);
}

TEST_CASE("sparse exchange: on is refused for a model that does not report its rows") {
  const auto parts = sparse_data(200, 50, 4);
  tutti::train_options opt{
      .batch = 64, .epochs = 1, .base_lr = 0.05, .seed = 1, .evaluate_each_epoch = false};
  using silent_trainer = tutti::trainer<silent_mf, tutti::shuffled_shards, tutti::single_rank>;
  opt.sparse_exchange = sparse_exchange_policy::on;
  CHECK_THROWS_WITH_AS(silent_trainer(silent_mf(make_mf(parts.train)), {}, {}, {}, {}, opt),
                       doctest::Contains("touched_rows"), tutti::invalid_argument);
  opt.sparse_exchange = static_cast<sparse_exchange_policy>(7);
  CHECK_THROWS_WITH_AS(silent_trainer(silent_mf(make_mf(parts.train)), {}, {}, {}, {}, opt),
                       doctest::Contains("sparse_exchange"), tutti::invalid_argument);
  // automatic stays dense for such a model.
  opt.sparse_exchange = sparse_exchange_policy::automatic;
  silent_trainer t(silent_mf(make_mf(parts.train)), {}, {}, {}, {}, opt);
  const auto r = t.fit(parts.train, parts.test);
  CHECK(r.sparse_steps == 0);
  CHECK(r.bytes_saved_per_step == 0);
}

#if __has_include(<cblas.h>)
TEST_CASE("sparse exchange: neural_cf's four tables travel as rows, results as dense") {
  using ncf = tutti::models::neural_cf<tutti::host_space>;
  const auto parts = sparse_data(1200, 600, 4);
  auto make = [&] {
    return ncf({.gmf_dim = 8, .layers = {16, 8}, .l2 = 1e-4f}, parts.train.n_users(),
               parts.train.n_items());
  };
  tutti::train_options opt{
      .batch = 96, .epochs = 1, .base_lr = 0.02, .seed = 3, .evaluate_each_epoch = false};
  const auto dense = train_ranks<ncf, tutti::adam>(3, parts.train, opt, make, tutti::adam{});
  opt.sparse_exchange = sparse_exchange_policy::automatic;
  const auto sparse = train_ranks<ncf, tutti::adam>(3, parts.train, opt, make, tutti::adam{});
  const auto& r = sparse[0].result;
  CHECK(r.sparse_steps == r.steps);
  CHECK(r.bytes_reduced_per_step * 4 < r.dense_bytes_per_step);
  // The packed dense remainder (the MLP between the tables) and the rows are summed in rank
  // order like the plain reduce, so the bits agree whatever BLAS kernel computed the gradients;
  // with Adam a rounding difference in a near-zero gradient would be a whole step.
  CHECK(count_differing(sparse[0].params, dense[0].params) == 0);
  CHECK(r.epochs.back().train_loss == dense[0].result.epochs.back().train_loss);
  check_replicas_agree(sparse);
}
#else
TEST_CASE("sparse exchange: neural_cf's four tables travel as rows, results as dense") {
  TUTTI_TEST_SKIP("no <cblas.h> in this build: neural_cf is compiled out");
}
#endif

TEST_CASE("sparse exchange: uneven shards (tail none) give the rows of the dense reduce") {
  const auto parts = sparse_data(1500, 800, 4);
  tutti::train_options opt{
      .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 12, .evaluate_each_epoch = false};
  auto train = [&](sparse_exchange_policy policy) {
    opt.sparse_exchange = policy;
    std::vector<rank_run> out(3);
    tutti::run_local(3, [&](tutti::local_ring ring) {
      tutti::trainer<mf, tutti::shuffled_shards, tutti::local_ring> t(
          make_mf(parts.train), tutti::shuffled_shards{.tail = tutti::tail_policy::none}, ring, {},
          tutti::sgd{.momentum = 0.9f}, opt);
      auto r = t.fit(parts.train, tutti::data::interactions{});
      out[static_cast<std::size_t>(ring.rank())] = {t.parameters_on_host(), std::move(r)};
    });
    return out;
  };
  REQUIRE(parts.train.size() % 3 != 0);  // the last step is short on some ranks
  const auto dense = train(sparse_exchange_policy::off);
  const auto sparse = train(sparse_exchange_policy::on);
  CHECK(count_differing(sparse[0].params, dense[0].params) == 0);  // rank-order sums on both
  CHECK(sparse[0].result.epochs.back().weighted_samples == double(parts.train.size()));
  check_replicas_agree(sparse);
}

namespace {

// local_ring over a link slow by construction, timed on a clock of its own
// (`reducer_keeps_clock`): each all_gather (the rows) or all_reduce_mean (the dense path)
// advances the clock by a microsecond per byte on the slowed path and a nanosecond per byte on
// the other. `measured` is handed these costs, not the machine's timings, so what it chooses
// does not depend on the load beside the test.
class slowed_ring : public tutti_test::ring_forwarder {
 public:
  enum class slow { gather, reduce };
  slowed_ring(tutti::local_ring ring, slow which) : ring_forwarder(ring), m_which(which) {}
  template <class T>
  void all_reduce_mean(std::span<T> g) {
    advance(g.size_bytes(), m_which == slow::reduce);
    m_ring.all_reduce_mean(g);
  }
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    advance(all.size_bytes(), m_which == slow::gather);
    m_ring.all_gather(mine, all);
  }
  double clock_seconds() const { return m_clock; }

 private:
  void advance(std::size_t bytes, bool slowed) {
    m_clock += double(bytes) * (slowed ? 1e-6 : 1e-9);
  }
  slow m_which;
  double m_clock = 0;
};
static_assert(tutti::reducer_keeps_clock<slowed_ring>);

std::vector<rank_run> train_slowed(int world, const tutti::data::interactions& train,
                                   const tutti::train_options& opt, slowed_ring::slow which) {
  return train_ranks<mf>(
      world, train, opt, [&] { return make_mf(train); }, tutti::sgd{.momentum = 0.9f},
      [&](tutti::local_ring r) { return slowed_ring(r, which); });
}

// Every rank agreed on one ratio, and it is positive.
double agreed_ratio(const std::vector<rank_run>& runs) {
  const double ratio = runs[0].result.sparse_row_cost_ratio;
  CHECK(ratio > 0);
  for (const auto& r : runs) CHECK(r.result.sparse_row_cost_ratio == ratio);
  return ratio;
}

}  // namespace

TEST_CASE("sparse exchange: measured alternates the paths, agrees on a ratio, trains as dense") {
  const auto parts = sparse_data(800, 400, 4);
  tutti::train_options opt{
      .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 12, .evaluate_each_epoch = false};
  for (const int world : {2, 3}) {
    CAPTURE(world);
    opt.sparse_exchange = sparse_exchange_policy::off;
    const auto dense = train_mf(world, parts.train, opt);
    opt.sparse_exchange = sparse_exchange_policy::measured;
    const auto measured = train_mf(world, parts.train, opt);
    check_replicas_agree(measured);
    agreed_ratio(measured);
    // The five rows trials at least (on this data every step touches rows).
    CHECK(measured[0].result.sparse_steps >= opt.sparse_trial_steps / 2);
    CHECK(count_differing(measured[0].params, dense[0].params) == 0);  // either path, same bits
  }
  for (const std::size_t bad : {2, 5}) {
    opt.sparse_trial_steps = bad;
    CHECK_THROWS_WITH_AS(train_mf(2, parts.train, opt),
                         doctest::Contains(("sparse_trial_steps = " + std::to_string(bad)).c_str()),
                         tutti::invalid_argument);
  }
}

TEST_CASE("sparse exchange: measured keeps the dense path where gathers cost more per byte") {
  // By bytes the rows win here (automatic sends them on every step); with each gathered byte
  // made to cost a microsecond, measured sends rows in its five rows trials only.
  const auto parts = sparse_data(800, 400, 4);
  tutti::train_options opt{.batch = 64,
                           .epochs = 1,
                           .base_lr = 0.05,
                           .seed = 12,
                           .evaluate_each_epoch = false,
                           .sparse_exchange = sparse_exchange_policy::automatic};
  const auto by_bytes = train_mf(2, parts.train, opt);
  REQUIRE(by_bytes[0].result.steps > opt.sparse_trial_steps + 4);
  CHECK(by_bytes[0].result.sparse_steps == by_bytes[0].result.steps);
  opt.sparse_exchange = sparse_exchange_policy::measured;
  const auto measured = train_slowed(2, parts.train, opt, slowed_ring::slow::gather);
  CHECK(agreed_ratio(measured) > 20);
  CHECK(measured[0].result.sparse_steps == opt.sparse_trial_steps / 2);
  check_replicas_agree(measured);
  CHECK(count_differing(measured[0].params, by_bytes[0].params) == 0);
}

TEST_CASE("sparse exchange: measured sends rows where the dense reduce costs more per byte") {
  // The small table and big batch of the automatic case above: by bytes dense wins on every
  // step; with each densely reduced byte made to cost a microsecond, measured sends rows on
  // every step but its five dense trials.
  const auto parts = sparse_data(80, 12, 12);
  const tutti::data::interactions train = whole_steps(parts.train, 240);
  tutti::train_options opt{.batch = 240,
                           .epochs = 6,
                           .base_lr = 0.05,
                           .seed = 3,
                           .evaluate_each_epoch = false,
                           .sparse_exchange = sparse_exchange_policy::automatic};
  const auto by_bytes = train_mf(4, train, opt);
  CHECK(by_bytes[0].result.sparse_steps == 0);
  opt.sparse_exchange = sparse_exchange_policy::measured;
  const auto measured = train_slowed(4, train, opt, slowed_ring::slow::reduce);
  CHECK(agreed_ratio(measured) < 0.4);
  REQUIRE(measured[0].result.steps > opt.sparse_trial_steps);
  CHECK(measured[0].result.sparse_steps == measured[0].result.steps - opt.sparse_trial_steps / 2);
  check_replicas_agree(measured);
  CHECK(count_differing(measured[0].params, by_bytes[0].params) == 0);
}

}  // namespace test_sparse_exchange
