// SPDX-License-Identifier: Apache-2.0
/// @file capability_last_wait_seconds.cpp
/// @brief Must not compile: a reducer whose `last_wait_seconds` is not const.
// expect-error: tutti::gradient_reducer: `last_wait_seconds` is not the capability
// expect-error: tutti::reducer_reports_wait
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_last_wait_seconds : tutti_compile_checks::base_reducer {
  double last_wait_seconds() { return 0; }
};

static_assert(tutti::check_gradient_reducer<wrong_last_wait_seconds>());

int main() {
  return 0;
}
