// SPDX-License-Identifier: Apache-2.0
// The gradient noise scale: the estimator against a problem whose gradient covariance is known,
// and the trainer's measurement (it only reads: training bits are unchanged; W ranks and one
// rank of W micro-batches estimate the same scale).
#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace test_noise_scale {

namespace {

// Per-sample gradients g = G + e with e ~ N(0, diag(sigma²)): tr(Σ) = Σ sigma², B_simple =
// tr(Σ) / |G|². Each step draws `world` small batches of `b` samples; their mean is the big
// batch's gradient.
double estimate_on_known_problem(std::size_t world, std::size_t b, double decay, int steps) {
  const std::size_t dim = 32;
  std::vector<double> g(dim), sigma(dim);
  double grad_sq = 0, trace = 0;
  for (std::size_t j = 0; j < dim; ++j) {
    g[j] = 0.1 * std::cos(double(j));
    sigma[j] = 0.5 + 0.05 * double(j % 7);
    grad_sq += g[j] * g[j];
    trace += sigma[j] * sigma[j];
  }
  tutti::detail::noise_scale_tracker tracker(decay);
  std::uint64_t counter = 0;
  std::vector<double> small(dim), big(dim);
  for (int s = 0; s < steps; ++s) {
    double small_sq = 0;
    std::fill(big.begin(), big.end(), 0.0);
    for (std::size_t k = 0; k < world; ++k) {
      std::fill(small.begin(), small.end(), 0.0);
      for (std::size_t i = 0; i < b; ++i)
        for (std::size_t j = 0; j < dim; ++j)
          small[j] += (g[j] + sigma[j] * tutti::detail::normal01(17, counter++)) / double(b);
      for (std::size_t j = 0; j < dim; ++j) {
        small_sq += small[j] * small[j] / double(world);
        big[j] += small[j] / double(world);
      }
    }
    double big_sq = 0;
    for (double v : big) big_sq += v * v;
    tracker.add(small_sq, 1.0 / double(b), big_sq, double(world * b));
  }
  const auto e = tracker.estimate();
  CHECK(e.measurements == std::size_t(steps));
  CHECK(e.small_batch == doctest::Approx(double(b)));
  CHECK(e.big_batch == doctest::Approx(double(world * b)));
  return e.b_simple / (trace / grad_sq);  // estimate ÷ truth
}

}  // namespace

TEST_CASE("noise scale: the estimator converges to tr(Σ)/|G|² of a known problem within 5%") {
  // The truth here is ~66 samples: batches well below and at it.
  for (std::size_t world : {2u, 4u}) {
    for (std::size_t b : {8u, 32u}) {
      CAPTURE(world);
      CAPTURE(b);
      CHECK(std::abs(estimate_on_known_problem(world, b, 0.999, 4000) - 1.0) < 0.05);
    }
  }
}

TEST_CASE("noise scale: nothing is estimated from equal batch sizes or non-finite norms") {
  tutti::detail::noise_scale_tracker t;
  t.add(2.0, 1.0 / 64, 1.0, 64);  // the small batch is not smaller
  t.add(NAN, 1.0 / 16, 1.0, 64);
  CHECK(t.estimate().measurements == 0);
  CHECK_FALSE(t.estimate().known());
  t.add(2.0, 1.0 / 16, 1.0, 64);
  CHECK(t.estimate().measurements == 1);
  CHECK_FALSE(t.estimate().bounded());  // one estimate has no spread to judge it by
  t.add(2.0, 1.0 / 16, 1.0, 64);
  // tr(Σ) = (2 − 1) / (1/16 − 1/64) = 21.33, |G|² = 1 − 21.33/64 = 0.667: B_simple = 32.
  CHECK(t.estimate().b_simple == doctest::Approx(32.0));
  CHECK(t.estimate().grad_sq_error == doctest::Approx(0.0));
}

TEST_CASE("noise scale: a |G|² lost in its noise gives a lower bound, not a ratio of noise") {
  tutti::detail::noise_scale_tracker t(0.9);
  // tr(Σ) = 1 throughout; the |G|² estimates alternate ±0.01 around 0: unresolved.
  for (int k = 0; k < 40; ++k) {
    const double g2 = k % 2 == 0 ? 0.01 : -0.01;
    t.add(g2 + 1.0 / 16, 1.0 / 16, g2 + 1.0 / 64, 64);
  }
  const auto e = t.estimate();
  CHECK_FALSE(e.known());
  CHECK(e.bounded());
  CHECK(e.b_simple == 0);
  CHECK(e.trace == doctest::Approx(1.0));
  CHECK(e.grad_sq_error > 0);
  // At least tr / (|G|² + 2 se): far above the batches measured, but finite and honest.
  CHECK(e.b_simple_at_least ==
        doctest::Approx(e.trace / (std::max(e.grad_sq, 0.0) + 2 * e.grad_sq_error)));
  CHECK(e.b_simple_at_least > 64);
}

namespace {

using mf = tutti::models::matrix_factorization<tutti::host_space>;
using tutti_test::rank_run;

// Few learners and courses seen many times each: every sample moves a large share of the
// parameters, so the noise scale sits near the batches trained here and both of its terms are
// well resolved (with thousands of learners each sample touches a sliver of the table and
// B_simple is in the thousands).
const tutti::data::split_result& parts() {
  static const auto p = [] {
    tutti::data::interactions d;
    d.implicit = true;
    for (std::int64_t u = 0; u < 5; ++u) d.user_ids.push_back(u);
    for (std::int64_t i = 0; i < 6; ++i) d.item_ids.push_back(i);
    for (std::uint64_t k = 0; k < 6000; ++k) {
      const auto u = static_cast<std::int32_t>(tutti::detail::hash2(7, k) % 5);
      const auto i = static_cast<std::int32_t>(tutti::detail::hash2(8, k) % 6);
      const double like = 0.15 + 0.35 * double((u + 2 * i) % 3);
      d.users.push_back(u);
      d.items.push_back(i);
      d.labels.push_back(tutti::detail::uniform01(9, k) < like ? 1.f : 0.f);
    }
    return tutti::data::split(d, {.test_fraction = 0.1, .seed = 4});
  }();
  return p;
}

template <class Optimizer = tutti::sgd>
rank_run train_on(int world, const tutti::train_options& opt, Optimizer optimizer = {}) {
  return tutti_test::train_rank0<mf>(
      world, parts(), opt,
      [] {
        return mf({.dim = 8, .l2 = 1e-3f, .loss = tutti::loss_kind::logistic},
                  parts().train.n_users(), parts().train.n_items());
      },
      tutti::constant{}, optimizer);
}

tutti::train_options options(std::size_t every) {
  tutti::train_options o{
      .batch = 240, .epochs = 3, .base_lr = 0.05, .seed = 3, .evaluate_each_epoch = false};
  o.noise_scale_every = every;
  return o;
}

}  // namespace

TEST_CASE("noise scale: measuring every step changes no bit of training, on every path") {
  auto check_same = [](int world, tutti::train_options o, auto optimizer) {
    CAPTURE(world);
    o.noise_scale_every = 0;
    const rank_run off = train_on(world, o, optimizer);
    o.noise_scale_every = 1;
    const rank_run on = train_on(world, o, optimizer);
    CHECK(on.params == off.params);
    CHECK(on.result.noise_scale.bounded());
    CHECK(on.result.noise_scale.measurements > 0);
    CHECK_FALSE(off.result.noise_scale.bounded());
  };
  auto accumulated = options(1);
  accumulated.accumulation = 4;
  check_same(1, accumulated, tutti::sgd{});
  check_same(3, options(1), tutti::sgd{.momentum = 0.9f});
  check_same(3, accumulated, tutti::adam{});
  auto overlapped = options(1);
  overlapped.overlap_reduce = true;
  check_same(2, overlapped, tutti::sgd{});
  auto rows = options(1);
  rows.sparse_exchange = tutti::sparse_exchange_policy::on;
  check_same(3, rows, tutti::sgd{});
  check_same(3, options(1), tutti::lazy_adam{});
  check_same(1, accumulated, tutti::lazy_adam{});
}

TEST_CASE("noise scale: W ranks and one rank of W micro-batches estimate the same scale") {
  auto o = options(1);
  o.epochs = 8;
  o.noise_scale_decay = 0.99;
  const rank_run ranks = train_on(4, o);
  auto micro = o;
  micro.accumulation = 4;
  const rank_run one = train_on(1, micro);
  const auto& a = ranks.result.noise_scale;
  const auto& b = one.result.noise_scale;
  REQUIRE(a.known());
  REQUIRE(b.known());
  // Every full step measured: all but each epoch's last (partial) one.
  const std::size_t full = parts().train.size() / 240;
  CHECK(a.measurements == 8 * full);
  CHECK(b.measurements == 8 * full);
  CHECK(a.small_batch == doctest::Approx(60.0));
  CHECK(b.small_batch == doctest::Approx(60.0));
  CHECK(a.big_batch == doctest::Approx(240.0));
  // Different partitions of the same steps (ranks take every 4th position, micro-batches
  // contiguous quarters): the same quantity estimated from other samples.
  MESSAGE("B_simple: " << a.b_simple << " (4 ranks), " << b.b_simple << " (1 rank, 4 micro)");
  CHECK(a.b_simple / b.b_simple > 0.67);
  CHECK(a.b_simple / b.b_simple < 1.5);
  // Each epoch reports the estimate as of its end.
  CHECK(ranks.result.epochs.back().noise_scale.b_simple == a.b_simple);
}

TEST_CASE("noise scale: a run that cannot measure says why") {
  const rank_run one = train_on(1, options(1));
  CHECK_FALSE(one.result.noise_scale.known());
  CHECK(one.result.noise_scale_why.find("accumulation >= 2") != std::string::npos);
  const rank_run off = train_on(2, options(0));
  CHECK(off.result.noise_scale_why.find("off") != std::string::npos);
  auto bad = options(1);
  bad.noise_scale_decay = 1.0;
  CHECK_THROWS_WITH_AS(train_on(2, bad), doctest::Contains("noise_scale_decay = 1"),
                       tutti::invalid_argument);
}

}  // namespace test_noise_scale
