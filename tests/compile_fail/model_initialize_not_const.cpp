// SPDX-License-Identifier: Apache-2.0
/// @file model_initialize_not_const.cpp
/// @brief Must not compile: a model whose `initialize` is not const is told so, not that the
/// member is missing.
// expect-error: tutti::model: `initialize` is not const; expected `void initialize\(
// expect-error: \(see docs/concepts\.md#model\)
#include "base_policies.hpp"

#include <cstdint>
#include <span>

/// Complete, but `initialize` lacks its const.
struct model_with_mutable_initialize : tutti_compile_checks::base_model {
  void initialize(std::span<float> /*params*/, std::uint64_t /*seed*/) {}
};

static_assert(tutti::check_model<model_with_mutable_initialize>());

int main() {
  return 0;
}
