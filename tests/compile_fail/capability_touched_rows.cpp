// SPDX-License-Identifier: Apache-2.0
/// @file capability_touched_rows.cpp
/// @brief Must not compile: a model whose `touched_rows` returns a count, not the rows.
// expect-error: tutti::model: `touched_rows` is not the capability
// expect-error: tutti::model_reports_touched_rows
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_touched_rows : tutti_compile_checks::base_model {
  int touched_rows(std::size_t /*segment*/) const { return 0; }
};

static_assert(tutti::check_model<wrong_touched_rows>());

int main() {
  return 0;
}
