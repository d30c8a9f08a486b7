// SPDX-License-Identifier: Apache-2.0
/// @file detail/median.hpp
/// @brief The median every timing report quotes (benchmarks, `tutti bench`, the allreduce
/// harness): one definition, so they all agree on even counts.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tutti::detail {

/// Median of `v` (the mean of the two middle values for an even count); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid)));
}

}  // namespace tutti::detail
