// SPDX-License-Identifier: Apache-2.0
/// @file model_value_type_double.cpp
/// @brief Must not compile: a model that declares `value_type = double` and takes float in its
/// members gets one message naming the value type, not three missing members.
// expect-error: tutti::model: `value_type` is not float, while initialize, loss_and_gradient
// expect-error: expected `using value_type = float;`
#include "base_policies.hpp"

#include <cstdint>
#include <span>

/// Written for float, declared as double.
struct model_declared_double : tutti_compile_checks::base_model {
  using value_type = double;
};

static_assert(tutti::check_model<model_declared_double>());

int main() {
  return 0;
}
