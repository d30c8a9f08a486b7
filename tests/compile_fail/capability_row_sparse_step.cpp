// SPDX-License-Identifier: Apache-2.0
/// @file capability_row_sparse_step.cpp
/// @brief Must not compile: an optimizer that asks for the row-sparse step and has no `step_rows`.
// expect-error: tutti::optimizer: `row_sparse` or `step_rows` is not the capability
// expect-error: tutti::optimizer_steps_rows
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_row_sparse_step : tutti_compile_checks::base_optimizer {
  bool row_sparse() const { return true; }
};

static_assert(tutti::check_optimizer<wrong_row_sparse_step, tutti::host_space>());

int main() {
  return 0;
}
