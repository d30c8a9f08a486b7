// SPDX-License-Identifier: Apache-2.0
/// @file optimizer_missing_state_size.cpp
/// @brief Must not compile: an optimizer that does not say how much state it needs is rejected
/// by name, since the trainer allocates that state.
// expect-error: tutti::optimizer: missing `std::size_t state_size\(std::size_t parameters\)
// expect-error: \(see docs/concepts\.md#optimizer\)
#include <tutti/concepts.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

/// Complete but for `state_size`.
struct optimizer_without_state_size {
  template <class Space>
  void step(const Space& /*space*/, std::span<float> params, std::span<const float> grads,
            std::span<float> /*state*/, float lr, std::uint64_t /*step*/) const {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr * grads[i];
  }
};

static_assert(tutti::check_optimizer<optimizer_without_state_size, tutti::host_space>());

int main() {
  return 0;
}
