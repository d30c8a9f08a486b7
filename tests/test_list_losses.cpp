// SPDX-License-Identifier: Apache-2.0
// The list losses (BPR and sampled softmax with the log-Q correction) of matrix factorisation
// (neural CF's are checked in test_ncf.cpp): the gradient against finite differences, the loss
// against a brute-force reference computed from the model's own scores, a padded list that changes
// nothing, and the batches and models that are refused.
#include <doctest/doctest.h>

#include <tutti/gradient_check.hpp>
#include <tutti/models/logistic_regression.hpp>
#include <tutti/models/matrix_factorization.hpp>

#include "model_harness.hpp"
#include "spaces.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace test_list_losses {

namespace {

using tutti::loss_kind;
using tutti_test::host_batch;
using tutti_test::list_batch;
using tutti_test::list_view;
using tutti_test::log_q_of_items;

/// The reference loss of one list of scores `s` (the positive first), weight `w`, in double.
double ref_list_loss(loss_kind k, const std::vector<double>& s, const std::vector<double>& lq) {
  if (k == loss_kind::bpr) {
    double l = 0;
    for (std::size_t j = 1; j < s.size(); ++j) l += std::log1p(std::exp(s[j] - s[0]));
    return l;
  }
  double z = 0;
  for (std::size_t j = 0; j < s.size(); ++j) z += std::exp(s[j] - lq[j]);
  return std::log(z) - (s[0] - lq[0]);
}

template <class Space>
tutti::models::matrix_factorization<Space, double> list_mf(loss_kind k) {
  return {{.dim = 3, .l2 = 0.f, .loss = k, .init_scale = 0.5f}, 7, 5};
}

}  // namespace

TEST_CASE_TEMPLATE("list losses: matrix factorisation's gradient matches finite differences", Space,
                   TUTTI_TEST_SPACES) {
  const host_batch hb = list_batch();
  for (loss_kind k : {loss_kind::bpr, loss_kind::softmax}) {
    for (bool corrected : {false, true}) {
      if (k == loss_kind::bpr && corrected) continue;  // BPR reads no correction
      CAPTURE(std::string(tutti::to_string(k)));
      CAPTURE(corrected);
      auto m = list_mf<Space>(k);
      const list_view<Space> b(m.space(), hb, corrected ? log_q_of_items() : std::vector<float>{});
      const auto params = tutti_test::run_initialize(m, 7);
      const auto r = tutti::check_gradient(m, std::span<const double>(params), b.view());
      INFO(r.describe());
      CHECK(r.passed());
      CHECK(r.nonzero > 20);
    }
  }
}

TEST_CASE_TEMPLATE("list losses: the loss is the reference's over the model's own scores", Space,
                   TUTTI_TEST_SPACES) {
  const host_batch hb = list_batch();
  const std::vector<float> lq = log_q_of_items();
  for (loss_kind k : {loss_kind::bpr, loss_kind::softmax}) {
    CAPTURE(std::string(tutti::to_string(k)));
    auto m = list_mf<Space>(k);
    const auto params = tutti_test::run_initialize(m, 11);
    const auto scores = tutti_test::run_predict(m, params, hb.users, hb.items);
    double want = 0;
    for (std::size_t l = 0; l < 4; ++l) {
      std::vector<double> s, q;
      for (std::size_t j = 0; j < 3; ++j) {
        s.push_back(scores[l * 3 + j]);
        q.push_back(double(lq[std::size_t(hb.items[l * 3 + j])]));
      }
      want += double(hb.weights[l * 3]) * ref_list_loss(k, s, q);
    }
    const list_view<Space> b(m.space(), hb, lq);
    auto p = tutti::make_buffer(m.space(), std::span<const double>(params));
    tutti::buffer<double, Space> g(m.layout().total(), m.space());
    tutti::fill(m.space(), g.span(), 0.0);
    std::vector<double> zero{0.0};
    auto loss = tutti::make_buffer(m.space(), std::span<const double>(zero));
    m.loss_and_gradient(std::span<const double>(p.span()), b.view(), g.span(), 1.0, loss.data());
    const double got = tutti::to_host_vector(m.space(), loss.span())[0];
    CHECK(got == doctest::Approx(want).epsilon(1e-12));
    // BPR ignores the correction; softmax with it is another loss than without it.
    const list_view<Space> plain(m.space(), hb, {});
    tutti::fill(m.space(), loss.span(), 0.0);
    m.loss_and_gradient(std::span<const double>(p.span()), plain.view(), g.span(), 1.0,
                        loss.data());
    const double uncorrected = tutti::to_host_vector(m.space(), loss.span())[0];
    if (k == loss_kind::bpr)
      CHECK(uncorrected == got);
    else
      CHECK(std::fabs(uncorrected - got) > 1e-3);
  }
}

TEST_CASE_TEMPLATE("list losses: a padded list changes nothing, bitwise", Space,
                   TUTTI_TEST_SPACES) {
  const host_batch hb = list_batch();
  host_batch without = hb;  // the same batch without the padded third list
  for (auto* v : {&without.users, &without.items}) v->erase(v->begin() + 6, v->begin() + 9);
  for (auto* v : {&without.labels, &without.weights}) v->erase(v->begin() + 6, v->begin() + 9);
  for (loss_kind k : {loss_kind::bpr, loss_kind::softmax}) {
    CAPTURE(std::string(tutti::to_string(k)));
    auto m = tutti::models::matrix_factorization<Space>(
        {.dim = 5, .l2 = 0.01f, .loss = k, .init_scale = 0.3f}, 7, 5);
    const auto params = tutti_test::run_initialize(m, 2);
    const auto run = [&](const host_batch& batch) {
      const list_view<Space> b(m.space(), batch, log_q_of_items());
      auto p = tutti::make_buffer(m.space(), std::span<const float>(params));
      tutti::buffer<float, Space> g(m.layout().total(), m.space());
      tutti::fill(m.space(), g.span(), 0.f);
      m.loss_and_gradient(std::span<const float>(p.span()), b.view(), g.span(), 0.5f, nullptr);
      return tutti::to_host_vector(m.space(), g.span());
    };
    CHECK(run(hb) == run(without));
  }
}

TEST_CASE_TEMPLATE("list losses: batches not made of lists are refused, named", Space,
                   TUTTI_TEST_SPACES) {
  auto m = list_mf<Space>(loss_kind::bpr);
  const auto params = tutti_test::run_initialize(m, 1);
  auto p = tutti::make_buffer(m.space(), std::span<const double>(params));
  tutti::buffer<double, Space> g(m.layout().total(), m.space());
  const host_batch hb = list_batch();
  const list_view<Space> b(m.space(), hb, {});
  tutti::batch_view single = b.view();
  single.list_size = 1;
  CHECK_THROWS_WITH_AS(
      m.loss_and_gradient(std::span<const double>(p.span()), single, g.span(), 1.0, nullptr),
      doctest::Contains("the loss is bpr and the batch has 12 slots in lists of 1"),
      tutti::invalid_argument);
  tutti::batch_view odd = b.view();
  odd.list_size = 5;
  CHECK_THROWS_WITH_AS(
      m.loss_and_gradient(std::span<const double>(p.span()), odd, g.span(), 1.0, nullptr),
      doctest::Contains("12 slots in lists of 5"), tutti::invalid_argument);
  const std::vector<float> short_q = {0.f, 0.f};
  const list_view<Space> wrong(m.space(), hb, short_q);
  CHECK_THROWS_WITH_AS(
      m.loss_and_gradient(std::span<const double>(p.span()), wrong.view(), g.span(), 1.0, nullptr),
      doctest::Contains("item_log_q has 2 values; expected none or one per item (5)"),
      tutti::invalid_argument);
  CHECK_THROWS_WITH_AS(
      (tutti::models::logistic_regression<Space>({.loss = loss_kind::softmax}, 7, 5)),
      doctest::Contains("loss is softmax; expected squared or logistic"), tutti::invalid_argument);
}

}  // namespace test_list_losses
