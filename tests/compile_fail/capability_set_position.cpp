// SPDX-License-Identifier: Apache-2.0
/// @file capability_set_position.cpp
/// @brief Must not compile: a reducer whose `set_position` takes one argument.
// expect-error: tutti::gradient_reducer: `set_position` is not the capability
// expect-error: tutti::reducer_tracks_position
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_set_position : tutti_compile_checks::base_reducer {
  void set_position(std::size_t /*step*/) {}
};

static_assert(tutti::check_gradient_reducer<wrong_set_position>());

int main() {
  return 0;
}
