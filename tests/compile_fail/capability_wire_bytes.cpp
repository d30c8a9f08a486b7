// SPDX-License-Identifier: Apache-2.0
/// @file capability_wire_bytes.cpp
/// @brief Must not compile: a reducer whose `wire_bytes` takes no count.
// expect-error: tutti::gradient_reducer: `wire_bytes` is not the capability
// expect-error: tutti::reducer_counts_wire_bytes
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_wire_bytes : tutti_compile_checks::base_reducer {
  std::uint64_t wire_bytes() const { return 0; }
};

static_assert(tutti::check_gradient_reducer<wrong_wire_bytes>());

int main() {
  return 0;
}
