// SPDX-License-Identifier: Apache-2.0
/// @file capability_warmup_steps.cpp
/// @brief Must not compile: a schedule whose `warmup_steps` is a function.
// expect-error: tutti::lr_schedule: `warmup_steps` is not the capability
// expect-error: tutti::schedule_has_warmup
// expect-error: \(see docs/concepts\.md#optional-capabilities\)
#include <tutti/concepts.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

struct wrong_warmup_steps {
  double lr(std::size_t /*step*/, std::size_t /*total_steps*/, double base_lr) const {
    return base_lr;
  }
  std::size_t warmup_steps() const { return 100; }
};

static_assert(tutti::check_lr_schedule<wrong_warmup_steps>());

int main() {
  return 0;
}
