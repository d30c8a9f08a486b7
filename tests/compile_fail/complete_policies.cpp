// SPDX-License-Identifier: Apache-2.0
/// @file complete_policies.cpp
/// @brief Positive control for the compile-fail tests: the smallest complete policy of each slot
/// satisfies its concept, so the failures next to this file come from the one member each
/// leaves out and not from a mistake shared by all of them.
#include <tutti/concepts.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti_compile_checks {

// The minimal model of docs/concepts.md, as printed there.
/// A model with one parameter, the prediction for every pair (squared loss).
struct minimal_model {
  using space_type = tutti::host_space;
  using value_type = float;

  minimal_model() : m_bias(m_layout.add("bias", 1, 1, tutti::segment_kind::bias).offset) {}
  const space_type& space() const noexcept { return m_space; }
  const tutti::parameter_layout& layout() const noexcept { return m_layout; }
  tutti::loss_kind loss() const noexcept { return tutti::loss_kind::squared; }
  void initialize(std::span<float> params, std::uint64_t /*seed*/) const { params[m_bias] = 0.0f; }
  void loss_and_gradient(std::span<const float> params, const tutti::batch_view& batch,
                         std::span<float> grads, float scale, float* loss_sum) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      const float residual = params[m_bias] - batch.labels[i];
      grads[m_bias] += scale * batch.weights[i] * 2.0f * residual;
      *loss_sum += batch.weights[i] * residual * residual;
    }
  }
  void predict(std::span<const float> params, std::span<const std::int32_t> /*users*/,
               std::span<const std::int32_t> /*items*/, std::span<float> out) {
    for (float& value : out) value = params[m_bias];
  }

 private:
  space_type m_space;
  tutti::parameter_layout m_layout;  // declared before m_bias: it is built first
  std::size_t m_bias;                // the bias's index in the arena
};

/// Rank r takes positions r, r + W, ... in dataset order; the tail is dropped.
struct minimal_sampler {
  tutti::shard shard(std::size_t n, int world_size, int rank, std::uint64_t /*seed*/,
                     std::uint64_t /*epoch*/) const {
    const auto world = static_cast<std::size_t>(world_size);
    const std::size_t slots = n / world;
    tutti::shard s;
    for (std::size_t j = 0; j < slots; ++j) {
      s.indices.push_back(j * world + static_cast<std::size_t>(rank));
      s.weights.push_back(1.0f);
    }
    for (std::size_t j = 0; j <= slots; ++j) s.real_prefix.push_back(j * world);
    return s;
  }
};

/// One rank: every collective is the identity.
struct minimal_reducer {
  template <class Space>
  static constexpr bool accepts = true;
  int rank() const noexcept { return 0; }
  int world_size() const noexcept { return 1; }
  void all_reduce_mean(std::span<float> /*grads*/) {}
  void broadcast(std::span<float> /*values*/, int /*root*/) {}
  void all_reduce_sum(std::span<double> /*values*/) {}
  void all_reduce_max(std::span<double> /*values*/) {}
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    for (std::size_t i = 0; i < mine.size(); ++i) all[i] = mine[i];
  }
};

/// The base rate at every step.
struct minimal_schedule {
  double lr(std::size_t /*step*/, std::size_t /*total_steps*/, double base_lr) const {
    return base_lr;
  }
};

/// Plain SGD without state.
struct minimal_optimizer {
  std::size_t state_size(std::size_t /*parameters*/) const noexcept { return 0; }
  template <class Space>
  void step(const Space& /*space*/, std::span<float> params, std::span<const float> grads,
            std::span<float> /*state*/, float lr, std::uint64_t /*step*/) const {
    for (std::size_t i = 0; i < params.size(); ++i) params[i] -= lr * grads[i];
  }
};

static_assert(tutti::check_model<minimal_model>());
static_assert(tutti::check_shard_sampler<minimal_sampler>());
static_assert(tutti::check_gradient_reducer<minimal_reducer>());
static_assert(tutti::check_lr_schedule<minimal_schedule>());
static_assert(tutti::check_optimizer<minimal_optimizer, tutti::host_space>());

static_assert(tutti::model<minimal_model>);
static_assert(tutti::shard_sampler<minimal_sampler>);
static_assert(tutti::gradient_reducer<minimal_reducer>);
static_assert(tutti::lr_schedule<minimal_schedule>);
static_assert(tutti::optimizer<minimal_optimizer, tutti::host_space>);

// The concepts must also reject: a type with none of the members satisfies none of them.
struct unrelated {};
static_assert(!tutti::model<unrelated>);
static_assert(!tutti::shard_sampler<unrelated>);
static_assert(!tutti::gradient_reducer<unrelated>);
static_assert(!tutti::lr_schedule<unrelated>);
static_assert(!tutti::optimizer<unrelated, tutti::host_space>);

}  // namespace tutti_compile_checks
