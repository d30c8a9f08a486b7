// SPDX-License-Identifier: Apache-2.0
/// @file concepts/optimizer.hpp
/// @brief The optimizer slot of `tutti::trainer`: the `tutti::optimizer` concept, its check,
/// and the optimizer's optional capabilities.
#pragma once

#include <tutti/layout.hpp>
#include <tutti/space/host.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

namespace tutti {
namespace detail {

template <class O>
concept optimizer_has_state_size = requires(const O& o, std::size_t n) {
  { o.state_size(n) } -> std::convertible_to<std::size_t>;
};
template <class O, class Space>
concept optimizer_has_step = requires(const O& o, const Space& space, std::span<float> p,
                                      std::span<const float> g, std::span<float> state, float lr,
                                      std::uint64_t t) {
  o.step(space, p, g, state, lr, t);
};

template <class O>
concept names_row_sparse_step = requires {
  &O::row_sparse;
}
|| requires {
  &O::step_rows;
};

}  // namespace detail

/// An optimizer for parameters on `Space`: one fused pass over the arena.
/// See docs/concepts.md#optimizer.
template <class O, class Space = host_space>
concept optimizer = detail::optimizer_has_state_size<O> && detail::optimizer_has_step<O, Space>;

// ---- optional capabilities (docs/concepts.md#optional-capabilities) ----------------------------

/// Capability: a state size that depends on the layout (row-wise Adagrad keeps one float per
/// embedding row). Without it the trainer asks `state_size(n)`.
template <class O>
concept optimizer_sizes_state_by_layout = requires(const O& o, const parameter_layout& layout) {
  { o.state_size(layout) } -> std::convertible_to<std::size_t>;
};

/// Capability: a step that sees the layout (LARS and LAMB take a trust ratio per segment); the
/// trainer calls it instead of the plain `step`.
template <class O, class Space>
concept optimizer_steps_by_layout = requires(const O& o, const Space& space,
                                             const parameter_layout& layout, std::span<float> p,
                                             std::span<const float> g, std::span<float> state,
                                             float lr, std::uint64_t t) {
  o.step(space, layout, p, g, state, lr, t);
};

/// Capability: `step_rows` updates only the selected rows (their gradients hold the step's
/// values; every other row's gradient is zero and is not read), and `row_sparse()` says whether
/// this optimizer wants the row-sparse step (a run-time choice, so a policy that picks an
/// optimizer by name can hold dense and row-sparse ones). The trainer takes the row-sparse step
/// on a host space with a model that reports its touched rows.
template <class O, class Space>
concept optimizer_steps_rows = requires(const O& o, const Space& space,
                                        const parameter_layout& layout, std::span<float> p,
                                        std::span<const float> g, std::span<float> state,
                                        row_selection rows, float lr, std::uint64_t t) {
  { o.row_sparse() } -> std::convertible_to<bool>;
  o.step_rows(space, layout, p, g, state, rows, lr, t);
};

/// Capability: `step_rows_on_space` is `step_rows` on a space the host cannot read (a GPU): the
/// selection's rows and their count live in the space's memory, and every kernel does nothing
/// when `*skip` is set (the step's finite guard, also in the space's memory; null: never).
template <class O, class Space>
concept optimizer_steps_rows_on_space = requires(const O& o, const Space& space,
                                                 const parameter_layout& layout, std::span<float> p,
                                                 std::span<const float> g, std::span<float> state,
                                                 row_selection_on_space rows, const float* skip,
                                                 float lr, std::uint64_t t) {
  { o.row_sparse() } -> std::convertible_to<bool>;
  o.step_rows_on_space(space, layout, p, g, state, rows, skip, lr, t);
};

/// What `row_step_values` returns: the optimizer's values of one row-sparse step.
template <class O>
using row_step_values_t = decltype(std::declval<const O&>().row_step_values(
    std::declval<const parameter_layout&>(), std::span<float>{}, std::span<const float>{},
    std::span<float>{}, 0.f, std::uint64_t{}));

/// Capability: the row-sparse step on a space the host cannot read, with what changes from step
/// to step (the rate, the bias corrections of step t) read from the space's memory.
/// `row_step_values(layout, params, grads, state, lr, step)` checks the step and returns those
/// values as one trivially copyable object (host code); the trainer copies it into the space,
/// and `step_rows_on_space(..., skip, values)` runs the kernels of `step_rows_on_space(..., skip,
/// lr, step)`, which read `*values` there. Every kernel of such a step has the same arguments at
/// every step, so a trainer can replay the step from a graph (`tutti::space_captures_steps`).
template <class O, class Space>
concept optimizer_steps_rows_from_memory = optimizer_steps_rows_on_space<O, Space> &&
    requires(const O& o, const Space& space, const parameter_layout& layout, std::span<float> p,
             std::span<const float> g, std::span<float> state, row_selection_on_space rows,
             const float* skip) {
  requires std::is_trivially_copyable_v<row_step_values_t<O>>;
  o.step_rows_on_space(space, layout, p, g, state, rows, skip,
                       static_cast<const row_step_values_t<O>*>(nullptr));
};

namespace detail {
/// Stands for any caller of a run function in `optimizer_fuses_rows`.
struct any_row_use {
  template <class Fn>
  void operator()(const Fn&) const {}
};
}  // namespace detail

/// Capability: `with_row_update(layout, params, grads, state, lr, step, use)` calls
/// `use(fn)` once with the row-sparse step as a function of one run of rows
/// (`fn(const detail::row_run&)`, optionally `fn.prefetch(run)`): `step_rows` is `fn` over every
/// run of the selection. A run's update reads the gradient of that run only, at `grads[run.grad]`
/// on (the run's own place in the arena, or its slots in a gradient sized by the batch, which
/// may then be smaller than `params`), so the trainer visits each run once for the update and
/// its own work on the same rows (zeroing the gradient while it is in cache) instead of one pass
/// each.
template <class O, class Space>
concept optimizer_fuses_rows = optimizer_steps_rows<O, Space> &&
    requires(const O& o, const parameter_layout& layout, std::span<float> p,
             std::span<const float> g, std::span<float> state, float lr, std::uint64_t t) {
  o.with_row_update(layout, p, g, state, lr, t, detail::any_row_use{});
};

/// Asserts `tutti::optimizer` for `Space` member by member, then that the row-sparse
/// capability's members have their signatures; returns true when all hold.
template <class O, class Space>
consteval bool check_optimizer() {
  static_assert(detail::optimizer_has_state_size<O>,
                "tutti::optimizer: missing `std::size_t state_size(std::size_t parameters) const` "
                "(see docs/concepts.md#optimizer)");
  static_assert(detail::optimizer_has_step<O, Space>,
                "tutti::optimizer: missing `template <class Space> void step(const Space&, "
                "std::span<float> params, std::span<const float> grads, std::span<float> state, "
                "float lr, std::uint64_t step) const` (see docs/concepts.md#optimizer)");
  static_assert(!detail::names_row_sparse_step<O> || optimizer_steps_rows<O, host_space>,
                "tutti::optimizer: `row_sparse` or `step_rows` is not the capability "
                "tutti::optimizer_steps_rows; expected `bool row_sparse() const` and `template "
                "<class Space> void step_rows(const Space&, const tutti::parameter_layout&, "
                "std::span<float> params, std::span<const float> grads, std::span<float> state, "
                "tutti::row_selection rows, float lr, std::uint64_t step) const` on a host space "
                "(see docs/concepts.md#optional-capabilities)");
  return true;
}

}  // namespace tutti
