// SPDX-License-Identifier: Apache-2.0
/// @file schedule_missing_lr.cpp
/// @brief Must not compile: a schedule whose `lr` lacks the total step count and base rate does
/// not have the member the trainer calls.
// expect-error: tutti::lr_schedule: missing `double lr\(std::size_t step,
// expect-error: \(see docs/concepts\.md#lr-schedule\)
#include <tutti/concepts.hpp>

#include <cstddef>

/// A decay that forgot the trainer passes the run length and base rate.
struct schedule_with_wrong_lr {
  double lr(std::size_t step) const { return 1.0 / (1.0 + static_cast<double>(step)); }
};

static_assert(tutti::check_lr_schedule<schedule_with_wrong_lr>());

int main() {
  return 0;
}
