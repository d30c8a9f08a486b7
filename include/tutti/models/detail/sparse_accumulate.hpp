// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/sparse_accumulate.hpp
/// @brief Deterministic, atomic-free accumulation of per-slot gradients into table rows, and
/// fixed-order sums; shared by every model in tutti::models.
///
/// A batch may name the same user or item many times. Scatter-adding with atomics would make
/// the floating-point summation order depend on thread scheduling, so two runs (or one run on 1
/// and on 8 threads) would disagree in the last bits and replicas of a data-parallel group
/// would drift apart. Instead each slot writes its contribution to scratch,
/// slots are stably sorted by row id, and one thread per (row, column) sums that row's
/// contributions in slot order. Every result is a function of the batch alone.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/config.hpp>
#include <tutti/error.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/traits.hpp>

#include <thrust/sort.h>

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

namespace tutti::detail {

/// Scratch memory of a space that only grows. Copying yields an empty scratch on the same
/// space, so a model holding scratch stays copyable (each replica gets its own).
template <class T, execution_space Space>
class scratch_array {
 public:
  scratch_array() = default;
  explicit scratch_array(const Space& space) : m_buf(0, space) {}
  scratch_array(const scratch_array& o) : m_buf(0, o.m_buf.space()) {}
  scratch_array& operator=(const scratch_array& o) {
    if (this != &o) m_buf = buffer<T, Space>(0, o.m_buf.space());
    return *this;
  }
  scratch_array(scratch_array&&) noexcept = default;
  scratch_array& operator=(scratch_array&&) noexcept = default;
  ~scratch_array() = default;

  /// The memory (nullptr before the first `reserve`).
  T* data() noexcept { return m_buf.data(); }
  /// The memory (nullptr before the first `reserve`).
  const T* data() const noexcept { return m_buf.data(); }

  /// Returns room for at least `n` elements; contents are unspecified after a growth.
  T* reserve(std::size_t n) {
    // Grow only: reallocating on a device space may synchronise, so steady state must not.
    if (m_buf.size() < n) m_buf.resize_discard(n);
    return m_buf.data();
  }

 private:
  buffer<T, Space> m_buf;
};

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
  const T sigmoid = s >= T(0) ? T(1) / (T(1) + e) : e / (T(1) + e);
  slope = sigmoid - y;
}

/// Kernel: the keys to sort are the ids, the values the slot indices.
struct init_row_sort_fn {
  const std::int32_t* ids;
  std::int32_t* keys;
  std::int32_t* order;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    keys[i] = ids[i];
    order[i] = static_cast<std::int32_t>(i);
  }
};

/// Kernel over (sorted position j, column c): the first position of each run of equal keys
/// sums column c of the run's contributions in slot order and adds it to the row of `dest`.
/// Weight-0 slots are skipped, so padding neither changes a sum nor touches a row.
template <class T>
struct row_segment_sum_fn {
  const std::int32_t* keys;   // sorted ids
  const std::int32_t* order;  // slot index of each sorted position
  const float* weights;
  const T* contrib;  // contrib[slot * contrib_stride + c]
  std::size_t contrib_stride;
  std::size_t cols;
  std::size_t n;
  T* dest;  // dest[row * dest_stride + c]
  std::size_t dest_stride;
  std::int32_t n_rows;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t j = t / cols;
    const std::size_t c = t % cols;
    const std::int32_t row = keys[j];
    if (j > 0 && keys[j - 1] == row) return;
    T sum = T(0);
    bool any = false;
    for (std::size_t k = j; k < n && keys[k] == row; ++k) {
      const std::size_t slot = static_cast<std::size_t>(order[k]);
      if (weights[slot] == 0.f) continue;
      sum += contrib[slot * contrib_stride + c];
      any = true;
    }
    if (!any) return;
    assert(row >= 0 && row < n_rows && "tutti: id out of range in a batch");
    dest[static_cast<std::size_t>(row) * dest_stride + c] += sum;
  }
};

/// Groups the slots of a batch by row id (one stable sort), then adds per-slot contributions
/// into the rows of a table, each row summed by one thread in slot order.
template <execution_space Space>
class row_grouping {
 public:
  row_grouping() = default;
  explicit row_grouping(const Space& space) : m_keys(space), m_order(space) {}
  // A copy starts with empty scratch and no grouping of its own.
  row_grouping(const row_grouping& o) : m_keys(o.m_keys), m_order(o.m_order) {}
  row_grouping& operator=(const row_grouping& o) {
    if (this != &o) {
      m_keys = o.m_keys;
      m_order = o.m_order;
      m_n = 0;
    }
    return *this;
  }
  row_grouping(row_grouping&&) noexcept = default;
  row_grouping& operator=(row_grouping&&) noexcept = default;
  ~row_grouping() = default;

  /// Sorts slots by `ids[0..n)` (memory of `space`); a later `scatter_add` uses this grouping.
  void group(const Space& space, const std::int32_t* ids, std::size_t n) {
    m_n = n;
    if (n == 0) return;
    std::int32_t* keys = m_keys.reserve(n);
    std::int32_t* order = m_order.reserve(n);
    parallel_for(space, n, init_row_sort_fn{ids, keys, order});
    // Stable, so equal ids keep slot order; a stable sort's output is unique, hence the same
    // on every thread count and backend.
    thrust::stable_sort_by_key(space.policy(), keys, keys + n, order);
  }

  /// For every row r of the last grouping and every c < cols, adds the sum over the row's
  /// slots s with weights[s] != 0 of contrib[s*contrib_stride + c] to dest[r*dest_stride + c].
  template <class T>
  void scatter_add(const Space& space, const T* contrib, std::size_t contrib_stride,
                   std::size_t cols, const float* weights, T* dest, std::size_t dest_stride,
                   std::int32_t n_rows) const {
    if (m_n == 0 || cols == 0) return;
    parallel_for(space, m_n * cols,
                 row_segment_sum_fn<T>{m_keys.data(), m_order.data(), weights, contrib,
                                       contrib_stride, cols, m_n, dest, dest_stride, n_rows});
  }

 private:
  scratch_array<std::int32_t, Space> m_keys;
  scratch_array<std::int32_t, Space> m_order;
  std::size_t m_n = 0;
};

/// Kernel: out[b] = in[b*block] + ... + in[min(n, (b+1)*block) - 1], left to right.
template <class T>
struct block_sum_fn {
  const T* in;
  std::size_t n;
  std::size_t block;
  T* out;
  TUTTI_HOST_DEVICE void operator()(std::size_t b) const {
    const std::size_t begin = b * block;
    const std::size_t end = begin + block < n ? begin + block : n;
    T s = T(0);
    for (std::size_t k = begin; k < end; ++k) s += in[k];
    out[b] = s;
  }
};

/// Kernel with one thread: *dest += in[0] + ... + in[n-1], left to right.
template <class T>
struct serial_sum_add_fn {
  const T* in;
  std::size_t n;
  T* dest;
  TUTTI_HOST_DEVICE void operator()(std::size_t) const {
    T s = T(0);
    for (std::size_t k = 0; k < n; ++k) s += in[k];
    *dest += s;
  }
};

/// Sum of an array in a fixed association (blocks of `block`, then blocks of block sums, then
/// one serial pass), so the result depends only on the values, never on the thread count.
/// Runs on the space without reading anything back to the host.
template <class T, execution_space Space>
class ordered_sum {
 public:
  /// Values summed serially per block: large enough to amortise a launch per level, small
  /// enough that the serial tail of one thread stays short.
  static constexpr std::size_t block = 256;

  ordered_sum() = default;
  explicit ordered_sum(const Space& space) : m_partials(space) {}

  /// Adds the sum of `x[0..n)` (memory of `space`) to `*dest` (memory of `space`).
  void add_to(const Space& space, const T* x, std::size_t n, T* dest) {
    if (n == 0) return;
    std::size_t need = 0;
    for (std::size_t m = n; m > block; m = (m + block - 1) / block) need += (m + block - 1) / block;
    T* partials = m_partials.reserve(need);
    const T* in = x;
    std::size_t m = n;
    while (m > block) {
      const std::size_t nb = (m + block - 1) / block;
      parallel_for(space, nb, block_sum_fn<T>{in, m, block, partials});
      in = partials;
      partials += nb;
      m = nb;
    }
    parallel_for(space, 1, serial_sum_add_fn<T>{in, m, dest});
  }

 private:
  scratch_array<T, Space> m_partials;
};

/// Checks the spans handed to a model's `loss_and_gradient` against its arena size.
inline void check_loss_and_gradient_args(const char* fn, std::size_t total, std::size_t params,
                                         std::size_t grads, const batch_view& batch) {
  TUTTI_EXPECTS(params == total, fn,
                "params has " + std::to_string(params) +
                    " values; expected layout().total() = " + std::to_string(total));
  TUTTI_EXPECTS(grads == total, fn,
                "grads has " + std::to_string(grads) +
                    " values; expected layout().total() = " + std::to_string(total));
  const std::size_t n = batch.users.size();
  TUTTI_EXPECTS(
      batch.items.size() == n && batch.labels.size() == n && batch.weights.size() == n, fn,
      "batch spans have sizes users " + std::to_string(n) + ", items " +
          std::to_string(batch.items.size()) + ", labels " + std::to_string(batch.labels.size()) +
          ", weights " + std::to_string(batch.weights.size()) + "; expected equal sizes");
  TUTTI_EXPECTS(n <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), fn,
                "batch has " + std::to_string(n) + " slots; expected at most 2^31 - 1");
}

/// Checks the spans handed to a model's `predict`.
inline void check_predict_args(const char* fn, std::size_t total, std::size_t params,
                               std::size_t users, std::size_t items, std::size_t out) {
  TUTTI_EXPECTS(params == total, fn,
                "params has " + std::to_string(params) +
                    " values; expected layout().total() = " + std::to_string(total));
  TUTTI_EXPECTS(items == users && out == users, fn,
                "users has " + std::to_string(users) + " ids, items " + std::to_string(items) +
                    ", out " + std::to_string(out) + "; expected equal sizes");
}

}  // namespace tutti::detail
