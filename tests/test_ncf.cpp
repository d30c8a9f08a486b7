// SPDX-License-Identifier: Apache-2.0
/// @file test_ncf.cpp
/// @brief Tests of `tutti::models::neural_cf`: gradients against finite differences, padding,
/// predict, layout, initialisation, reproducibility, training through the trainer (1 ≡ 2 ranks)
/// and, under nvcc, host ≡ cuda parity.
#include <doctest/doctest.h>

#include "skip.hpp"

#if __has_include(<cblas.h>)

#include "model_harness.hpp"
#include "spaces.hpp"

#include <tutti/batch.hpp>
#include <tutti/concepts.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/gradient_check.hpp>
#include <tutti/models/neural_cf.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/tutti.hpp>

#include "rank_runs.hpp"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace test_ncf {

using tutti_test::relative_difference;

namespace {

using tutti::loss_kind;
using tutti::models::neural_cf;
using tutti::models::neural_cf_options;

static_assert(tutti::model<neural_cf<>>);
static_assert(tutti::check_model<neural_cf<>>());
static_assert(tutti::check_model<neural_cf<tutti::host_space, double>>());
static_assert(std::is_same_v<neural_cf<>::value_type, float>);

using tutti_test::check_batch;
using tutti_test::host_batch;
using tutti_test::in_segment;
using tutti_test::lg_result;
using tutti_test::ref_loss;
using tutti_test::run_initialize;
using tutti_test::run_lg;
using tutti_test::run_predict;
using tutti_test::space_batch;

/// An independent reference of the network in double, written from the formula and read off
/// the layout by segment name.
struct ncf_ref {
  struct layer {
    std::size_t in, out, w, b;
  };
  std::size_t gu, gi, mu, mi, gmf, mlp, ow, ob;
  std::vector<layer> layers;

  template <class M>
  explicit ncf_ref(const M& m)
      : gu(m.layout().find("gmf_user_embedding").offset),
        gi(m.layout().find("gmf_item_embedding").offset),
        mu(m.layout().find("mlp_user_embedding").offset),
        mi(m.layout().find("mlp_item_embedding").offset),
        gmf(m.gmf_dim()),
        mlp(m.mlp_dim()),
        ow(m.layout().find("output_weight").offset),
        ob(m.layout().find("output_bias").offset) {
    std::size_t in = 2 * mlp;
    for (std::size_t l = 0; l < m.options().layers.size(); ++l) {
      const std::string stem = "mlp" + std::to_string(l);
      const auto& w = m.layout().find(stem + "_weight");
      layers.push_back({in, w.cols, w.offset, m.layout().find(stem + "_bias").offset});
      in = w.cols;
    }
  }

  /// The score; appends every layer's pre-activations to `pre` when given.
  template <class T>
  double score(const std::vector<T>& p, std::size_t u, std::size_t i,
               std::vector<double>* pre = nullptr) const {
    std::vector<double> a(2 * mlp);
    for (std::size_t c = 0; c < mlp; ++c) {
      a[c] = double(p[mu + u * mlp + c]);
      a[mlp + c] = double(p[mi + i * mlp + c]);
    }
    for (const layer& L : layers) {
      std::vector<double> z(L.out);
      for (std::size_t j = 0; j < L.out; ++j) {
        double v = double(p[L.b + j]);
        for (std::size_t k = 0; k < L.in; ++k) v += a[k] * double(p[L.w + k * L.out + j]);
        z[j] = v;
        if (pre) pre->push_back(v);
      }
      for (double& v : z) v = v > 0 ? v : 0;
      a = z;
    }
    double s = double(p[ob]);
    for (std::size_t c = 0; c < gmf; ++c)
      s += double(p[gu + u * gmf + c]) * double(p[gi + i * gmf + c]) * double(p[ow + c]);
    for (std::size_t j = 0; j < a.size(); ++j) s += a[j] * double(p[ow + gmf + j]);
    return s;
  }

  template <class T>
  double reg(const std::vector<T>& p, std::size_t u, std::size_t i) const {
    double r = 0;
    auto sq = [&](std::size_t at, std::size_t n) {
      for (std::size_t c = 0; c < n; ++c) r += double(p[at + c]) * double(p[at + c]);
    };
    sq(gu + u * gmf, gmf);
    sq(gi + i * gmf, gmf);
    sq(mu + u * mlp, mlp);
    sq(mi + i * mlp, mlp);
    return r;
  }

  /// Σ w_i·(L_i + l2·reg_i) (with_l2) or Σ w_i·L_i over the real slots.
  template <class T>
  double objective(loss_kind k, double l2, const std::vector<T>& p, const host_batch& b,
                   bool with_l2) const {
    double f = 0;
    for (std::size_t j = 0; j < b.users.size(); ++j) {
      if (b.weights[j] == 0.f) continue;  // padding ids may be anything
      const auto u = static_cast<std::size_t>(b.users[j]);
      const auto i = static_cast<std::size_t>(b.items[j]);
      double term = ref_loss(k, score(p, u, i), b.labels[j]);
      if (with_l2) term += l2 * reg(p, u, i);
      f += double(b.weights[j]) * term;
    }
    return f;
  }
};

/// A tiny model whose every width differs, so a transposed or misplaced operand cannot pass.
template <class Space, class T>
neural_cf<Space, T> tiny_model(loss_kind loss, float l2 = 0.05f) {
  return neural_cf<Space, T>(
      {.gmf_dim = 3, .mlp_dim = 2, .layers = {5, 4, 3}, .l2 = l2, .loss = loss}, 7, 5);
}

/// Parameters N(0, 0.6²) everywhere (padding 0), from the first seed ≥ `seed` at which every
/// pre-activation of every real slot of `b` lies at least `margin` away from the ReLU's kink and
/// every layer has units on both sides of it (so the mask is exercised).
template <class Model, class T = typename Model::value_type>
std::vector<T> params_away_from_kinks(const Model& m, const host_batch& b, std::uint64_t seed,
                                      double margin) {
  const ncf_ref ref(m);
  const auto mask = in_segment(m.layout());
  for (;; ++seed) {
    std::vector<T> p(m.layout().total(), T(0));
    for (std::size_t k = 0; k < p.size(); ++k)
      if (mask[k]) p[k] = static_cast<T>(0.6 * tutti::detail::normal01(seed, k));
    bool ok = true;
    std::size_t negative = 0, positive = 0;
    for (std::size_t j = 0; j < b.users.size() && ok; ++j) {
      if (b.weights[j] == 0.f) continue;
      std::vector<double> pre;
      ref.score(p, std::size_t(b.users[j]), std::size_t(b.items[j]), &pre);
      for (double z : pre) {
        ok = ok && std::fabs(z) > margin;
        (z < 0 ? negative : positive) += 1;
      }
    }
    if (ok && negative > 4 && positive > 4) return p;
  }
}

}  // namespace

TEST_CASE("neural_cf: the layout has the expected segments, shapes and kinds") {
  using tutti::segment_kind;
  neural_cf<> m({.gmf_dim = 8, .layers = {64, 32, 16}}, 100, 40);
  CHECK(m.mlp_dim() == 32);  // layers[0] / 2 by default
  const auto& l = m.layout();
  struct expected {
    const char* name;
    std::size_t rows, cols;
    segment_kind kind;
  };
  const expected want[] = {
      {"gmf_user_embedding", 100, 8, segment_kind::embedding},
      {"gmf_item_embedding", 40, 8, segment_kind::embedding},
      {"mlp_user_embedding", 100, 32, segment_kind::embedding},
      {"mlp_item_embedding", 40, 32, segment_kind::embedding},
      {"mlp0_weight", 64, 64, segment_kind::dense},
      {"mlp0_bias", 1, 64, segment_kind::bias},
      {"mlp1_weight", 64, 32, segment_kind::dense},
      {"mlp1_bias", 1, 32, segment_kind::bias},
      {"mlp2_weight", 32, 16, segment_kind::dense},
      {"mlp2_bias", 1, 16, segment_kind::bias},
      {"output_weight", 8 + 16, 1, segment_kind::dense},
      {"output_bias", 1, 1, segment_kind::bias},
  };
  REQUIRE(l.segments().size() == std::size(want));
  std::size_t count = 0, end = 0;
  for (std::size_t s = 0; s < std::size(want); ++s) {
    CAPTURE(s);
    CHECK(l[s].name == want[s].name);
    CHECK(l[s].rows == want[s].rows);
    CHECK(l[s].cols == want[s].cols);
    CHECK(l[s].kind == want[s].kind);
    CHECK(l[s].offset % 16 == 0);
    CHECK(l[s].offset >= end);  // in order, never overlapping
    end = l[s].offset + l[s].size();
    count += want[s].rows * want[s].cols;
  }
  CHECK(l.parameter_count() == count);
  CHECK(l.total() >= end);
  CHECK(m.loss() == loss_kind::logistic);
  CHECK(m.n_users() == 100);
  CHECK(m.n_items() == 40);

  // An explicit mlp_dim sets the first layer's fan-in.
  neural_cf<> e({.gmf_dim = 4, .mlp_dim = 5, .layers = {3}}, 10, 10);
  CHECK(e.mlp_dim() == 5);
  CHECK(e.layout().find("mlp0_weight").rows == 10);
  CHECK(e.layout().find("mlp0_weight").cols == 3);
  CHECK(e.layout().find("output_weight").rows == 7);
  CHECK(e.layout().segments().size() == 8);
}

TEST_CASE_TEMPLATE("neural_cf: the gradient of every segment matches central finite differences",
                   Space, TUTTI_TEST_SPACES) {
  for (const loss_kind loss : {loss_kind::squared, loss_kind::logistic}) {
    CAPTURE(static_cast<int>(loss));
    const double l2 = double(0.05f);  // the model keeps l2 as a float
    auto m = tiny_model<Space, double>(loss, 0.05f);
    const host_batch b = check_batch(loss);
    const ncf_ref ref(m);
    const auto params = params_away_from_kinks(m, b, 100, 1e-3);
    const double scale = 0.75;
    const auto r = run_lg(m, params, b, scale);

    CHECK(r.loss == doctest::Approx(ref.objective(loss, l2, params, b, false)).epsilon(1e-12));
    const auto mask = in_segment(m.layout());
    const double h = 1e-6;
    std::size_t bad = 0;
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (!mask[k]) {
        CHECK(r.grads[k] == 0.0);  // arena padding gets exactly nothing
        continue;
      }
      auto p = params;
      p[k] = params[k] + h;
      const double up = ref.objective(loss, l2, p, b, true);
      p[k] = params[k] - h;
      const double down = ref.objective(loss, l2, p, b, true);
      const double fd = scale * (up - down) / (2 * h);
      if (std::fabs(r.grads[k] - fd) > 1e-6 * std::max(std::fabs(fd), 1e-3)) {
        ++bad;
        MESSAGE("index " << k << ": analytic " << r.grads[k] << ", finite difference " << fd);
      }
    }
    CHECK(bad == 0);
    // Every segment gets a gradient (so no segment passes by being left out), and the rows only
    // the padding slot names (user 5) get exactly nothing.
    for (const auto& s : m.layout().segments()) {
      CAPTURE(s.name);
      double norm = 0;
      for (std::size_t k = s.offset; k < s.offset + s.size(); ++k) norm += std::fabs(r.grads[k]);
      CHECK(norm > 0);
    }
    for (const char* e : {"gmf_user_embedding", "mlp_user_embedding"}) {
      const auto& s = m.layout().find(e);
      for (std::size_t c = 0; c < s.cols; ++c) CHECK(r.grads[s.offset + 5 * s.cols + c] == 0.0);
    }
  }
}

TEST_CASE_TEMPLATE("neural_cf: padding slots change nothing and their ids are never read", Space,
                   TUTTI_TEST_SPACES) {
  auto m = tiny_model<Space, double>(loss_kind::logistic);
  host_batch b = check_batch(loss_kind::logistic);
  const auto params = params_away_from_kinks(m, b, 7, 1e-3);
  // Without the padding slot, then with padding slots spread through the batch whose ids are
  // far out of range: reading them would fault or produce garbage.
  host_batch clean, padded;
  for (std::size_t j = 0; j < b.users.size(); ++j) {
    if (b.weights[j] == 0.f) continue;
    for (host_batch* t : {&clean, &padded}) {
      t->users.push_back(b.users[j]);
      t->items.push_back(b.items[j]);
      t->labels.push_back(b.labels[j]);
      t->weights.push_back(b.weights[j]);
    }
    if (j % 3 == 1) {
      padded.users.push_back(1 << 30);
      padded.items.push_back(-(1 << 30));
      padded.labels.push_back(1.f);
      padded.weights.push_back(0.f);
    }
  }
  const auto a = run_lg(m, params, clean, 1.0);
  const auto p = run_lg(m, params, padded, 1.0);
  CHECK(p.loss == doctest::Approx(a.loss).epsilon(1e-14));
  for (std::size_t k = 0; k < a.grads.size(); ++k) {
    CAPTURE(k);
    CHECK(p.grads[k] == doctest::Approx(a.grads[k]).epsilon(1e-12).scale(1e-12));
  }
}

TEST_CASE_TEMPLATE("neural_cf: gradients and loss are added to, gradients scaled by scale", Space,
                   TUTTI_TEST_SPACES) {
  auto m = tiny_model<Space, double>(loss_kind::squared);
  const host_batch b = check_batch(loss_kind::squared);
  const auto params = params_away_from_kinks(m, b, 3, 1e-3);
  const auto one = run_lg(m, params, b, 1.0);
  const auto quarter = run_lg(m, params, b, 0.25);
  for (std::size_t k = 0; k < one.grads.size(); ++k)
    CHECK(quarter.grads[k] == doctest::Approx(0.25 * one.grads[k]).epsilon(1e-13));
  CHECK(quarter.loss == one.loss);  // the loss is not scaled
  std::vector<double> g0(one.grads.size());
  for (std::size_t k = 0; k < g0.size(); ++k) g0[k] = 0.5 + double(k % 7);
  const auto added = run_lg(m, params, b, 1.0, g0, 10.0);
  for (std::size_t k = 0; k < g0.size(); ++k)
    CHECK(added.grads[k] == doctest::Approx(g0[k] + one.grads[k]).epsilon(1e-14));
  CHECK(added.loss == 10.0 + one.loss);
  // A copy has its own scratch (and cuBLAS handle) and computes the same.
  auto copy = m;
  const auto c = run_lg(copy, params, b, 1.0);
  CHECK(c.grads == one.grads);
  CHECK(run_lg(m, params, b, 1.0).grads == one.grads);
}

TEST_CASE_TEMPLATE("neural_cf: the list losses' gradient matches finite differences", Space,
                   TUTTI_TEST_SPACES) {
  const host_batch b = tutti_test::list_batch();
  for (const loss_kind loss : {loss_kind::bpr, loss_kind::softmax}) {
    CAPTURE(std::string(tutti::to_string(loss)));
    auto m = tiny_model<Space, double>(loss, 0.f);
    const tutti_test::list_view<Space> lists(m.space(), b, tutti_test::log_q_of_items());
    const auto params = params_away_from_kinks(m, b, 21, 1e-3);
    const auto r = tutti::check_gradient(m, std::span<const double>(params), lists.view());
    INFO(r.describe());
    CHECK(r.passed());
    CHECK(r.nonzero > 40);
  }
}

TEST_CASE_TEMPLATE("neural_cf: predict is the score the loss is computed from", Space,
                   TUTTI_TEST_SPACES) {
  for (const loss_kind loss : {loss_kind::squared, loss_kind::logistic}) {
    CAPTURE(static_cast<int>(loss));
    auto m = tiny_model<Space, double>(loss);
    const host_batch b = check_batch(loss);
    const auto params = params_away_from_kinks(m, b, 11, 1e-6);
    const ncf_ref ref(m);
    const auto out = run_predict(m, params, b.users, b.items);
    double weighted = 0;
    for (std::size_t j = 0; j < b.users.size(); ++j) {
      CHECK(out[j] ==
            doctest::Approx(ref.score(params, std::size_t(b.users[j]), std::size_t(b.items[j])))
                .epsilon(1e-12));
      weighted += double(b.weights[j]) * ref_loss(loss, out[j], b.labels[j]);
    }
    CHECK(run_lg(m, params, b, 1.0).loss == doctest::Approx(weighted).epsilon(1e-12));
  }
  // More slots than one predict pass holds: the pieces agree with a short call.
  auto m = tiny_model<Space, double>(loss_kind::logistic);
  const auto params = params_away_from_kinks(m, check_batch(loss_kind::logistic), 5, 1e-6);
  const std::size_t n = neural_cf<Space, double>::predict_rows + 777;
  std::vector<std::int32_t> users(n), items(n);
  for (std::size_t j = 0; j < n; ++j) {
    users[j] = std::int32_t(j % 7);
    items[j] = std::int32_t((j / 7) % 5);
  }
  const auto all = run_predict(m, params, users, items);
  const std::vector<std::int32_t> tail_u(users.end() - 40, users.end());
  const std::vector<std::int32_t> tail_i(items.end() - 40, items.end());
  const auto tail = run_predict(m, params, tail_u, tail_i);
  for (std::size_t j = 0; j < 40; ++j)
    CHECK(all[n - 40 + j] == doctest::Approx(tail[j]).epsilon(1e-13));
}

TEST_CASE_TEMPLATE("neural_cf: initialize is counter-based: embeddings, He weights, zero biases",
                   Space, TUTTI_TEST_SPACES) {
  neural_cf<Space> m(
      {.gmf_dim = 8, .layers = {32, 16}, .init_scale = 0.1f, .output_bias_init = 2.5f}, 500, 300);
  const auto p = run_initialize(m, 42);
  const auto& l = m.layout();
  const auto mask = in_segment(l);
  for (std::size_t k = 0; k < p.size(); ++k)
    if (!mask[k]) CHECK(p[k] == 0.f);
  for (const char* b : {"mlp0_bias", "mlp1_bias"}) {
    const auto& s = l.find(b);
    for (std::size_t k = s.offset; k < s.offset + s.size(); ++k) CHECK(p[k] == 0.f);
  }
  CHECK(p[l.find("output_bias").offset] == 2.5f);
  auto sd_of = [&](const char* name) {
    const auto& s = l.find(name);
    double sq = 0;
    for (std::size_t k = s.offset; k < s.offset + s.size(); ++k) sq += double(p[k]) * p[k];
    // The value at arena index k is sd · init_normal(seed, k).
    const std::size_t k = s.offset + 3;
    return std::pair{std::sqrt(sq / double(s.size())),
                     double(p[k]) / tutti::detail::init_normal(42, k)};
  };
  for (const char* e :
       {"gmf_user_embedding", "gmf_item_embedding", "mlp_user_embedding", "mlp_item_embedding"}) {
    CAPTURE(e);
    const auto [sd, ratio] = sd_of(e);
    CHECK(sd == doctest::Approx(0.1).epsilon(0.05));
    CHECK(ratio == doctest::Approx(0.1).epsilon(1e-6));
  }
  CHECK(sd_of("mlp0_weight").second == doctest::Approx(std::sqrt(2.0 / 32)).epsilon(1e-6));
  CHECK(sd_of("mlp1_weight").second == doctest::Approx(std::sqrt(2.0 / 32)).epsilon(1e-6));
  CHECK(sd_of("mlp0_weight").first == doctest::Approx(std::sqrt(2.0 / 32)).epsilon(0.05));
  CHECK(sd_of("output_weight").second == doctest::Approx(std::sqrt(1.0 / 24)).epsilon(1e-6));
  CHECK(run_initialize(m, 42) == p);
  CHECK(run_initialize(m, 43) != p);
}

TEST_CASE("neural_cf: arguments are validated") {
  using tutti::invalid_argument;
  CHECK_THROWS_WITH_AS(neural_cf<>({.gmf_dim = 0}, 3, 3), doctest::Contains("gmf_dim is 0"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(neural_cf<>({.layers = {}}, 3, 3), doctest::Contains("layers is empty"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(neural_cf<>({.layers = {8, 0}}, 3, 3), doctest::Contains("layers[1] is 0"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(neural_cf<>({.layers = {1}}, 3, 3), doctest::Contains("mlp_dim is 0"),
                       invalid_argument);
  CHECK_NOTHROW(neural_cf<>({.mlp_dim = 1, .layers = {1}}, 3, 3));
  CHECK_THROWS_WITH_AS(neural_cf<>({}, 0, 3), doctest::Contains("n_users is 0"), invalid_argument);
  CHECK_THROWS_AS(neural_cf<>({}, 3, -1), invalid_argument);
  CHECK_THROWS_AS(neural_cf<>({.l2 = -1.f}, 3, 3), invalid_argument);
  CHECK_THROWS_AS(neural_cf<>({.init_scale = std::nanf("")}, 3, 3), invalid_argument);

  neural_cf<> m({.gmf_dim = 2, .layers = {4}}, 3, 3);
  std::vector<float> params(m.layout().total()), grads(m.layout().total()), small(5);
  std::vector<std::int32_t> ids = {0, 1};
  std::vector<float> two = {1.f, 1.f}, three = {1.f, 1.f, 1.f};
  float loss = 0;
  const tutti::batch_view ok{ids, ids, two, two};
  CHECK_NOTHROW(m.loss_and_gradient(params, ok, grads, 1.f, &loss));
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(small, ok, grads, 1.f, &loss),
                       doctest::Contains("params has 5 values"), invalid_argument);
  const tutti::batch_view ragged{ids, ids, three, two};
  CHECK_THROWS_AS(m.loss_and_gradient(params, ragged, grads, 1.f, &loss), invalid_argument);
  CHECK_THROWS_AS(m.initialize(small, 1), invalid_argument);
  std::vector<float> out(3);
  CHECK_THROWS_AS(m.predict(params, ids, ids, out), invalid_argument);
}

TEST_CASE("neural_cf: results are bitwise identical across runs and OpenMP thread counts") {
  const std::size_t n = 6000;
  const std::int32_t n_users = 200, n_items = 90;
  host_batch b;
  tutti::detail::splitmix rng(17);
  for (std::size_t j = 0; j < n; ++j) {
    const bool hot = rng.uniform() < 0.3;
    b.users.push_back(static_cast<std::int32_t>(hot ? rng.below(3) : rng.below(n_users)));
    b.items.push_back(static_cast<std::int32_t>(hot ? rng.below(2) : rng.below(n_items)));
    b.labels.push_back(rng.uniform() < 0.5 ? 0.f : 1.f);
    b.weights.push_back(rng.uniform() < 0.03 ? 0.f : 1.f);
  }
  neural_cf<> m({.gmf_dim = 8, .layers = {32, 16, 8}, .l2 = 1e-3f, .init_scale = 0.3f}, n_users,
                n_items);
  const auto params = run_initialize(m, 4);
  const int saved = omp_get_max_threads();
  std::vector<lg_result<float>> out;
  for (int threads : {1, 2, 3, 2}) {
    omp_set_num_threads(threads);
    out.push_back(run_lg(m, params, b, 1.f / float(n)));
  }
  omp_set_num_threads(saved);
  for (std::size_t r = 1; r < out.size(); ++r) {
    CAPTURE(r);
    CHECK(std::memcmp(out[0].grads.data(), out[r].grads.data(),
                      out[0].grads.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(&out[0].loss, &out[r].loss, sizeof(float)) == 0);
  }
  // And right: the float gradient agrees with the double model's.
  neural_cf<tutti::host_space, double> md(
      {.gmf_dim = 8, .layers = {32, 16, 8}, .l2 = 1e-3f, .init_scale = 0.3f}, n_users, n_items);
  const std::vector<double> pd(params.begin(), params.end());
  const auto d = run_lg(md, pd, b, 1.0 / double(n));
  double diff = 0, norm = 0;
  for (std::size_t k = 0; k < d.grads.size(); ++k) {
    diff += (double(out[0].grads[k]) - d.grads[k]) * (double(out[0].grads[k]) - d.grads[k]);
    norm += d.grads[k] * d.grads[k];
  }
  CHECK(std::sqrt(diff / norm) < 1e-5);
  CHECK(out[0].loss == doctest::Approx(d.loss).epsilon(1e-5));
}

TEST_CASE(
    "neural_cf: the host's GEMM in bands of rows or of depth is the product, with the same bits "
    "on any number of threads") {
  // m = 700: two bands of 256 rows and a last one of 188 (the rows left over), for each of the
  // four transpositions; m = 300: one call; m = 40 with k = 5000: a weight gradient's shape,
  // cut in k into a band of 2048 and a last one of 2952, added in order.
  tutti::detail::splitmix rng(23);
  const int saved = omp_get_max_threads();
  using shape = std::pair<std::size_t, std::size_t>;
  for (const auto& [m, k] : {shape{700, 13}, shape{300, 13}, shape{40, 5000}})
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        CAPTURE(m);
        CAPTURE(k);
        CAPTURE(ta);
        CAPTURE(tb);
        const std::size_t n = 7;
        const std::size_t lda = ta ? m : k, ldb = tb ? k : n;
        std::vector<float> a((ta ? k : m) * lda), b((tb ? n : k) * ldb), c0(m * n);
        for (auto& x : a) x = static_cast<float>(rng.uniform() - 0.5);
        for (auto& x : b) x = static_cast<float>(rng.uniform() - 0.5);
        for (auto& x : c0) x = static_cast<float>(rng.uniform() - 0.5);
        std::vector<std::vector<float>> runs;
        for (int threads : {1, 2, 3}) {
          omp_set_num_threads(threads);
          std::vector<float> c = c0;
          tutti::detail::blas_context<tutti::host_space> ctx;
          tutti::detail::gemm<float>(ctx, tutti::host_space{}, ta, tb, m, n, k, 0.5f, a.data(), lda,
                                     b.data(), ldb, 2.f, c.data(), n);
          runs.push_back(std::move(c));
        }
        omp_set_num_threads(saved);
        CHECK(std::memcmp(runs[1].data(), runs[0].data(), m * n * sizeof(float)) == 0);
        CHECK(std::memcmp(runs[2].data(), runs[0].data(), m * n * sizeof(float)) == 0);
        double worst = 0;
        for (std::size_t i = 0; i < m; ++i)
          for (std::size_t j = 0; j < n; ++j) {
            double want = 2.0 * c0[i * n + j];
            for (std::size_t p = 0; p < k; ++p)
              want += 0.5 * double(ta ? a[p * lda + i] : a[i * lda + p]) *
                      double(tb ? b[j * ldb + p] : b[p * ldb + j]);
            worst = std::max(worst, std::abs(want - double(runs[0][i * n + j])));
          }
        CHECK(worst < 1e-5 * std::max(1.0, std::sqrt(double(k) / 50)));  // 1e-4 at k = 5000
      }
}

TEST_CASE(
    "neural_cf: its host kernels write a row at a time what they write an element at a time") {
  // The gather, the bias + ReLU pass, the masked backward pass with its column sums, the output
  // layer's sums and the embedding contributions: row(i) against operator() over the row's
  // elements, bit for bit.
  tutti::detail::splitmix rng(29);
  const auto fill = [&rng](std::vector<float>& v) {
    for (auto& x : v) x = static_cast<float>(rng.uniform() - 0.5);
  };
  const std::size_t n = 37, gmf = 5, mlp = 3, cols = 70, e = gmf + mlp, width = gmf + 2 * mlp;
  const std::int32_t users = 11, items = 9;
  const tutti::detail::ncf_offsets off{0, users * gmf, users * gmf + items * gmf,
                                       users * gmf + items * gmf + users * mlp};
  std::vector<float> params(off.mlp_item + items * mlp);
  fill(params);
  std::vector<std::int32_t> u(n), it(n);
  std::vector<float> w(n);
  for (std::size_t i = 0; i < n; ++i) {
    u[i] = static_cast<std::int32_t>(rng.below(users));
    it[i] = static_cast<std::int32_t>(rng.below(items));
    w[i] = i % 7 == 3 ? 0.f : static_cast<float>(0.5 + rng.uniform());
  }
  const auto both = [](auto make, std::size_t rows, std::size_t row_width) {
    auto [by_element, f1] = make();
    for (std::size_t t = 0; t < rows * row_width; ++t) f1(t);
    auto [by_row, f2] = make();
    for (std::size_t i = 0; i < rows; ++i) f2.row(i);
    REQUIRE(by_element->size() == by_row->size());
    CHECK(std::memcmp(by_element->data(), by_row->data(), by_row->size() * sizeof(float)) == 0);
  };
  both(
      [&] {
        auto out = std::make_shared<std::vector<float>>(n * (gmf + 1) + n * 2 * mlp, -7.f);
        return std::pair{out, tutti::detail::ncf_gather_fn<float>{
                                  params.data(), u.data(), it.data(), w.data(), off, gmf, mlp,
                                  users, items, out->data(), gmf + 1, out->data() + n * (gmf + 1)}};
      },
      n, width);
  std::vector<float> z0(n * (cols + 2)), bias(cols), act(n * (cols + 2));
  fill(z0);
  fill(bias);
  fill(act);
  both(
      [&] {
        auto z = std::make_shared<std::vector<float>>(z0);
        return std::pair{
            z, tutti::detail::ncf_bias_relu_fn<float>{z->data(), cols + 2, cols, bias.data()}};
      },
      n, cols);
  for (const bool masked : {true, false})
    for (const std::size_t chunk : {std::size_t{8}, n}) {
      const std::size_t chunks = (n + chunk - 1) / chunk;
      both(
          [&] {
            // The upstream gradient, the chunks' partial sums, then the bias gradient.
            auto out = std::make_shared<std::vector<float>>(z0);
            out->resize(z0.size() + chunks * cols + cols, 0.25f);
            float* partial = chunks > 1 ? out->data() + z0.size() : nullptr;
            float* bias_grad = out->data() + z0.size() + chunks * cols;
            return std::pair{out, tutti::detail::ncf_relu_backward_fn<float>{
                                      out->data(), cols + 2, masked ? act.data() : nullptr,
                                      cols + 2, cols, n, chunk, partial, bias_grad}};
          },
          chunks, cols);
    }
  // The output layer's sums: 71 columns (the weights' 70 and the bias) cross a tile of 64.
  std::vector<float> raw(n), h(n * cols);
  fill(raw);
  fill(h);
  for (const std::size_t chunk : {std::size_t{8}, n}) {
    const std::size_t chunks = (n + chunk - 1) / chunk;
    both(
        [&] {
          auto out = std::make_shared<std::vector<float>>(chunks * (cols + 1), 0.5f);
          return std::pair{out, tutti::detail::ncf_output_sums_fn<float>{raw.data(), h.data(), cols,
                                                                         n, chunk, out->data()}};
        },
        chunks, cols + 1);
  }
  std::vector<float> dh(n * (gmf + 4)), dx0(n * 2 * mlp);
  fill(dh);
  fill(dx0);
  both(
      [&] {
        auto out = std::make_shared<std::vector<float>>(2 * n * e, -3.f);
        return std::pair{out,
                         tutti::detail::ncf_contrib_fn<float>{
                             params.data(), u.data(), it.data(), w.data(), off, gmf, mlp, dh.data(),
                             gmf + 4, dx0.data(), 0.01f, 0.5f, out->data(), out->data() + n * e}};
      },
      n, e);
}

namespace {

using ncf = neural_cf<tutti::host_space>;

tutti::data::split_result course_data(bool implicit, std::int32_t learners) {
  auto all = tutti::data::synthetic_courses({.learners = learners,
                                             .courses = 60,
                                             .interactions_per_learner = 12,
                                             .implicit = implicit,
                                             .seed = 5});
  return tutti::data::split(all, {.test_fraction = 0.2, .seed = 3});
}

ncf make_ncf(const tutti::data::interactions& d, tutti::loss_kind loss) {
  // The paper's small initialisation (init_scale 0.01): 0.1 trains to a clearly lower AUC here.
  return ncf({.gmf_dim = 8, .layers = {16, 8}, .loss = loss}, d.n_users(), d.n_items());
}

using run = tutti_test::rank_run;

template <class Optimizer>
run train_ncf(int world, const tutti::data::split_result& parts, tutti::train_options opt,
              tutti::loss_kind loss, Optimizer optimizer) {
  return tutti_test::train_rank0<ncf>(
      world, parts, opt, [&] { return make_ncf(parts.train, loss); }, tutti::constant{}, optimizer);
}

}  // namespace

TEST_CASE("neural_cf: trained on 2 ranks with Adam, the loss falls and the test AUC beats 0.7") {
  const auto parts = course_data(true, 3000);
  const run r = train_ncf(2, parts, {.batch = 256, .epochs = 6, .base_lr = 0.005, .seed = 1},
                          loss_kind::logistic, tutti::adam{});
  CHECK(r.result.epochs.back().train_loss < r.result.epochs.front().train_loss);
  CHECK(std::string(r.result.eval.metric) == "auc");
  MESSAGE("neural_cf test AUC " << r.result.eval.value);
  CHECK(r.result.eval.value > 0.7);
}

#if defined(OPENBLAS_VERSION)
TEST_CASE("neural_cf: the OpenBLAS kernel asked for with OPENBLAS_CORETYPE is the one that runs") {
  // The suite runs these cases again under other kernels (tests/CMakeLists.txt); this case
  // proves that such a run really used the kernel it names.
  const char* asked = std::getenv("OPENBLAS_CORETYPE");
  std::string got(openblas_get_corename());
  MESSAGE("OpenBLAS kernel: " << got);
  if (asked == nullptr || *asked == '\0') {  // the machine's own choice
    CHECK_FALSE(got.empty());
    return;
  }
  std::string want(asked);
  for (auto* s : {&want, &got})
    std::transform(s->begin(), s->end(), s->begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  CHECK(got == want);
}
#endif

TEST_CASE("neural_cf: 1 rank and 2 ranks at the same global batch end with the same parameters") {
  for (const loss_kind loss : {loss_kind::logistic, loss_kind::squared}) {
    CAPTURE(static_cast<int>(loss));
    const auto parts = course_data(loss == loss_kind::logistic, 300);
    const tutti::train_options opt{
        .batch = 240, .epochs = 2, .base_lr = 0.01, .seed = 11, .evaluate_each_epoch = false};
    REQUIRE(parts.train.size() % 240 != 0);  // the last step is partial, and padded on 2 ranks
    const run one = train_ncf(1, parts, opt, loss, tutti::adam{});
    const run two = train_ncf(2, parts, opt, loss, tutti::adam{});
    CHECK(two.result.steps == one.result.steps);
    // Not the same arithmetic (one sum of 240 terms against two of 120, and the BLAS's own
    // order inside each), so a tolerance: under OpenBLAS's SSE3, Haswell and AVX-512 kernels
    // the difference measured 0.8e-7 to 2.6e-7, far inside 1e-4; the suite runs this case
    // under each of them.
    const double d = relative_difference(two.params, one.params);
    MESSAGE("relative difference 1 vs 2 ranks: " << d);
    CHECK(d <= 1e-4);
    CHECK(two.result.epochs.back().train_loss ==
          doctest::Approx(one.result.epochs.back().train_loss).epsilon(1e-4));
  }
}

#if defined(TUTTI_HAS_CUDA)

namespace {

template <class Space, class Optimizer>
std::vector<float> train_ncf_on(const tutti::data::split_result& parts, tutti::loss_kind loss,
                                Optimizer optimizer, double* final_loss) {
  using model = neural_cf<Space>;
  tutti::trainer<model, tutti::shuffled_shards, tutti::single_rank, tutti::constant, Optimizer> t(
      model({.gmf_dim = 8, .layers = {32, 16, 8}, .loss = loss}, parts.train.n_users(),
            parts.train.n_items()),
      tutti::shuffled_shards{}, tutti::single_rank{}, tutti::constant{}, optimizer,
      {.batch = 512, .epochs = 2, .base_lr = 0.005, .seed = 9, .evaluate_each_epoch = false});
  auto r = t.fit(parts.train, parts.test);
  *final_loss = r.epochs.back().train_loss;
  return t.parameters_on_host();
}

}  // namespace

TEST_CASE("neural_cf: host and cuda spaces train to the same parameters") {
  for (bool implicit : {true, false}) {
    CAPTURE(implicit);
    auto all = tutti::data::synthetic_courses(
        {.learners = 400, .courses = 80, .interactions_per_learner = 15, .implicit = implicit});
    auto parts = tutti::data::split(all, {.test_fraction = 0.1, .seed = 2});
    const auto loss = implicit ? loss_kind::logistic : loss_kind::squared;
    double host_loss = 0, cuda_loss = 0;
    auto host = train_ncf_on<tutti::host_space>(parts, loss, tutti::adam{}, &host_loss);
    auto cuda = train_ncf_on<tutti::cuda_space>(parts, loss, tutti::adam{}, &cuda_loss);
    REQUIRE(host.size() == cuda.size());
    CHECK(relative_difference(cuda, host) <= 1e-4);
    CHECK(cuda_loss == doctest::Approx(host_loss).epsilon(1e-4));
    host = train_ncf_on<tutti::host_space>(parts, loss, tutti::sgd{.momentum = 0.9f}, &host_loss);
    cuda = train_ncf_on<tutti::cuda_space>(parts, loss, tutti::sgd{.momentum = 0.9f}, &cuda_loss);
    CHECK(relative_difference(cuda, host) <= 1e-4);
    CHECK(cuda_loss == doctest::Approx(host_loss).epsilon(1e-4));
  }
}

TEST_CASE("neural_cf: TUTTI_CUBLAS_CHECK names the call, the cuBLAS status and the place") {
  try {
    TUTTI_CUBLAS_CHECK(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, nullptr, nullptr, 1,
                                   nullptr, 1, nullptr, nullptr, 1));
    FAIL("a cuBLAS call without a handle succeeded");
  } catch (const tutti::cublas_error& e) {
    const std::string what = e.what();
    CHECK(what.find("cublasSgemm(nullptr") != std::string::npos);
    CHECK(what.find("CUBLAS_STATUS_") != std::string::npos);
    CHECK(what.find("test_ncf.cpp:") != std::string::npos);
  }
}

#endif  // TUTTI_HAS_CUDA

}  // namespace test_ncf
#else

TEST_CASE("neural_cf: its host tests need a CBLAS") {
  TUTTI_TEST_SKIP("no <cblas.h> in this build: neural_cf's host tests are compiled out");
}

#endif  // __has_include(<cblas.h>)
