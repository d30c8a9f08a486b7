// SPDX-License-Identifier: Apache-2.0
/// @file trainer/row_sparse_step.hpp
/// @brief `detail::row_sparse_step`: the row-sparse step of `tutti::trainer` as one type that owns
/// its state: which rows a step updates, their check, their exchange between ranks, the update and
/// the zeroing of what the step touched, on a host space and on a space the host cannot read.
/// Trainer-private (tutti/trainer.hpp holds one).
#pragma once

#include <tutti/concepts/model.hpp>
#include <tutti/concepts/optimizer.hpp>
#include <tutti/concepts/reducer.hpp>
#include <tutti/layout.hpp>
#include <tutti/trainer/row_exchange_on_space.hpp>
#include <tutti/trainer/row_step.hpp>
#include <tutti/trainer/row_step_on_space.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace tutti::detail {

/// The row-sparse step (an optimizer with `tutti::optimizer_steps_rows`): the gradient arena is
/// zero between steps, the model adds into it, the optimizer updates the rows the step touched
/// (on any rank) and the dense segments, and those are zeroed again, so no step pays for the
/// whole table. Off until planned. On a host space the rows are the sparse exchange's touched
/// ids (`row_step`); on a space the host cannot read they are the model's lists in the space's
/// memory (`row_step_on_space`), which travel between ranks by all_gather
/// (`row_exchange_on_space`).
template <class Space>
class row_sparse_step {
 public:
  /// Whether the step is row-sparse (planned).
  bool on() const noexcept { return m_on; }

  /// Plans the step on a host space: `sparse[k]` is the layout index of the k-th row-sparse
  /// segment; `slots`, where given, the layout of a gradient in slots.
  void plan(const parameter_layout& layout, std::vector<std::size_t> sparse,
            const parameter_layout* slots) {
    m_host.plan(layout, std::move(sparse), slots);
    m_on = true;
  }

  /// Plans the step on a space the host cannot read.
  void plan(const Space& space, const parameter_layout& layout, std::vector<std::size_t> sparse) {
    m_device.plan(space, layout, std::move(sparse));
    m_on = true;
  }

  /// The start of a step: on a device, no rows selected yet.
  void begin() {
    if constexpr (!Space::host_accessible) m_device.clear();
  }

  /// Host: the rows to step are `touched[k]` of the k-th row-sparse segment.
  void select(std::span<const std::vector<std::int32_t>> touched) { m_host.select(touched); }

  /// Device: the rows to step are those the model's last `loss_and_gradient` touched.
  template <class Model>
  requires model_reports_touched_rows_on_space<Model>
  void select_on_space(const Model& model) { m_device.select(model); }

  /// Host, several ranks: `touched` becomes the union of every rank's rows, and the rows to
  /// step; returns the bytes gathered (the ledger's convention).
  template <class Reducer>
  std::uint64_t merge_ranks(Reducer& reducer, std::vector<std::vector<std::int32_t>>& touched) {
    const std::uint64_t bytes = m_host.merge_ranks(reducer, touched);
    m_host.select(touched);
    return bytes;
  }

  /// Device, several ranks: each row-sparse segment's touched rows of `grads` travel by
  /// all_gather (`block`, the micro-batch, bounds a rank's rows); the rows to step become their
  /// union, holding the mean over the ranks. Returns the bytes gathered. The dense segments are
  /// the caller's to reduce (`sparse_on_space` says which are not).
  template <class Reducer>
  requires reducer_gathers_on_space<Reducer> std::uint64_t exchange_on_space(
      const Space& space, Reducer& reducer, const parameter_layout& layout, std::size_t block,
      float* grads) {
    std::uint64_t bytes = 0;
    const auto& segs = layout.segments();
    const auto sparse = m_device.sparse();
    for (std::size_t k = 0; k < sparse.size(); ++k) {
      const std::size_t s = sparse[k];
      m_device.set(s, m_exchange.exchange(space, reducer, k, segs[s], m_device.selection()[s],
                                          block, grads, bytes));
    }
    return bytes;
  }

  /// Device: the layout indices of the row-sparse segments.
  std::span<const std::size_t> sparse_on_space() const noexcept { return m_device.sparse(); }

  /// Host: true when the rows to step hold an infinity or a NaN; with `rows_checked` (the
  /// model checked the rows as it wrote them) only the dense segments are read.
  bool nonfinite(const Space& space, const float* grads, bool rows_checked) const {
    return rows_checked ? m_host.any_nonfinite_dense(space, grads)
                        : m_host.any_nonfinite(space, grads);
  }

  /// Device: kernels that set `*flag` and `*entry` when a selected value is not finite.
  void check_on_space(const Space& space, const float* grads, float* flag, float* entry) const {
    m_device.check(space, grads, flag, entry);
  }

  /// Host: Σ g² over the rows to step and the dense segments (the rest of the arena is zero).
  double squared_norm(const Space& space, const float* grads) const {
    return m_host.squared_norm(space, grads);
  }

  /// Host: the rows to step, as the optimizer's `step_rows` takes them.
  row_selection selection() const noexcept { return m_host.selection(); }

  /// Host: the optimizer's update of the rows to step (unless `skip`), then their gradient
  /// zeroed; an optimizer that fuses the two (`optimizer_fuses_rows`) does both in one pass.
  template <class Optimizer>
  void update(Optimizer& optimizer, const Space& space, const parameter_layout& layout,
              std::span<float> params, std::span<float> grads, std::span<float> state, bool skip,
              float rate, std::uint64_t t) const {
    const auto g = std::span<const float>(grads);
    if constexpr (optimizer_fuses_rows<Optimizer, Space>) {
      if (!skip) {
        optimizer.with_row_update(layout, params, g, state, rate, t, [&](const auto& fn) {
          m_host.visit_then_zero(space, fn, grads.data());
        });
        return;
      }
    }
    if constexpr (optimizer_steps_rows<Optimizer, Space>)
      if (!skip) optimizer.step_rows(space, layout, params, g, state, m_host.selection(), rate, t);
    m_host.zero(space, grads.data());
  }

  /// Device: the optimizer's update of the rows to step, whose kernels read the step's skip flag
  /// (`skip`) and, where the optimizer reads them from memory, its rate and step (`values`),
  /// so the host never waits; then their gradient zeroed.
  template <class Optimizer, class Values>
  void update_on_space(Optimizer& optimizer, const Space& space, const parameter_layout& layout,
                       std::span<float> params, std::span<float> grads, std::span<float> state,
                       const float* skip, const Values* values, float rate, std::uint64_t t) const {
    const auto g = std::span<const float>(grads);
    if constexpr (optimizer_steps_rows_from_memory<Optimizer, Space>) {
      (void)rate, (void)t;
      optimizer.step_rows_on_space(space, layout, params, g, state, m_device.selection(), skip,
                                   values);
    } else if constexpr (optimizer_steps_rows_on_space<Optimizer, Space>) {
      (void)values;
      optimizer.step_rows_on_space(space, layout, params, g, state, m_device.selection(), skip,
                                   rate, t);
    }
    m_device.zero(space, grads.data());
  }

 private:
  bool m_on = false;
  row_step m_host;                          // host spaces
  row_step_on_space<Space> m_device;        // spaces the host cannot read
  row_exchange_on_space<Space> m_exchange;  // and several ranks
};

}  // namespace tutti::detail
