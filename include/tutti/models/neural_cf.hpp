// SPDX-License-Identifier: Apache-2.0
/// @file models/neural_cf.hpp
/// @brief `tutti::models::neural_cf`: neural collaborative filtering (NeuMF, He et al. 2017), a
/// generalised-MF branch and an MLP branch fused into one score; dense layers through BLAS.
///
/// Needs a CBLAS on the host (link `tutti::blas`, or `-lopenblas`) and cuBLAS on the CUDA space
/// (link `CUDA::cublas`); not part of `tutti/tutti.hpp` for that reason.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/config.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/error.hpp>
#include <tutti/layout.hpp>
#include <tutti/models/detail/blas.hpp>
#include <tutti/models/detail/losses.hpp>
#include <tutti/models/detail/ncf_kernels.hpp>
#include <tutti/models/detail/sparse_accumulate.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tutti::models {

/// Hyper-parameters of `neural_cf` (designated initialisers:
/// `{.gmf_dim = 8, .layers = {32, 16, 8}, .loss = tutti::loss_kind::squared}`).
struct neural_cf_options {
  /// Embedding dimension of the generalised-MF branch (>= 1).
  std::size_t gmf_dim = 16;
  /// Embedding dimension of the MLP branch; its input is the concatenation of the user's and the
  /// item's MLP embeddings, 2·mlp_dim values. 0 takes layers[0] / 2, the paper's choice (the
  /// input is as wide as the first layer).
  std::size_t mlp_dim = 0;
  /// Widths of the MLP's dense layers, each followed by a ReLU (at least one, each >= 1).
  std::vector<std::size_t> layers = {64, 32, 16};
  /// L2 strength: each weighted sample adds l2·(squared norms of the four embedding rows it
  /// reads) to the objective, as matrix_factorization does. Dense layers are not regularised
  /// here (use an optimizer's weight decay).
  float l2 = 0.f;
  /// Loss minimised: squared (ratings), logistic (0/1 labels), or over lists of a positive and
  /// its sampled negatives, bpr or softmax (`batch_view::list_size`).
  loss_kind loss = loss_kind::logistic;
  /// Standard deviation of the normal initialisation of the embeddings (>= 0). Dense weights
  /// start from He's N(0, 2/fan_in) (the output layer N(0, 1/fan_in)), biases from 0.
  float init_scale = 0.01f;
  /// Initial bias of the output layer (e.g. the mean rating for squared loss).
  float output_bias_init = 0.f;
};

/// Neural collaborative filtering (NeuMF): score
///
///     s = w_outᵀ·[p_u ⊙ q_i, MLP([m_u, n_i])] + b_out
///
/// where p_u, q_i are the GMF embeddings (gmf_dim), m_u, n_i the MLP embeddings (mlp_dim) and
/// MLP a stack of dense layers a ← ReLU(a·W + b) of widths `layers`.
///
/// Parameters live in the trainer's arena with the segments, in this order:
/// "gmf_user_embedding" (n_users × gmf_dim), "gmf_item_embedding" (n_items × gmf_dim),
/// "mlp_user_embedding" (n_users × mlp_dim), "mlp_item_embedding" (n_items × mlp_dim), all
/// embedding; then for each layer l "mlp<l>_weight" (fan_in × width, dense, row-major so that a
/// batch-major activation multiplies it from the left) and "mlp<l>_bias" (1 × width, bias);
/// then "output_weight" ((gmf_dim + last width) × 1, dense) and "output_bias" (1 × 1, bias).
///
/// Objective of a batch: Σ_i w_i·[L(s_i, y_i) + l2·(|p_u|² + |q_i|² + |m_u|² + |n_i|²)], L as
/// in `matrix_factorization`. The contract of `loss_and_gradient` is matrix_factorization's:
/// it ADDS scale·w_i·∂/∂θ into `grads` and Σ_i w_i·L_i into `*loss_sum` (nullptr skips it), on
/// the space, never reading back to the host; weight-0 slots contribute nothing and their ids
/// are never read. Embedding gradients accumulate through the deterministic sorted
/// accumulator; dense gradients come from GEMMs (OpenBLAS on the host, cuBLAS on a CUDA
/// stream), whose results are reproducible run to run for a given library, thread count and
/// batch size, but not bitwise across batch sizes (padding changes the GEMM's blocking, so a
/// padded batch agrees with the unpadded one to rounding).
///
/// Batch-major scratch (activations, their gradients and the per-slot embedding contributions:
/// about n·(6·mlp_dim + 4·gmf_dim + 2·Σ widths) values for a batch of n) is owned by the model
/// and grows on demand; `predict` runs in pieces of at most `predict_rows` slots, so evaluating
/// a large test set does not grow it.
///
/// One instance is not safe to call from two threads at once; copies are independent (scratch
/// and the cuBLAS handle are not copied), one per rank.
///
/// @tparam Space a type modelling `tutti::execution_space` with BLAS support (`host_space`,
/// `cuda_space`)
/// @tparam T the value type of parameters and gradients (float; double for gradient checks)
template <execution_space Space = host_space, class T = float>
class neural_cf {
 public:
  /// The execution space parameters live in and kernels run on.
  using space_type = Space;
  /// The value type of parameters, gradients and losses.
  using value_type = T;
  /// `predict` runs the network on at most this many slots at a time.
  static constexpr std::size_t predict_rows = std::size_t{1} << 15;

  /// A model of `n_users` users and `n_items` items with hyper-parameters `opt`.
  neural_cf(neural_cf_options opt, std::int32_t n_users, std::int32_t n_items, Space space = {})
      : m_opt(std::move(opt)),
        m_n_users(n_users),
        m_n_items(n_items),
        m_space(std::move(space)),
        m_blas(m_space),
        m_users(m_space),
        m_items(m_space),
        m_loss_sum(m_space),
        m_work(m_space) {
    constexpr const char* fn = "tutti::models::neural_cf";
    TUTTI_EXPECTS(m_opt.gmf_dim >= 1, fn,
                  "gmf_dim is " + std::to_string(m_opt.gmf_dim) + "; expected >= 1");
    TUTTI_EXPECTS(!m_opt.layers.empty(), fn, "layers is empty; expected at least one width");
    for (std::size_t l = 0; l < m_opt.layers.size(); ++l)
      TUTTI_EXPECTS(m_opt.layers[l] >= 1, fn,
                    "layers[" + std::to_string(l) + "] is 0; expected every width >= 1");
    m_mlp_dim = m_opt.mlp_dim != 0 ? m_opt.mlp_dim : m_opt.layers[0] / 2;
    TUTTI_EXPECTS(m_mlp_dim >= 1, fn,
                  "mlp_dim is 0 and layers[0] / 2 is 0; expected mlp_dim >= 1 or layers[0] >= 2");
    for (std::size_t w : m_opt.layers) detail::check_blas_size(fn, w, "a layer width");
    detail::check_blas_size(fn, m_opt.gmf_dim + m_opt.layers.back(), "gmf_dim + last width");
    detail::check_blas_size(fn, 2 * m_mlp_dim, "2·mlp_dim");
    TUTTI_EXPECTS(n_users >= 1, fn, "n_users is " + std::to_string(n_users) + "; expected >= 1");
    TUTTI_EXPECTS(n_items >= 1, fn, "n_items is " + std::to_string(n_items) + "; expected >= 1");
    TUTTI_EXPECTS(std::isfinite(m_opt.l2) && m_opt.l2 >= 0.f, fn,
                  "l2 is " + std::to_string(m_opt.l2) + "; expected a finite value >= 0");
    TUTTI_EXPECTS(
        std::isfinite(m_opt.init_scale) && m_opt.init_scale >= 0.f, fn,
        "init_scale is " + std::to_string(m_opt.init_scale) + "; expected a finite value >= 0");
    TUTTI_EXPECTS(std::isfinite(m_opt.output_bias_init), fn,
                  "output_bias_init is not finite; expected a finite value");
    TUTTI_EXPECTS(m_opt.loss == loss_kind::squared || m_opt.loss == loss_kind::logistic ||
                      is_list_loss(m_opt.loss),
                  fn, "loss is not a tutti::loss_kind; expected squared, logistic, bpr or softmax");

    const auto nu = static_cast<std::size_t>(n_users);
    const auto ni = static_cast<std::size_t>(n_items);
    const std::size_t g = m_opt.gmf_dim, m = m_mlp_dim;
    auto add = [&](std::string name, std::size_t rows, std::size_t cols, segment_kind kind) {
      return m_layout.add(std::move(name), rows, cols, kind).offset;
    };
    m_off.gmf_user = add("gmf_user_embedding", nu, g, segment_kind::embedding);
    m_off.gmf_item = add("gmf_item_embedding", ni, g, segment_kind::embedding);
    m_off.mlp_user = add("mlp_user_embedding", nu, m, segment_kind::embedding);
    m_off.mlp_item = add("mlp_item_embedding", ni, m, segment_kind::embedding);
    std::size_t fan_in = 2 * m;
    for (std::size_t l = 0; l < m_opt.layers.size(); ++l) {
      const std::size_t out = m_opt.layers[l];
      const std::string stem = "mlp" + std::to_string(l);
      dense d{fan_in, out, 0, 0};
      d.weight = add(stem + "_weight", fan_in, out, segment_kind::dense);
      d.bias = add(stem + "_bias", 1, out, segment_kind::bias);
      m_dense.push_back(d);
      fan_in = out;
    }
    m_fused = g + m_opt.layers.back();
    m_output.in = m_fused;
    m_output.out = 1;
    m_output.weight = add("output_weight", m_fused, 1, segment_kind::dense);
    m_output.bias = add("output_bias", 1, 1, segment_kind::bias);
  }

  /// The space instance kernels run on.
  const Space& space() const noexcept { return m_space; }
  /// The parameter layout (see the class comment).
  const parameter_layout& layout() const noexcept { return m_layout; }
  /// The loss minimised.
  loss_kind loss() const noexcept { return m_opt.loss; }
  /// The hyper-parameters, as given (mlp_dim may be 0; see `mlp_dim()`).
  const neural_cf_options& options() const noexcept { return m_opt; }
  /// Number of users.
  std::int32_t n_users() const noexcept { return m_n_users; }
  /// Number of items.
  std::int32_t n_items() const noexcept { return m_n_items; }
  /// Embedding dimension of the GMF branch.
  std::size_t gmf_dim() const noexcept { return m_opt.gmf_dim; }
  /// Embedding dimension of the MLP branch (options().mlp_dim, or layers[0] / 2 when that is 0).
  std::size_t mlp_dim() const noexcept { return m_mlp_dim; }

  /// Fills `params` (memory of the space, layout().total() values): embedding value at arena
  /// index k is init_scale·init_normal(seed, k); a dense weight at k is sd·init_normal(seed, k)
  /// with sd = sqrt(2 / fan_in) for the MLP layers (He, for ReLU) and sqrt(1 / fan_in) for the
  /// output layer; biases and padding 0, the output bias output_bias_init. Depends only on (layout,
  /// seed): identical on every space and thread count.
  void initialize(std::span<T> params, std::uint64_t seed) const {
    TUTTI_EXPECTS(params.size() == m_layout.total(), "tutti::models::neural_cf::initialize",
                  "params has " + std::to_string(params.size()) +
                      " values; expected layout().total() = " + std::to_string(m_layout.total()));
    fill(m_space, params, T(0));
    T* p = params.data();
    auto normal = [&](std::size_t begin, std::size_t count, double sd) {
      if (count == 0) return;
      const std::size_t end = begin + count, pairs = (end + 1) / 2 - begin / 2;
      parallel_for(m_space, pairs, detail::ncf_normal_fn<T>{p, begin, end, begin / 2, sd, seed});
    };
    const auto nu = static_cast<std::size_t>(m_n_users);
    const auto ni = static_cast<std::size_t>(m_n_items);
    const double scale = static_cast<double>(m_opt.init_scale);
    normal(m_off.gmf_user, nu * m_opt.gmf_dim, scale);
    normal(m_off.gmf_item, ni * m_opt.gmf_dim, scale);
    normal(m_off.mlp_user, nu * m_mlp_dim, scale);
    normal(m_off.mlp_item, ni * m_mlp_dim, scale);
    for (const dense& d : m_dense)
      normal(d.weight, d.in * d.out, std::sqrt(2.0 / static_cast<double>(d.in)));
    normal(m_output.weight, m_output.in, std::sqrt(1.0 / static_cast<double>(m_output.in)));
    fill(m_space, params.subspan(m_output.bias, 1), static_cast<T>(m_opt.output_bias_init));
  }

  /// Adds the batch's scaled, weighted gradient into `grads` and its weighted data loss into
  /// `*loss_sum` (see the class comment). `params`, `grads`, the batch and `loss_sum` are memory
  /// of the space; nothing is read back to the host.
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum) {
    loss_and_gradient(params, batch, grads, scale, loss_sum, gradient_ready{});
  }

  /// As above, reporting segments final through `ready` as backward produces them: the output
  /// layer, each MLP layer from the last, then the four embedding tables (MLP item, MLP user,
  /// GMF item, GMF user; on a host space in pieces from their last row). The gradient is
  /// bitwise the same as without `ready`.
  void loss_and_gradient(std::span<const T> params, const batch_view& batch, std::span<T> grads,
                         T scale, T* loss_sum, const gradient_ready& ready) {
    detail::check_loss_and_gradient_args("tutti::models::neural_cf::loss_and_gradient",
                                         m_layout.total(), params.size(), grads.size(), batch);
    const std::size_t n = batch.size();
    if (n == 0) {
      const auto& segments = m_layout.segments();
      for (auto s = segments.rbegin(); s != segments.rend(); ++s) ready(s->offset, s->size());
      return;
    }
    const T* p = params.data();
    T* g = grads.data();
    const std::size_t gmf = m_opt.gmf_dim, mlp = m_mlp_dim, e = gmf + mlp;
    const std::size_t layers = m_dense.size();
    const work w = carve(n, true);
    if (is_list_loss(m_opt.loss)) {
      forward(p, batch.users.data(), batch.items.data(), batch.weights.data(), n, w, w.raw);
      parallel_for(
          m_space, n / batch.list_size,
          detail::list_loss_of("tutti::models::neural_cf::loss_and_gradient", m_opt.loss, batch,
                               m_n_items, w.raw, p + m_output.bias, scale, w.slot_loss));
      if (loss_sum != nullptr) m_loss_sum.add_to(m_space, w.slot_loss, nullptr, n, loss_sum);
      // d(raw) = scale·w·dL/ds is in w.raw. A list loss does not change when every score of a
      // list moves alike, so the output bias has no gradient there: adding the slopes' sum would
      // add only their rounding, which Adam would scale up into steps.
      gemm(true, false, m_fused, 1, n, w.h, m_fused, w.raw, 1, T(1), g + m_output.weight, 1);
      gemm(false, true, n, m_fused, 1, w.raw, 1, p + m_output.weight, 1, T(0), w.dh, m_fused);
    } else {
      // A pointwise loss: the output layer, the loss and the gradient into the features in one
      // pass over the slots, then the output weights' and bias's sums.
      forward_hidden(p, batch.users.data(), batch.items.data(), batch.weights.data(), n, w);
      parallel_for(m_space, n,
                   detail::ncf_output_loss_fn<T>{
                       w.h, m_fused, p + m_output.weight, p + m_output.bias, batch.labels.data(),
                       batch.weights.data(), m_opt.loss, scale, w.raw, w.dh, w.slot_loss});
      if (loss_sum != nullptr) m_loss_sum.add_to(m_space, w.slot_loss, nullptr, n, loss_sum);
      output_backward(w, n, g);
    }
    ready(m_output.bias, 1);
    ready(m_output.weight, m_fused);
    // MLP layers, last to first; the last layer's activation and its gradient sit in the
    // columns of h and dh after the GMF product.
    for (std::size_t l = layers; l-- > 0;) {
      const dense& d = m_dense[l];
      const T* a = l + 1 == layers ? w.h + gmf : w.act[l];
      T* da = l + 1 == layers ? w.dh + gmf : w.dact[l];
      const std::size_t ld = l + 1 == layers ? m_fused : d.out;
      bias_backward(da, ld, a, ld, d.out, n, w.partial, g + d.bias);
      const T* in = l == 0 ? w.x0 : w.act[l - 1];
      T* din = l == 0 ? w.dx0 : w.dact[l - 1];
      gemm(true, false, d.in, d.out, n, in, d.in, da, ld, T(1), g + d.weight, d.out);
      gemm(false, true, n, d.in, d.out, da, ld, p + d.weight, d.out, T(0), din, d.in);
      ready(d.bias, d.out);
      ready(d.weight, d.in * d.out);
    }

    // Embedding rows: per-slot contributions, then the deterministic sorted accumulation.
    parallel_grid(
        m_space, n, e,
        detail::ncf_contrib_fn<T>{p, batch.users.data(), batch.items.data(), batch.weights.data(),
                                  m_off, gmf, mlp, w.dh, m_fused, w.dx0, static_cast<T>(m_opt.l2),
                                  scale, w.user_contrib, w.item_contrib});
    const float* wt = batch.weights.data();
    m_users.group(m_space, batch.users.data(), wt, n, m_n_users);
    m_items.group(m_space, batch.items.data(), wt, n, m_n_items);
    m_items.scatter_add_ready(m_space, w.item_contrib + gmf, e, mlp, g, m_off.mlp_item, m_n_items,
                              ready);
    m_users.scatter_add_ready(m_space, w.user_contrib + gmf, e, mlp, g, m_off.mlp_user, m_n_users,
                              ready);
    m_items.scatter_add_ready(m_space, w.item_contrib, e, gmf, g, m_off.gmf_item, m_n_items, ready);
    m_users.scatter_add_ready(m_space, w.user_contrib, e, gmf, g, m_off.gmf_user, m_n_users, ready);
  }

  /// True for the four embedding tables (segments 0 to 3), whose gradient is zero outside the
  /// rows a batch reads; the trainer's sparse exchange sends only those rows.
  bool row_sparse(std::size_t segment) const noexcept { return segment < 4; }

  /// The rows of embedding segment `segment` (0 "gmf_user_embedding", 1 "gmf_item_embedding",
  /// 2 "mlp_user_embedding", 3 "mlp_item_embedding") that the real (weight > 0) slots of the
  /// last `loss_and_gradient` call read: unique, ascending, in host memory; every other row got
  /// no gradient from that call. Valid until the next `loss_and_gradient` or `touched_rows`
  /// call; empty before the first call. Computed from the grouping the call already made (on a
  /// device space a copy to the host, which synchronises). Throws `tutti::invalid_argument`
  /// for another segment.
  std::span<const std::int32_t> touched_rows(std::size_t segment) const {
    TUTTI_EXPECTS(row_sparse(segment), "tutti::models::neural_cf::touched_rows",
                  "segment " + std::to_string(segment) +
                      " has no touched rows; expected 0 to 3 (the embedding tables)");
    const bool user = segment % 2 == 0;
    std::vector<std::int32_t>& out = user ? m_touched_users : m_touched_items;
    (user ? m_users : m_items).rows(m_space, out);
    return out;
  }

  /// Writes the score s of each (users[k], items[k]) to out[k] (all memory of the space),
  /// computed exactly as `loss_and_gradient` computes it. For the logistic loss this is the
  /// logit, as for matrix_factorization: apply a sigmoid for a probability.
  void predict(std::span<const T> params, std::span<const std::int32_t> users,
               std::span<const std::int32_t> items, std::span<T> out) {
    detail::check_predict_args("tutti::models::neural_cf::predict", m_layout.total(), params.size(),
                               users.size(), items.size(), out.size());
    const T* p = params.data();
    for (std::size_t begin = 0; begin < users.size(); begin += predict_rows) {
      const std::size_t n = std::min(predict_rows, users.size() - begin);
      const work w = carve(n, false);
      forward(p, users.data() + begin, items.data() + begin, nullptr, n, w, out.data() + begin);
      parallel_for(m_space, n, detail::ncf_add_bias_fn<T>{out.data() + begin, p + m_output.bias});
    }
  }

 private:
  /// One dense layer: fan-in, width and the arena offsets of its weight and bias.
  struct dense {
    std::size_t in, out, weight, bias;
  };

  /// Pointers into the scratch for one batch of n slots.
  struct work {
    T* x0;                 // n × 2·mlp: MLP input
    std::vector<T*> act;   // n × width of layer l, for every layer but the last
    T* h;                  // n × fused: [GMF product, last layer's activation]
    T* raw;                // n: output before its bias; then the gradient flowing back
    T* dx0;                // n × 2·mlp
    std::vector<T*> dact;  // like act
    T* dh;                 // n × fused
    T* slot_loss;          // n
    T* user_contrib;       // n × (gmf + mlp)
    T* item_contrib;       // n × (gmf + mlp)
    T* partial;            // chunks × widest layer
  };

  /// Per-column partial sums of the backward epilogue: rows one thread sums serially (a GPU
  /// needs many more, shorter threads than a CPU).
  static constexpr std::size_t chunk = Space::host_accessible ? 256 : 32;

  /// Carves the scratch for n slots (growing it when needed); the backward half only when
  /// `backward`.
  work carve(std::size_t n, bool backward) {
    const std::size_t layers = m_dense.size();
    // 16 values = 64 bytes: every piece starts on a cache line, as BLAS kernels prefer.
    auto round = [](std::size_t v) {
      return (v + 15) / 16 * 16;
    };
    std::size_t total = 0;
    auto take = [&](std::size_t count) {
      const std::size_t at = total;
      total += round(count);
      return at;
    };
    const std::size_t x0 = take(n * 2 * m_mlp_dim);
    std::vector<std::size_t> act(layers, 0), dact(layers, 0);
    for (std::size_t l = 0; l + 1 < layers; ++l) act[l] = take(n * m_dense[l].out);
    const std::size_t h = take(n * m_fused);
    const std::size_t raw = take(n);
    std::size_t dx0 = 0, dh = 0, sl = 0, uc = 0, ic = 0, part = 0;
    if (backward) {
      dx0 = take(n * 2 * m_mlp_dim);
      for (std::size_t l = 0; l + 1 < layers; ++l) dact[l] = take(n * m_dense[l].out);
      dh = take(n * m_fused);
      sl = take(n);
      const std::size_t e = m_opt.gmf_dim + m_mlp_dim;
      uc = take(n * e);
      ic = take(n * e);
      std::size_t widest = m_fused + 1;  // the output layer's sums: its weights and bias
      for (const dense& d : m_dense) widest = std::max(widest, d.out);
      part = take((n + chunk - 1) / chunk * widest);
    }
    T* base = m_work.reserve(total);
    work w{};
    w.x0 = base + x0;
    w.act.assign(layers, nullptr);
    w.dact.assign(layers, nullptr);
    for (std::size_t l = 0; l + 1 < layers; ++l) w.act[l] = base + act[l];
    w.h = base + h;
    w.raw = base + raw;
    if (backward) {
      w.dx0 = base + dx0;
      for (std::size_t l = 0; l + 1 < layers; ++l) w.dact[l] = base + dact[l];
      w.dh = base + dh;
      w.slot_loss = base + sl;
      w.user_contrib = base + uc;
      w.item_contrib = base + ic;
      w.partial = base + part;
    }
    return w;
  }

  /// Runs the network on n slots: `forward_hidden`, then the output layer into `raw` (n values,
  /// before the output bias), each score summed as `ncf_output_loss_fn` sums it.
  void forward(const T* p, const std::int32_t* users, const std::int32_t* items,
               const float* weights, std::size_t n, const work& w, T* raw) {
    forward_hidden(p, users, items, weights, n, w);
    parallel_for(m_space, n,
                 detail::ncf_output_score_fn<T>{w.h, m_fused, p + m_output.weight, raw});
  }

  /// The network up to the output layer: the input gather, and each dense layer as a GEMM
  /// followed by its fused bias + ReLU pass, into the fused features `w.h`.
  void forward_hidden(const T* p, const std::int32_t* users, const std::int32_t* items,
                      const float* weights, std::size_t n, const work& w) {
    const std::size_t gmf = m_opt.gmf_dim, mlp = m_mlp_dim;
    const std::size_t layers = m_dense.size();
    parallel_grid(m_space, n, gmf + 2 * mlp,
                  detail::ncf_gather_fn<T>{p, users, items, weights, m_off, gmf, mlp, m_n_users,
                                           m_n_items, w.h, m_fused, w.x0});
    for (std::size_t l = 0; l < layers; ++l) {
      const dense& d = m_dense[l];
      const T* in = l == 0 ? w.x0 : w.act[l - 1];
      T* out = l + 1 == layers ? w.h + gmf : w.act[l];
      const std::size_t ld = l + 1 == layers ? m_fused : d.out;
      gemm(false, false, n, d.out, d.in, in, d.in, p + d.weight, d.out, T(0), out, ld);
      parallel_grid(m_space, n, d.out, detail::ncf_bias_relu_fn<T>{out, ld, d.out, p + d.bias});
    }
  }

  /// The output layer's weight and bias gradients from raw (the gradient at each score) and the
  /// fused features: per chunk of rows, then the chunks in order, so no sum depends on how the
  /// chunks were shared out.
  void output_backward(const work& w, std::size_t n, T* g) {
    const std::size_t chunks = (n + chunk - 1) / chunk, cols = m_fused + 1;
    parallel_grid(m_space, chunks, cols,
                  detail::ncf_output_sums_fn<T>{w.raw, w.h, m_fused, n, chunk, w.partial});
    parallel_for(m_space, cols,
                 detail::ncf_output_column_sum_fn<T>{w.partial, m_fused, chunks,
                                                     g + m_output.weight, g + m_output.bias});
  }

  /// Masks the upstream gradient `d` of a layer by its ReLU (`a` its activation; null for none)
  /// and adds its column sums to `bias_grad`, in an order fixed by n.
  void bias_backward(T* d, std::size_t ldd, const T* a, std::size_t lda, std::size_t cols,
                     std::size_t n, T* partial, T* bias_grad) {
    const std::size_t chunks = (n + chunk - 1) / chunk;
    parallel_grid(m_space, chunks, cols,
                  detail::ncf_relu_backward_fn<T>{d, ldd, a, lda, cols, n, chunk,
                                                  chunks > 1 ? partial : nullptr, bias_grad});
    if (chunks > 1)
      parallel_for(m_space, cols, detail::ncf_column_sum_fn<T>{partial, cols, chunks, bias_grad});
  }

  /// Row-major C = op(A)·op(B) + beta·C on the model's space.
  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const T* a,
            std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    detail::gemm<T>(m_blas, m_space, ta, tb, m, n, k, T(1), a, lda, b, ldb, beta, c, ldc);
  }

  neural_cf_options m_opt;
  std::int32_t m_n_users;
  std::int32_t m_n_items;
  Space m_space;
  std::size_t m_mlp_dim = 0;
  std::size_t m_fused = 0;  // gmf_dim + last width: the output layer's fan-in
  parameter_layout m_layout;
  detail::ncf_offsets m_off{};
  std::vector<dense> m_dense;
  dense m_output{};
  detail::blas_context<Space> m_blas;
  detail::sparse_accumulator<T, Space> m_users;
  detail::sparse_accumulator<T, Space> m_items;
  detail::ordered_sum<T, Space> m_loss_sum;
  detail::scratch_array<T, Space> m_work;
  // The last call's touched rows, per table (`touched_rows`).
  mutable std::vector<std::int32_t> m_touched_users;
  mutable std::vector<std::int32_t> m_touched_items;
};

}  // namespace tutti::models
