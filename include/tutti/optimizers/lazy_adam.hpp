// SPDX-License-Identifier: Apache-2.0
/// @file optimizers/lazy_adam.hpp
/// @brief `tutti::lazy_adam`: Adam whose moments move only on the rows a step touched.
#pragma once

#include <tutti/optimizers/adam.hpp>
#include <tutti/optimizers/row_sparse.hpp>
#include <tutti/optimizers/rows_on_space.hpp>
#include <tutti/state_map.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti {

/// Lazy Adam, PyTorch's `SparseAdam` for the embedding tables and Adam for the rest: on a
/// row-sparse step (see optimizers/row_sparse.hpp) each touched row, and every value of the
/// dense segments, takes exactly `tutti::adam`'s update (same formulas, same bias correction by
/// the global step, same bits); a row the step did not touch keeps its value **and its moments**.
///
/// Where it differs from dense Adam: dense Adam moves an untouched row too, by its decaying
/// momentum (m·β1 each step, with a gradient of 0), and decays its second moment; lazy Adam
/// leaves the row where it is until the row is read again, then resumes from its old moments.
/// That is what makes the step cost O(batch) instead of O(table), and it is the semantics of
/// TensorFlow's LazyAdam and PyTorch's SparseAdam. Weight decay, when set, also applies to the
/// touched rows only.
///
/// State is `adam`'s: 2n floats, first moments then second. Outside a row-sparse step (a device
/// space, a model that does not report its touched rows) `step` is dense Adam; the trainer
/// refuses that combination rather than change the semantics silently.
struct lazy_adam {
  float beta1 = 0.9f;        ///< decay of the first-moment average, in [0, 1)
  float beta2 = 0.999f;      ///< decay of the second-moment average, in [0, 1)
  float eps = 1e-8f;         ///< added to the denominator; finite and > 0
  float weight_decay = 0.f;  ///< finite and >= 0; on touched rows only
  bool decoupled = false;    ///< AdamW's decoupled weight decay

  /// The dense Adam these hyper-parameters describe.
  adam dense() const { return adam{beta1, beta2, eps, weight_decay, decoupled}; }

  void validate() const { dense().validate(); }
  std::size_t state_size(std::size_t parameters) const { return 2 * parameters; }
  /// Where each row's state lies: the first moments, then the second, each laid out as the
  /// arena (tutti/state_map.hpp).
  tutti::state_map state_map(const parameter_layout& layout) const {
    return arena_state_map(layout, 2);
  }
  /// Wants the row-sparse step.
  bool row_sparse() const noexcept { return true; }

  /// Dense Adam over the whole arena (every row touched).
  template <execution_space Space>
  void step(const Space& space, std::span<float> params, std::span<const float> grads,
            std::span<float> state, float lr, std::uint64_t step) const {
    dense().step(space, params, grads, state, lr, step);
  }

  /// Adam on the selected rows and whole segments of `layout`; nothing else is read or written.
  template <execution_space Space>
  requires(Space::host_accessible) void step_rows(const Space& space,
                                                  const parameter_layout& layout,
                                                  std::span<float> params,
                                                  std::span<const float> grads,
                                                  std::span<float> state, row_selection rows,
                                                  float lr, std::uint64_t step) const {
    detail::step_rows_by_update(*this, "tutti::lazy_adam::step_rows", space, layout, params, grads,
                                state, rows, lr, step);
  }

  /// The same step on a space the host cannot read (`tutti::optimizer_steps_rows_on_space`).
  template <execution_space Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout,
                          std::span<float> params, std::span<const float> grads,
                          std::span<float> state, row_selection_on_space rows, const float* skip,
                          float lr, std::uint64_t step) const {
    detail::elementwise_step_rows_on_space(*this, "tutti::lazy_adam::step_rows_on_space", space,
                                           layout, params, grads, state, rows, skip, lr, step);
  }

  /// The same step with Adam's kernel of the step, `*values`, in the space's memory
  /// (`tutti::optimizer_steps_rows_from_memory`).
  template <execution_space Space>
  void step_rows_on_space(const Space& space, const parameter_layout& layout,
                          std::span<float> /*params*/, std::span<const float> /*grads*/,
                          std::span<float> /*state*/, row_selection_on_space rows,
                          const float* skip, const detail::adam_kernel* values) const {
    detail::elementwise_step_rows_at("tutti::lazy_adam::step_rows_on_space", space, layout, rows,
                                     skip, values);
  }

  /// Adam's element kernel of step `step` (1-based) over the arena, checked (a gradient of the
  /// arena's size).
  detail::adam_kernel row_step_values(const parameter_layout& /*layout*/, std::span<float> params,
                                      std::span<const float> grads, std::span<float> state,
                                      float lr, std::uint64_t step) const {
    return kernel(params, grads, state, lr, step, false);
  }

  /// `use(fn)` with this step as a function of one run of rows (`tutti::optimizer_fuses_rows`).
  template <class Use>
  void with_row_update(const parameter_layout& layout, std::span<float> params,
                       std::span<const float> grads, std::span<float> state, float lr,
                       std::uint64_t step, Use&& use) const {
    detail::elementwise_row_update(kernel(params, grads, state, lr, step, true), layout, use);
  }

 private:
  // The kernel, checked; `in_slots`: the gradient may be in slots (fewer values than params).
  detail::adam_kernel kernel(std::span<float> params, std::span<const float> grads,
                             std::span<float> state, float lr, std::uint64_t step,
                             bool in_slots) const {
    const adam a = dense();
    a.validate();
    const std::size_t n = params.size();
    detail::check_optimizer_step("tutti::lazy_adam", n, grads.size(), state.size(), state_size(n),
                                 lr, in_slots);
    detail::check_one_based_step("tutti::lazy_adam", step);
    return a.make_kernel(params, grads, state, lr, step);
  }
};

}  // namespace tutti
