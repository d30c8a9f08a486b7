// SPDX-License-Identifier: Apache-2.0
/// @file models/matrix_factorization.hpp
/// @brief `tutti::models::matrix_factorization`: biased matrix factorisation for recommenders,
/// with squared or logistic loss and deterministic sparse gradients.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/config.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/normal_fill.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>
#include <tutti/gradient_ready.hpp>
#include <tutti/layout.hpp>
#include <tutti/models/detail/losses.hpp>
#include <tutti/models/detail/sparse_accumulate.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti::models {

/// Hyper-parameters of `matrix_factorization` (designated initialisers:
/// `{.dim = 64, .loss = tutti::loss_kind::logistic}`).
struct mf_options {
  /// Embedding dimension of users and items (>= 1).
  std::int32_t dim = 32;
  /// L2 strength: each weighted sample adds l2·(|p_u|² + |q_i|² + b_u² + b_i²) to the objective.
  float l2 = 1e-4f;
  /// Loss minimised: squared (ratings), logistic (0/1 labels), or over lists of a positive and
  /// its sampled negatives, bpr or softmax (`batch_view::list_size`).
  loss_kind loss = loss_kind::squared;
  /// Standard deviation of the normal initialisation of embeddings (>= 0).
  float init_scale = 0.1f;
  /// Initial global bias (e.g. the mean rating for squared loss).
  float global_bias_init = 0.f;
};

}  // namespace tutti::models

namespace tutti::detail {

/// Arena offsets of the matrix-factorisation segments (a POD that kernels can carry).
struct mf_offsets {
  std::size_t user_embedding;
  std::size_t item_embedding;
  std::size_t user_bias;
  std::size_t item_bias;
  std::size_t global_bias;
};

/// <p, q> over `dim` values as four interleaved partial sums (column c goes to sum c mod 4, the
/// columns past the last multiple of 4 to sum 0), added as (s0 + s1) + (s2 + s3): a fixed
/// association, so the same on every thread count, that the host vectorises and whose
/// dependency chain is a quarter as long as a left-to-right sum.
template <class T>
TUTTI_HOST_DEVICE inline T dot4(const T* p, const T* q, std::size_t dim) {
  T s0 = T(0), s1 = T(0), s2 = T(0), s3 = T(0);
  std::size_t c = 0;
  for (; c + 4 <= dim; c += 4) {
    s0 += p[c] * q[c];
    s1 += p[c + 1] * q[c + 1];
    s2 += p[c + 2] * q[c + 2];
    s3 += p[c + 3] * q[c + 3];
  }
  for (; c < dim; ++c) s0 += p[c] * q[c];
  return (s0 + s1) + (s2 + s3);
}

/// Score g + b_u + b_i + <p_u, q_i> of one (user, item) pair (the dot product as `dot4`).
template <class T>
TUTTI_HOST_DEVICE inline T mf_score(const T* params, const mf_offsets& o, std::size_t dim,
                                    std::size_t u, std::size_t i) {
  const T* p = params + o.user_embedding + u * dim;
  const T* q = params + o.item_embedding + i * dim;
  return params[o.global_bias] + params[o.user_bias + u] + params[o.item_bias + i] +
         dot4(p, q, dim);
}

/// Kernel over the arena: embeddings from N(0, scale²), global bias its initial value, every
/// other value (biases, padding) zero. Counter-based, so identical on every space.
template <class T>
struct mf_init_fn {
  T* params;
  std::size_t total, user_begin, user_end, item_begin, item_end, global_bias;
  double scale;
  T global_bias_init;
  std::uint64_t seed;
  TUTTI_HOST_DEVICE bool embedding(std::size_t k) const {
    return (k >= user_begin && k < user_end) || (k >= item_begin && k < item_end);
  }
  /// True when every index of [b, e) lies in one embedding table.
  bool embedding_run(std::size_t b, std::size_t e) const {
    return (b >= user_begin && e <= user_end) || (b >= item_begin && e <= item_end);
  }
  /// Writes arena indices 2·pair and 2·pair + 1 (one draw of init_normal_pair for both).
  TUTTI_HOST_DEVICE void operator()(std::size_t pair) const {
    const std::size_t first = 2 * pair;
    double normal[2] = {0.0, 0.0};
    if (embedding(first) || (first + 1 < total && embedding(first + 1)))
      init_normal_pair(seed, pair, normal[0], normal[1]);
    for (std::size_t k = first; k < first + 2 && k < total; ++k) {
      if (embedding(k))
        params[k] = static_cast<T>(scale * normal[k - first]);
      else if (k == global_bias)
        params[k] = global_bias_init;
      else
        params[k] = T(0);
    }
  }
};

/// Kernel over slots: writes slot i's gradient contributions (user row: dim embedding values
/// then the bias; item row likewise), its weighted loss and its global-bias gradient, for a
/// pointwise loss. `write` is the part a list loss shares (`mf_list_fn`).
template <class T>
struct mf_slot_fn {
  const T* params;
  const std::int32_t* users;
  const std::int32_t* items;
  const float* labels;
  const float* weights;
  mf_offsets off;
  std::size_t dim;
  std::int32_t n_users, n_items;
  loss_kind loss;
  T l2, scale;
  T* user_contrib;    // n × (dim + 1)
  T* item_contrib;    // n × (dim + 1)
  T* slot_loss;       // n
  T* slot_global;     // n
  std::size_t n = 0;  // slots: the host asks for slot i + prefetch_ahead's rows while at i
  TUTTI_HOST_DEVICE void prefetch_rows(std::size_t j) const {
    if (weights[j] == 0.f) return;  // a padding slot's ids are never used
    const auto u = static_cast<std::size_t>(users[j]);
    const auto it = static_cast<std::size_t>(items[j]);
    prefetch_bytes(params + off.user_embedding + u * dim, dim * sizeof(T));
    prefetch_bytes(params + off.item_embedding + it * dim, dim * sizeof(T));
    prefetch_bytes(params + off.user_bias + u, sizeof(T), false, 1);
    prefetch_bytes(params + off.item_bias + it, sizeof(T), false, 1);
  }
  TUTTI_HOST_DEVICE std::size_t user(std::size_t i) const {
    assert(users[i] >= 0 && users[i] < n_users &&
           "tutti::models::matrix_factorization: user id out of range");
    return static_cast<std::size_t>(users[i]);
  }
  TUTTI_HOST_DEVICE std::size_t item(std::size_t i) const {
    assert(items[i] >= 0 && items[i] < n_items &&
           "tutti::models::matrix_factorization: item id out of range");
    return static_cast<std::size_t>(items[i]);
  }
  /// Slot i's contributions for the scaled slope gs = scale·w·dL/ds. `shared`: whether the score's
  /// slope reaches the learner's bias and the global bias (a list loss does not change when every
  /// score of a list moves alike, so they have no gradient from it: adding the list's slopes
  /// would add only their rounding, which Adam would scale up into steps; their L2 term stays).
  TUTTI_HOST_DEVICE void write(std::size_t i, T w, T gs, bool shared) const {
    const std::size_t uu = user(i), ii = item(i);
    const T* p = params + off.user_embedding + uu * dim;
    const T* q = params + off.item_embedding + ii * dim;
    const T r = scale * w * T(2) * l2;
    T* uc = user_contrib + i * (dim + 1);
    T* ic = item_contrib + i * (dim + 1);
    combine2(uc, gs, q, r, p, dim);  // uc[c] = gs * q[c] + r * p[c]
    combine2(ic, gs, p, r, q, dim);
    uc[dim] = (shared ? gs : T(0)) + r * params[off.user_bias + uu];
    ic[dim] = gs + r * params[off.item_bias + ii];
    slot_global[i] = shared ? gs : T(0);
  }
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
#if !defined(__CUDA_ARCH__)
    if (i + prefetch_ahead < n) prefetch_rows(i + prefetch_ahead);
#endif
    const T w = static_cast<T>(weights[i]);
    if (w == T(0)) {
      // Padding: the row kernels skip this slot, so only the per-slot sums need zeros.
      slot_loss[i] = T(0);
      slot_global[i] = T(0);
      return;
    }
    const T s = mf_score(params, off, dim, user(i), item(i));
    T l, dl;
    pointwise_loss(loss, s, static_cast<T>(labels[i]), l, dl);
    slot_loss[i] = w * l;
    write(i, w, scale * w * dl, true);
  }
};

/// Kernel over the lists of a batch (a list loss): the scores of list l's slots (not read for a
/// padded list), `list_loss_fn` turning them into the slots' scaled slopes and the list's loss,
/// then each slot's contributions as `mf_slot_fn` writes them: one pass over the rows.
template <class T>
struct mf_list_fn {
  mf_slot_fn<T> slot;
  list_loss_fn<T> loss;  // its scores: where the slopes go
  TUTTI_HOST_DEVICE void operator()(std::size_t l) const {
    const std::size_t g = loss.g, first = l * g;
#if !defined(__CUDA_ARCH__)
    for (std::size_t j = first + prefetch_ahead; j < first + prefetch_ahead + g && j < slot.n; ++j)
      slot.prefetch_rows(j);
#endif
    const T w = static_cast<T>(slot.weights[first]);
    if (w != T(0))
      for (std::size_t i = first; i < first + g; ++i)
        loss.s[i] = mf_score(slot.params, slot.off, slot.dim, slot.user(i), slot.item(i));
    loss(l);
    for (std::size_t i = first; i < first + g; ++i)
      if (w == T(0))
        slot.slot_global[i] = T(0);  // padding: the row kernels skip it
      else
        slot.write(i, w, loss.s[i], false);
  }
};

/// Kernel over slots: out[i] = score of (users[i], items[i]).
template <class T>
struct mf_predict_fn {
  const T* params;
  const std::int32_t* users;
  const std::int32_t* items;
  mf_offsets off;
  std::size_t dim;
  std::int32_t n_users, n_items;
  T* out;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    assert(users[i] >= 0 && users[i] < n_users && "tutti: user id out of range in predict");
    assert(items[i] >= 0 && items[i] < n_items && "tutti: item id out of range in predict");
    out[i] = mf_score(params, off, dim, static_cast<std::size_t>(users[i]),
                      static_cast<std::size_t>(items[i]));
  }
};

}  // namespace tutti::detail

namespace tutti::models {

/// Biased matrix factorisation: score s = g + b_u + b_i + <p_u, q_i>.
///
/// Parameters live in the trainer's arena with the segments, in this order,
/// "user_embedding" (n_users × dim, embedding), "item_embedding" (n_items × dim, embedding),
/// "user_bias" (n_users × 1, bias), "item_bias" (n_items × 1, bias), "global_bias" (1 × 1, bias).
///
/// Objective of a batch: Σ_i w_i·[L(s_i, y_i) + l2·(|p_u|² + |q_i|² + b_u² + b_i²)] with
/// L = (s - y)² (squared) or y·softplus(-s) + (1-y)·softplus(s) (logistic, computed stably).
/// The list losses (bpr, softmax) replace Σ_i w_i·L(s_i, y_i) by Σ_lists w·L(list) over the
/// batch's lists of `batch_view::list_size` slots (see `detail::list_loss_fn`); the L2 term is
/// the same, slot by slot. Every list is one learner's, so a list loss does not read the
/// learner's bias or the global bias: their gradient is the L2 term's alone (exactly 0 for the
/// global bias). The global bias is not regularised.
///
/// Contract of `loss_and_gradient`, for every slot i with weight w_i:
/// - it ADDS scale·w_i·∂(L_i + l2-term_i)/∂θ into `grads` (the caller zeroes them; adding lets a
///   caller accumulate several batches);
/// - it ADDS Σ_i w_i·L_i (the data loss only, without the L2 term) into `*loss_sum`, one value
///   in the space's memory, so a device step never synchronises to report its loss; pass
///   nullptr to skip the loss;
/// - any batch is valid, duplicates of a user or item included; weight-0 slots (padding)
///   contribute nothing, wherever they sit (the results are bitwise those of the batch without
///   them), and their ids are never dereferenced;
/// - results are bitwise reproducible: no atomics, and every sum runs in an order fixed by the
///   batch alone, so runs, OpenMP thread counts and core counts agree to the last bit (host and
///   CUDA agree to rounding: the compilers contract multiply-adds differently).
///
/// Ids outside [0, n_users) or [0, n_items) in a batch are the caller's bug (tutti's cleaning
/// rejects them before training): debug builds stop on an assertion, release builds read and
/// write out of bounds.
///
/// One instance is not safe to call from two threads at once (it owns scratch memory); copies
/// are independent and cheap (scratch is not copied), one per rank.
///
/// @tparam Space a type modelling `tutti::execution_space`
/// @tparam T the value type of parameters and gradients (float; double for gradient checks)
template <execution_space Space = host_space, class T = float>
class matrix_factorization {
 public:
  /// The execution space parameters live in and kernels run on.
  using space_type = Space;
  /// The value type of parameters, gradients and losses.
  using value_type = T;

  /// A model of `n_users` users and `n_items` items with hyper-parameters `opt`.
  matrix_factorization(mf_options opt, std::int32_t n_users, std::int32_t n_items, Space space = {})
      : m_opt(opt),
        m_n_users(n_users),
        m_n_items(n_items),
        m_space(std::move(space)),
        m_users(m_space),
        m_items(m_space),
        m_user_contrib(m_space),
        m_item_contrib(m_space),
        m_slot_loss(m_space),
        m_slot_global(m_space),
        m_slopes(m_space),
        m_user_rows(m_space),
        m_item_rows(m_space) {
    constexpr const char* fn = "tutti::models::matrix_factorization";
    TUTTI_EXPECTS(opt.dim >= 1, fn, "dim is " + std::to_string(opt.dim) + "; expected >= 1");
    TUTTI_EXPECTS(n_users >= 1, fn, "n_users is " + std::to_string(n_users) + "; expected >= 1");
    TUTTI_EXPECTS(n_items >= 1, fn, "n_items is " + std::to_string(n_items) + "; expected >= 1");
    TUTTI_EXPECTS(std::isfinite(opt.l2) && opt.l2 >= 0.f, fn,
                  "l2 is " + std::to_string(opt.l2) + "; expected a finite value >= 0");
    TUTTI_EXPECTS(
        std::isfinite(opt.init_scale) && opt.init_scale >= 0.f, fn,
        "init_scale is " + std::to_string(opt.init_scale) + "; expected a finite value >= 0");
    TUTTI_EXPECTS(std::isfinite(opt.global_bias_init), fn,
                  "global_bias_init is not finite; expected a finite value");
    TUTTI_EXPECTS(
        opt.loss == loss_kind::squared || opt.loss == loss_kind::logistic || is_list_loss(opt.loss),
        fn, "loss is not a tutti::loss_kind; expected squared, logistic, bpr or softmax");
    const auto nu = static_cast<std::size_t>(n_users);
    const auto ni = static_cast<std::size_t>(n_items);
    const auto d = static_cast<std::size_t>(opt.dim);
    m_off.user_embedding = m_layout.add("user_embedding", nu, d, segment_kind::embedding).offset;
    m_off.item_embedding = m_layout.add("item_embedding", ni, d, segment_kind::embedding).offset;
    m_off.user_bias = m_layout.add("user_bias", nu, 1, segment_kind::bias).offset;
    m_off.item_bias = m_layout.add("item_bias", ni, 1, segment_kind::bias).offset;
    m_off.global_bias = m_layout.add("global_bias", 1, 1, segment_kind::bias).offset;
  }

  /// The space instance kernels run on.
  const Space& space() const noexcept { return m_space; }
  /// The parameter layout (five segments, see the class comment).
  const parameter_layout& layout() const noexcept { return m_layout; }
  /// The loss minimised.
  loss_kind loss() const noexcept { return m_opt.loss; }
  /// The hyper-parameters.
  const mf_options& options() const noexcept { return m_opt; }
  /// Number of users (rows of "user_embedding").
  std::int32_t n_users() const noexcept { return m_n_users; }
  /// Number of items (rows of "item_embedding").
  std::int32_t n_items() const noexcept { return m_n_items; }
  /// Embedding dimension.
  std::int32_t dim() const noexcept { return m_opt.dim; }

  /// Makes `initialize` copy `values` (a host arena of layout().total() values, e.g. a fresh
  /// initialisation with an earlier model's rows put in by `apply_warm_start`) instead of
  /// drawing; null: draw again. Copies of the model share the values.
  void start_from(std::shared_ptr<const std::vector<T>> values) {
    TUTTI_EXPECTS(!values || values->size() == m_layout.total(),
                  "tutti::models::matrix_factorization::start_from",
                  "values has " + std::to_string(values ? values->size() : 0) +
                      " values; expected layout().total() = " + std::to_string(m_layout.total()));
    m_start = std::move(values);
  }

  /// Makes `initialize`, after it draws, hand the arena to `edit` on the host (in place on a
  /// space the host can read; a host copy, copied back, on one it cannot): e.g. to put an
  /// earlier model's rows in (`apply_warm_start`) with no second arena. Null: no edit. Copies of
  /// the model share the function.
  void after_initialize(std::function<void(std::span<T>)> edit) { m_edit = std::move(edit); }

  /// Fills `params` (memory of the space, layout().total() values): embedding value at arena
  /// index k is init_scale·init_normal(seed, k), biases and padding 0, global bias
  /// global_bias_init. Depends only on (layout, seed): identical on every space and thread count.
  /// After `start_from(values)`, copies `values` instead.
  void initialize(std::span<T> params, std::uint64_t seed) const {
    TUTTI_EXPECTS(params.size() == m_layout.total(),
                  "tutti::models::matrix_factorization::initialize",
                  "params has " + std::to_string(params.size()) +
                      " values; expected layout().total() = " + std::to_string(m_layout.total()));
    if (m_start) {
      m_space.copy_from_host(params.data(), m_start->data(), params.size_bytes());
      return;
    }
    const auto d = static_cast<std::size_t>(m_opt.dim);
    const detail::mf_init_fn<T> init{params.data(),
                                     params.size(),
                                     m_off.user_embedding,
                                     m_off.user_embedding + static_cast<std::size_t>(m_n_users) * d,
                                     m_off.item_embedding,
                                     m_off.item_embedding + static_cast<std::size_t>(m_n_items) * d,
                                     m_off.global_bias,
                                     static_cast<double>(m_opt.init_scale),
                                     static_cast<T>(m_opt.global_bias_init),
                                     seed};
    if constexpr (std::is_same_v<Space, host_space>)
      initialize_on_host(init);
    else
      parallel_for(m_space, (params.size() + 1) / 2, init);
    if (!m_edit) return;
    if constexpr (Space::host_accessible) {
      m_edit(params);
    } else {
      std::vector<T> host = to_host_vector(m_space, std::span<const T>(params));
      m_edit(std::span<T>(host));
      m_space.copy_from_host(params.data(), host.data(), params.size_bytes());
    }
  }

  /// Adds the batch's scaled, weighted gradient into `grads` and its weighted data loss into
  /// `*loss_sum` (see the class comment for the exact contract). `params`, `grads`, the batch
  /// and `loss_sum` are memory of the space; nothing is read back to the host.
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    loss_and_gradient(params, batch, grads, scale, loss_sum, gradient_ready{});
  }

  /// As above, reporting the gradient's segments final through `ready` as soon as they are:
  /// the global bias, the item then the user biases, then the item and the user embedding
  /// tables in pieces of about 64 Ki values from their last row to their first (on a device
  /// space each table whole). The gradient is bitwise the same as without `ready`.
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum, const gradient_ready& ready) {
    constexpr const char* fn = "tutti::models::matrix_factorization::loss_and_gradient";
    detail::check_loss_and_gradient_args(fn, m_layout.total(), params.size(), grads.size(), batch,
                                         gradient_values());
    const std::size_t n = batch.size();
    const bool to_slots = m_slots.has_value();
    TUTTI_EXPECTS(!to_slots || !ready, fn,
                  "a gradient in slots is final only after the whole batch; expected no "
                  "gradient_ready report with write_gradient_to_slots");
    if (to_slots) check_slot_rows(n);
    const detail::mf_offsets& at = to_slots ? m_slot_off : m_off;  // where the gradient goes
    m_last_slots = n;
    m_user_rows_found = false;
    m_item_rows_found = false;
    m_touched_users_found = false;
    m_touched_items_found = false;
    if (n == 0) {
      m_users.group(m_space, nullptr, nullptr, 0, m_n_users);  // no rows touched
      m_items.group(m_space, nullptr, nullptr, 0, m_n_items);
      const auto& segments = m_layout.segments();
      for (auto s = segments.rbegin(); s != segments.rend(); ++s) ready(s->offset, s->size());
      return;
    }
    const auto d = static_cast<std::size_t>(m_opt.dim);
    T* uc = m_user_contrib.reserve(n * (d + 1));
    T* ic = m_item_contrib.reserve(n * (d + 1));
    T* sl = m_slot_loss.reserve(n);
    T* sg = m_slot_global.reserve(n);
    const detail::mf_slot_fn<T> slot{params.data(),
                                     batch.users.data(),
                                     batch.items.data(),
                                     batch.labels.data(),
                                     batch.weights.data(),
                                     m_off,
                                     d,
                                     m_n_users,
                                     m_n_items,
                                     m_opt.loss,
                                     static_cast<T>(m_opt.l2),
                                     scale,
                                     uc,
                                     ic,
                                     sl,
                                     sg,
                                     n};
    if (is_list_loss(m_opt.loss)) {
      T* x = m_slopes.reserve(n);
      const auto loss =
          detail::list_loss_of("tutti::models::matrix_factorization::loss_and_gradient", m_opt.loss,
                               batch, m_n_items, x, static_cast<const T*>(nullptr), scale, sl);
      parallel_for(m_space, n / batch.list_size, detail::mf_list_fn<T>{slot, loss});
    } else {
      parallel_for(m_space, n, slot);
    }
    const float* w = batch.weights.data();
    T* g = grads.data();
    const std::size_t one = 1;
    // Arena order is user table, item table, user bias, item bias, global bias: backward runs
    // from the end, so each report can start a reduction while the rest is summed.
    accumulator::group_two(m_space, m_users, batch.users.data(), m_n_users, m_items,
                           batch.items.data(), m_n_items, w, n);
    m_users.add_sum(m_space, sg, g + at.global_bias);
    if (loss_sum != nullptr) m_users.add_sum(m_space, sl, loss_sum);
    ready(m_off.global_bias, 1);
    if constexpr (Space::host_accessible) {
      if (to_slots) {  // the k-th touched row's embedding gradient and bias to place k
        m_items.scatter_add_split_to_slots(m_space, ic, d + 1, d + 1, g + at.item_embedding, d, d,
                                           g + at.item_bias, one);
        m_users.scatter_add_split_to_slots(m_space, uc, d + 1, d + 1, g + at.user_embedding, d, d,
                                           g + at.user_bias, one);
        return;
      }
    }
    if (!ready) {
      // One pass per table: a row's embedding gradient and its bias together (the same bits).
      m_items.scatter_add_split(m_space, ic, d + 1, d + 1, g + m_off.item_embedding, d, d,
                                g + m_off.item_bias, one);
      m_users.scatter_add_split(m_space, uc, d + 1, d + 1, g + m_off.user_embedding, d, d,
                                g + m_off.user_bias, one);
      return;
    }
    m_items.scatter_add(m_space, ic + d, d + 1, one, g + m_off.item_bias, one);
    ready(m_off.item_bias, static_cast<std::size_t>(m_n_items));
    m_users.scatter_add(m_space, uc + d, d + 1, one, g + m_off.user_bias, one);
    ready(m_off.user_bias, static_cast<std::size_t>(m_n_users));
    m_items.scatter_add_ready(m_space, ic, d + 1, d, g, m_off.item_embedding, m_n_items, ready);
    m_users.scatter_add_ready(m_space, uc, d + 1, d, g, m_off.user_embedding, m_n_users, ready);
  }

  /// `tutti::model_writes_gradient_slots`: from the next `loss_and_gradient` on, `grads` is an
  /// arena of `gradients->total()` values, the layout of this model's five segments (same names,
  /// columns and order) with "user_embedding" and "user_bias" of as many rows as the distinct
  /// learners a batch may hold, "item_embedding" and "item_bias" as many as its distinct items:
  /// the gradient of the k-th row `touched_rows(s)` lists is added to row k of segment s, every
  /// sum bitwise what the model's own layout gets. `std::nullopt`: the model's own layout again.
  /// Host spaces.
  void write_gradient_to_slots(std::optional<parameter_layout> gradients) requires(
      Space::host_accessible) {
    constexpr const char* fn = "tutti::models::matrix_factorization::write_gradient_to_slots";
    if (!gradients) {
      m_slots.reset();
      return;
    }
    const auto& mine = m_layout.segments();
    const auto& theirs = gradients->segments();
    TUTTI_EXPECTS(theirs.size() == mine.size(), fn,
                  "the gradient layout has " + std::to_string(theirs.size()) +
                      " segments; expected the model's " + std::to_string(mine.size()));
    for (std::size_t s = 0; s < mine.size(); ++s)
      TUTTI_EXPECTS(theirs[s].name == mine[s].name && theirs[s].cols == mine[s].cols &&
                        theirs[s].rows <= mine[s].rows && (row_sparse(s) || theirs[s].rows == 1),
                    fn,
                    "segment " + std::to_string(s) + " of the gradient layout is '" +
                        theirs[s].name + "' (" + std::to_string(theirs[s].rows) + "x" +
                        std::to_string(theirs[s].cols) + "); expected '" + mine[s].name +
                        "' with " + std::to_string(mine[s].cols) + " columns and at most " +
                        std::to_string(row_sparse(s) ? mine[s].rows : 1) + " rows");
    m_slot_off = {theirs[0].offset, theirs[1].offset, theirs[2].offset, theirs[3].offset,
                  theirs[4].offset};
    m_slots = std::move(gradients);
  }

  /// `tutti::model_repeats_its_kernels`: a call's kernels and their arguments depend on the
  /// batch's size and the memory it is in, not on its values; the scratch arrays grow at the
  /// first call of a size and are kept.
  static constexpr bool repeats_its_kernels = true;

  /// True for the segments whose gradient is zero outside the rows a batch reads: both
  /// embedding tables and both per-row bias vectors (segments 0 to 3); false for the global
  /// bias. The trainer's sparse exchange sends only those rows of these segments.
  bool row_sparse(std::size_t segment) const noexcept { return segment < 4; }

  /// The rows of segment `segment` (0 "user_embedding", 1 "item_embedding", 2 "user_bias",
  /// 3 "item_bias") that the real (weight > 0) slots of the last `loss_and_gradient` call read:
  /// unique, ascending, in host memory; every other row of the segment got no gradient from
  /// that call. Valid until the next `loss_and_gradient` or `touched_rows` call; empty before
  /// the first call. Computed from the grouping the call already made (one pass over the batch;
  /// on a device space a copy to the host, which synchronises). Throws
  /// `tutti::invalid_argument` for another segment.
  std::span<const std::int32_t> touched_rows(std::size_t segment) const {
    TUTTI_EXPECTS(row_sparse(segment), "tutti::models::matrix_factorization::touched_rows",
                  "segment " + std::to_string(segment) +
                      " has no touched rows; expected 0 to 3 (the embeddings and per-row biases)");
    const bool user = segment % 2 == 0;
    std::vector<std::int32_t>& out = user ? m_touched_users : m_touched_items;
    bool& found = user ? m_touched_users_found : m_touched_items_found;
    if (!found) (user ? m_users : m_items).rows(m_space, out);  // once per table and call
    found = true;
    return out;
  }

  /// Host: true when every value the last `loss_and_gradient` call added to the rows of the
  /// embedding tables and per-row biases is finite, checked as each row's sum was written
  /// (`tutti::model_checks_row_gradient`); false when one may not be.
  bool row_gradient_finite() const requires(Space::host_accessible) {
    return m_users.written_finite() && m_items.written_finite();
  }

  /// `touched_rows` in the memory of the model's space
  /// (`tutti::model_reports_touched_rows_on_space`): found by kernels from the grouping the call
  /// already made, never read back to the host, so a device step does not wait for them. Valid
  /// until the next `loss_and_gradient`; room for as many rows as that call had slots. Throws like
  /// `touched_rows`.
  segment_rows_on_space touched_rows_on_space(std::size_t segment) const {
    TUTTI_EXPECTS(row_sparse(segment), "tutti::models::matrix_factorization::touched_rows_on_space",
                  "segment " + std::to_string(segment) +
                      " has no touched rows; expected 0 to 3 (the embeddings and per-row biases)");
    const bool user = segment % 2 == 0;
    auto& ids = user ? m_user_rows : m_item_rows;
    bool& found = user ? m_user_rows_found : m_item_rows_found;
    std::int32_t* rows = ids.reserve(m_last_slots + 1);
    if (!found) (user ? m_users : m_items).rows_on_space(m_space, rows, rows + m_last_slots);
    found = true;
    return segment_rows_on_space{false, rows, rows + m_last_slots, m_last_slots};
  }

  /// Writes the score s = g + b_u + b_i + <p_u, q_i> of each (users[k], items[k]) to out[k]
  /// (all memory of the space). For the logistic loss this is the logit: apply a sigmoid for a
  /// probability; ranking metrics such as AUC need only its order.
  void predict(std::span<const T> params, std::span<const std::int32_t> users,
               std::span<const std::int32_t> items, std::span<T> out) const {
    detail::check_predict_args("tutti::models::matrix_factorization::predict", m_layout.total(),
                               params.size(), users.size(), items.size(), out.size());
    parallel_for(m_space, users.size(),
                 detail::mf_predict_fn<T>{params.data(), users.data(), items.data(), m_off,
                                          static_cast<std::size_t>(m_opt.dim), m_n_users, m_n_items,
                                          out.data()});
  }

 private:
  /// `init` on the host, in blocks of pairs over the threads: a block inside one embedding table
  /// in vectors (`detail::fill_normal_pairs`, the same values bit for bit), the blocks that meet
  /// a table's end, the biases or the padding pair by pair.
  void initialize_on_host(const detail::mf_init_fn<T>& init) const {
    constexpr std::size_t block = 4096;  // pairs
    const std::size_t pairs = (init.total + 1) / 2;
    const std::size_t blocks = (pairs + block - 1) / block;
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t b = 0; b < static_cast<std::ptrdiff_t>(blocks); ++b) {
      const std::size_t lo = static_cast<std::size_t>(b) * block;
      const std::size_t hi = lo + block < pairs ? lo + block : pairs;
      if (2 * hi <= init.total && init.embedding_run(2 * lo, 2 * hi))
        detail::fill_normal_pairs(init.params + 2 * lo, init.seed, lo, hi - lo, init.scale);
      else
        for (std::size_t p = lo; p < hi; ++p) init(p);
    }
  }
  // Values `loss_and_gradient` expects in `grads`.
  std::size_t gradient_values() const noexcept {
    return m_slots ? m_slots->total() : m_layout.total();
  }

  // Every learner and item of a batch of n slots has a slot.
  void check_slot_rows(std::size_t n) const {
    const auto& segs = m_slots->segments();
    for (std::size_t s = 0; s < 4; ++s) {
      const std::size_t need = std::min(n, m_layout.segments()[s].rows);
      TUTTI_EXPECTS(segs[s].rows >= need, "tutti::models::matrix_factorization::loss_and_gradient",
                    "the gradient layout has " + std::to_string(segs[s].rows) + " slots for '" +
                        segs[s].name + "' and the batch has " + std::to_string(n) +
                        " slots; expected at least " + std::to_string(need));
    }
  }

  mf_options m_opt;
  std::int32_t m_n_users;
  std::int32_t m_n_items;
  Space m_space;
  parameter_layout m_layout;
  detail::mf_offsets m_off{};
  using accumulator = detail::sparse_accumulator<T, Space>;
  accumulator m_users;
  accumulator m_items;
  detail::scratch_array<T, Space> m_user_contrib;
  detail::scratch_array<T, Space> m_item_contrib;
  detail::scratch_array<T, Space> m_slot_loss;
  detail::scratch_array<T, Space> m_slot_global;
  detail::scratch_array<T, Space> m_slopes;  // a list loss's scores, then scaled slopes
  // The last call's touched rows, per table (`touched_rows`).
  mutable std::vector<std::int32_t> m_touched_users;
  mutable std::vector<std::int32_t> m_touched_items;
  mutable bool m_touched_users_found = false;
  mutable bool m_touched_items_found = false;
  // The same in the space's memory (`touched_rows_on_space`): the ids, then their number; found
  // once per call, for the slots of the last call.
  mutable detail::scratch_array<std::int32_t, Space> m_user_rows;
  mutable detail::scratch_array<std::int32_t, Space> m_item_rows;
  mutable bool m_user_rows_found = false;
  mutable bool m_item_rows_found = false;
  std::size_t m_last_slots = 0;
  std::shared_ptr<const std::vector<T>> m_start;  // start_from's values, or null
  std::function<void(std::span<T>)> m_edit;       // after_initialize's edit, or null
  std::optional<parameter_layout> m_slots;        // write_gradient_to_slots's layout
  detail::mf_offsets m_slot_off{};                // its segments' offsets
};

}  // namespace tutti::models
