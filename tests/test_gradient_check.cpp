// SPDX-License-Identifier: Apache-2.0
// tutti::check_gradient: tutti's own models pass it; a model whose gradient is wrong in one
// place, or that writes none, or whose regulariser is left out of its reported loss, fails it,
// and the result names the parameter; so does one whose derivatives are right but which ignores
// the scale, writes over the gradient or the loss, or averages over its batch; sampling checks a
// fixed subset; bad input is refused.
#include <tutti/gradient_check.hpp>
#include <tutti/models/logistic_regression.hpp>
#include <tutti/models/matrix_factorization.hpp>
#include <tutti/models/neural_cf.hpp>

#include "model_harness.hpp"
#include "spaces.hpp"
#include "wrapped_model.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace test_gradient_check {

using namespace tutti;
using namespace tutti::models;
using tutti_test::check_batch;
using tutti_test::run_initialize;
using tutti_test::space_batch;

namespace {

/// `Inner` whose gradient of one parameter comes out `factor` times too large.
template <class Inner>
class scaled_gradient : public tutti_test::wrapped_model<Inner> {
 public:
  using T = typename Inner::value_type;
  scaled_gradient(Inner inner, std::size_t index, T factor)
      : tutti_test::wrapped_model<Inner>(std::move(inner)), m_index(index), m_factor(factor) {}
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    this->m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
    std::vector<T> g = to_host_vector(this->space(), std::span<const T>(grads));
    g[m_index] *= m_factor;
    copy_from_host(this->space(), std::span<const T>(g), grads);
  }

 private:
  std::size_t m_index;
  T m_factor;
};

/// `Inner` that reports its loss and writes no gradient.
template <class Inner>
class no_gradient : public tutti_test::wrapped_model<Inner> {
 public:
  using T = typename Inner::value_type;
  explicit no_gradient(Inner inner) : tutti_test::wrapped_model<Inner>(std::move(inner)) {}
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    buffer<T, typename Inner::space_type> scratch(grads.size(), this->space());
    fill(this->space(), scratch.span(), T(0));
    this->m_inner.loss_and_gradient(params, batch, scratch.span(), scale, loss_sum);
  }
};

/// How a model can break the `loss_and_gradient` contract while its derivatives are right.
enum class breach { ignores_scale, overwrites_gradient, overwrites_loss, mean_over_batch };

/// `Inner` (on the host) that keeps its derivatives right at scale 1 into zeros, the case a
/// derivative check alone sees, and breaks the contract one way.
template <class Inner>
class breaks_contract : public tutti_test::wrapped_model<Inner> {
 public:
  using T = typename Inner::value_type;
  breaks_contract(Inner inner, breach how)
      : tutti_test::wrapped_model<Inner>(std::move(inner)), m_how(how) {}
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    switch (m_how) {
      case breach::ignores_scale:
        return this->m_inner.loss_and_gradient(params, batch, grads, T(1), loss_sum);
      case breach::overwrites_gradient:
        std::fill(grads.begin(), grads.end(), T(0));
        return this->m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
      case breach::overwrites_loss:
        *loss_sum = T(0);
        return this->m_inner.loss_and_gradient(params, batch, grads, scale, loss_sum);
      case breach::mean_over_batch: {  // the mean loss, and its gradient: consistent, not a sum
        const T n = T(batch.size());
        T loss = 0;
        this->m_inner.loss_and_gradient(params, batch, grads, scale / n, &loss);
        *loss_sum += loss / n;
        return;
      }
    }
  }

 private:
  breach m_how;
};

template <class Space>
using mf = matrix_factorization<Space, double>;

template <class Space>
mf<Space> small_mf(loss_kind k, float l2 = 0.f) {
  return mf<Space>({.dim = 3, .l2 = l2, .loss = k, .init_scale = 0.5f}, 7, 5);
}

/// A user's own model, written on its value type so that `per_user_bias<double>` can be checked
/// and `per_user_bias<float>` trained (docs/concepts.md#checking-a-models-gradient): a global
/// bias plus one bias per user, squared loss.
template <class T>
struct per_user_bias {
  using space_type = host_space;
  using value_type = T;

  explicit per_user_bias(std::size_t users)
      : m_global(m_layout.add("global", 1, 1, segment_kind::bias)),
        m_user(m_layout.add("user", users, 1, segment_kind::bias)) {}
  const space_type& space() const noexcept { return m_space; }
  const parameter_layout& layout() const noexcept { return m_layout; }
  loss_kind loss() const noexcept { return loss_kind::squared; }
  void initialize(std::span<T> params, std::uint64_t seed) const {
    for (std::size_t k = 0; k < params.size(); ++k) params[k] = T(0.1) * T((seed + k) % 7);
  }
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const std::size_t u = m_user.at(static_cast<std::size_t>(batch.users[i]), 0);
      const T residual = params[m_global.offset] + params[u] - T(batch.labels[i]);
      const T g = scale * T(batch.weights[i]) * T(2) * residual;
      grads[m_global.offset] += g;
      grads[u] += g;
      *loss_sum += T(batch.weights[i]) * residual * residual;
    }
  }
  void predict(std::span<const T> params, std::span<const std::int32_t> users,
               std::span<const std::int32_t> /*items*/, std::span<T> out) {
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = params[m_global.offset] + params[m_user.at(static_cast<std::size_t>(users[i]), 0)];
  }

 private:
  space_type m_space;
  parameter_layout m_layout;  // declared before the handles: it is built first
  segment_handle m_global, m_user;
};

}  // namespace

TEST_CASE("check_gradient: a user's own model, checked in double") {
  per_user_bias<double> m(8);
  std::vector<double> params(m.layout().total());
  m.initialize(params, 1);
  const std::vector<std::int32_t> users = {0, 3, 3, 7}, items = {0, 0, 0, 0};
  const std::vector<float> labels = {1.f, 2.f, 0.5f, 4.f}, weights = {1.f, 1.f, 1.f, 0.f};
  const batch_view batch{users, items, labels, weights};
  const auto r = check_gradient(m, std::span<const double>(params), batch);
  INFO(r.describe());
  CHECK(r.passed());
  CHECK(r.nonzero == 3);  // the global bias, users 0 and 3 (user 7's slot is padding)
  // The layout aligns segments, so the arena holds padding, and it is checked too.
  CHECK(r.checked == m.layout().total());
  CHECK(m.layout().total() > 9);
}

TEST_CASE_TEMPLATE("check_gradient: tutti's models pass with the regulariser off", Space,
                   TUTTI_TEST_SPACES) {
  for (loss_kind k : {loss_kind::squared, loss_kind::logistic}) {
    CAPTURE(static_cast<int>(k));
    const auto hb = check_batch(k);
    {
      auto m = small_mf<Space>(k);
      const space_batch<Space> b(m.space(), hb);
      const auto params = run_initialize(m, 3);
      const auto r = check_gradient(m, std::span<const double>(params), b.view());
      INFO(r.describe());
      CHECK(r.passed());
      CHECK(r.checked == m.layout().total());
      CHECK(r.nonzero > 10);
    }
    {
      logistic_regression<Space, double> m({.l2 = 0.f, .loss = k}, 7, 5);
      const space_batch<Space> b(m.space(), hb);
      const auto params = run_initialize(m, 5);
      const auto r = check_gradient(m, std::span<const double>(params), b.view());
      INFO(r.describe());
      CHECK(r.passed());
    }
    {
      neural_cf<Space, double> m({.gmf_dim = 2, .layers = {4, 2}, .loss = k}, 7, 5);
      const space_batch<Space> b(m.space(), hb);
      const auto params = run_initialize(m, 9);
      const auto r = check_gradient(m, std::span<const double>(params), b.view());
      INFO(r.describe());
      CHECK(r.passed());
      CHECK(r.nonzero > 20);
    }
  }
}

TEST_CASE("check_gradient: one wrong derivative fails and is named by segment, row, column") {
  const auto hb = check_batch(loss_kind::squared);
  auto inner = small_mf<host_space>(loss_kind::squared);
  // The item-bias segment's row 1 (item 1 appears in the batch), doubled.
  const auto& segs = inner.layout().segments();
  std::size_t bias_segment = segs.size();
  for (std::size_t i = 0; i < segs.size(); ++i)
    if (segs[i].cols == 1 && segs[i].rows == 5) bias_segment = i;
  REQUIRE(bias_segment < segs.size());
  const std::size_t index = segs[bias_segment].offset + 1;
  scaled_gradient<mf<host_space>> m(inner, index, 2.0);
  const space_batch<host_space> b(m.space(), hb);
  const auto params = run_initialize(inner, 3);
  const auto r = check_gradient(m, std::span<const double>(params), b.view());
  CHECK_FALSE(r.passed());
  REQUIRE(r.failed == 1);
  REQUIRE(r.worst.size() == 1);
  CHECK(r.worst[0].index == index);
  CHECK(r.worst[0].segment == bias_segment);
  CHECK(r.worst[0].row == 1);
  CHECK(r.worst[0].col == 0);
  CHECK(r.worst[0].analytic == doctest::Approx(2 * r.worst[0].numeric).epsilon(1e-6));
  CHECK(r.describe().find("segment " + std::to_string(bias_segment) + ", row 1, column 0") !=
        std::string::npos);

  // A factor within the tolerance passes.
  scaled_gradient<mf<host_space>> close(inner, index, 1.0 + 1e-9);
  CHECK(check_gradient(close, std::span<const double>(params), b.view()).passed());
}

TEST_CASE("check_gradient: a model that writes no gradient fails") {
  const auto hb = check_batch(loss_kind::logistic);
  auto inner = small_mf<host_space>(loss_kind::logistic);
  no_gradient<mf<host_space>> m(inner);
  const space_batch<host_space> b(m.space(), hb);
  const auto params = run_initialize(inner, 3);
  const auto r = check_gradient(m, std::span<const double>(params), b.view());
  CHECK_FALSE(r.passed());
  CHECK(r.nonzero == 0);
  CHECK(r.failed > 10);
  CHECK(r.describe().find("wrote no gradient") != std::string::npos);
}

TEST_CASE("check_gradient: a regulariser outside the reported loss is found") {
  // tutti's models add l2 to the gradient, not to the reported (data) loss: the check sees
  // exactly that difference on the rows the batch touched.
  const auto hb = check_batch(loss_kind::squared);
  auto m = small_mf<host_space>(loss_kind::squared, 0.05f);
  const space_batch<host_space> b(m.space(), hb);
  const auto params = run_initialize(m, 3);
  const auto r = check_gradient(m, std::span<const double>(params), b.view());
  CHECK_FALSE(r.passed());
  CHECK(r.failed > 0);
}

TEST_CASE("check_gradient: a sample checks the same parameters for the same seed") {
  const auto hb = check_batch(loss_kind::squared);
  auto m = small_mf<host_space>(loss_kind::squared);
  const space_batch<host_space> b(m.space(), hb);
  const auto params = run_initialize(m, 3);
  auto inner = m;
  scaled_gradient<mf<host_space>> wrong(inner, 0, 3.0);
  gradient_check_options o;
  o.max_checked = 12;
  const auto a = check_gradient(m, std::span<const double>(params), b.view(), o);
  CHECK(a.checked == 12);
  CHECK(a.passed() == (a.nonzero > 0));
  // Every sampled index of one seed: the full check's failures restricted to them.
  std::size_t found = 0;
  for (std::uint64_t seed = 1; seed <= 40; ++seed) {
    o.seed = seed;
    const auto s1 = check_gradient(wrong, std::span<const double>(params), b.view(), o);
    const auto s2 = check_gradient(wrong, std::span<const double>(params), b.view(), o);
    CHECK(s1.failed == s2.failed);
    CHECK(s1.max_relative_error == s2.max_relative_error);
    found += s1.failed;
  }
  CHECK(found > 0);  // some seed draws parameter 0, and the check fails there
}

TEST_CASE("check_gradient: refuses an arena of the wrong size and a non-positive step") {
  const auto hb = check_batch(loss_kind::squared);
  auto m = small_mf<host_space>(loss_kind::squared);
  const space_batch<host_space> b(m.space(), hb);
  std::vector<double> params = run_initialize(m, 3);
  params.pop_back();
  CHECK_THROWS_WITH_AS(check_gradient(m, std::span<const double>(params), b.view()),
                       doctest::Contains("expected the whole arena"), invalid_argument);
  params = run_initialize(m, 3);
  gradient_check_options o;
  o.step = 0;
  CHECK_THROWS_AS(check_gradient(m, std::span<const double>(params), b.view(), o),
                  invalid_argument);
}

TEST_CASE("check_gradient: a model with right derivatives that breaks the contract fails") {
  // Each of these trains wrong under W ranks (scale = W / samples) or accumulation (several
  // calls into one gradient), though its derivatives at scale 1 into zeros are right.
  const auto hb = check_batch(loss_kind::squared);
  auto inner = small_mf<host_space>(loss_kind::squared);
  const space_batch<host_space> b(inner.space(), hb);
  const auto params = run_initialize(inner, 3);
  const std::pair<breach, const char*> cases[] = {
      {breach::ignores_scale, "called with scale 0.375 onto a gradient that was not zero"},
      {breach::overwrites_gradient, "called with scale 0.375 onto a gradient that was not zero"},
      {breach::overwrites_loss, "called onto a loss sum of 1.5, it left"},
      {breach::mean_over_batch, "the batch's two halves, one call each into one gradient"}};
  for (const auto& [how, says] : cases) {
    CAPTURE(static_cast<int>(how));
    breaks_contract<mf<host_space>> m(inner, how);
    const auto r = check_gradient(m, std::span<const double>(params), b.view());
    INFO(r.describe());
    CHECK_FALSE(r.passed());
    CHECK(r.failed == 0);  // the derivatives agree: only the contract check sees it
    CHECK(r.nonzero > 10);
    REQUIRE_FALSE(r.contract.empty());
    CHECK(r.contract.front().find(says) != std::string::npos);
    CHECK(r.describe().find("contract: " + std::string(says)) != std::string::npos);
  }
}

}  // namespace test_gradient_check
