// SPDX-License-Identifier: Apache-2.0
/// @file concepts/model.hpp
/// @brief The model slot of `tutti::trainer`: the `tutti::model` concept, its check, and the
/// model's optional capabilities.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/gradient_ready.hpp>
#include <tutti/layout.hpp>
#include <tutti/space/traits.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace tutti {
namespace detail {

template <class M>
concept model_has_space = requires(const M& m) {
  typename M::space_type;
  requires execution_space<typename M::space_type>;
  { m.space() } -> std::convertible_to<const typename M::space_type&>;
};
template <class M>
concept model_has_value_type = requires {
  typename M::value_type;
};
template <class M>
concept model_has_layout = requires(const M& m) {
  { m.layout() } -> std::convertible_to<const parameter_layout&>;
};
template <class M>
concept model_has_loss = requires(const M& m) {
  { m.loss() } -> std::convertible_to<loss_kind>;
};
template <class M, class T>
concept model_initializes = requires(const M& m, std::span<T> p, std::uint64_t seed) {
  m.initialize(p, seed);
};
template <class M, class T>
concept model_computes_gradient = requires(M& m, std::span<const T> p, const batch_view& b,
                                           std::span<T> g, T scale, T* loss_sum) {
  m.loss_and_gradient(p, b, g, scale, loss_sum);
};
template <class M, class T>
concept model_predicts = requires(M& m, std::span<const T> p, std::span<const std::int32_t> ids,
                                  std::span<T> out) {
  m.predict(p, ids, ids, out);
};
template <class M>
concept model_has_initialize =
    model_has_value_type<M> && model_initializes<M, typename M::value_type>;
template <class M>
concept model_has_loss_and_gradient =
    model_has_value_type<M> && model_computes_gradient<M, typename M::value_type>;
template <class M>
concept model_has_predict = model_has_value_type<M> && model_predicts<M, typename M::value_type>;

// `initialize` callable, but only on a non-const model.
template <class M>
concept model_initializes_if_mutable = model_has_value_type<M> &&
    requires(M& m, std::span<typename M::value_type> p, std::uint64_t seed) {
  m.initialize(p, seed);
};

// The members are written for float while `value_type` names another type: the one cause of
// what would otherwise read as three missing members.
template <class M>
concept model_value_type_mismatch =
    model_has_value_type<M> && !std::same_as<typename M::value_type, float> &&
    !model_has_initialize<M> && !model_has_loss_and_gradient<M> && !model_has_predict<M> &&
    model_initializes<M, float> && model_computes_gradient<M, float> && model_predicts<M, float>;

template <class M>
concept names_initialize = requires {
  &M::initialize;
};
template <class M>
concept names_loss_and_gradient = requires {
  &M::loss_and_gradient;
};
template <class M>
concept names_predict = requires {
  &M::predict;
};

// A member with a capability's name (one that is not overloaded; `&T::name` names it).
template <class M>
concept names_touched_rows = requires {
  &M::touched_rows;
};
template <class M>
concept names_row_sparse = requires {
  &M::row_sparse;
};

}  // namespace detail

/// A model: describes its parameter layout and computes loss, gradients and predictions on its
/// execution space. See docs/concepts.md#model.
template <class M>
concept model = detail::model_has_space<M> && detail::model_has_value_type<M> &&
    detail::model_has_layout<M> && detail::model_has_loss<M> && detail::model_has_initialize<M> &&
    detail::model_has_loss_and_gradient<M> && detail::model_has_predict<M>;

// ---- optional capabilities (docs/concepts.md#optional-capabilities) ----------------------------

/// Capability: the rows of a segment its last `loss_and_gradient` call touched (unique,
/// ascending, host memory). Enables the sparse exchange and the row-sparse optimizers.
template <class M>
concept model_reports_touched_rows = requires(const M& m, std::size_t segment) {
  { m.touched_rows(segment) } -> std::convertible_to<std::span<const std::int32_t>>;
};

/// Capability: `m.write_gradient_to_slots(std::optional<parameter_layout> gradients)`. Given a
/// layout of the model's segments (same names, columns and order, each row-sparse segment with
/// as many rows as the distinct rows a batch may touch), every later `loss_and_gradient` takes
/// a `grads` arena of `gradients->total()` values and adds the gradient of the k-th row
/// `touched_rows(s)` lists to row k of segment s (a dense segment where `gradients` puts it):
/// the gradient is sized by the batch, not the tables. `std::nullopt` goes back to the model's
/// own layout. The row-sparse step of one rank on a host space uses it (docs/training.md).
template <class M>
concept model_writes_gradient_slots = model_reports_touched_rows<M> &&
    requires(M& m, std::optional<parameter_layout> gradients) {
  m.write_gradient_to_slots(gradients);
};

/// Capability: the model checks, as it writes them, the values its last `loss_and_gradient` call
/// added to the rows of its row-sparse segments; `row_gradient_finite()` true says every one is
/// finite (false says nothing). The row-sparse step of one rank without accumulation then checks
/// only the dense segments itself, instead of reading the touched rows again.
template <class M>
concept model_checks_row_gradient = requires(const M& m) {
  { m.row_gradient_finite() } -> std::convertible_to<bool>;
};

/// Capability: the rows of a segment its last `loss_and_gradient` call touched, in the memory
/// of the model's space (`segment_rows_on_space`, not `whole`), found there without a copy to
/// the host. Enables the row-sparse step on a space the host cannot read (a GPU).
template <class M>
concept model_reports_touched_rows_on_space = requires(const M& m, std::size_t segment) {
  { m.touched_rows_on_space(segment) } -> std::convertible_to<segment_rows_on_space>;
};

/// Capability: `M::repeats_its_kernels` is true: once a `loss_and_gradient` call has seen a batch
/// of some size, every later call with a batch of that size (in the same memory) enqueues the
/// same kernels with the same arguments, allocates nothing that outlives the call and reads
/// nothing back to the host. Its device step can then be recorded once and replayed
/// (`tutti::space_captures_steps`); a model that draws per call (dropout) or sizes its work from
/// the data on the host must not say so.
template <class M>
concept model_repeats_its_kernels = requires {
  requires M::repeats_its_kernels;
};

/// Capability: which segments are row-sparse (otherwise: those of kind embedding).
template <class M>
concept model_names_row_sparse = requires(const M& m, std::size_t segment) {
  { m.row_sparse(segment) } -> std::convertible_to<bool>;
};

/// Capability: `loss_and_gradient` with a sixth argument, a `tutti::gradient_ready` it calls
/// as backward makes ranges of the gradient final. Enables the overlapped reduction to hide
/// behind backward (`reports_gradient_ready`, gradient_ready.hpp).
template <class M>
concept model_reports_gradient_ready = reports_gradient_ready<M>;

// The checks below are called by `tutti::trainer`; each failed requirement prints one message.

/// Asserts `tutti::model` member by member, then that a member with an optional capability's
/// name has its signature; returns true when all hold.
template <class M>
consteval bool check_model() {
  static_assert(detail::model_has_space<M>,
                "tutti::model: missing `using space_type = <execution space>;` and "
                "`const space_type& space() const` (see docs/concepts.md#model)");
  static_assert(detail::model_has_value_type<M>,
                "tutti::model: missing `using value_type = float;` (see docs/concepts.md#model)");
  static_assert(detail::model_has_layout<M>,
                "tutti::model: missing `const tutti::parameter_layout& layout() const` "
                "(see docs/concepts.md#model)");
  static_assert(
      detail::model_has_loss<M>,
      "tutti::model: missing `tutti::loss_kind loss() const` (see docs/concepts.md#model)");
  // One message per mistake: the value type first, then each member either missing or present
  // with another signature.
  constexpr bool mismatch = detail::model_value_type_mismatch<M>;
  static_assert(!mismatch,
                "tutti::model: `value_type` is not float, while initialize, loss_and_gradient and "
                "predict take float; expected `using value_type = float;` (a model meant for "
                "gradient checks in double is written on its value type: see "
                "docs/concepts.md#checking-a-models-gradient)");
  constexpr bool init = mismatch || detail::model_has_initialize<M>;
  static_assert(init || !detail::model_initializes_if_mutable<M>,
                "tutti::model: `initialize` is not const; expected `void "
                "initialize(std::span<value_type> params, std::uint64_t seed) const` (see "
                "docs/concepts.md#model)");
  static_assert(init || detail::model_initializes_if_mutable<M> || !detail::names_initialize<M>,
                "tutti::model: `initialize` has another signature; expected `void "
                "initialize(std::span<value_type> params, std::uint64_t seed) const` (see "
                "docs/concepts.md#model)");
  static_assert(init || detail::names_initialize<M>,
                "tutti::model: missing `void initialize(std::span<value_type> params, "
                "std::uint64_t seed) const` (see docs/concepts.md#model)");
  constexpr bool grad = mismatch || detail::model_has_loss_and_gradient<M>;
  static_assert(grad || !detail::names_loss_and_gradient<M>,
                "tutti::model: `loss_and_gradient` has another signature; expected `void "
                "loss_and_gradient(std::span<const value_type> params, const tutti::batch_view&, "
                "std::span<value_type> grads, value_type scale, value_type* loss_sum)` (see "
                "docs/concepts.md#model)");
  static_assert(grad || detail::names_loss_and_gradient<M>,
                "tutti::model: missing `void loss_and_gradient(std::span<const value_type> params, "
                "const tutti::batch_view&, std::span<value_type> grads, value_type scale, "
                "value_type* loss_sum)` (see docs/concepts.md#model)");
  constexpr bool pred = mismatch || detail::model_has_predict<M>;
  static_assert(pred || !detail::names_predict<M>,
                "tutti::model: `predict` has another signature; expected `void "
                "predict(std::span<const value_type> params, std::span<const std::int32_t> users, "
                "std::span<const std::int32_t> items, std::span<value_type> out)` (see "
                "docs/concepts.md#model)");
  static_assert(pred || detail::names_predict<M>,
                "tutti::model: missing `void predict(std::span<const value_type> params, "
                "std::span<const std::int32_t> users, std::span<const std::int32_t> items, "
                "std::span<value_type> out)` (see docs/concepts.md#model)");
  static_assert(
      !detail::names_touched_rows<M> || model_reports_touched_rows<M>,
      "tutti::model: `touched_rows` is not the capability "
      "tutti::model_reports_touched_rows; expected `std::span<const std::int32_t> "
      "touched_rows(std::size_t segment) const` (see docs/concepts.md#optional-capabilities)");
  static_assert(!detail::names_row_sparse<M> || model_names_row_sparse<M>,
                "tutti::model: `row_sparse` is not the capability tutti::model_names_row_sparse; "
                "expected `bool row_sparse(std::size_t segment) const` (see "
                "docs/concepts.md#optional-capabilities)");
  return true;
}

}  // namespace tutti
