// SPDX-License-Identifier: Apache-2.0
// The row-sparse step on a space the host cannot read (a GPU's path), run here on
// tutti_test::opaque_host_space: the same trainer, model and optimizers through the kernels a
// device runs (rows found and counted in the space's memory, the finite check and the skip in
// kernels). A device sums in shorter chunks than the host, so the two agree to rounding; a row
// updated that was not touched, a gradient row left unzeroed or a skipped step applied would
// move the parameters far more.
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"
#include "spaces.hpp"
#include "wrapped_model.hpp"

#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace test_row_step_on_space {

namespace {

using tutti_test::count_differing;
using tutti_test::implicit_courses;
using tutti_test::opaque_host_space;

const tutti::train_options options{
    .batch = 96, .epochs = 2, .base_lr = 0.05, .seed = 6, .evaluate_each_epoch = false};

template <class Space>
tutti::models::matrix_factorization<Space> make_mf(const tutti::data::interactions& d) {
  return {{.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, d.n_users(), d.n_items()};
}

struct run {
  std::vector<float> params;
  tutti::fit_result result;
};

template <class Model, class Optimizer>
run train_model(Model model, const tutti::data::interactions& d, Optimizer optimizer,
                tutti::train_options opt = options) {
  tutti::trainer<Model, tutti::shuffled_shards, tutti::single_rank, tutti::constant, Optimizer> t(
      std::move(model), {}, {}, {}, optimizer, opt);
  auto r = t.fit(d, {});
  return {t.parameters_on_host(), std::move(r)};
}

template <class Space, class Optimizer>
std::vector<float> train_on(const tutti::data::interactions& d, Optimizer optimizer) {
  return train_model(make_mf<Space>(d), d, optimizer).params;
}

template <class Optimizer>
void check_matches_host(Optimizer optimizer) {
  const auto parts = implicit_courses(600, 200);
  const auto host = train_on<tutti::host_space>(parts.train, optimizer);
  const auto opaque = train_on<opaque_host_space>(parts.train, optimizer);
  const double diff = tutti_test::relative_difference(opaque, host);
  CHECK(diff < 1e-5);
  // The same run with a dense step differs by far more: the row step is not dense here.
  MESSAGE("relative difference to the host's row step: " << diff);
}

}  // namespace

TEST_CASE("opaque host space: the device path of a dense step gives the host's bits") {
  const auto parts = implicit_courses(300, 100);
  const auto host = train_on<tutti::host_space>(parts.train, tutti::adam{});
  const auto opaque = train_on<opaque_host_space>(parts.train, tutti::adam{});
  CHECK(tutti_test::relative_difference(host, opaque) < 1e-5);
  MESSAGE(tutti_test::relative_difference(host, opaque));
}

static_assert(tutti::optimizer_steps_rows_on_space<tutti::lazy_adam, opaque_host_space>);
static_assert(tutti::optimizer_steps_rows_on_space<tutti::rowwise_adagrad, opaque_host_space>);
static_assert(tutti::optimizer_steps_rows_on_space<tutti::row_sparse_sgd, opaque_host_space>);
static_assert(tutti::model_reports_touched_rows_on_space<
              tutti::models::matrix_factorization<opaque_host_space>>);

TEST_CASE("row-sparse step on a device's path: lazy Adam trains as on the host") {
  check_matches_host(tutti::lazy_adam{});
}

TEST_CASE("row-sparse step on a device's path: row-wise Adagrad trains as on the host") {
  check_matches_host(tutti::rowwise_adagrad{});
}

TEST_CASE(
    "row-sparse step on a device's path: row-sparse SGD with momentum trains as on the "
    "host") {
  check_matches_host(tutti::row_sparse_sgd{.momentum = 0.9f});
}

TEST_CASE("row-sparse step on a device's path: the rows are found and counted in the space") {
  // A batch reading users 5, 2, 5 and 9 (one padding slot reading 7): rows 2, 5, 9, count 3.
  using mf = tutti::models::matrix_factorization<opaque_host_space>;
  mf m({.dim = 3}, 12, 4);
  const opaque_host_space space;
  tutti::buffer<float, opaque_host_space> params(m.layout().total(), space);
  tutti::buffer<float, opaque_host_space> grads(m.layout().total(), space);
  m.initialize(params.span(), 1);
  tutti::fill(space, grads.span(), 0.f);
  const std::vector<std::int32_t> users{5, 2, 5, 9, 7}, items{0, 1, 1, 3, 2};
  const std::vector<float> labels{1, 0, 1, 1, 0}, weights{1, 1, 1, 1, 0};
  tutti::buffer<std::int32_t, opaque_host_space> u(5, space), it(5, space);
  tutti::buffer<float, opaque_host_space> y(5, space), w(5, space);
  tutti::copy_from_host(space, std::span<const std::int32_t>(users), u.span());
  tutti::copy_from_host(space, std::span<const std::int32_t>(items), it.span());
  tutti::copy_from_host(space, std::span<const float>(labels), y.span());
  tutti::copy_from_host(space, std::span<const float>(weights), w.span());
  m.loss_and_gradient(std::span<const float>(params.span()),
                      tutti::batch_view{u.span(), it.span(), y.span(), w.span()}, grads.span(), 1.f,
                      nullptr);
  const tutti::segment_rows_on_space users_rows = m.touched_rows_on_space(0);
  const tutti::segment_rows_on_space items_rows = m.touched_rows_on_space(3);
  CHECK_FALSE(users_rows.whole);
  CHECK(users_rows.capacity == 5);
  std::int32_t count = 0;
  space.copy_to_host(&count, users_rows.count, sizeof count);
  REQUIRE(count == 3);
  std::vector<std::int32_t> rows(3);
  space.copy_to_host(rows.data(), users_rows.rows, 3 * sizeof(std::int32_t));
  CHECK(rows == std::vector<std::int32_t>{2, 5, 9});
  space.copy_to_host(&count, items_rows.count, sizeof count);
  REQUIRE(count == 3);
  space.copy_to_host(rows.data(), items_rows.rows, 3 * sizeof(std::int32_t));
  CHECK(rows == std::vector<std::int32_t>{0, 1, 3});
}

namespace {

// Matrix factorisation whose gradient turns NaN at one call, in a touched user row.
template <class Space>
using poisoned_mf = tutti_test::poisoned_model<tutti::models::matrix_factorization<Space>>;

}  // namespace

TEST_CASE("row-sparse step on a device's path: a non-finite step is skipped in the kernels") {
  // The kernels read the step's skip flag: the poisoned step changes nothing (no snapshot to
  // restore), and the NaN row is zeroed with the others, so the run ends as on the host.
  const auto parts = implicit_courses(600, 200);
  tutti::train_options opt = options;
  opt.epochs = 1;
  const auto host =
      train_model(poisoned_mf<tutti::host_space>(make_mf<tutti::host_space>(parts.train), 5),
                  parts.train, tutti::lazy_adam{}, opt);
  const auto opaque =
      train_model(poisoned_mf<opaque_host_space>(make_mf<opaque_host_space>(parts.train), 5),
                  parts.train, tutti::lazy_adam{}, opt);
  REQUIRE(host.result.skipped_steps == 1);
  CHECK(opaque.result.skipped_steps == 1);
  REQUIRE_FALSE(opaque.result.nonfinite.empty());
  CHECK(opaque.result.nonfinite.at(0).global_step == 5);
  CHECK(std::all_of(opaque.params.begin(), opaque.params.end(),
                    [](float v) { return std::isfinite(v); }));
  CHECK(tutti_test::relative_difference(opaque.params, host.params) < 1e-5);
}

TEST_CASE("row-sparse step on a device's path: refused where it cannot run, with the reason") {
  const auto parts = implicit_courses(300, 100);
  auto message = [&](auto run) -> std::string {
    try {
      run();
    } catch (const tutti::invalid_argument& e) {
      return e.what();
    }
    return "no error";
  };
  tutti::train_options opt = options;
  opt.accumulation = 2;
  CHECK(message([&] {
          train_model(make_mf<opaque_host_space>(parts.train), parts.train, tutti::lazy_adam{},
                      opt);
        }).find("accumulation = 1") != std::string::npos);
}

TEST_CASE("device path: a stop request is read every stop_poll_every steps, not every step") {
  // Requested during global step 2 (0-based): the host stops after that step; a device reads
  // the request only after steps 4, 9, ... (stop_poll_every = 5) and stops after step 4.
  const auto parts = implicit_courses(600, 200);
  auto stopped_after = [&](auto space_tag, std::size_t poll) {
    using space = decltype(space_tag);
    std::atomic<bool> stop{false};
    tutti::train_options opt = options;
    opt.stop = &stop;
    opt.stop_poll_every = poll;
    opt.on_step = [&](const tutti::step_progress& p) {
      if (p.global_step == 2) stop = true;
    };
    try {
      train_model(make_mf<space>(parts.train), parts.train, tutti::lazy_adam{}, opt);
    } catch (const tutti::interrupted_error& e) {
      return e.global_step();
    }
    return std::uint64_t{0};
  };
  CHECK(stopped_after(tutti::host_space{}, 5) == 4);
  CHECK(stopped_after(opaque_host_space{}, 5) == 5);
  CHECK(stopped_after(opaque_host_space{}, 1) == 4);
}

namespace {

// local_ring standing in for nccl_ring on the opaque space: its all_gather_on_space moves the
// 32-bit values through the ring's host all_gather (the space's memory is host memory).
class opaque_ring : public tutti_test::ring_forwarder {
 public:
  template <class Space>
  static constexpr bool accepts = true;
  using ring_forwarder::ring_forwarder;
  template <class T>
  void all_gather_on_space(std::span<const T> mine, std::span<T> all) {
    static_assert(sizeof(T) == sizeof(std::uint32_t));
    std::vector<std::uint64_t> m(mine.size()), a(all.size());
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = std::bit_cast<std::uint32_t>(mine[i]);
    m_ring.all_gather(m, a);
    for (std::size_t i = 0; i < a.size(); ++i)
      all[i] = std::bit_cast<T>(static_cast<std::uint32_t>(a[i]));
  }
};
static_assert(tutti::reducer_gathers_on_space<opaque_ring>);

template <class Optimizer>
std::vector<tutti_test::rank_run> train_opaque_ranks(int world, const tutti::data::interactions& d,
                                                     Optimizer optimizer) {
  using mf = tutti::models::matrix_factorization<opaque_host_space>;
  std::vector<tutti_test::rank_run> out(static_cast<std::size_t>(world));
  tutti::run_local(world, [&](tutti::local_ring ring) {
    tutti::trainer<mf, tutti::shuffled_shards, opaque_ring, tutti::constant, Optimizer> t(
        make_mf<opaque_host_space>(d), {}, opaque_ring(ring), {}, optimizer, options);
    auto r = t.fit(d, {});
    auto& mine = out[static_cast<std::size_t>(ring.rank())];
    mine.params = t.parameters_on_host();
    mine.result = std::move(r);
  });
  return out;
}

}  // namespace

TEST_CASE(
    "row-sparse step on several device ranks: the rows travel by all_gather, and W ranks "
    "train as one") {
  // Each rank sends its touched rows and their gradient rows; every rank sums the union's rows
  // in rank order, so the replicas agree bit for bit, and W ranks at the same global batch end
  // where one rank does, to rounding. A rank that kept only its own rows, or a mean over the
  // wrong rows, ends far from it.
  const auto parts = implicit_courses(600, 200);
  const auto one = train_opaque_ranks(1, parts.train, tutti::lazy_adam{});
  for (int world : {2, 3}) {
    CAPTURE(world);
    const auto many = train_opaque_ranks(world, parts.train, tutti::lazy_adam{});
    tutti_test::check_replicas_agree(many);
    CHECK(tutti_test::relative_difference(many[0].params, one[0].params) < 1e-5);
    // The exchange counted what it gathered, not the dense table.
    const std::size_t arena = make_mf<opaque_host_space>(parts.train).layout().total();
    CHECK(many[0].result.bytes_reduced_per_step < arena * sizeof(float) / 2);
  }
}

namespace {

// shuffled_shards that counts the shards it writes on a space.
struct counted_shards : tutti::shuffled_shards {
  int* fills = nullptr;
  template <tutti::execution_space Space>
  void fill_on_space(const Space& space, std::size_t n, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch, std::size_t start, std::uint64_t* indices,
                     float* weights) const {
    ++*fills;
    shuffled_shards::fill_on_space(space, n, world, rank, seed, epoch, start, indices, weights);
  }
};

// The same shards built on the host only (no `sampler_fills_on_space`).
struct host_built_shards {
  tutti::shuffled_shards inner;
  tutti::shard shard(std::size_t n, int world, int rank, std::uint64_t seed,
                     std::uint64_t epoch) const {
    return inner.shard(n, world, rank, seed, epoch);
  }
};
static_assert(!tutti::sampler_fills_on_space<host_built_shards, opaque_host_space>);

template <class Sampler>
std::vector<float> train_with(Sampler sampler, const tutti::data::interactions& d,
                              tutti::train_options opt = options) {
  using model = tutti::models::matrix_factorization<opaque_host_space>;
  tutti::trainer<model, Sampler, tutti::single_rank, tutti::constant, tutti::lazy_adam> t(
      make_mf<opaque_host_space>(d), sampler, {}, {}, {}, opt);
  t.fit(d, {});
  return t.parameters_on_host();
}

}  // namespace

TEST_CASE("a device's path: the shard written on the space trains to the host-built shard's bits") {
  const auto parts = implicit_courses(300, 100);
  int fills = 0;
  const auto on_space = train_with(counted_shards{{}, &fills}, parts.train);
  CHECK(fills == static_cast<int>(options.epochs));  // one shard per epoch, written there
  const auto host_built = train_with(host_built_shards{}, parts.train);
  CHECK(count_differing(on_space, host_built) == 0);

  // An `on_batch` callback needs each step's positions on the host: the shard is built there.
  fills = 0;
  std::size_t seen = 0;
  tutti::train_options watched = options;
  watched.on_batch = [&](const tutti::step_progress&, std::span<const std::uint64_t> ids,
                         std::span<const float>) {
    seen += ids.size();
  };
  const auto with_callback = train_with(counted_shards{{}, &fills}, parts.train, watched);
  CHECK(fills == 0);
  CHECK(seen == options.epochs * parts.train.size());
  CHECK(count_differing(with_callback, host_built) == 0);
}

TEST_CASE("sampled negatives and a list loss on a device's path train as on the host") {
  // The draw reads its tables and the epoch's key from the space's memory, and the softmax its
  // log-Q correction; the row step treats every negative's course as a touched row.
  const auto parts = implicit_courses(300, 100);
  tutti::train_options opt = options;
  opt.negatives = {.per_positive = 4, .sampler = tutti::negative_sampler::popularity};
  const auto train = [&](auto space_tag, auto optimizer) {
    using Space = decltype(space_tag);
    tutti::models::matrix_factorization<Space> m(
        {.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::softmax}, parts.train.n_users(),
        parts.train.n_items());
    return train_model(std::move(m), parts.train, optimizer, opt).params;
  };
  for (const bool rows : {false, true}) {
    CAPTURE(rows);
    const auto host = rows ? train(tutti::host_space{}, tutti::lazy_adam{})
                           : train(tutti::host_space{}, tutti::adam{});
    const auto opaque = rows ? train(opaque_host_space{}, tutti::lazy_adam{})
                             : train(opaque_host_space{}, tutti::adam{});
    CHECK(tutti_test::relative_difference(opaque, host) < 1e-5);
  }
  // Without the negatives the same run ends elsewhere: they were drawn and trained on.
  tutti::train_options none = opt;
  none.negatives = {};
  tutti::models::matrix_factorization<opaque_host_space> logistic(
      {.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic}, parts.train.n_users(),
      parts.train.n_items());
  const auto without = train_model(std::move(logistic), parts.train, tutti::adam{}, none).params;
  CHECK(tutti_test::relative_difference(without, train(opaque_host_space{}, tutti::adam{})) > 1e-2);
}

}  // namespace test_row_step_on_space
