// SPDX-License-Identifier: Apache-2.0
/// @file capability_clock_seconds.cpp
/// @brief Must not compile: a reducer whose `clock_seconds` returns no number.
// expect-error: tutti::gradient_reducer: `clock_seconds` is not the capability
// expect-error: tutti::reducer_keeps_clock
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

struct wrong_clock : tutti_compile_checks::base_reducer {
  void clock_seconds() const {}
};

static_assert(tutti::check_gradient_reducer<wrong_clock>());

int main() {
  return 0;
}
