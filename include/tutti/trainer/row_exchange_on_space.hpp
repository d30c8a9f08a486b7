// SPDX-License-Identifier: Apache-2.0
/// @file trainer/row_exchange_on_space.hpp
/// @brief The row-sparse step on several device ranks: each rank's touched rows and their
/// gradient rows travel by all_gather (never the dense table); every rank then forms the union
/// of the rows and each union row's mean over the ranks, summed in rank order, so every replica
/// gets the same bits. Kernels only: no count is read back to the host.
#pragma once

#include <tutti/concepts/reducer.hpp>
#include <tutti/config.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/algorithms.hpp>
#include <tutti/space/buffer.hpp>

#include <thrust/sort.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tutti::detail {

/// Kernel over t < block × cols: this rank's k-th touched row id (padding past the count) and
/// its gradient row (zeros past the count), packed for the gather.
struct pack_rows_fn {
  const float* g;  // the segment's first gradient value
  std::size_t cols;
  const std::int32_t* rows;
  const std::int32_t* count;
  std::int32_t* ids;  // block
  float* values;      // block × cols
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t k = t / cols, c = t % cols;
    const bool real = k < static_cast<std::size_t>(*count);
    if (c == 0) ids[k] = real ? rows[k] : padding_key;
    values[t] = real ? g[static_cast<std::size_t>(rows[k]) * cols + c] : 0.f;
  }
};

/// Kernel over t < capacity × cols: for the u-th row of the union, the mean over ranks of the
/// gathered gradient rows, summed in rank order (a rank that did not touch the row adds
/// nothing), written to the row of the arena.
struct mean_rows_fn {
  const std::int32_t* all_ids;  // world × block, each rank's block ascending, padding last
  const float* all_values;      // world × block × cols
  std::size_t block;
  std::size_t cols;
  int world;
  const std::int32_t* rows;  // the union
  const std::int32_t* count;
  float* g;
  TUTTI_HOST_DEVICE void operator()(std::size_t t) const {
    const std::size_t u = t / cols, c = t % cols;
    if (u >= static_cast<std::size_t>(*count)) return;
    const std::int32_t row = rows[u];
    float total = 0.f;
    for (int w = 0; w < world; ++w) {
      const std::int32_t* ids = all_ids + static_cast<std::size_t>(w) * block;
      std::size_t lo = 0, hi = block;  // first position with ids[pos] >= row
      while (lo < hi) {
        const std::size_t mid = (lo + hi) / 2;
        if (ids[mid] < row)
          lo = mid + 1;
        else
          hi = mid;
      }
      if (lo < block && ids[lo] == row)
        total += all_values[(static_cast<std::size_t>(w) * block + lo) * cols + c];
    }
    g[static_cast<std::size_t>(row) * cols + c] = total / static_cast<float>(world);
  }
};

/// Scratch and kernels of the exchange, one set per row-sparse segment.
template <class Space>
class row_exchange_on_space {
 public:
  /// Exchanges the gradient rows `sel` (this rank's touched rows of segment `seg`, at most
  /// `block` of them) of `g` with every rank; returns the union of every rank's rows (memory of
  /// the space, valid until the next exchange of this slot `slot`), whose gradient rows now
  /// hold the mean over the ranks. Bytes gathered, in the ledger's convention, go to `bytes`.
  template <class Reducer>
  requires reducer_gathers_on_space<Reducer> segment_rows_on_space
  exchange(const Space& space, Reducer& reducer, std::size_t slot, const segment& seg,
           const segment_rows_on_space& sel, std::size_t block, float* g, std::uint64_t& bytes) {
    const int world = reducer.world_size();
    const auto w = static_cast<std::size_t>(world);
    if (m_slots.size() <= slot) m_slots.resize(slot + 1, scratch(space));
    scratch& s = m_slots[slot];
    std::int32_t* ids = s.ids.reserve(block);
    float* values = s.values.reserve(block * seg.cols);
    std::int32_t* all_ids = s.all_ids.reserve(w * block);
    float* all_values = s.all_values.reserve(w * block * seg.cols);
    std::int32_t* sorted = s.sorted.reserve(2 * w * block + 1);
    std::int32_t* head = s.head.reserve(2 * w * block);
    float* at = g + seg.offset;
    parallel_for(space, block * seg.cols,
                 pack_rows_fn{at, seg.cols, sel.rows, sel.count, ids, values});
    reducer.all_gather_on_space(std::span<const std::int32_t>(ids, block),
                                std::span<std::int32_t>(all_ids, w * block));
    reducer.all_gather_on_space(std::span<const float>(values, block * seg.cols),
                                std::span<float>(all_values, w * block * seg.cols));
    bytes += w * block * (sizeof(std::int32_t) + seg.cols * sizeof(float)) / 2;
    // The union: every gathered id sorted, then the starts of its runs, as a model finds its
    // touched rows (padding sorts last and starts no run).
    const std::size_t n = w * block;
    std::int32_t* rows = sorted + n;
    std::int32_t* count = rows + n;
    space.copy(sorted, all_ids, n * sizeof(std::int32_t));
    thrust::sort(space.policy(), sorted, sorted + n);
    run_starts_on_space(space, sorted, n, head, rows, count);
    parallel_for(space, n * seg.cols,
                 mean_rows_fn{all_ids, all_values, block, seg.cols, world, rows, count, at});
    return segment_rows_on_space{false, rows, count, n};
  }

 private:
  struct scratch {
    explicit scratch(const Space& space)
        : ids(space),
          values(space),
          all_ids(space),
          all_values(space),
          sorted(space),
          head(space) {}
    scratch_array<std::int32_t, Space> ids;
    scratch_array<float, Space> values;
    scratch_array<std::int32_t, Space> all_ids;
    scratch_array<float, Space> all_values;
    scratch_array<std::int32_t, Space> sorted;  // the sorted ids, the union, its count
    scratch_array<std::int32_t, Space> head;    // run starts, their scan
  };
  std::vector<scratch> m_slots;
};

}  // namespace tutti::detail
