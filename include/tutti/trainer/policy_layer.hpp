// SPDX-License-Identifier: Apache-2.0
/// @file trainer/policy_layer.hpp
/// @brief `tutti::trainer`: the layer over `tutti::trainer_core` that holds the learning-rate
/// schedule and the optimizer as their own types and answers the core's questions (the rate, the
/// dense update, the row-sparse update on the host and on a device, the values a device step
/// reads), so only those are compiled per schedule and optimizer.
#pragma once

#include <tutti/trainer.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>

namespace tutti {

/// One rank of a data-parallel training run, composed at compile time from five policies: the
/// model, the shard sampler, the gradient reducer (whose work is `tutti::trainer_core`'s,
/// tutti/trainer.hpp), the learning-rate schedule and the optimizer. The trainer holds the schedule
/// and the optimizer as the types it is given: each capability of theirs reaches the step from the
/// type itself
/// (`detail::policy_facts`), and only their own calls (the rate, the update) are compiled per
/// schedule and optimizer.
///
/// @tparam Model a `tutti::model` (its `space_type` is where everything runs)
/// @tparam Sampler a `tutti::shard_sampler`
/// @tparam Reducer a `tutti::gradient_reducer` that accepts the model's space
/// @tparam Schedule a `tutti::lr_schedule`
/// @tparam Optimizer a `tutti::optimizer` for the model's space
template <class Model, class Sampler, class Reducer, class Schedule = constant,
          class Optimizer = sgd>
class trainer final : public trainer_core<Model, Sampler, Reducer> {
  using core = trainer_core<Model, Sampler, Reducer>;
  static_assert(check_lr_schedule<Schedule>());

 public:
  using space_type = typename Model::space_type;
  static_assert(check_optimizer<Optimizer, space_type>());

  /// Builds a trainer for one rank; allocates and initialises the arenas (rank 0's parameters
  /// are broadcast at the start of `fit`).
  trainer(Model model, Sampler sampler, Reducer reducer, Schedule schedule, Optimizer optimizer,
          train_options options)
      : core(std::move(model), std::move(sampler), std::move(reducer), std::move(options),
             detail::policy_facts_of<space_type>(optimizer, schedule, model.layout())),
        m_schedule(std::move(schedule)),
        m_optimizer(std::move(optimizer)) {}

  /// The optimizer the trainer steps with.
  const Optimizer& optimizer() const noexcept { return m_optimizer; }
  /// The learning-rate schedule.
  const Schedule& schedule() const noexcept { return m_schedule; }

 private:
  using row_values = typename detail::row_values_of<Optimizer, space_type>::type;

  double rate_at(std::size_t step, std::size_t total, double base) const override {
    return m_schedule.lr(step, total, base);
  }

  void apply_optimizer(double lr, std::uint64_t t) override {
    const auto grads = std::span<const float>(this->m_grads.first(this->gradient_values()));
    const auto rate = static_cast<float>(lr);
    if constexpr (optimizer_steps_by_layout<Optimizer, space_type>)
      m_optimizer.step(this->m_space, this->m_model.layout(), this->m_params.span(), grads,
                       this->m_state.span(), rate, t);
    else
      m_optimizer.step(this->m_space, this->m_params.span(), grads, this->m_state.span(), rate, t);
  }

  void update_rows(std::span<float> grads, bool skip, float rate, std::uint64_t t) override {
    if constexpr (space_type::host_accessible)
      this->m_rows.update(m_optimizer, this->m_space, this->m_model.layout(), this->m_params.span(),
                          grads, this->m_state.span(), skip, rate, t);
    else
      (void)grads, (void)skip, (void)rate, (void)t;
  }

  void update_rows_on_space(std::span<float> grads, const float* skip, float rate,
                            std::uint64_t t) override {
    if constexpr (!space_type::host_accessible) {
      // The optimizer's values lie in the step's values in the space's memory (an address only).
      const auto* values = reinterpret_cast<const detail::step_values<row_values>*>(
          static_cast<const void*>(this->m_values.data()));
      this->m_rows.update_on_space(m_optimizer, this->m_space, this->m_model.layout(),
                                   this->m_params.span(), grads, this->m_state.span(), skip,
                                   detail::optimizer_values_at(values), rate, t);
    } else {
      (void)grads, (void)skip, (void)rate, (void)t;
    }
  }

  void write_row_values(std::uint64_t* values, float rate, std::uint64_t t) override {
    if constexpr (optimizer_steps_rows_from_memory<Optimizer, space_type>) {
      const row_values v = m_optimizer.row_step_values(
          this->m_model.layout(), this->m_params.span(),
          std::span<const float>(this->m_grads.first(this->gradient_values())),
          this->m_state.span(), rate, t);
      std::memcpy(
          reinterpret_cast<char*>(values) + offsetof(detail::step_values<row_values>, optimizer),
          &v, sizeof v);
    } else {
      (void)values, (void)rate, (void)t;
    }
  }

  Schedule m_schedule;
  Optimizer m_optimizer;
};

}  // namespace tutti
