// SPDX-License-Identifier: Apache-2.0
/// @file models/detail/row_sort.hpp
/// @brief Host: the slots of a batch grouped by row id with one serial LSD radix sort over the
/// bits the ids need, in one pass from the ids and weights.
///
/// A stable sort's output is unique, so this is bit for bit what `thrust::stable_sort_by_key`
/// gives the sparse accumulator on every backend; it only does less: no separate pass to build
/// the keys, no parallel region for a batch of a few thousand slots, and as many passes as the
/// table's row count needs (two of 11 bits up to 4 M rows) instead of four of 8.
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace tutti::detail {

/// Sorts slots [0, n) by `ids` (weight-0 slots as `padding`, after every id), stably: writes the
/// sorted keys to `keys` and the slots to `order`; `keys_tmp` and `order_tmp` are scratch of n
/// values, `count` scratch the function resizes. Ids of real slots lie in [0, n_rows).
inline void radix_group_rows(const std::int32_t* ids, const float* weights, std::size_t n,
                             std::int32_t n_rows, std::int32_t padding, std::int32_t* keys,
                             std::int32_t* order, std::int32_t* keys_tmp, std::int32_t* order_tmp,
                             std::vector<std::uint32_t>& count) {
  // Padding sorts as n_rows, one past the last id, and is written back as `padding` at the end.
  const auto top = static_cast<std::uint32_t>(n_rows);
  const int bits = std::max(1, static_cast<int>(std::bit_width(top)));
  const int passes = (bits + 10) / 11;
  const int digit = (bits + passes - 1) / passes;
  const std::uint32_t mask = (std::uint32_t{1} << digit) - 1;
  // Sorting into the other buffer each pass: start so that the last pass lands in keys/order.
  std::int32_t* from_k = passes % 2 == 0 ? keys : keys_tmp;
  std::int32_t* from_o = passes % 2 == 0 ? order : order_tmp;
  std::int32_t* to_k = passes % 2 == 0 ? keys_tmp : keys;
  std::int32_t* to_o = passes % 2 == 0 ? order_tmp : order;
  for (std::size_t i = 0; i < n; ++i) {
    assert((weights[i] == 0.f || (ids[i] >= 0 && ids[i] < n_rows)) &&
           "tutti: id out of range in a batch");
    from_k[i] = weights[i] != 0.f ? ids[i] : static_cast<std::int32_t>(top);
    from_o[i] = static_cast<std::int32_t>(i);
  }
  for (int p = 0; p < passes; ++p) {
    const int shift = p * digit;
    count.assign(std::size_t{mask} + 2, 0);
    for (std::size_t i = 0; i < n; ++i)
      ++count[((static_cast<std::uint32_t>(from_k[i]) >> shift) & mask) + 1];
    for (std::size_t b = 1; b < count.size(); ++b) count[b] += count[b - 1];
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t at = count[(static_cast<std::uint32_t>(from_k[i]) >> shift) & mask]++;
      to_k[at] = from_k[i];
      to_o[at] = from_o[i];
    }
    std::swap(from_k, to_k);
    std::swap(from_o, to_o);
  }
  // The sorted pairs are in keys/order; padding goes back to its key.
  for (std::size_t i = n; i-- > 0 && static_cast<std::uint32_t>(keys[i]) == top;) keys[i] = padding;
}

}  // namespace tutti::detail
