// SPDX-License-Identifier: Apache-2.0
// Running a model's kernels on host data, for the model tests (test_models.cpp, test_ncf.cpp):
// batches copied into a space; loss_and_gradient, initialize and predict with host results; the
// data loss in double; the gradient checks' batch and the arena's segment mask.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/buffer.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tutti_test {

/// A batch in host memory.
struct host_batch {
  std::vector<std::int32_t> users, items;
  std::vector<float> labels, weights;
};

/// The same batch copied into a space.
template <class Space>
struct space_batch {
  tutti::buffer<std::int32_t, Space> users, items;
  tutti::buffer<float, Space> labels, weights;
  space_batch(const Space& s, const host_batch& b)
      : users(tutti::make_buffer(s, std::span<const std::int32_t>(b.users))),
        items(tutti::make_buffer(s, std::span<const std::int32_t>(b.items))),
        labels(tutti::make_buffer(s, std::span<const float>(b.labels))),
        weights(tutti::make_buffer(s, std::span<const float>(b.weights))) {}
  tutti::batch_view view() const {
    return {users.span(), items.span(), labels.span(), weights.span()};
  }
};

template <class T>
struct lg_result {
  std::vector<T> grads;
  T loss;
};

/// Runs `loss_and_gradient` on host data: gradients start at `grads0` (zeros when empty), the
/// loss at `loss0`.
template <class Model, class T = typename Model::value_type>
lg_result<T> run_lg(Model& m, const std::vector<T>& params, const host_batch& hb, T scale,
                    std::vector<T> grads0 = {}, T loss0 = T(0)) {
  using Space = typename Model::space_type;
  const Space& s = m.space();
  if (grads0.empty()) grads0.assign(m.layout().total(), T(0));
  auto p = tutti::make_buffer(s, std::span<const T>(params));
  auto g = tutti::make_buffer(s, std::span<const T>(grads0));
  std::vector<T> l0{loss0};
  auto l = tutti::make_buffer(s, std::span<const T>(l0));
  space_batch<Space> b(s, hb);
  m.loss_and_gradient(std::span<const T>(p.span()), b.view(), g.span(), scale, l.data());
  return {tutti::to_host_vector(s, g.span()), tutti::to_host_vector(s, l.span())[0]};
}

template <class Model, class T = typename Model::value_type>
std::vector<T> run_initialize(const Model& m, std::uint64_t seed) {
  std::vector<T> nan(m.layout().total(), std::numeric_limits<T>::quiet_NaN());
  auto p = tutti::make_buffer(m.space(), std::span<const T>(nan));
  m.initialize(p.span(), seed);
  return tutti::to_host_vector(m.space(), p.span());
}

template <class Model, class T = typename Model::value_type>
std::vector<T> run_predict(Model& m, const std::vector<T>& params,
                           const std::vector<std::int32_t>& users,
                           const std::vector<std::int32_t>& items) {
  const auto& s = m.space();
  auto p = tutti::make_buffer(s, std::span<const T>(params));
  auto u = tutti::make_buffer(s, std::span<const std::int32_t>(users));
  auto i = tutti::make_buffer(s, std::span<const std::int32_t>(items));
  tutti::buffer<T, typename Model::space_type> out(users.size(), s);
  m.predict(std::span<const T>(p.span()), std::span<const std::int32_t>(u.span()),
            std::span<const std::int32_t>(i.span()), out.span());
  return tutti::to_host_vector(s, out.span());
}

/// The data loss of score `s` against label `y`, in double.
inline double ref_loss(tutti::loss_kind k, double s, double y) {
  if (k == tutti::loss_kind::squared) return (s - y) * (s - y);
  return y * std::log1p(std::exp(-s)) + (1 - y) * std::log1p(std::exp(s));
}

/// True for arena indices that belong to a segment (not alignment padding).
inline std::vector<bool> in_segment(const tutti::parameter_layout& l) {
  std::vector<bool> mask(l.total(), false);
  for (const auto& s : l.segments())
    for (std::size_t k = s.offset; k < s.offset + s.size(); ++k) mask[k] = true;
  return mask;
}

/// The gradient checks' batch: 7 users, 5 items; users 3 and 0, items 1 and 4 repeat; slot 6 is
/// padding (its user 5 appears nowhere else); weights vary; user 4 and item 0's neighbour rows
/// stay untouched. Labels are ratings for the squared loss, clicks for the logistic one.
inline host_batch check_batch(tutti::loss_kind k) {
  host_batch b;
  b.users = {3, 0, 3, 6, 2, 3, 5, 0, 1, 3};
  b.items = {1, 1, 4, 1, 0, 2, 1, 4, 3, 1};
  b.weights = {1.f, 1.f, 0.5f, 1.f, 2.f, 1.f, 0.f, 1.f, 1.f, 1.5f};
  if (k == tutti::loss_kind::squared)
    b.labels = {4.f, 3.f, 1.f, 5.f, 2.f, 3.f, 4.f, 5.f, 1.f, 2.f};
  else
    b.labels = {1.f, 0.f, 1.f, 1.f, 0.f, 0.f, 1.f, 1.f, 0.f, 1.f};
  return b;
}

/// The list losses' batch: four lists of a positive and two negatives over 7 users and 5
/// items (`list_size` 3); user 2 has two lists, item 3 is a negative twice and a positive once;
/// the third list is padding (weight 0), the last weighs 1.5.
inline host_batch list_batch() {
  host_batch b;
  b.users = {2, 2, 2, 0, 0, 0, 5, 5, 5, 2, 2, 2};
  b.items = {3, 1, 4, 4, 3, 0, 2, 1, 0, 2, 3, 0};
  b.labels = {1.f, 0.f, 0.f, 1.f, 0.f, 0.f, 1.f, 0.f, 0.f, 1.f, 0.f, 0.f};
  b.weights = {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 0.f, 0.f, 0.f, 1.5f, 1.5f, 1.5f};
  return b;
}

/// log Q of the 5 items as a popularity sampler would give them (probabilities summing to 1).
inline std::vector<float> log_q_of_items() {
  std::vector<float> out;
  for (double q : {0.1, 0.15, 0.2, 0.3, 0.25}) out.push_back(static_cast<float>(std::log(q)));
  return out;
}

/// A batch in a space read as lists of 3, with the items' log Q when `log_q` is not empty.
template <class Space>
struct list_view {
  space_batch<Space> b;
  tutti::buffer<float, Space> log_q;
  list_view(const Space& s, const host_batch& hb, const std::vector<float>& lq)
      : b(s, hb), log_q(tutti::make_buffer(s, std::span<const float>(lq))) {}
  tutti::batch_view view() const {
    tutti::batch_view v = b.view();
    v.list_size = 3;
    v.item_log_q = log_q.span();
    return v;
  }
};

}  // namespace tutti_test
