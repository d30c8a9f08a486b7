// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/row_sparse_sgd.hpp
/// @brief `tutti::row_sparse_sgd`: SGD that visits only the rows a step touched.
#pragma once

#include <tutti/optimizers/row_sparse.hpp>
#include <tutti/optimizers/rows_on_space.hpp>
#include <tutti/optimizers/sgd.hpp>
#include <tutti/state_map.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti {

/// SGD on a row-sparse step (see optimizers/row_sparse.hpp): each touched row, and every value of
/// the dense segments, takes exactly `tutti::sgd`'s update; untouched rows are not visited.
///
/// Without momentum and weight decay this *is* dense SGD, bit for bit: an untouched row's
/// gradient is 0 and `p - lr·0 = p`. With momentum, a row's velocity is lazy: it decays and is
/// applied only on the steps that touch the row (dense SGD keeps moving an untouched row by
/// `momentum · v` every step); weight decay likewise applies to touched rows only.
///
/// State is `sgd`'s: n floats of velocity with momentum, none without.
struct row_sparse_sgd {
  float momentum = 0.f;      ///< in [0, 1); 0 disables momentum (and its state)
  bool nesterov = false;     ///< Nesterov momentum; requires momentum > 0
  float weight_decay = 0.f;  ///< finite and >= 0; on touched rows only

  /// The dense SGD these hyper-parameters describe.
  sgd dense() const { return sgd{momentum, nesterov, weight_decay}; }

  void validate() const { dense().validate(); }
  std::size_t state_size(std::size_t parameters) const { return dense().state_size(parameters); }
  /// Where each row's state lies: SGD's (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    return dense().state_map(layout);
  }
  /// Wants the row-sparse step.
  bool row_sparse() const noexcept { return true; }

  /// Dense SGD over the whole arena (every row touched).
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t step) const {
    dense().step(space, params, grads, state, lr, step);
  }

  /// SGD on the selected rows and whole segments of `layout`; nothing else is read or written.
  template <execution_space Space>
  requires(Space::host_accessible) void step_rows(const Space& space,
                                                  const parameter_layout& layout,
                                                  std::span<float> params,
                                                  std::span<const float> grads,
                                                  std::span<float> state, row_selection rows,
                                                  float lr, std::uint64_t step) const {
    detail::step_rows_by_update(*this, "tutti::row_sparse_sgd::step_rows", space, layout, params,
                                grads, state, rows, lr, step);
  }

  /// The same step on a space the host cannot read (`tutti::optimizer_steps_rows_on_space`).
  template <execution_space Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout,
                          std::span<float> params, std::span<const float> grads,
                          std::span<float> state, row_selection_on_space rows, const float* skip,
                          float lr, std::uint64_t step) const {
    detail::elementwise_step_rows_on_space(*this, "tutti::row_sparse_sgd::step_rows_on_space",
                                           space, layout, params, grads, state, rows, skip, lr,
                                           step);
  }

  /// The same step with SGD's kernel of the step, `*values`, in the space's memory
  /// (`tutti::optimizer_steps_rows_from_memory`).
  template <execution_space Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout,
                          std::span<float> /*params*/, std::span<const float> /*grads*/,
                          std::span<float> /*state*/, row_selection_on_space rows,
                          const float* skip, const detail::sgd_kernel* values) const {
    detail::elementwise_step_rows_at("tutti::row_sparse_sgd::step_rows_on_space", space, layout,
                                     rows, skip, values);
  }

  /// SGD's element kernel of a step at rate `lr` over the arena, checked (a gradient of the
  /// arena's size).
  detail::sgd_kernel row_step_values(const parameter_layout& /*layout*/, std::span<float> params,
                                     std::span<const float> grads, std::span<float> state, float lr,
                                     std::uint64_t /*step*/) const {
    return kernel(params, grads, state, lr, false);
  }

  /// `use(fn)` with this step as a function of one run of rows (`tutti::optimizer_fuses_rows`).
  template <class Use>
  void with_row_update(const parameter_layout& layout, std::span<float> params,
                       std::span<const float> grads, std::span<float> state, float lr,
                       std::uint64_t /*step*/, Use&& use) const {
    detail::elementwise_row_update(kernel(params, grads, state, lr, true), layout, use);
  }

 private:
  // The kernel, checked; `in_slots`: the gradient may be in slots (fewer values than params).
  detail::sgd_kernel kernel(std::span<float> params, std::span<const float> grads,
                            std::span<float> state, float lr, bool in_slots) const {
    validate();
    const std::size_t n = params.size();
    detail::check_optimizer_step("tutti::row_sparse_sgd", n, grads.size(), state.size(),
                                 state_size(n), lr, in_slots);
    return detail::sgd_kernel{
        params.data(), grads.data(), momentum > 0.f ? state.data() : nullptr, lr, momentum,
        weight_decay,  nesterov};
  }
};

}  // namespace tutti
