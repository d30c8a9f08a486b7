// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/losses.hpp
/// @brief The losses the models minimise: pointwise (squared, logistic), slot by slot, and over
/// lists (BPR, sampled softmax), a learner's positive against its sampled negatives.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/config.hpp>
#include <tutti/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tutti::detail {

/// softplus(x) = log(1 + e^x) and the logistic function σ(x) = 1 / (1 + e^-x) from one exp,
/// written so that no exp overflows.
template <class T>
TUTTI_HOST_DEVICE inline void softplus_sigmoid(T x, T& softplus, T& sigmoid) {
  const T e = std::exp(-std::fabs(x));  // in (0, 1]
  softplus = (x > T(0) ? x : T(0)) + std::log1p(e);
  sigmoid = x >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
}

/// The model's loss at score `s` and label `y`: sets `loss` and `slope` = dloss/ds.
/// Logistic: y·softplus(-s) + (1-y)·softplus(s), written so that no exp overflows.
template <class T>
TUTTI_HOST_DEVICE inline void pointwise_loss(loss_kind kind, T s, T y, T& loss, T& slope) {
  if (kind == loss_kind::squared) {
    const T r = s - y;
    loss = r * r;
    slope = T(2) * r;
    return;
  }
  const T e = std::exp(-std::fabs(s));  // in (0, 1]: never overflows
  const T log1pe = std::log1p(e);
  const T softplus_pos = (s > T(0) ? s : T(0)) + log1pe;   // softplus(s)
  const T softplus_neg = (s < T(0) ? -s : T(0)) + log1pe;  // softplus(-s)
  loss = y * softplus_neg + (T(1) - y) * softplus_pos;
  const T sig = s >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
  slope = sig - y;
}

/// Kernel over the lists of a batch (`batch_view::list_size` = g slots each, the positive
/// first). On entry s[l·g + j] (+ *bias when `bias` is set) is the score of slot j of list l; on
/// exit it is scale·w·dL/ds of that slot, with w the weight of the list's first slot (0 for a
/// padded list), and slot_loss holds w·L at the list's first slot and 0 at the others.
///
/// - BPR (Rendle et al. 2009), the positive above each negative:
///   L = Σ_{k≥1} softplus(s_k - s_0); dL/ds_k = σ(s_k - s_0), dL/ds_0 = -Σ_k σ(s_k - s_0).
/// - Sampled softmax with the log-Q correction (Bengio and Senécal 2008; Yi et al. 2019):
///   z_j = s_j - log Q(item_j) (no correction when `item_log_q` is null), L = logsumexp(z) - z_0;
///   dL/ds_j = softmax(z)_j - [j = 0].
///
/// Every sum runs over the list in slot order: the same on every space and thread count.
template <class T>
struct list_loss_fn {
  T* s;                       // n scores in, n scaled slopes out
  const T* bias;              // added to every score, or null
  const float* weights;       // n
  const std::int32_t* items;  // n
  const float* item_log_q;    // n_items, or null
  std::size_t g;              // slots per list (>= 2)
  loss_kind loss;
  T scale;
  T* slot_loss;  // n
  TUTTI_HOST_DEVICE void operator()(std::size_t l) const {
    T* x = s + l * g;
    T* out_loss = slot_loss + l * g;
    const T w = static_cast<T>(weights[l * g]);
    const T b = bias != nullptr ? *bias : T(0);
    for (std::size_t j = 1; j < g; ++j) out_loss[j] = T(0);
    if (w == T(0)) {
      for (std::size_t j = 0; j < g; ++j) x[j] = T(0);
      out_loss[0] = T(0);
      return;
    }
    const T sw = scale * w;
    if (loss == loss_kind::bpr) {
      const T s0 = x[0] + b;
      T total = T(0), head = T(0);
      for (std::size_t j = 1; j < g; ++j) {
        T sp, p;
        softplus_sigmoid(x[j] + b - s0, sp, p);
        total += sp;
        head += p;
        x[j] = sw * p;
      }
      x[0] = -sw * head;
      out_loss[0] = w * total;
      return;
    }
    // Softmax: z_j = s_j - log Q(item_j) in place, then e^(z_j - max z) (no exp overflows), then
    // the slopes.
    const std::int32_t* list_items = items + l * g;
    T top = T(0);
    for (std::size_t j = 0; j < g; ++j) {
      const T lq = item_log_q != nullptr ? static_cast<T>(item_log_q[list_items[j]]) : T(0);
      x[j] = x[j] + b - lq;
      top = j == 0 || x[j] > top ? x[j] : top;
    }
    const T z0 = x[0];
    T sum = T(0);
    for (std::size_t j = 0; j < g; ++j) sum += (x[j] = std::exp(x[j] - top));
    out_loss[0] = w * (std::log(sum) + top - z0);
    for (std::size_t j = 0; j < g; ++j) {
      const T p = x[j] / sum;
      x[j] = sw * (j == 0 ? p - T(1) : p);
    }
  }
};

/// The `list_loss_fn` over the lists of `batch` (scores in `x`, see there), to run over
/// batch.size() / batch.list_size lists; `fn` names the model in the errors. Throws
/// `tutti::invalid_argument` for a batch that is not made of lists (list_size below 2, or a size
/// that is not a multiple of it) or whose `item_log_q` does not hold one value per item.
template <class T>
list_loss_fn<T> list_loss_of(const char* fn, loss_kind loss, const batch_view& batch,
                             std::int32_t n_items, T* x, const T* bias, T scale, T* slot_loss) {
  const std::size_t n = batch.size(), g = batch.list_size;
  TUTTI_EXPECTS(g >= 2 && n % g == 0, fn,
                std::string("the loss is ") + to_string(loss) + " and the batch has " +
                    std::to_string(n) + " slots in lists of " + std::to_string(g) +
                    "; expected lists of a positive and at least one negative (list_size >= 2) "
                    "that fill the batch");
  TUTTI_EXPECTS(batch.item_log_q.empty() || batch.item_log_q.size() == std::size_t(n_items), fn,
                "item_log_q has " + std::to_string(batch.item_log_q.size()) +
                    " values; expected none or one per item (" + std::to_string(n_items) + ")");
  const float* log_q =
      loss == loss_kind::softmax && !batch.item_log_q.empty() ? batch.item_log_q.data() : nullptr;
  return {x, bias, batch.weights.data(), batch.items.data(), log_q, g, loss, scale, slot_loss};
}

}  // namespace tutti::detail
