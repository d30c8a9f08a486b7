// SPDX-License-Identifier: Apache-2.0
/// @file capability_start_all_reduce_mean.cpp
/// @brief Must not compile: a reducer that starts collectives but has no `finish_started`.
// expect-error: tutti::gradient_reducer: `start_all_reduce_mean` is not the capability
// expect-error: tutti::reducer_starts_collectives
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_start_all_reduce_mean : tutti_compile_checks::base_reducer {
  void start_all_reduce_mean(std::span<float> /*grads*/) {}
};

static_assert(tutti::check_gradient_reducer<wrong_start_all_reduce_mean>());

int main() {
  return 0;
}
