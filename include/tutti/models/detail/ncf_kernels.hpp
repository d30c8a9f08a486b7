// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/ncf_kernels.hpp
/// @brief The kernels of `tutti::models::neural_cf` (models/neural_cf.hpp): the tables' normal
/// initialisation, the gather of a batch's embeddings into the first layer's input, the dense
/// layers' bias and ReLU, the output layer fused with a pointwise loss (score, loss, gradient at
/// the score, the row of the gradient into the features, the output weights' chunk sums), and the
/// per-slot embedding contributions the sorted accumulator adds into the tables. Each is a
/// parallel_for functor that runs on either space.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/random.hpp>
#include <tutti/models/detail/losses.hpp>

#include <cassert>
#include <cstddef>
#include <cstdint>

namespace tutti::detail {

/// Arena offsets of the four embedding tables (a POD that kernels can carry).
struct ncf_offsets {
  std::size_t gmf_user;
  std::size_t gmf_item;
  std::size_t mlp_user;
  std::size_t mlp_item;
};

/// Kernel over the pairs of arena indices that meet [begin, end): value k is sd·init_normal(seed,
/// k), both of a pair from one draw of init_normal_pair; `first_pair` is begin / 2.
template <class T>
struct ncf_normal_fn {
  T* params;
  std::size_t begin, end, first_pair;
  double sd;
  std::uint64_t seed;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t pair = first_pair + t;
    double normal[2] = {0.0, 0.0};
    init_normal_pair(seed, pair, normal[0], normal[1]);
    for (std::size_t k = 2 * pair; k < 2 * pair + 2; ++k)
      if (k >= begin && k < end) params[k] = static_cast<T>(sd * normal[k - 2 * pair]);
  }
};

/// Kernel over (slot i, column c) of the network's input: columns [0, gmf) are the GMF product
/// p_u ⊙ q_i, written to h (row stride ldh); the next 2·mlp are the user's then the item's MLP
/// embedding, written to x0 (row stride 2·mlp). Weight-0 slots (padding) get zeros and their
/// ids are never read; `weights` null means every slot is real.
template <class T>
struct ncf_gather_fn {
  const T* params;
  const std::int32_t* users;
  const std::int32_t* items;
  const float* weights;
  ncf_offsets off;
  std::size_t gmf, mlp;
  std::int32_t n_users, n_items;
  T* h;
  std::size_t ldh;
  T* x0;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t width = gmf + 2 * mlp;
    const std::size_t i = t / width;
    const std::size_t c = t % width;
    T v = T(0);
    if (weights == nullptr || weights[i] != 0.f) {
      assert(users[i] >= 0 && users[i] < n_users &&
             "tutti::models::neural_cf: user id out of range");
      assert(items[i] >= 0 && items[i] < n_items &&
             "tutti::models::neural_cf: item id out of range");
      const auto u = static_cast<std::size_t>(users[i]);
      const auto it = static_cast<std::size_t>(items[i]);
      if (c < gmf)
        v = params[off.gmf_user + u * gmf + c] * params[off.gmf_item + it * gmf + c];
      else if (c < gmf + mlp)
        v = params[off.mlp_user + u * mlp + (c - gmf)];
      else
        v = params[off.mlp_item + it * mlp + (c - gmf - mlp)];
    }
    if (c < gmf)
      h[i * ldh + c] = v;
    else
      x0[i * 2 * mlp + (c - gmf)] = v;
  }
  /// Row i's columns, as `operator()` writes them (host).
  void row(std::size_t i) const {
    T* hr = h + i * ldh;
    T* xr = x0 + i * 2 * mlp;
    if (weights != nullptr && weights[i] == 0.f) {
      for (std::size_t c = 0; c < gmf; ++c) hr[c] = T(0);
      for (std::size_t c = 0; c < 2 * mlp; ++c) xr[c] = T(0);
      return;
    }
    assert(users[i] >= 0 && users[i] < n_users && "tutti::models::neural_cf: user id out of range");
    assert(items[i] >= 0 && items[i] < n_items && "tutti::models::neural_cf: item id out of range");
    const auto u = static_cast<std::size_t>(users[i]);
    const auto it = static_cast<std::size_t>(items[i]);
    const T* pu = params + off.gmf_user + u * gmf;
    const T* qi = params + off.gmf_item + it * gmf;
    for (std::size_t c = 0; c < gmf; ++c) hr[c] = pu[c] * qi[c];
    const T* mu = params + off.mlp_user + u * mlp;
    const T* mi = params + off.mlp_item + it * mlp;
    for (std::size_t c = 0; c < mlp; ++c) xr[c] = mu[c];
    for (std::size_t c = 0; c < mlp; ++c) xr[mlp + c] = mi[c];
  }
};

/// Forward epilogue of a dense layer, over (row i, column j): z ← max(z + b_j, 0) in place, one
/// pass over the GEMM's output (row stride ld).
template <class T>
struct ncf_bias_relu_fn {
  T* z;
  std::size_t ld;
  std::size_t cols;
  const T* bias;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t i = t / cols;
    const std::size_t j = t % cols;
    const T v = z[i * ld + j] + bias[j];
    z[i * ld + j] = v > T(0) ? v : T(0);
  }
  /// Row i's columns (host).
  void row(std::size_t i) const {
    T* zr = z + i * ld;
    for (std::size_t j = 0; j < cols; ++j) {
      const T v = zr[j] + bias[j];
      zr[j] = v > T(0) ? v : T(0);
    }
  }
};

/// h·w over `fused` values in eight lanes (value j in lane j mod 8), the lanes added in a fixed
/// tree: the same sum on every space and thread count, and a loop the host vectorises.
template <class T>
TUTTI_HOST_DEVICE T ncf_output_dot(const T* h, const T* w, std::size_t fused) {
  T lane[8] = {};
  std::size_t j = 0;
  for (; j + 8 <= fused; j += 8)
    for (std::size_t l = 0; l < 8; ++l) lane[l] += h[j + l] * w[j + l];
  for (std::size_t l = 0; j + l < fused; ++l) lane[l] += h[j + l] * w[j + l];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/// Kernel over slots: raw_i = h_i·w, slot i's score before the output bias, summed by
/// `ncf_output_dot` (as `ncf_output_loss_fn` sums it).
template <class T>
struct ncf_output_score_fn {
  const T* h;
  std::size_t fused;
  const T* weight;
  T* raw;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    raw[i] = ncf_output_dot(h + i * fused, weight, fused);
  }
};

/// Kernel over slots, the output layer fused with a pointwise loss: slot i's score s_i = h_i·w +
/// output bias (h_i its row of the fused features, w the output weights, `ncf_output_dot`), its
/// weighted loss, raw_i = scale·w_i·dL/ds (0 for padding), and its row of dh =
/// raw_i·w, the gradient flowing back into the fused features.
template <class T>
struct ncf_output_loss_fn {
  const T* h;
  std::size_t fused;
  const T* weight;
  const T* output_bias;
  const float* labels;
  const float* weights;
  loss_kind loss;
  T scale;
  T* raw;
  T* dh;
  T* slot_loss;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    const T* hr = h + i * fused;
    T* dr = dh + i * fused;
    const T w = static_cast<T>(weights[i]);
    if (w == T(0)) {
      raw[i] = T(0);
      slot_loss[i] = T(0);
      for (std::size_t j = 0; j < fused; ++j) dr[j] = T(0);
      return;
    }
    T l, dl;
    pointwise_loss(loss, ncf_output_dot(hr, weight, fused) + *output_bias,
                   static_cast<T>(labels[i]), l, dl);
    slot_loss[i] = w * l;
    const T d = scale * w * dl;
    raw[i] = d;
    for (std::size_t j = 0; j < fused; ++j) dr[j] = d * weight[j];
  }
};

/// The output layer's weight and bias gradients over (chunk k of rows, column j ≤ fused): the
/// chunk's rows of raw_i·h_ij (column j < fused) or of raw_i (j = fused, the bias) summed in row
/// order into partial[k·(fused + 1) + j], for `ncf_column_sum_fn`.
template <class T>
struct ncf_output_sums_fn {
  const T* raw;
  const T* h;
  std::size_t fused;
  std::size_t n;
  std::size_t chunk;
  T* partial;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t cols = fused + 1;
    const std::size_t k = t / cols;
    const std::size_t j = t % cols;
    const std::size_t begin = k * chunk;
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    T s = T(0);
    for (std::size_t i = begin; i < end; ++i) s += j < fused ? raw[i] * h[i * fused + j] : raw[i];
    partial[k * cols + j] = s;
  }
  /// Chunk k's columns (host), each column's sum in the same order as `operator()`.
  void row(std::size_t k) const {
    constexpr std::size_t tile = 64;
    const std::size_t cols = fused + 1;
    const std::size_t begin = k * chunk;
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    for (std::size_t j0 = 0; j0 < cols; j0 += tile) {
      const std::size_t w = cols - j0 < tile ? cols - j0 : tile;
      // Of the tile's columns, the weights' (h's columns) and then, in the last tile, the bias.
      const std::size_t wh = j0 + w > fused ? fused - j0 : w;
      T s[tile] = {};
      for (std::size_t i = begin; i < end; ++i) {
        const T* hr = h + i * fused + j0;
        const T r = raw[i];
        for (std::size_t j = 0; j < wh; ++j) s[j] += r * hr[j];
        if (wh < w) s[wh] += r;
      }
      for (std::size_t j = 0; j < w; ++j) partial[k * cols + j0 + j] = s[j];
    }
  }
};

/// Kernel over the output layer's fused + 1 columns: the chunks' partial sums of column j, in
/// chunk order, added to the weight gradient (j < fused) or the bias gradient (j = fused).
template <class T>
struct ncf_output_column_sum_fn {
  const T* partial;
  std::size_t fused;
  std::size_t chunks;
  T* weight_grad;
  T* bias_grad;
  TUTTI_HOST_DEVICE void operator()(std::size_t j) const {
    T s = T(0);
    for (std::size_t k = 0; k < chunks; ++k) s += partial[k * (fused + 1) + j];
    (j < fused ? weight_grad[j] : *bias_grad) += s;
  }
};

/// Kernel over slots: out[i] += output bias (predict's epilogue).
template <class T>
struct ncf_add_bias_fn {
  T* out;
  const T* output_bias;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { out[i] += *output_bias; }
};

/// Backward epilogue of a dense layer, over (chunk k of rows, column j): the upstream gradient d
/// (row stride ldd) is masked in place by the ReLU (kept where the activation a > 0; no mask
/// when a is null, for the output layer), and the chunk's rows of column j are summed in row
/// order. With one chunk the sum is added to bias_grad[j] here; otherwise it goes to
/// partial[k·cols + j] for `ncf_column_sum_fn`.
template <class T>
struct ncf_relu_backward_fn {
  T* d;
  std::size_t ldd;
  const T* a;
  std::size_t lda;
  std::size_t cols;
  std::size_t n;
  std::size_t chunk;
  T* partial;
  T* bias_grad;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t k = t / cols;
    const std::size_t j = t % cols;
    const std::size_t begin = k * chunk;
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    T s = T(0);
    for (std::size_t i = begin; i < end; ++i) {
      T v = d[i * ldd + j];
      if (a != nullptr && !(a[i * lda + j] > T(0))) {
        v = T(0);
        d[i * ldd + j] = v;
      }
      s += v;
    }
    if (partial != nullptr)
      partial[k * cols + j] = s;
    else
      bias_grad[j] += s;
  }
  /// Chunk k's columns (host), a tile of columns at a time with their rows in order: each
  /// column's sum adds the same values in the same order as `operator()`.
  void row(std::size_t k) const {
    constexpr std::size_t tile = 64;
    const std::size_t begin = k * chunk;
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    for (std::size_t j0 = 0; j0 < cols; j0 += tile) {
      const std::size_t w = cols - j0 < tile ? cols - j0 : tile;
      T s[tile] = {};
      for (std::size_t i = begin; i < end; ++i) {
        T* dr = d + i * ldd + j0;
        if (a != nullptr) {
          const T* ar = a + i * lda + j0;
          for (std::size_t j = 0; j < w; ++j) dr[j] = ar[j] > T(0) ? dr[j] : T(0);
        }
        for (std::size_t j = 0; j < w; ++j) s[j] += dr[j];
      }
      for (std::size_t j = 0; j < w; ++j) {
        if (partial != nullptr)
          partial[k * cols + j0 + j] = s[j];
        else
          bias_grad[j0 + j] += s[j];
      }
    }
  }
};

/// Kernel over columns: bias_grad[j] += the chunks' partial sums of column j, in chunk order.
template <class T>
struct ncf_column_sum_fn {
  const T* partial;
  std::size_t cols;
  std::size_t chunks;
  T* bias_grad;
  TUTTI_HOST_DEVICE void operator()(std::size_t j) const {
    T s = T(0);
    for (std::size_t k = 0; k < chunks; ++k) s += partial[k * cols + j];
    bias_grad[j] += s;
  }
};

/// Kernel over (slot i, column c < gmf + mlp): slot i's gradient contributions to its user's and
/// its item's embedding rows, GMF columns first, then MLP columns, each with its L2 term. dh
/// holds ∂/∂(p ⊙ q) in its first gmf columns, dx0 ∂/∂(MLP input). Padding slots are skipped
/// (the row accumulators never read them).
template <class T>
struct ncf_contrib_fn {
  const T* params;
  const std::int32_t* users;
  const std::int32_t* items;
  const float* weights;
  ncf_offsets off;
  std::size_t gmf, mlp;
  const T* dh;
  std::size_t ldh;
  const T* dx0;
  T l2, scale;
  T* user_contrib;  // n × (gmf + mlp)
  T* item_contrib;  // n × (gmf + mlp)
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t e = gmf + mlp;
    const std::size_t i = t / e;
    const std::size_t c = t % e;
    const T w = static_cast<T>(weights[i]);
    if (w == T(0)) return;
    const auto u = static_cast<std::size_t>(users[i]);
    const auto it = static_cast<std::size_t>(items[i]);
    const T r = scale * w * T(2) * l2;
    if (c < gmf) {
      const T p = params[off.gmf_user + u * gmf + c];
      const T q = params[off.gmf_item + it * gmf + c];
      const T g = dh[i * ldh + c];
      user_contrib[i * e + c] = g * q + r * p;
      item_contrib[i * e + c] = g * p + r * q;
    } else {
      const std::size_t cc = c - gmf;
      const T p = params[off.mlp_user + u * mlp + cc];
      const T q = params[off.mlp_item + it * mlp + cc];
      user_contrib[i * e + c] = dx0[i * 2 * mlp + cc] + r * p;
      item_contrib[i * e + c] = dx0[i * 2 * mlp + mlp + cc] + r * q;
    }
  }
  /// Row i's columns (host).
  void row(std::size_t i) const {
    const T w = static_cast<T>(weights[i]);
    if (w == T(0)) return;
    const std::size_t e = gmf + mlp;
    const auto u = static_cast<std::size_t>(users[i]);
    const auto it = static_cast<std::size_t>(items[i]);
    const T r = scale * w * T(2) * l2;
    T* uc = user_contrib + i * e;
    T* ic = item_contrib + i * e;
    const T* pu = params + off.gmf_user + u * gmf;
    const T* qi = params + off.gmf_item + it * gmf;
    const T* dr = dh + i * ldh;
    for (std::size_t c = 0; c < gmf; ++c) {
      uc[c] = dr[c] * qi[c] + r * pu[c];
      ic[c] = dr[c] * pu[c] + r * qi[c];
    }
    const T* mu = params + off.mlp_user + u * mlp;
    const T* mi = params + off.mlp_item + it * mlp;
    const T* xr = dx0 + i * 2 * mlp;
    for (std::size_t c = 0; c < mlp; ++c) {
      uc[gmf + c] = xr[c] + r * mu[c];
      ic[gmf + c] = xr[mlp + c] + r * mi[c];
    }
  }
};

}  // namespace tutti::detail
