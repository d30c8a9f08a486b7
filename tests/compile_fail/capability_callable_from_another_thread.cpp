// SPDX-License-Identifier: Apache-2.0
/// @file capability_callable_from_another_thread.cpp
/// @brief Must not compile: a reducer whose `callable_from_another_thread` is not const.
// expect-error: tutti::gradient_reducer: `callable_from_another_thread` is not the capability
// expect-error: tutti::reducer_says_thread_safety
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_callable_from_another_thread : tutti_compile_checks::base_reducer {
  bool callable_from_another_thread() { return true; }
};

static_assert(tutti::check_gradient_reducer<wrong_callable_from_another_thread>());

int main() {
  return 0;
}
