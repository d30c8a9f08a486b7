// SPDX-License-Identifier: Apache-2.0
/// @file capability_row_sparse_segments.cpp
/// @brief Must not compile: a model whose `row_sparse` takes no segment.
// expect-error: tutti::model: `row_sparse` is not the capability
// expect-error: tutti::model_names_row_sparse
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include "base_policies.hpp"

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_row_sparse_segments : tutti_compile_checks::base_model {
  bool row_sparse() const { return true; }
};

static_assert(tutti::check_model<wrong_row_sparse_segments>());

int main() {
  return 0;
}
