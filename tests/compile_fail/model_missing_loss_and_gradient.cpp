// SPDX-License-Identifier: Apache-2.0
/// @file model_missing_loss_and_gradient.cpp
/// @brief Must not compile: a model without `loss_and_gradient` is rejected by name.
// expect-error: tutti::model: missing `void loss_and_gradient\(std::span<const value_type> params
// expect-error: \(see docs/concepts\.md#model\)
#include <tutti/concepts.hpp>

#include <cstdint>
#include <span>

/// Complete but for `loss_and_gradient`.
struct model_without_gradient {
  using space_type = tutti::host_space;
  using value_type = float;

  model_without_gradient() { m_layout.add("bias", 1, 1, tutti::segment_kind::bias); }
  const space_type& space() const noexcept { return m_space; }
  const tutti::parameter_layout& layout() const noexcept { return m_layout; }
  tutti::loss_kind loss() const noexcept { return tutti::loss_kind::squared; }
  void initialize(std::span<float> params, std::uint64_t /*seed*/) const { params[0] = 0.0f; }
  void predict(std::span<const float> params, std::span<const std::int32_t> /*users*/,
               std::span<const std::int32_t> /*items*/, std::span<float> out) {
    for (float& value : out) value = params[0];
  }

 private:
  space_type m_space;
  tutti::parameter_layout m_layout;
};

static_assert(tutti::check_model<model_without_gradient>());

int main() {
  return 0;
}
