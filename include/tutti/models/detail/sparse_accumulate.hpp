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

/// Sort key of a weight-0 slot: above every valid id, so padding sorts behind all real slots
/// and the real slots keep the same sorted positions whether or not padding is present.
inline constexpr std::int32_t padding_key = std::numeric_limits<std::int32_t>::max();

/// Kernel: the keys to sort are the ids (padding_key for weight-0 slots), the values the slots.
struct init_row_sort_fn {
  const std::int32_t* ids;
  const float* weights;
  std::int32_t* keys;
  std::int32_t* order;
  std::int32_t n_rows;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const {
    const bool real = weights[i] != 0.f;
    assert((!real || (ids[i] >= 0 && ids[i] < n_rows)) && "tutti: id out of range in a batch");
    keys[i] = real ? ids[i] : padding_key;
    order[i] = static_cast<std::int32_t>(i);
  }
};

/// Where column c of a row's sum goes: columns [0, split) to `main` (row stride `main_stride`),
/// columns [split, cols) to `tail` (row stride `tail_stride`), so one pass over a grouping fills
/// two segments (an embedding table and its bias column) from one per-slot contribution.
///
/// With `slots_before` a row's sum goes to its slot instead of its row: the k-th distinct row
/// of the grouping, ascending, to place k (a compact gradient sized by the batch, not the
/// table). `slots_before[k]` is the number of distinct rows whose run starts before sorted
/// chunk k (one entry per chunk, then the total).
template <class T>
struct row_dest {
  T* main;
  std::size_t main_stride;
  std::size_t split;
  T* tail = nullptr;
  std::size_t tail_stride = 0;
  const std::int32_t* slots_before = nullptr;
  TUTTI_HOST_DEVICE T* at(std::int32_t row, std::size_t c) const {
    const auto r = static_cast<std::size_t>(row);
    return c < split ? main + r * main_stride + c : tail + r * tail_stride + (c - split);
  }
  /// Where the row whose run starts at sorted position j goes: `row`, or its slot (`slot`,
  /// counted by the caller) when the sums go to slots.
  TUTTI_HOST_DEVICE std::int32_t place(std::int32_t row, std::int32_t slot) const {
    return slots_before != nullptr ? slot : row;
  }
};

/// Kernel over (chunk k, column c) of the sorted positions: sums each run of equal keys inside
/// the chunk in slot order. A run wholly inside the chunk is added to its row here (it has no
/// other writer); a run crossing a chunk boundary leaves its pieces in `first_piece` (the
/// piece that continues a run from the previous chunk) and `last_piece` (the piece that starts
/// a run continuing into the next chunk) for `chain_pieces_fn`.
template <class T>
struct chunk_pieces_fn {
  const std::int32_t* keys;   // sorted keys
  const std::int32_t* order;  // slot index of each sorted position
  const T* contrib;           // contrib[slot * contrib_stride + c]
  std::size_t contrib_stride;
  std::size_t cols;
  std::size_t n;
  std::size_t chunk;
  row_dest<T> dest;
  T* first_piece;               // [chunk * cols + c]
  T* last_piece;                // [chunk * cols + c]
  std::size_t first_chunk = 0;  // thread t works on chunk first_chunk + t / cols
  std::int32_t row_lo = 0;      // only rows in [row_lo, row_hi) are summed
  std::int32_t row_hi = padding_key;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t k = first_chunk + t / cols;
    const std::size_t c = t % cols;
    const std::size_t begin = k * chunk;
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    std::size_t j = begin;
    // The slot of the run in progress (the one before the chunk's first start, then each start).
    std::int32_t slot = dest.slots_before != nullptr ? dest.slots_before[k] - 1 : 0;
    while (j < end) {
      const std::int32_t row = keys[j];
      if (row == padding_key || row >= row_hi) return;  // only later rows from here on
      const bool starts_before = j == begin && begin > 0 && keys[begin - 1] == row;
      if (!starts_before) ++slot;
      std::size_t e = j;
      if (row < row_lo) {
        while (e < end && keys[e] == row) ++e;
        j = e;
        continue;
      }
      T sum = T(0);
      for (; e < end && keys[e] == row; ++e)
        sum += contrib[static_cast<std::size_t>(order[e]) * contrib_stride + c];
      const bool continues_after = e == end && end < n && keys[end] == row;
      if (starts_before)
        first_piece[k * cols + c] = sum;
      else if (continues_after)
        last_piece[k * cols + c] = sum;
      else
        *dest.at(dest.place(row, slot), c) += sum;
      j = e;
    }
  }
};

/// Host kernel over chunks k: what `chunk_pieces_fn` computes for every column of chunk k, with
/// the columns as the inner loop (a tile of `tile` at a time), so one slot's contiguous
/// contribution is read once and the adds vectorise. Each column's sum still runs over the
/// run's slots in sorted order from zero, so every result is bitwise `chunk_pieces_fn`'s.
template <class T>
struct chunk_rows_fn {
  static constexpr std::size_t tile = 64;
  chunk_pieces_fn<T> f;
  unsigned char* nonfinite;  // [t]: 1 when a value chunk first_chunk + t wrote is not finite
  void operator()(std::size_t t) const {
    unsigned bad = 0;
    const std::size_t k = f.first_chunk + t;
    const std::size_t begin = k * f.chunk;
    const std::size_t end = begin + f.chunk < f.n ? begin + f.chunk : f.n;
    const bool to_slots = f.dest.slots_before != nullptr;
    for (std::size_t c0 = 0; c0 < f.cols; c0 += tile) {
      const std::size_t w = f.cols - c0 < tile ? f.cols - c0 : tile;
      std::size_t j = begin;
      std::int32_t slot = to_slots ? f.dest.slots_before[k] - 1 : 0;  // as chunk_pieces_fn
      while (j < end) {
        const std::int32_t row = f.keys[j];
        if (row == padding_key || row >= f.row_hi) break;  // only later rows from here on
        const bool starts_before = j == begin && begin > 0 && f.keys[begin - 1] == row;
        if (!starts_before) ++slot;
        std::size_t e = j;
        if (row < f.row_lo) {
          while (e < end && f.keys[e] == row) ++e;
          j = e;
          continue;
        }
        // The row `prefetch_ahead` sorted positions on is written soon: ask for it now (rows of a
        // large table are cache misses; slots are few and close together).
        if (j + prefetch_ahead < end) {
          const std::int32_t ahead = f.keys[j + prefetch_ahead];
          if (!to_slots && ahead != padding_key && ahead != row) {
            if (c0 < f.dest.split)
              prefetch_bytes(f.dest.at(ahead, c0), std::min(w, f.dest.split - c0) * sizeof(T),
                             true);
            if (c0 + w > f.dest.split && f.dest.tail != nullptr)  // the tail columns' row
              prefetch_bytes(f.dest.at(ahead, std::max(c0, f.dest.split)), sizeof(T), true, 1);
          }
          // The slot's contribution, written by whichever thread computed the slot.
          prefetch_bytes(
              f.contrib + static_cast<std::size_t>(f.order[j + prefetch_ahead]) * f.contrib_stride +
                  c0,
              w * sizeof(T));
        }
        T sum[tile];
        for (std::size_t c = 0; c < w; ++c) sum[c] = T(0);
        for (; e < end && f.keys[e] == row; ++e)
          add_into(sum, f.contrib + static_cast<std::size_t>(f.order[e]) * f.contrib_stride + c0,
                   w);
        const bool continues_after = e == end && end < f.n && f.keys[end] == row;
        if (starts_before || continues_after) {
          T* out = (starts_before ? f.first_piece : f.last_piece) + k * f.cols + c0;
          for (std::size_t c = 0; c < w; ++c) out[c] = sum[c];
        } else {
          const std::int32_t to = f.dest.place(row, slot);
          const std::size_t in_main = c0 < f.dest.split ? std::min(w, f.dest.split - c0) : 0;
          if (in_main > 0) bad |= add_into_checked(f.dest.at(to, c0), sum, in_main);
          if (in_main < w)
            bad |= add_into_checked(f.dest.at(to, c0 + in_main), sum + in_main, w - in_main);
        }
        j = e;
      }
    }
    nonfinite[t] = bad != 0 ? 1 : 0;
  }
};

/// Kernel over (chunk k, column c): when chunk k holds the first piece of a run that crosses
/// into later chunks, adds that piece and the run's pieces in the following chunks, in chunk
/// order, to the run's row.
template <class T>
struct chain_pieces_fn {
  const std::int32_t* keys;
  std::size_t cols;
  std::size_t n;
  std::size_t chunk;
  const T* first_piece;
  const T* last_piece;
  row_dest<T> dest;
  std::size_t first_chunk = 0;  // thread t works on chunk first_chunk + t / cols
  std::int32_t row_lo = 0;      // only rows in [row_lo, row_hi) are chained
  std::int32_t row_hi = padding_key;
  /// The row whose run starts in chunk k and crosses into chunk k + 1 (the row this kernel
  /// writes for chunk k), or -1 when there is none in [row_lo, row_hi).
  TUTTI_HOST_DEVICE std::int32_t chained_row(std::size_t k) const {
    const std::size_t begin = k * chunk;
    const std::size_t end = begin + chunk < n ? begin + chunk : n;
    if (end >= n) return -1;
    const std::int32_t row = keys[end - 1];
    if (row == padding_key || keys[end] != row || row < row_lo || row >= row_hi) return -1;
    if (begin > 0 && keys[begin - 1] == row) return -1;  // the run started in an earlier chunk
    return row;
  }
  /// Where chunk k's chained row goes: the row, or its slot (the last run started before chunk
  /// k + 1).
  TUTTI_HOST_DEVICE std::int32_t chained_place(std::size_t k, std::int32_t row) const {
    return dest.place(row, dest.slots_before != nullptr ? dest.slots_before[k + 1] - 1 : 0);
  }
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t k = first_chunk + t / cols;
    const std::size_t c = t % cols;
    const std::int32_t row = chained_row(k);
    if (row < 0) return;
    T total = last_piece[k * cols + c];
    for (std::size_t k2 = k + 1;; ++k2) {
      total += first_piece[k2 * cols + c];
      const std::size_t end2 = (k2 + 1) * chunk;
      if (end2 >= n || keys[end2] != row) break;
    }
    *dest.at(chained_place(k, row), c) += total;
  }
};

/// Kernel: out[b] = in[p(b*block)] + ... + in[p(min(n, (b+1)*block) - 1)], left to right,
/// where p is `perm` or the identity when `perm` is null.
template <class T>
struct block_sum_fn {
  const T* in;
  const std::int32_t* perm;
  std::size_t n;
  std::size_t block;
  T* out;
  TUTTI_HOST_DEVICE void operator()(std::size_t b) const {
    const std::size_t begin = b * block;
    const std::size_t end = begin + block < n ? begin + block : n;
    T s = T(0);
    if (perm != nullptr)
      for (std::size_t k = begin; k < end; ++k) s += in[static_cast<std::size_t>(perm[k])];
    else
      for (std::size_t k = begin; k < end; ++k) s += in[k];
    out[b] = s;
  }
};

/// Kernel with one thread: *dest += in[p(0)] + ... + in[p(n-1)], left to right.
template <class T>
struct serial_sum_add_fn {
  const T* in;
  const std::int32_t* perm;
  std::size_t n;
  T* dest;
  TUTTI_HOST_DEVICE void operator()(std::size_t) const {
    T s = T(0);
    for (std::size_t k = 0; k < n; ++k)
      s += in[perm != nullptr ? static_cast<std::size_t>(perm[k]) : k];
    *dest += s;
  }
};

/// Kernel over sorted positions j: 1 where a run of real keys starts, else 0.
struct row_head_fn {
  const std::int32_t* keys;
  std::int32_t* head;
  TUTTI_HOST_DEVICE void operator()(std::size_t j) const {
    const std::int32_t k = keys[j];
    head[j] = k != padding_key && (j == 0 || keys[j - 1] != k) ? 1 : 0;
  }
};

/// Kernel over sorted positions j: writes the key of each run's start to its place among the
/// runs (`seen[j]` = runs started at or before j), and the number of runs once.
struct row_compact_fn {
  const std::int32_t* keys;
  const std::int32_t* head;
  const std::int32_t* seen;
  std::size_t n;
  std::int32_t* rows;
  std::int32_t* count;
  TUTTI_HOST_DEVICE void operator()(std::size_t j) const {
    if (head[j] != 0) rows[seen[j] - 1] = keys[j];
    if (j + 1 == n) *count = seen[j];
  }
};

/// Writes the distinct real keys of the sorted `keys[0, n)` (n >= 1), ascending, to `rows` and
/// their number to `*count` (memory of `space`; `head` is scratch of 2n): a pass marking where
/// each run of keys starts, a scan, and a pass writing the starts. Nothing is read back to the
/// host.
template <class Space>
void run_starts_on_space(const Space& space, const std::int32_t* keys, std::size_t n,
                         std::int32_t* head, std::int32_t* rows, std::int32_t* count) {
  parallel_for(space, n, row_head_fn{keys, head});
  thrust::inclusive_scan(space.policy(), head, head + n, head + n);
  parallel_for(space, n, row_compact_fn{keys, head, head + n, n, rows, count});
}

/// Sum of an array in a fixed association (blocks of `block`, then blocks of block sums, then
/// one serial pass), so the result depends only on the values, never on the thread count or
/// the machine. Runs on the space without reading anything back to the host.
template <class T, execution_space Space>
class ordered_sum {
 public:
  /// Values summed serially per block: large enough to amortise a launch per level, small
  /// enough that the serial tail of one thread stays short. A GPU needs many more, shorter
  /// threads than a CPU to hide memory latency.
  static constexpr std::size_t block = Space::host_accessible ? 256 : 32;

  ordered_sum() = default;
  explicit ordered_sum(const Space& space) : m_partials(space) {}

  /// Adds the sum of `x[perm[k]]` over k in [0, n) (of `x[k]` when `perm` is null) to `*dest`;
  /// all pointers are memory of `space`.
  void add_to(const Space& space, const T* x, const std::int32_t* perm, std::size_t n, T* dest) {
    if (n == 0) return;
    std::size_t need = 0;
    for (std::size_t m = n; m > block; m = (m + block - 1) / block) need += (m + block - 1) / block;
    T* partials = m_partials.reserve(need);
    const T* in = x;
    std::size_t m = n;
    while (m > block) {
      const std::size_t nb = (m + block - 1) / block;
      parallel_for(space, nb, block_sum_fn<T>{in, perm, m, block, partials});
      in = partials;
      perm = nullptr;  // later levels read the partials in place
      partials += nb;
      m = nb;
    }
    parallel_for(space, 1, serial_sum_add_fn<T>{in, perm, m, dest});
  }

 private:
  scratch_array<T, Space> m_partials;
};

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
