// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/row_sums.hpp
/// @brief The kernels of the models' deterministic accumulation
/// (models/detail/sparse_accumulate.hpp): the sort keys of a batch's slots, the chunked sums of
/// each row's run of slots into its row or its slot, the chains of runs that cross chunks, the run
/// starts of a sorted grouping, and the fixed-order sum of an array; with the scratch memory they
/// work in.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/finite.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/detail/prefetch.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>
#include <tutti/space/traits.hpp>

#include <thrust/scan.h>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace tutti::detail {
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

}  // namespace tutti::detail
