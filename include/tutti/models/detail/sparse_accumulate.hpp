// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/sparse_accumulate.hpp
/// @brief Deterministic, atomic-free accumulation of per-slot gradients into table rows, and
/// fixed-order sums; shared by every model in tutti::models.
///
/// A batch may name the same user or item many times. Scatter-adding with atomics would make
/// the floating-point summation order depend on thread scheduling, so two runs (or one run on 1
/// and on 8 threads) would disagree in the last bits and replicas of a data-parallel group
/// would drift apart. Instead each slot writes its contribution to scratch, slots are stably
/// sorted by row id, and each row's contributions are summed in slot order with a fixed
/// association. Every result is a function of the batch alone.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/config.hpp>
#include <tutti/detail/finite.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/error.hpp>
#include <tutti/gradient_ready.hpp>
#include <tutti/models/detail/row_sort.hpp>
#include <tutti/models/detail/row_sums.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/traits.hpp>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <algorithm>

#include <cassert>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace tutti::detail {

/// Groups the slots of a batch by row id with one stable sort, then adds per-slot
/// contributions into the rows of a table and sums per-slot values, all in an order fixed by
/// the batch alone. Weight-0 slots sort behind every real slot and are never read, so padding
/// changes no bit of any result.
///
/// A row's sum is split into chunks of `chunk` sorted positions: each chunk sums its pieces in
/// slot order, and a run crossing chunks is then chained chunk by chunk, so a hot row (one
/// item in a third of the batch) costs chunk + run/chunk serial steps, not run.
template <class T, execution_space Space>
class sparse_accumulator {
 public:
  /// Sorted positions one thread sums serially before handing over to the chain (shorter on a
  /// GPU, where a batch must spread over hundreds of thousands of threads).
  static constexpr std::size_t chunk = Space::host_accessible ? 256 : 32;

  sparse_accumulator() = default;
  explicit sparse_accumulator(const Space& space)
      : m_keys(space),
        m_order(space),
        m_keys_tmp(space),
        m_order_tmp(space),
        m_head(space),
        m_first(space),
        m_last(space),
        m_sum(space) {}
  // A copy starts with empty scratch and no grouping of its own.
  sparse_accumulator(const sparse_accumulator& o)
      : m_keys(o.m_keys),
        m_order(o.m_order),
        m_keys_tmp(o.m_keys_tmp),
        m_order_tmp(o.m_order_tmp),
        m_head(o.m_head),
        m_first(o.m_first),
        m_last(o.m_last),
        m_sum(o.m_sum) {}
  sparse_accumulator& operator=(const sparse_accumulator& o) {
    if (this != &o) {
      m_keys = o.m_keys;
      m_order = o.m_order;
      m_keys_tmp = o.m_keys_tmp;
      m_order_tmp = o.m_order_tmp;
      m_head = o.m_head;
      m_first = o.m_first;
      m_last = o.m_last;
      m_sum = o.m_sum;
      m_n = 0;
      m_written_finite = true;
    }
    return *this;
  }
  sparse_accumulator(sparse_accumulator&&) noexcept = default;
  sparse_accumulator& operator=(sparse_accumulator&&) noexcept = default;
  ~sparse_accumulator() = default;

  /// Groups slots [0, n) by `ids` (slots whose `weights` are 0 drop out); ids of real slots
  /// must lie in [0, n_rows) (debug assertion). All pointers are memory of `space`.
  void group(const Space& space, const std::int32_t* ids, const float* weights, std::size_t n,
             std::int32_t n_rows) {
    m_n = n;
    m_written_finite = true;
    if (n == 0) return;
    std::int32_t* keys = m_keys.reserve(n);
    std::int32_t* order = m_order.reserve(n);
    if constexpr (Space::host_accessible) {
      // One serial radix sort from the ids: the same output (a stable sort's is unique).
      radix_group_rows(ids, weights, n, n_rows, padding_key, keys, order, m_keys_tmp.reserve(n),
                       m_order_tmp.reserve(n), m_count);
      return;
    }
    parallel_for(space, n, init_row_sort_fn{ids, weights, keys, order, n_rows});
    // Stable, so equal ids keep slot order; a stable sort's output is unique, hence the same
    // on every thread count and backend.
    thrust::stable_sort_by_key(space.policy(), keys, keys + n, order);
  }

  /// `a.group(space, a_ids, weights, n, a_rows)` and `b.group(space, b_ids, weights, n, b_rows)`
  /// (a model's users and items): on a host space the two serial sorts run side by side, one
  /// per thread of one parallel region, once the batch is large enough to pay for it.
  static void group_two(const Space& space, sparse_accumulator& a, const std::int32_t* a_ids,
                        std::int32_t a_rows, sparse_accumulator& b, const std::int32_t* b_ids,
                        std::int32_t b_rows, const float* weights, std::size_t n) {
    if constexpr (Space::host_accessible && requires { Space::serial_below; }) {
      if (n >= Space::serial_below) {
        thrust::for_each_n(space.policy(), thrust::counting_iterator<int>(0), 2,
                           group_one_fn{space, &a, a_ids, a_rows, &b, b_ids, b_rows, weights, n});
        return;
      }
    }
    a.group(space, a_ids, weights, n, a_rows);
    b.group(space, b_ids, weights, n, b_rows);
  }

  /// For every row r of the last grouping and every c < cols, adds the sum over the row's real
  /// slots s of contrib[s*contrib_stride + c] to dest[r*dest_stride + c].
  void scatter_add(const Space& space, const T* contrib, std::size_t contrib_stride,
                   std::size_t cols, T* dest, std::size_t dest_stride) {
    scatter_add_split(space, contrib, contrib_stride, cols, dest, dest_stride, cols, nullptr, 0);
  }

  /// `scatter_add` of `cols` columns in one pass, columns [0, split) into `dest` (row stride
  /// `dest_stride`) and columns [split, cols) into `tail` (row stride `tail_stride`): every sum
  /// is bitwise what two `scatter_add` calls give, for half the passes over the grouping.
  void scatter_add_split(const Space& space, const T* contrib, std::size_t contrib_stride,
                         std::size_t cols, T* dest, std::size_t dest_stride, std::size_t split,
                         T* tail, std::size_t tail_stride) {
    if (m_n == 0 || cols == 0) return;
    scatter_chunks(space, contrib, contrib_stride, cols,
                   row_dest<T>{dest, dest_stride, split, tail, tail_stride}, 0,
                   (m_n + chunk - 1) / chunk, 0, padding_key);
  }

  /// `scatter_add_split` into slots instead of rows: the k-th distinct row of the last grouping,
  /// ascending (the k-th id `rows` lists), to row k of `dest` and of `tail`, so a gradient sized
  /// by the batch holds what a table-sized one would (every sum bitwise the same). Returns the
  /// number of slots written. Host-accessible spaces.
  std::size_t scatter_add_split_to_slots(const Space& space, const T* contrib,
                                         std::size_t contrib_stride, std::size_t cols, T* dest,
                                         std::size_t dest_stride, std::size_t split, T* tail,
                                         std::size_t tail_stride) requires(Space::host_accessible) {
    if (m_n == 0) return 0;
    const std::size_t chunks = (m_n + chunk - 1) / chunk;
    number_slots(chunks);
    if (cols > 0)
      scatter_chunks(
          space, contrib, contrib_stride, cols,
          row_dest<T>{dest, dest_stride, split, tail, tail_stride, m_slots_before.data()}, 0,
          chunks, 0, padding_key);
    return static_cast<std::size_t>(m_slots_before[chunks]);
  }

  /// `scatter_add` for the rows in [row_lo, row_hi) only, with the same chunks (so every row's
  /// sum is bitwise what `scatter_add` gives it). Host-accessible spaces only: the rows' sorted
  /// positions are found by a binary search over the keys.
  void scatter_add_rows(const Space& space, const T* contrib, std::size_t contrib_stride,
                        std::size_t cols, T* dest, std::size_t dest_stride, std::int32_t row_lo,
                        std::int32_t row_hi) requires(Space::host_accessible) {
    if (m_n == 0 || cols == 0 || row_lo >= row_hi) return;
    const std::int32_t* keys = m_keys.data();
    const auto p0 = static_cast<std::size_t>(std::lower_bound(keys, keys + m_n, row_lo) - keys);
    const auto p1 = static_cast<std::size_t>(std::lower_bound(keys, keys + m_n, row_hi) - keys);
    if (p0 == p1) return;
    scatter_chunks(space, contrib, contrib_stride, cols, row_dest<T>{dest, dest_stride, cols},
                   p0 / chunk, (p1 + chunk - 1) / chunk, row_lo, row_hi);
  }

  /// `scatter_add` into the `n_rows` × `cols` table at arena offset `offset` of `grads`, which
  /// then reports the table final through `ready`: on a host-accessible space in pieces of
  /// about `piece` values, last rows first (so a trainer can reduce the end of the table while
  /// the start is summed); elsewhere whole, after the sums.
  void scatter_add_ready(const Space& space, const T* contrib, std::size_t contrib_stride,
                         std::size_t cols, T* grads, std::size_t offset, std::int32_t n_rows,
                         const gradient_ready& ready, std::size_t piece = std::size_t{1} << 16) {
    T* dest = grads + offset;
    if constexpr (Space::host_accessible) {
      if (ready) {
        const auto rows = static_cast<std::int32_t>(
            std::min<std::size_t>(std::max<std::size_t>(1, piece / std::max<std::size_t>(1, cols)),
                                  static_cast<std::size_t>(n_rows)));
        for (std::int32_t hi = n_rows; hi > 0;) {
          const std::int32_t lo = hi > rows ? hi - rows : 0;
          scatter_add_rows(space, contrib, contrib_stride, cols, dest, cols, lo, hi);
          ready(offset + static_cast<std::size_t>(lo) * cols,
                static_cast<std::size_t>(hi - lo) * cols);
          hi = lo;
        }
        return;
      }
    }
    scatter_add(space, contrib, contrib_stride, cols, dest, cols);
    ready(offset, static_cast<std::size_t>(n_rows) * cols);
  }

  /// Adds the sum of values[s] over the slots s of the last grouping to `*dest`, in sorted
  /// order; weight-0 slots come last, so their values must be 0 (the models write 0).
  void add_sum(const Space& space, const T* values, T* dest) {
    m_sum.add_to(space, values, m_order.data(), m_n, dest);
  }

  /// Host: true when every value the scatters since the last `group` wrote (a row's sum added
  /// to its destination) is finite, checked as each is written, so a caller need not read the
  /// rows again; false when one may not be. Weight-0 slots are never read.
  bool written_finite() const noexcept requires(Space::host_accessible) { return m_written_finite; }

  /// Writes the distinct row ids of the last grouping's real slots, ascending, to `rows` and
  /// their number to `*count` (memory of `space`, room for the batch's slots), as
  /// `run_starts_on_space` finds them. Nothing is read back to the host, so a device step does
  /// not wait for it.
  void rows_on_space(const Space& space, std::int32_t* rows, std::int32_t* count) const {
    if (m_n == 0) {
      fill(space, std::span<std::int32_t>(count, 1), 0);
      return;
    }
    run_starts_on_space(space, m_keys.data(), m_n, m_head.reserve(2 * m_n), rows, count);
  }

  /// Writes into `out` (host memory, replaced) the distinct row ids of the last grouping's real
  /// slots, ascending: the rows `scatter_add` wrote to. The sorted keys already hold them, so
  /// this is one pass over the batch; on a space that is not host accessible the keys are
  /// copied to the host first, which synchronises.
  void rows([[maybe_unused]] const Space& space, std::vector<std::int32_t>& out) const {
    out.clear();
    if (m_n == 0) return;
    const std::int32_t* keys = m_keys.data();
    std::vector<std::int32_t> staged;
    if constexpr (!Space::host_accessible) {
      staged.resize(m_n);
      space.copy_to_host(staged.data(), keys, m_n * sizeof(std::int32_t));
      keys = staged.data();
    }
    for (std::size_t j = 0; j < m_n && keys[j] != padding_key; ++j)
      if (out.empty() || out.back() != keys[j]) out.push_back(keys[j]);
  }

 private:
  struct group_one_fn {
    const Space& space;
    sparse_accumulator* a;
    const std::int32_t* a_ids;
    std::int32_t a_rows;
    sparse_accumulator* b;
    const std::int32_t* b_ids;
    std::int32_t b_rows;
    const float* weights;
    std::size_t n;
    void operator()(int which) const {
      if (which == 0)
        a->group(space, a_ids, weights, n, a_rows);
      else
        b->group(space, b_ids, weights, n, b_rows);
    }
  };

  void scatter_chunks(const Space& space, const T* contrib, std::size_t contrib_stride,
                      std::size_t cols, row_dest<T> dest, std::size_t k0, std::size_t k1,
                      std::int32_t row_lo, std::int32_t row_hi) {
    const std::size_t chunks = (m_n + chunk - 1) / chunk;
    T* first = m_first.reserve(chunks * cols);
    T* last = m_last.reserve(chunks * cols);
    const chunk_pieces_fn<T> pieces{
        m_keys.data(), m_order.data(), contrib, contrib_stride, cols,  m_n, chunk, dest,
        first,         last,           k0,      row_lo,         row_hi};
    if constexpr (Space::host_accessible) {
      // A thread per chunk, all columns: the work of a chunk is chunk x cols adds.
      m_chunk_nonfinite.resize(k1 - k0);
      const chunk_rows_fn<T> rows{pieces, m_chunk_nonfinite.data()};
      if ((k1 - k0) * chunk * cols >= Space::serial_below * 16 && k1 - k0 > 1)
        thrust::for_each_n(space.policy(), thrust::counting_iterator<std::size_t>(0), k1 - k0,
                           rows);
      else
        for (std::size_t t = 0; t < k1 - k0; ++t) rows(t);
      for (unsigned char bad : m_chunk_nonfinite)
        if (bad != 0) m_written_finite = false;
    } else {
      parallel_for(space, (k1 - k0) * cols, pieces);
    }
    if (chunks > 1) {
      const chain_pieces_fn<T> chain{m_keys.data(), cols, m_n, chunk,  first,
                                     last,          dest, k0,  row_lo, row_hi};
      parallel_for(space, (k1 - k0) * cols, chain);
      if constexpr (Space::host_accessible) check_chained(chain, k0, k1);
    }
  }

  /// Host: `m_slots_before[k]`, the distinct rows whose run starts before sorted chunk k, for
  /// every chunk, then their total (one pass over the sorted keys).
  void number_slots(std::size_t chunks) requires(Space::host_accessible) {
    m_slots_before.resize(chunks + 1);
    const std::int32_t* keys = m_keys.data();
    std::int32_t seen = 0;
    for (std::size_t k = 0; k < chunks; ++k) {
      m_slots_before[k] = seen;
      const std::size_t end = std::min(m_n, (k + 1) * chunk);
      for (std::size_t j = k * chunk; j < end && keys[j] != padding_key; ++j)
        seen += j == 0 || keys[j - 1] != keys[j] ? 1 : 0;
    }
    m_slots_before[chunks] = seen;
  }

  /// Host: clears `m_written_finite` when a row that `chain` wrote (a run crossing from chunk k
  /// into the next, k in [k0, k1)) holds a value that is not finite.
  void check_chained(const chain_pieces_fn<T>& chain, std::size_t k0, std::size_t k1) {
    for (std::size_t k = k0; k < k1; ++k) {
      const std::int32_t row = chain.chained_row(k);
      if (row < 0) continue;
      const std::int32_t to = chain.chained_place(k, row);
      for (std::size_t c = 0; c < chain.cols; ++c)
        if (!finite_value(static_cast<float>(*chain.dest.at(to, c)))) m_written_finite = false;
    }
  }

  scratch_array<std::int32_t, Space> m_keys;
  scratch_array<std::int32_t, Space> m_order;
  scratch_array<std::int32_t, Space> m_keys_tmp;      // the host's radix sort
  scratch_array<std::int32_t, Space> m_order_tmp;     // the host's radix sort
  std::vector<std::uint32_t> m_count;                 // the host's radix sort
  mutable scratch_array<std::int32_t, Space> m_head;  // rows_on_space: run starts, their scan
  scratch_array<T, Space> m_first;
  scratch_array<T, Space> m_last;
  ordered_sum<T, Space> m_sum;
  std::size_t m_n = 0;
  std::vector<unsigned char> m_chunk_nonfinite;  // the host's scatter: a flag per chunk
  std::vector<std::int32_t> m_slots_before;      // the host's scatter to slots (number_slots)
  bool m_written_finite = true;                  // see `written_finite`
};

/// Checks the spans handed to a model's `loss_and_gradient` against its arena size.
/// `grad_total` is the gradient arena's size where it differs from the parameters' (a gradient
/// in slots, `tutti::model_writes_gradient_slots`).
inline void check_loss_and_gradient_args(const char* fn, std::size_t total, std::size_t params,
                                         std::size_t grads, const batch_view& batch,
                                         std::size_t grad_total = 0) {
  TUTTI_EXPECTS(params == total, fn,
                "params has " + std::to_string(params) +
                    " values; expected layout().total() = " + std::to_string(total));
  if (grad_total == 0) grad_total = total;
  TUTTI_EXPECTS(grads == grad_total, fn,
                "grads has " + std::to_string(grads) + " values; expected " +
                    (grad_total == total ? std::string("layout().total() = ")
                                         : std::string("the gradient slots' total = ")) +
                    std::to_string(grad_total));
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
