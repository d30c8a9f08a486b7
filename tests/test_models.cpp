// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include "model_harness.hpp"
#include "spaces.hpp"

#include <tutti/batch.hpp>
#include <tutti/concepts.hpp>
#include <tutti/detail/normal_fill.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/models/detail/sparse_accumulate.hpp>
#include <tutti/models/logistic_regression.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/space/buffer.hpp>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace test_models {

namespace {

using tutti::loss_kind;
using tutti::models::logistic_regression;
using tutti::models::lr_options;
using tutti::models::matrix_factorization;
using tutti::models::mf_options;

static_assert(tutti::model<matrix_factorization<>>);
static_assert(tutti::model<matrix_factorization<tutti::host_space, double>>);
static_assert(tutti::model<logistic_regression<>>);
static_assert(tutti::check_model<matrix_factorization<>>());
static_assert(tutti::check_model<logistic_regression<tutti::host_space, double>>());
static_assert(std::is_same_v<matrix_factorization<>::value_type, float>);

using tutti_test::check_batch;
using tutti_test::host_batch;
using tutti_test::in_segment;
using tutti_test::lg_result;
using tutti_test::ref_loss;
using tutti_test::run_initialize;
using tutti_test::run_lg;
using tutti_test::run_predict;
using tutti_test::space_batch;

/// Reference score and L2 term of matrix factorisation, read off the layout.
struct mf_ref {
  std::size_t ue, ie, ub, ib, gb, dim;
  template <class M>
  explicit mf_ref(const M& m)
      : ue(m.layout().find("user_embedding").offset),
        ie(m.layout().find("item_embedding").offset),
        ub(m.layout().find("user_bias").offset),
        ib(m.layout().find("item_bias").offset),
        gb(m.layout().find("global_bias").offset),
        dim(static_cast<std::size_t>(m.dim())) {}
  template <class T>
  double score(const std::vector<T>& p, std::size_t u, std::size_t i) const {
    double dot = 0;
    for (std::size_t c = 0; c < dim; ++c)
      dot += double(p[ue + u * dim + c]) * double(p[ie + i * dim + c]);
    return double(p[gb]) + double(p[ub + u]) + double(p[ib + i]) + dot;
  }
  template <class T>
  double reg(const std::vector<T>& p, std::size_t u, std::size_t i) const {
    double r = double(p[ub + u]) * double(p[ub + u]) + double(p[ib + i]) * double(p[ib + i]);
    for (std::size_t c = 0; c < dim; ++c)
      r += double(p[ue + u * dim + c]) * double(p[ue + u * dim + c]) +
           double(p[ie + i * dim + c]) * double(p[ie + i * dim + c]);
    return r;
  }
};

/// Reference score and L2 term of logistic regression.
struct lr_ref {
  std::size_t uw, iw, b;
  template <class M>
  explicit lr_ref(const M& m)
      : uw(m.layout().find("user_weight").offset),
        iw(m.layout().find("item_weight").offset),
        b(m.layout().find("bias").offset) {}
  template <class T>
  double score(const std::vector<T>& p, std::size_t u, std::size_t i) const {
    return double(p[b]) + double(p[uw + u]) + double(p[iw + i]);
  }
  template <class T>
  double reg(const std::vector<T>& p, std::size_t u, std::size_t i) const {
    return double(p[uw + u]) * double(p[uw + u]) + double(p[iw + i]) * double(p[iw + i]);
  }
};

/// Σ w_i·(L_i + l2·reg_i) (with_l2) or Σ w_i·L_i, in double.
template <class Ref, class T>
double ref_objective(const Ref& ref, loss_kind k, double l2, const std::vector<T>& p,
                     const host_batch& b, bool with_l2) {
  double f = 0;
  for (std::size_t j = 0; j < b.users.size(); ++j) {
    const auto u = static_cast<std::size_t>(b.users[j]);
    const auto i = static_cast<std::size_t>(b.items[j]);
    double term = ref_loss(k, ref.score(p, u, i), b.labels[j]);
    if (with_l2) term += l2 * ref.reg(p, u, i);
    f += double(b.weights[j]) * term;
  }
  return f;
}

/// The full MF gradient Σ_i scale·w_i·∂(L_i + l2·reg_i)/∂θ by direct loops in double.
template <class T>
std::vector<double> mf_ref_gradient(const mf_ref& ref, loss_kind k, double l2,
                                    const std::vector<T>& p, const host_batch& b, double scale) {
  std::vector<double> g(p.size(), 0.0);
  const std::size_t d = ref.dim;
  for (std::size_t j = 0; j < b.users.size(); ++j) {
    if (b.weights[j] == 0.f) continue;
    const auto u = static_cast<std::size_t>(b.users[j]);
    const auto i = static_cast<std::size_t>(b.items[j]);
    const double s = ref.score(p, u, i), y = b.labels[j];
    const double dl = k == loss_kind::squared ? 2 * (s - y) : 1 / (1 + std::exp(-s)) - y;
    const double sw = scale * double(b.weights[j]);
    for (std::size_t c = 0; c < d; ++c) {
      const double pu = p[ref.ue + u * d + c], qi = p[ref.ie + i * d + c];
      g[ref.ue + u * d + c] += sw * (dl * qi + 2 * l2 * pu);
      g[ref.ie + i * d + c] += sw * (dl * pu + 2 * l2 * qi);
    }
    g[ref.ub + u] += sw * (dl + 2 * l2 * double(p[ref.ub + u]));
    g[ref.ib + i] += sw * (dl + 2 * l2 * double(p[ref.ib + i]));
    g[ref.gb] += sw * dl;
  }
  return g;
}

/// Central finite differences of the full objective against the analytic gradient.
template <class Model, class Ref>
void gradient_check(Model& m, const Ref& ref, double l2, std::vector<double> params,
                    const host_batch& b) {
  const auto r = run_lg(m, params, b, 1.0);
  const auto mask = in_segment(m.layout());
  // The reported loss is the data loss alone.
  CHECK(r.loss ==
        doctest::Approx(ref_objective(ref, m.loss(), l2, params, b, false)).epsilon(1e-12));
  const double h = 1e-5;
  std::size_t nonzero = 0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (!mask[k]) {
      CHECK(r.grads[k] == 0.0);
      continue;
    }
    const double keep = params[k];
    params[k] = keep + h;
    const double fp = ref_objective(ref, m.loss(), l2, params, b, true);
    params[k] = keep - h;
    const double fm = ref_objective(ref, m.loss(), l2, params, b, true);
    params[k] = keep;
    const double fd = (fp - fm) / (2 * h);
    const double a = r.grads[k];
    const double rel = std::fabs(a - fd) / std::max({std::fabs(a), std::fabs(fd), 1e-3});
    if (a != 0.0) ++nonzero;
    INFO("parameter ", k, ": analytic ", a, ", finite difference ", fd);
    CHECK(rel < 1e-6);
  }
  CHECK(nonzero > 10);  // the check must have compared real gradients
}

/// Random parameters: embeddings from initialize, biases set to non-zero values by hand.
template <class Model>
std::vector<double> random_params(const Model& m, std::uint64_t seed) {
  auto p = run_initialize(m, seed);
  tutti::detail::splitmix rng(seed + 17);
  for (const auto& s : m.layout().segments())
    if (s.kind != tutti::segment_kind::embedding || s.cols == 1)
      for (std::size_t k = 0; k < s.size(); ++k) p[s.offset + k] = rng.uniform() - 0.5;
  return p;
}

}  // namespace

TEST_CASE_TEMPLATE("matrix_factorization: analytic gradient matches finite differences", Space,
                   TUTTI_TEST_SPACES) {
  for (loss_kind k : {loss_kind::squared, loss_kind::logistic}) {
    CAPTURE(static_cast<int>(k));
    const double l2 = 0.05;
    matrix_factorization<Space, double> m(
        {.dim = 3, .l2 = float(l2), .loss = k, .init_scale = 0.5f}, 7, 5);
    const mf_ref ref(m);
    auto params = random_params(m, 11);
    const auto b = check_batch(k);
    gradient_check(m, ref, double(float(l2)), params, b);
    // Rows no real slot touches: user 4 (absent) and user 5 (only in the padding slot).
    const auto r = run_lg(m, params, b, 1.0);
    for (std::size_t c = 0; c < 3; ++c) {
      CHECK(r.grads[ref.ue + 4 * 3 + c] == 0.0);
      CHECK(r.grads[ref.ue + 5 * 3 + c] == 0.0);
    }
    CHECK(r.grads[ref.ub + 5] == 0.0);
  }
}

TEST_CASE_TEMPLATE("logistic_regression: analytic gradient matches finite differences", Space,
                   TUTTI_TEST_SPACES) {
  for (loss_kind k : {loss_kind::squared, loss_kind::logistic}) {
    CAPTURE(static_cast<int>(k));
    const double l2 = 0.05;
    logistic_regression<Space, double> m({.l2 = float(l2), .loss = k}, 7, 5);
    const lr_ref ref(m);
    auto params = random_params(m, 5);
    const auto b = check_batch(k);
    gradient_check(m, ref, double(float(l2)), params, b);
  }
}

TEST_CASE_TEMPLATE("models: a padding slot contributes nothing", Space, TUTTI_TEST_SPACES) {
  matrix_factorization<Space, double> mf({.dim = 4, .l2 = 0.01f, .init_scale = 0.3f}, 7, 5);
  logistic_regression<Space, double> lr({.l2 = 0.01f}, 7, 5);
  auto check = [](auto& m, const std::vector<double>& params) {
    host_batch b = check_batch(m.loss());
    host_batch padded = b;
    // In the middle, on a shared item and an otherwise unused user; then one whose ids are
    // out of range (padding ids are never dereferenced).
    padded.users.insert(padded.users.begin() + 4, 4);
    padded.items.insert(padded.items.begin() + 4, 1);
    padded.labels.insert(padded.labels.begin() + 4, 1.f);
    padded.weights.insert(padded.weights.begin() + 4, 0.f);
    padded.users.push_back(1000);
    padded.items.push_back(-7);
    padded.labels.push_back(1.f);
    padded.weights.push_back(0.f);
    const auto a = run_lg(m, params, b, 1.0);
    const auto p = run_lg(m, params, padded, 1.0);
    CHECK(std::memcmp(a.grads.data(), p.grads.data(), a.grads.size() * sizeof(double)) == 0);
    CHECK(a.loss == p.loss);
    // A batch of padding alone changes nothing at all.
    host_batch only_pad = padded;
    std::fill(only_pad.weights.begin(), only_pad.weights.end(), 0.f);
    std::vector<double> g0(m.layout().total(), 0.25);
    const auto z = run_lg(m, params, only_pad, 1.0, g0, 3.0);
    CHECK(z.grads == g0);
    CHECK(z.loss == 3.0);
  };
  check(mf, random_params(mf, 3));
  check(lr, random_params(lr, 3));
}

TEST_CASE_TEMPLATE("models: scale multiplies the gradient, gradients and loss_sum add", Space,
                   TUTTI_TEST_SPACES) {
  matrix_factorization<Space, double> mf(
      {.dim = 3, .l2 = 0.02f, .loss = loss_kind::logistic, .init_scale = 0.4f}, 7, 5);
  logistic_regression<Space, double> lr({.l2 = 0.02f}, 7, 5);
  auto check = [](auto& m, const std::vector<double>& params) {
    const host_batch b = check_batch(m.loss());
    const auto one = run_lg(m, params, b, 1.0);
    REQUIRE(std::any_of(one.grads.begin(), one.grads.end(), [](double g) { return g != 0.0; }));
    REQUIRE(one.loss > 0.0);
    // A power-of-two scale is exact, so the gradients scale to the last bit.
    const auto quarter = run_lg(m, params, b, 0.25);
    for (std::size_t k = 0; k < one.grads.size(); ++k)
      CHECK(quarter.grads[k] == 0.25 * one.grads[k]);
    CHECK(quarter.loss == one.loss);  // the loss is not scaled
    const auto three = run_lg(m, params, b, 3.0);
    for (std::size_t k = 0; k < one.grads.size(); ++k)
      CHECK(three.grads[k] == doctest::Approx(3.0 * one.grads[k]).epsilon(1e-14));
    // Into non-zero gradients and loss: both are added to, not overwritten.
    std::vector<double> g0(one.grads.size());
    for (std::size_t k = 0; k < g0.size(); ++k) g0[k] = 0.5 + double(k % 7);
    const auto added = run_lg(m, params, b, 1.0, g0, 10.0);
    for (std::size_t k = 0; k < g0.size(); ++k) CHECK(added.grads[k] == g0[k] + one.grads[k]);
    CHECK(added.loss == 10.0 + one.loss);
    // Accumulating the same batch twice gives twice the gradient.
    const auto twice = run_lg(m, params, b, 1.0, one.grads, one.loss);
    for (std::size_t k = 0; k < g0.size(); ++k) CHECK(twice.grads[k] == 2.0 * one.grads[k]);
    CHECK(twice.loss == 2.0 * one.loss);
  };
  check(mf, random_params(mf, 21));
  check(lr, random_params(lr, 21));
}

TEST_CASE("models: results are bitwise identical across runs and OpenMP thread counts") {
  // Large and skewed: a few hot users and items repeat thousands of times, and the slot count
  // needs two levels of block sums.
  const std::size_t n = 70000;
  const std::int32_t n_users = 300, n_items = 120;
  host_batch b;
  tutti::detail::splitmix rng(99);
  for (std::size_t j = 0; j < n; ++j) {
    const bool hot = rng.uniform() < 0.3;
    b.users.push_back(static_cast<std::int32_t>(hot ? rng.below(3) : rng.below(n_users)));
    b.items.push_back(static_cast<std::int32_t>(hot ? rng.below(2) : rng.below(n_items)));
    b.labels.push_back(rng.uniform() < 0.5 ? 0.f : 1.f);
    b.weights.push_back(rng.uniform() < 0.03 ? 0.f : 1.f);
  }
  // The same batch with padding slots spread through it (and ids no real slot uses).
  host_batch padded;
  for (std::size_t j = 0; j < n; ++j) {
    if (j % 97 == 5) {
      padded.users.push_back(static_cast<std::int32_t>(rng.below(n_users)));
      padded.items.push_back(static_cast<std::int32_t>(rng.below(n_items)));
      padded.labels.push_back(1.f);
      padded.weights.push_back(0.f);
    }
    padded.users.push_back(b.users[j]);
    padded.items.push_back(b.items[j]);
    padded.labels.push_back(b.labels[j]);
    padded.weights.push_back(b.weights[j]);
  }
  const int saved = omp_get_max_threads();
  auto run_all = [&](auto& m, const std::vector<float>& params) {
    std::vector<lg_result<float>> out;
    for (int threads : {1, 2, 3, 2}) {
      omp_set_num_threads(threads);
      out.push_back(run_lg(m, params, b, 1.f / float(n)));
    }
    out.push_back(run_lg(m, params, padded, 1.f / float(n)));
    omp_set_num_threads(saved);
    for (std::size_t r = 1; r < out.size(); ++r) {
      CAPTURE(r);
      CHECK(std::memcmp(out[0].grads.data(), out[r].grads.data(),
                        out[0].grads.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(&out[0].loss, &out[r].loss, sizeof(float)) == 0);
    }
    return out[0];
  };

  matrix_factorization<tutti::host_space> mf(
      {.dim = 8, .l2 = 1e-3f, .loss = loss_kind::logistic, .init_scale = 0.2f}, n_users, n_items);
  const auto mf_params = run_initialize(mf, 4);
  const auto mf_r = run_all(mf, mf_params);
  // Reproducible and also right: every row (hot rows span hundreds of chunks) and both
  // multi-level sums agree with direct double loops.
  const mf_ref ref(mf);
  CHECK(mf_r.loss ==
        doctest::Approx(ref_objective(ref, mf.loss(), 0.0, mf_params, b, false)).epsilon(1e-4));
  const auto g = mf_ref_gradient(ref, mf.loss(), double(1e-3f), mf_params, b, 1.0 / double(n));
  std::size_t bad = 0;
  for (std::size_t k = 0; k < g.size(); ++k)
    if (std::fabs(double(mf_r.grads[k]) - g[k]) > 1e-4 * std::max(std::fabs(g[k]), 1e-3)) ++bad;
  CHECK(bad == 0);

  logistic_regression<tutti::host_space> lr({}, n_users, n_items);
  auto lr_params = run_initialize(lr, 4);
  for (std::size_t k = 0; k < lr_params.size(); ++k) lr_params[k] = float(rng.uniform() - 0.5);
  run_all(lr, lr_params);
}

TEST_CASE("sparse_accumulator: the host's chunk-per-thread kernel gives the per-column bits") {
  // The host sums a chunk's runs a whole row at a time (chunk_rows_fn); a device sums one
  // (chunk, column) per thread (chunk_pieces_fn + chain_pieces_fn). Replaying the latter here
  // over the same sorted keys must give the same bits, for widths below, at and above the
  // host's column tile, with hot rows spanning many chunks and padding slots.
  using acc_t = tutti::detail::sparse_accumulator<float, tutti::host_space>;
  const tutti::host_space space;
  tutti::detail::splitmix rng(5);
  for (const std::size_t cols :
       {std::size_t{1}, std::size_t{17}, std::size_t{64}, std::size_t{65}, std::size_t{150}}) {
    CAPTURE(cols);
    const std::size_t n = 3000;
    const std::int32_t n_rows = 200;
    std::vector<std::int32_t> ids(n);
    std::vector<float> weights(n), contrib(n * (cols + 3));
    for (std::size_t j = 0; j < n; ++j) {
      ids[j] = static_cast<std::int32_t>(rng.uniform() < 0.4 ? rng.below(2) : rng.below(n_rows));
      weights[j] = rng.uniform() < 0.05 ? 0.f : 1.f;
    }
    for (float& x : contrib) x = static_cast<float>(rng.uniform() - 0.5);
    const std::size_t stride = cols + 3;  // a slot's contribution is wider than the columns
    std::vector<float> host(n_rows * cols, 0.25f), device = host, some = host;
    acc_t acc(space);
    acc.group(space, ids.data(), weights.data(), n, n_rows);
    acc.scatter_add(space, contrib.data(), stride, cols, host.data(), cols);
    acc.scatter_add_rows(space, contrib.data(), stride, cols, some.data(), cols, 1, 150);

    // The device's kernels over the same stable sort.
    std::vector<std::int32_t> keys(n), order(n);
    for (std::size_t j = 0; j < n; ++j) {
      keys[j] = weights[j] != 0.f ? ids[j] : tutti::detail::padding_key;
      order[j] = static_cast<std::int32_t>(j);
    }
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return keys[static_cast<std::size_t>(a)] < keys[static_cast<std::size_t>(b)];
    });
    std::vector<std::int32_t> sorted(n);
    for (std::size_t j = 0; j < n; ++j) sorted[j] = keys[static_cast<std::size_t>(order[j])];
    const std::size_t chunk = acc_t::chunk, chunks = (n + chunk - 1) / chunk;
    CHECK(chunks > 4);
    std::vector<float> first(chunks * cols), last(chunks * cols);
    const tutti::detail::row_dest<float> to_device{device.data(), cols, cols};
    const tutti::detail::chunk_pieces_fn<float> pieces{
        sorted.data(), order.data(), contrib.data(), stride,     cols, n,
        chunk,         to_device,    first.data(),   last.data()};
    const tutti::detail::chain_pieces_fn<float> chain{sorted.data(), cols,        n,        chunk,
                                                      first.data(),  last.data(), to_device};
    for (std::size_t t = 0; t < chunks * cols; ++t) pieces(t);
    for (std::size_t t = 0; t < chunks * cols; ++t) chain(t);
    CHECK(std::memcmp(host.data(), device.data(), host.size() * sizeof(float)) == 0);
    CHECK(host != std::vector<float>(n_rows * cols, 0.25f));
    // One pass into two tables (columns [0, split) and the rest) gives each value the bits of
    // the one-table pass, wherever the split falls against the host's column tile.
    for (const std::size_t split : {cols - 1, cols / 2}) {
      CAPTURE(split);
      const std::size_t rest = cols - split;
      std::vector<float> main_part(n_rows * split, 0.25f), tail_part(n_rows * rest, 0.25f);
      acc.scatter_add_split(space, contrib.data(), stride, cols, main_part.data(), split, split,
                            tail_part.data(), rest);
      std::size_t differ = 0;
      for (std::size_t r = 0; r < static_cast<std::size_t>(n_rows); ++r)
        for (std::size_t c = 0; c < cols; ++c) {
          const float got = c < split ? main_part[r * split + c] : tail_part[r * rest + c - split];
          differ += std::memcmp(&got, &host[r * cols + c], sizeof(float)) != 0 ? 1 : 0;
        }
      CHECK(differ == 0);
    }
    // The row-filtered scatter gives those rows the same bits and leaves the others alone.
    for (std::size_t r = 0; r < static_cast<std::size_t>(n_rows); ++r)
      for (std::size_t c = 0; c < cols; ++c) {
        const float expected = r >= 1 && r < 150 ? host[r * cols + c] : 0.25f;
        if (std::memcmp(&some[r * cols + c], &expected, sizeof(float)) != 0) {
          FAIL_CHECK("row " << r << " column " << c);
          r = n_rows;
          break;
        }
      }
  }
}

TEST_CASE_TEMPLATE("models: a few SGD steps by hand lower the loss", Space, TUTTI_TEST_SPACES) {
  // 4 users × 3 items; every user rates or clicks several items.
  host_batch ratings;
  ratings.users = {0, 0, 1, 1, 1, 2, 2, 3, 3, 3};
  ratings.items = {0, 1, 0, 1, 2, 1, 2, 0, 1, 2};
  ratings.labels = {5, 3, 4, 2, 1, 4, 5, 1, 2, 5};
  ratings.weights.assign(10, 1.f);
  host_batch clicks = ratings;
  clicks.labels = {1, 0, 1, 0, 0, 1, 1, 0, 0, 1};

  auto descend = [](auto& m, auto params, const host_batch& b, double lr, int steps) {
    using T = typename std::decay_t<decltype(params)>::value_type;
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const auto r = run_lg(m, params, b, T(1) / T(b.users.size()));
      losses.push_back(double(r.loss));
      for (std::size_t k = 0; k < params.size(); ++k) params[k] -= T(lr) * r.grads[k];
    }
    return losses;
  };
  {
    matrix_factorization<Space> m({.dim = 2, .l2 = 1e-4f, .init_scale = 0.1f}, 4, 3);
    const auto l = descend(m, run_initialize(m, 1), ratings, 0.1, 60);
    for (std::size_t s = 1; s < 5; ++s) CHECK(l[s] < l[s - 1]);
    CHECK(l.back() < 0.1 * l.front());
  }
  {
    matrix_factorization<Space> m(
        {.dim = 2, .l2 = 1e-4f, .loss = loss_kind::logistic, .init_scale = 0.1f}, 4, 3);
    const auto l = descend(m, run_initialize(m, 1), clicks, 0.5, 60);
    for (std::size_t s = 1; s < 5; ++s) CHECK(l[s] < l[s - 1]);
    CHECK(l.back() < 0.7 * l.front());
  }
  {
    logistic_regression<Space> m({}, 4, 3);
    const auto l = descend(m, run_initialize(m, 1), clicks, 0.5, 60);
    for (std::size_t s = 1; s < 5; ++s) CHECK(l[s] < l[s - 1]);
    CHECK(l.back() < 0.95 * l.front());
  }
}

TEST_CASE_TEMPLATE("models: the logistic loss is stable at extreme scores", Space,
                   TUTTI_TEST_SPACES) {
  // bias = ±100 puts every score far out where a naive log(1 + exp(-z)) overflows or rounds
  // to zero; softplus keeps loss and gradient exact.
  logistic_regression<Space> m({.l2 = 0.f}, 2, 2);
  const std::size_t bias = m.layout().find("bias").offset;
  host_batch b;
  b.users = {0, 1};
  b.items = {0, 1};
  b.labels = {1.f, 0.f};
  b.weights = {1.f, 1.f};
  for (float s : {100.f, -100.f}) {
    std::vector<float> params(m.layout().total(), 0.f);
    params[bias] = s;
    const auto r = run_lg(m, params, b, 1.f);
    // One of the two slots is right by a margin of 100 (loss e^-100 ≈ 0, gradient ≈ 0), the
    // other wrong by 100 (loss 100, gradient ±1), so the bias gradient is ±1.
    CHECK(std::isfinite(r.loss));
    CHECK(r.loss == doctest::Approx(100.0).epsilon(1e-6));
    CHECK(r.grads[bias] == doctest::Approx(s > 0 ? 1.0 : -1.0).epsilon(1e-6));
    const std::size_t wrong_user = s > 0 ? 1 : 0;  // label 0 at +100, label 1 at -100
    CHECK(r.grads[m.layout().find("user_weight").offset + wrong_user] ==
          doctest::Approx(s > 0 ? 1.0 : -1.0).epsilon(1e-6));
    CHECK(std::fabs(r.grads[m.layout().find("user_weight").offset + 1 - wrong_user]) < 1e-30);
  }
}

TEST_CASE("models: layouts name their segments with aligned offsets") {
  matrix_factorization<> mf({.dim = 3}, 7, 5);
  const auto& l = mf.layout();
  REQUIRE(l.segments().size() == 5);
  const char* names[] = {"user_embedding", "item_embedding", "user_bias", "item_bias",
                         "global_bias"};
  const std::size_t offsets[] = {0, 32, 48, 64, 80};
  const std::size_t rows[] = {7, 5, 7, 5, 1};
  const std::size_t cols[] = {3, 3, 1, 1, 1};
  const tutti::segment_kind kinds[] = {tutti::segment_kind::embedding,
                                       tutti::segment_kind::embedding, tutti::segment_kind::bias,
                                       tutti::segment_kind::bias, tutti::segment_kind::bias};
  for (std::size_t s = 0; s < 5; ++s) {
    CAPTURE(s);
    CHECK(l[s].name == names[s]);
    CHECK(l[s].offset == offsets[s]);
    CHECK(l[s].rows == rows[s]);
    CHECK(l[s].cols == cols[s]);
    CHECK(l[s].kind == kinds[s]);
  }
  CHECK(l.total() == 96);
  CHECK(l.parameter_count() == 21 + 15 + 7 + 5 + 1);
  CHECK(mf.loss() == loss_kind::squared);
  CHECK(mf.n_users() == 7);
  CHECK(mf.n_items() == 5);
  CHECK(mf.dim() == 3);

  logistic_regression<> lr({}, 7, 40);
  const auto& m = lr.layout();
  REQUIRE(m.segments().size() == 3);
  CHECK(m[0].name == "user_weight");
  CHECK(m[0].offset == 0);
  CHECK(m[0].kind == tutti::segment_kind::embedding);
  CHECK(m[1].name == "item_weight");
  CHECK(m[1].offset == 16);
  CHECK(m[1].rows == 40);
  CHECK(m[2].name == "bias");
  CHECK(m[2].offset == 64);
  CHECK(m[2].kind == tutti::segment_kind::bias);
  CHECK(m.total() == 80);
  CHECK(lr.loss() == loss_kind::logistic);
}

TEST_CASE_TEMPLATE("models: predict matches the formula", Space, TUTTI_TEST_SPACES) {
  const std::vector<std::int32_t> users = {0, 6, 3, 3, 2};
  const std::vector<std::int32_t> items = {4, 0, 1, 1, 2};
  {
    matrix_factorization<Space, double> m({.dim = 3, .loss = loss_kind::logistic}, 7, 5);
    const auto params = random_params(m, 8);
    const mf_ref ref(m);
    const auto out = run_predict(m, params, users, items);
    for (std::size_t j = 0; j < users.size(); ++j) {
      // Written out in full rather than through mf_ref::score.
      const std::size_t u = std::size_t(users[j]), i = std::size_t(items[j]);
      double s = params[ref.gb] + params[ref.ub + u] + params[ref.ib + i];
      for (std::size_t c = 0; c < 3; ++c)
        s += params[ref.ue + 3 * u + c] * params[ref.ie + 3 * i + c];
      CHECK(out[j] == doctest::Approx(s).epsilon(1e-14));
    }
  }
  {
    logistic_regression<Space, double> m({}, 7, 5);
    const auto params = random_params(m, 8);
    const lr_ref ref(m);
    const auto out = run_predict(m, params, users, items);
    for (std::size_t j = 0; j < users.size(); ++j)
      CHECK(out[j] == doctest::Approx(params[ref.b] + params[ref.uw + std::size_t(users[j])] +
                                      params[ref.iw + std::size_t(items[j])])
                          .epsilon(1e-14));
  }
}

TEST_CASE_TEMPLATE("models: initialize is counter-based and fills every value", Space,
                   TUTTI_TEST_SPACES) {
  matrix_factorization<Space> m({.dim = 16, .init_scale = 0.3f, .global_bias_init = 3.5f}, 2000,
                                1000);
  const auto p = run_initialize(m, 42);
  const auto& l = m.layout();
  const auto mask = in_segment(l);
  for (std::size_t k = 0; k < p.size(); ++k)
    if (!mask[k]) CHECK(p[k] == 0.f);
  for (const char* b : {"user_bias", "item_bias"}) {
    const auto& s = l.find(b);
    CHECK(std::all_of(p.begin() + std::ptrdiff_t(s.offset),
                      p.begin() + std::ptrdiff_t(s.offset + s.size()),
                      [](float v) { return v == 0.f; }));
  }
  CHECK(p[l.find("global_bias").offset] == 3.5f);
  for (const char* e : {"user_embedding", "item_embedding"}) {
    const auto& s = l.find(e);
    double sum = 0, sq = 0;
    for (std::size_t k = s.offset; k < s.offset + s.size(); ++k) {
      sum += p[k];
      sq += double(p[k]) * p[k];
    }
    const double mean = sum / double(s.size());
    const double sd = std::sqrt(sq / double(s.size()) - mean * mean);
    CHECK(std::fabs(mean) < 0.01);
    CHECK(sd == doctest::Approx(0.3).epsilon(0.02));
    // The value at arena index k is init_scale · init_normal(seed, k), at every index (both
    // halves of a pair, and a pair that straddles the segment's ends).
    std::size_t differ = 0;
    for (std::size_t k = s.offset; k < s.offset + s.size(); ++k)
      differ += p[k] != static_cast<float>(0.3f * tutti::detail::init_normal(42, k));
    CHECK(differ == 0);
  }
  CHECK(run_initialize(m, 42) == p);
  CHECK(run_initialize(m, 43) != p);

  logistic_regression<Space> lr({}, 5, 3);
  const auto q = run_initialize(lr, 1);
  CHECK(std::all_of(q.begin(), q.end(), [](float v) { return v == 0.f; }));
}

TEST_CASE("init_normal: the Box-Muller of the math library, a standard normal") {
  // Within 1e-7 of √(-2 ln u1)·cos(2π u2) (and sin for the odd counter) on the same uniforms.
  const std::size_t n = 200000;
  double worst = 0, sum = 0, sq = 0;
  std::size_t within[3] = {0, 0, 0};
  for (std::size_t k = 0; k < n; ++k) {
    const double z = tutti::detail::init_normal(42, k);
    const std::uint64_t h = tutti::detail::hash2(42, k / 2);
    const double u1 = (static_cast<double>(h >> 32) + 0.5) * 0x1.0p-32;
    const double turn =
        6.283185307179586 * static_cast<double>(static_cast<std::uint32_t>(h)) * 0x1.0p-32;
    const double ref = std::sqrt(-2.0 * std::log(u1)) * (k % 2 ? std::sin(turn) : std::cos(turn));
    worst = std::max(worst, std::fabs(z - ref));
    sum += z;
    sq += z * z;
    for (int s = 0; s < 3; ++s) within[s] += std::fabs(z) < s + 1;
  }
  CHECK(worst < 1e-7);
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(std::sqrt(sq / n) == doctest::Approx(1.0).epsilon(0.01));
  // The normal's shares within 1, 2 and 3 standard deviations.
  CHECK(double(within[0]) / n == doctest::Approx(0.6827).epsilon(0.01));
  CHECK(double(within[1]) / n == doctest::Approx(0.9545).epsilon(0.005));
  CHECK(double(within[2]) / n == doctest::Approx(0.9973).epsilon(0.002));
  double a = 0, b = 0;
  tutti::detail::init_normal_pair(42, 7, a, b);
  CHECK(a == tutti::detail::init_normal(42, 14));
  CHECK(b == tutti::detail::init_normal(42, 15));
  CHECK(tutti::detail::log_unit(1.0) == 0.0);
  CHECK(tutti::detail::log_unit(0x1.0p-33) == doctest::Approx(std::log(0x1.0p-33)).epsilon(1e-14));
}

TEST_CASE("init_normal: the square root of x, y - x and ÷ alone, within 4 ulp of std::sqrt") {
  // Over the range -2 ln u1 takes (u1 in (2^-33, 1)), logarithmically spaced.
  for (double y = 2e-10; y < 47.0; y *= 1.0009) {
    const double r = tutti::detail::sqrt_positive(y), ref = std::sqrt(y);
    CHECK(std::fabs(r - ref) <= 4 * (std::nextafter(ref, 1e300) - ref));
  }
}

TEST_CASE("init_normal: the host's vector loops write init_normal_pair's values, bit for bit") {
  // Every loop the build has (the CPU's best, then each lower one; a level the CPU lacks runs
  // the next it has), from an odd first pair, in float and double.
  const std::size_t pairs = 5003;
  const std::uint64_t first = 1'000'001, seed = 42;
  const double scale = 0.3f;
  std::vector<float> ref(2 * pairs);
  std::vector<double> ref_d(2 * pairs);
  for (std::size_t i = 0; i < pairs; ++i) {
    double a = 0, b = 0;
    tutti::detail::init_normal_pair(seed, first + i, a, b);
    ref[2 * i] = static_cast<float>(scale * a);
    ref[2 * i + 1] = static_cast<float>(scale * b);
    ref_d[2 * i] = scale * a;
    ref_d[2 * i + 1] = scale * b;
  }
  MESSAGE("this CPU's best loop: level " << tutti::detail::normal_fill_level()
                                         << " (2 AVX-512, 1 AVX2, 0 the build's target)");
  for (int level = 2; level >= 0; --level) {
    CAPTURE(level);
    std::vector<float> out(2 * pairs, -1.f);
    tutti::detail::fill_normal_pairs(out.data(), seed, first, pairs, scale, level);
    CHECK(std::memcmp(out.data(), ref.data(), out.size() * sizeof(float)) == 0);
    std::vector<double> out_d(2 * pairs, -1.0);
    tutti::detail::fill_normal_pairs(out_d.data(), seed, first, pairs, scale, level);
    CHECK(std::memcmp(out_d.data(), ref_d.data(), out_d.size() * sizeof(double)) == 0);
  }
}

TEST_CASE("models: initialize does not depend on the OpenMP thread count") {
  matrix_factorization<> m({.dim = 5}, 300, 200);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto a = run_initialize(m, 7);
  omp_set_num_threads(2);
  const auto b = run_initialize(m, 7);
  omp_set_num_threads(saved);
  CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST_CASE("models: arguments are validated") {
  using tutti::invalid_argument;
  CHECK_THROWS_WITH_AS(matrix_factorization<>({.dim = 0}, 3, 3), doctest::Contains("dim is 0"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(matrix_factorization<>({}, 0, 3), doctest::Contains("n_users is 0"),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(matrix_factorization<>({}, 3, -1), doctest::Contains("n_items is -1"),
                       invalid_argument);
  CHECK_THROWS_AS(matrix_factorization<>({.l2 = -1.f}, 3, 3), invalid_argument);
  CHECK_THROWS_AS(matrix_factorization<>({.init_scale = std::nanf("")}, 3, 3), invalid_argument);
  CHECK_THROWS_AS(logistic_regression<>({}, 3, 0), invalid_argument);
  CHECK_THROWS_AS(logistic_regression<>({.l2 = -0.5f}, 3, 3), invalid_argument);

  matrix_factorization<> m({.dim = 2}, 3, 3);
  std::vector<float> params(m.layout().total()), grads(m.layout().total()), small(5);
  std::vector<std::int32_t> ids = {0, 1};
  std::vector<float> two = {1.f, 1.f}, three = {1.f, 1.f, 1.f};
  float loss = 0;
  const tutti::batch_view ok{ids, ids, two, two};
  CHECK_NOTHROW(m.loss_and_gradient(params, ok, grads, 1.f, &loss));
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(small, ok, grads, 1.f, &loss),
                       doctest::Contains("params has 5 values"), invalid_argument);
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(params, ok, small, 1.f, &loss),
                       doctest::Contains("grads has 5 values"), invalid_argument);
  const tutti::batch_view ragged{ids, ids, three, two};
  CHECK_THROWS_WITH_AS(m.loss_and_gradient(params, ragged, grads, 1.f, &loss),
                       doctest::Contains("expected equal sizes"), invalid_argument);
  CHECK_THROWS_AS(m.initialize(small, 1), invalid_argument);
  std::vector<float> out(3);
  CHECK_THROWS_AS(m.predict(params, ids, ids, out), invalid_argument);
  CHECK_THROWS_AS(m.predict(small, ids, ids, std::span<float>(out).first(2)), invalid_argument);

  logistic_regression<> lr({}, 3, 3);
  std::vector<float> lp(lr.layout().total()), lg(lr.layout().total());
  CHECK_NOTHROW(lr.loss_and_gradient(lp, ok, lg, 1.f, nullptr));
  CHECK_THROWS_AS(lr.loss_and_gradient(lp, ragged, lg, 1.f, &loss), invalid_argument);
  CHECK_THROWS_AS(lr.loss_and_gradient(small, ok, lg, 1.f, &loss), invalid_argument);
}

TEST_CASE_TEMPLATE("models: a copy computes the same gradient with its own scratch", Space,
                   TUTTI_TEST_SPACES) {
  matrix_factorization<Space> m({.dim = 4, .init_scale = 0.3f}, 7, 5);
  const auto params = run_initialize(m, 3);
  const host_batch b = check_batch(m.loss());
  const auto a = run_lg(m, params, b, 1.f);
  matrix_factorization<Space> copy = m;
  const auto c = run_lg(copy, params, b, 1.f);
  CHECK(std::memcmp(a.grads.data(), c.grads.data(), a.grads.size() * sizeof(float)) == 0);
  CHECK(a.loss == c.loss);
  // The original still works after its copy ran (no shared scratch).
  CHECK(run_lg(m, params, b, 1.f).grads == a.grads);
}

}  // namespace test_models
