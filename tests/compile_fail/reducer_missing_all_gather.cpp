// SPDX-License-Identifier: Apache-2.0
/// @file reducer_missing_all_gather.cpp
/// @brief Must not compile: a reducer without `all_gather` is rejected by name.
// expect-error: tutti::gradient_reducer: missing `void all_gather\(
// expect-error: \(see docs/concepts\.md#gradient-reducer\)
#include <tutti/concepts.hpp>

#include <cstdint>
#include <span>

/// Complete but for `all_gather`.
struct reducer_without_all_gather {
  template <class Space>
  static constexpr bool accepts = true;
  int rank() const noexcept { return 0; }
  int world_size() const noexcept { return 1; }
  void all_reduce_mean(std::span<float> /*grads*/) {}
  void broadcast(std::span<float> /*values*/, int /*root*/) {}
  void all_reduce_sum(std::span<double> /*values*/) {}
  void all_reduce_max(std::span<double> /*values*/) {}
};

static_assert(tutti::check_gradient_reducer<reducer_without_all_gather>());

int main() {
  return 0;
}
