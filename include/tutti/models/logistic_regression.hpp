// SPDX-License-Identifier: Apache-2.0
/// @file models/logistic_regression.hpp
/// @brief `tutti::models::logistic_regression`: a linear model on one-hot user and item
/// features (the popularity baseline), with deterministic sparse gradients.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/models/detail/losses.hpp>
#include <tutti/models/detail/sparse_accumulate.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace tutti::models {

/// Hyper-parameters of `logistic_regression` (designated initialisers: `{.l2 = 1e-3f}`).
struct lr_options {
  /// L2 strength: each weighted sample adds l2·(w_u² + w_i²) to the objective.
  float l2 = 1e-4f;
  /// Loss minimised: logistic (0/1 labels, the default) or squared (ratings).
  loss_kind loss = loss_kind::logistic;
};

}  // namespace tutti::models

namespace tutti::detail {

/// Arena offsets of the logistic-regression segments.
struct lr_offsets {
  std::size_t user_weight;
  std::size_t item_weight;
  std::size_t bias;
};

/// Kernel over slots: slot i's user and item weight gradients, weighted loss and bias gradient.
template <class T>
struct lr_slot_fn {
  const T* params;
  const std::int32_t* users;
  const std::int32_t* items;
  const float* labels;
  const float* weights;
  lr_offsets off;
  std::int32_t n_users, n_items;
  loss_kind loss;
  T l2, scale;
  T* user_contrib;  // n
  T* item_contrib;  // n
  T* slot_loss;     // n
  T* slot_bias;     // n
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    const T w = static_cast<T>(weights[i]);
    if (w == T(0)) {
      slot_loss[i] = T(0);
      slot_bias[i] = T(0);
      return;
    }
    const std::int32_t u = users[i];
    const std::int32_t it = items[i];
    assert(u >= 0 && u < n_users && "tutti::models::logistic_regression: user id out of range");
    assert(it >= 0 && it < n_items && "tutti::models::logistic_regression: item id out of range");
    const T wu = params[off.user_weight + static_cast<std::size_t>(u)];
    const T wi = params[off.item_weight + static_cast<std::size_t>(it)];
    const T s = params[off.bias] + wu + wi;
    T l, dl;
    pointwise_loss(loss, s, static_cast<T>(labels[i]), l, dl);
    const T sw = scale * w;
    const T gs = sw * dl;
    const T r = sw * T(2) * l2;
    user_contrib[i] = gs + r * wu;
    item_contrib[i] = gs + r * wi;
    slot_loss[i] = w * l;
    slot_bias[i] = gs;
  }
};

/// Kernel over slots: out[i] = bias + w_u + w_i.
template <class T>
struct lr_predict_fn {
  const T* params;
  const std::int32_t* users;
  const std::int32_t* items;
  lr_offsets off;
  std::int32_t n_users, n_items;
  T* out;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    assert(users[i] >= 0 && users[i] < n_users && "tutti: user id out of range in predict");
    assert(items[i] >= 0 && items[i] < n_items && "tutti: item id out of range in predict");
    out[i] = params[off.bias] + params[off.user_weight + static_cast<std::size_t>(users[i])] +
             params[off.item_weight + static_cast<std::size_t>(items[i])];
  }
};

}  // namespace tutti::detail

namespace tutti::models {

/// Logistic regression on one-hot user and item features: score s = bias + w_u + w_i.
///
/// Segments, in arena order: "user_weight" (n_users × 1, embedding), "item_weight"
/// (n_items × 1, embedding), "bias" (1 × 1, bias). The weight tables are kind `embedding`
/// because a batch touches few of their rows.
///
/// Objective of a batch: Σ_i w_i·[L(s_i, y_i) + l2·(w_u² + w_i²)], L as in
/// `matrix_factorization`; the bias is not regularised. `loss_and_gradient` keeps the same
/// contract as `matrix_factorization::loss_and_gradient`: it ADDS scale·w_i·∂(L_i + l2-term_i)/∂θ
/// into `grads` and Σ_i w_i·L_i (data loss only) into `*loss_sum` (nullptr skips it), accepts
/// duplicates, ignores weight-0 slots entirely, uses no atomics and is bitwise reproducible
/// across runs and thread counts. Out-of-range ids are the caller's bug (debug assertion).
/// `predict` returns the score (the logit for the logistic loss).
///
/// @tparam Space a type modelling `tutti::execution_space`
/// @tparam T the value type of parameters and gradients (float; double for gradient checks)
template <execution_space Space = host_space, class T = float>
class logistic_regression {
 public:
  /// The execution space parameters live in and kernels run on.
  using space_type = Space;
  /// The value type of parameters, gradients and losses.
  using value_type = T;

  /// A model of `n_users` users and `n_items` items with hyper-parameters `opt`.
  logistic_regression(lr_options opt, std::int32_t n_users, std::int32_t n_items, Space space = {})
      : m_opt(opt),
        m_n_users(n_users),
        m_n_items(n_items),
        m_space(std::move(space)),
        m_users(m_space),
        m_items(m_space),
        m_user_contrib(m_space),
        m_item_contrib(m_space),
        m_slot_loss(m_space),
        m_slot_bias(m_space) {
    constexpr const char* fn = "tutti::models::logistic_regression";
    TUTTI_EXPECTS(n_users >= 1, fn, "n_users is " + std::to_string(n_users) + "; expected >= 1");
    TUTTI_EXPECTS(n_items >= 1, fn, "n_items is " + std::to_string(n_items) + "; expected >= 1");
    TUTTI_EXPECTS(std::isfinite(opt.l2) && opt.l2 >= 0.f, fn,
                  "l2 is " + std::to_string(opt.l2) + "; expected a finite value >= 0");
    TUTTI_EXPECTS(opt.loss == loss_kind::squared || opt.loss == loss_kind::logistic, fn,
                  std::string("loss is ") + to_string(opt.loss) +
                      "; expected squared or logistic (a logistic regression scores slots one "
                      "by one; the list losses bpr and softmax are for the factor models)");
    const auto nu = static_cast<std::size_t>(n_users);
    const auto ni = static_cast<std::size_t>(n_items);
    m_off.user_weight = m_layout.add("user_weight", nu, 1, segment_kind::embedding).offset;
    m_off.item_weight = m_layout.add("item_weight", ni, 1, segment_kind::embedding).offset;
    m_off.bias = m_layout.add("bias", 1, 1, segment_kind::bias).offset;
  }

  /// The space instance kernels run on.
  const Space& space() const noexcept { return m_space; }
  /// The parameter layout (three segments, see the class comment).
  const parameter_layout& layout() const noexcept { return m_layout; }
  /// The loss minimised.
  loss_kind loss() const noexcept { return m_opt.loss; }
  /// The hyper-parameters.
  const lr_options& options() const noexcept { return m_opt; }
  /// Number of users (rows of "user_weight").
  std::int32_t n_users() const noexcept { return m_n_users; }
  /// Number of items (rows of "item_weight").
  std::int32_t n_items() const noexcept { return m_n_items; }

  /// Fills `params` (memory of the space, layout().total() values) with zeros: the objective
  /// is convex, so no symmetry needs breaking. `seed` is accepted for the model concept.
  void initialize(std::span<T> params, std::uint64_t /*seed*/) const {
    TUTTI_EXPECTS(params.size() == m_layout.total(),
                  "tutti::models::logistic_regression::initialize",
                  "params has " + std::to_string(params.size()) +
                      " values; expected layout().total() = " + std::to_string(m_layout.total()));
    tutti::fill(m_space, params, T(0));
  }

  /// Adds the batch's scaled, weighted gradient into `grads` and its weighted data loss into
  /// `*loss_sum` (contract in the class comment). All spans are memory of the space.
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    detail::check_loss_and_gradient_args("tutti::models::logistic_regression::loss_and_gradient",
                                         m_layout.total(), params.size(), grads.size(), batch);
    const std::size_t n = batch.size();
    if (n == 0) return;
    T* uc = m_user_contrib.reserve(n);
    T* ic = m_item_contrib.reserve(n);
    T* sl = m_slot_loss.reserve(n);
    T* sb = m_slot_bias.reserve(n);
    parallel_for(m_space, n,
                 detail::lr_slot_fn<T>{params.data(), batch.users.data(), batch.items.data(),
                                       batch.labels.data(), batch.weights.data(), m_off, m_n_users,
                                       m_n_items, m_opt.loss, static_cast<T>(m_opt.l2), scale, uc,
                                       ic, sl, sb});
    const float* w = batch.weights.data();
    T* g = grads.data();
    const std::size_t one = 1;
    m_users.group(m_space, batch.users.data(), w, n, m_n_users);
    m_users.scatter_add(m_space, uc, one, one, g + m_off.user_weight, one);
    m_users.add_sum(m_space, sb, g + m_off.bias);
    if (loss_sum != nullptr) m_users.add_sum(m_space, sl, loss_sum);
    m_items.group(m_space, batch.items.data(), w, n, m_n_items);
    m_items.scatter_add(m_space, ic, one, one, g + m_off.item_weight, one);
  }

  /// Writes the score bias + w_u + w_i of each (users[k], items[k]) to out[k] (memory of the
  /// space); for the logistic loss this is the logit.
  void predict(std::span<const T> params, std::span<const std::int32_t> users,
               std::span<const std::int32_t> items, std::span<T> out) const {
    detail::check_predict_args("tutti::models::logistic_regression::predict", m_layout.total(),
                               params.size(), users.size(), items.size(), out.size());
    parallel_for(m_space, users.size(),
                 detail::lr_predict_fn<T>{params.data(), users.data(), items.data(), m_off,
                                          m_n_users, m_n_items, out.data()});
  }

 private:
  lr_options m_opt;
  std::int32_t m_n_users;
  std::int32_t m_n_items;
  Space m_space;
  parameter_layout m_layout;
  detail::lr_offsets m_off{};
  detail::sparse_accumulator<T, Space> m_users;
  detail::sparse_accumulator<T, Space> m_items;
  detail::scratch_array<T, Space> m_user_contrib;
  detail::scratch_array<T, Space> m_item_contrib;
  detail::scratch_array<T, Space> m_slot_loss;
  detail::scratch_array<T, Space> m_slot_bias;
};

}  // namespace tutti::models
