// SPDX-License-Identifier: Apache-2.0
/// @file capability_shared_gradient_arena.cpp
/// @brief Must not compile: a reducer whose `shared_gradient_arena` lends doubles.
// expect-error: tutti::gradient_reducer: `shared_gradient_arena` is not the capability
// expect-error: tutti::reducer_lends_gradient_arena
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_shared_gradient_arena : tutti_compile_checks::base_reducer {
  std::span<double> shared_gradient_arena(std::size_t /*count*/) { return {}; }
};

static_assert(tutti::check_gradient_reducer<wrong_shared_gradient_arena>());

int main() {
  return 0;
}
