// SPDX-License-Identifier: Apache-2.0
/// @file base_policies.hpp
/// @brief Complete policies for the compile-fail tests of the optional capabilities: each test
/// derives from one and adds the one member it gets wrong.
#pragma once

#include <tutti/concepts.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti_compile_checks {

/// A complete model with no capability.
struct base_model {
  using space_type = tutti::host_space;
  using value_type = float;

  const space_type& space() const noexcept { return m_space; }
  const tutti::parameter_layout& layout() const noexcept { return m_layout; }
  tutti::loss_kind loss() const noexcept { return tutti::loss_kind::squared; }
  void initialize(std::span<float> /*params*/, std::uint64_t /*seed*/) const {}
  void loss_and_gradient(std::span<const float> /*params*/, const tutti::batch_view& /*batch*/,
                         std::span<float> /*grads*/, float /*scale*/, float* /*loss_sum*/) {}
  void predict(std::span<const float> /*params*/, std::span<const std::int32_t> /*users*/,
               std::span<const std::int32_t> /*items*/, std::span<float> /*out*/) {}

  space_type m_space;
  tutti::parameter_layout m_layout;
};

/// A complete reducer with no capability.
struct base_reducer {
  template <class Space>
  static constexpr bool accepts = true;
  int rank() const noexcept { return 0; }
  int world_size() const noexcept { return 1; }
  void all_reduce_mean(std::span<float> /*grads*/) {}
  void broadcast(std::span<float> /*values*/, int /*root*/) {}
  void all_reduce_sum(std::span<double> /*values*/) {}
  void all_reduce_max(std::span<double> /*values*/) {}
  void all_gather(std::span<const std::uint64_t> /*mine*/, std::span<std::uint64_t> /*all*/) {}
};

/// A complete sampler with no capability.
struct base_sampler {
  tutti::shard shard(std::size_t /*n*/, int /*world_size*/, int /*rank*/, std::uint64_t /*seed*/,
                     std::uint64_t /*epoch*/) const {
    return {};
  }
};

/// A complete optimizer with no capability.
struct base_optimizer {
  std::size_t state_size(std::size_t /*parameters*/) const { return 0; }
  template <class Space>
  void step(const Space& /*space*/, std::span<float> /*params*/, std::span<const float> /*grads*/,
            std::span<float> /*state*/, float /*lr*/, std::uint64_t /*step*/) const {}
};

}  // namespace tutti_compile_checks
