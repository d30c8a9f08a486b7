// SPDX-License-Identifier: Apache-2.0
/// @file concepts/reducer.hpp
/// @brief The gradient-reducer slot of `tutti::trainer`: the `tutti::gradient_reducer`
/// concept, its check, and the reducer's optional capabilities.
#pragma once

#include <tutti/space/host.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti {
namespace detail {

template <class R>
concept reducer_has_rank = requires(const R& r) {
  { r.rank() } -> std::convertible_to<int>;
  { r.world_size() } -> std::convertible_to<int>;
};
template <class R>
concept reducer_has_all_reduce_mean = requires(R& r, std::span<float> g) {
  r.all_reduce_mean(g);
};
template <class R>
concept reducer_has_broadcast = requires(R& r, std::span<float> g, int root) {
  r.broadcast(g, root);
};
template <class R>
concept reducer_has_scalar_reductions = requires(R& r, std::span<double> x) {
  r.all_reduce_sum(x);
  r.all_reduce_max(x);
};
template <class R>
concept reducer_has_all_gather = requires(R& r, std::span<const std::uint64_t> mine,
                                          std::span<std::uint64_t> all) {
  r.all_gather(mine, all);
};
template <class R>
concept reducer_has_accepts = requires {
  { R::template accepts<host_space> } -> std::convertible_to<bool>;
};

template <class R>
concept names_set_position = requires {
  &R::set_position;
};
template <class R>
concept names_last_wait_seconds = requires {
  &R::last_wait_seconds;
};
template <class R>
concept names_wire_bytes = requires {
  &R::wire_bytes;
};
template <class R>
concept names_shared_gradient_arena = requires {
  &R::shared_gradient_arena;
};
template <class R>
concept names_callable_from_another_thread = requires {
  &R::callable_from_another_thread;
};
template <class R>
concept names_start_all_reduce_mean = requires {
  &R::start_all_reduce_mean;
};
template <class R>
concept names_clock_seconds = requires {
  &R::clock_seconds;
};

}  // namespace detail

/// A gradient reducer: averages gradients and reduces small values across ranks.
/// See docs/concepts.md#gradient-reducer.
template <class R>
concept gradient_reducer = detail::reducer_has_rank<R> && detail::reducer_has_all_reduce_mean<R> &&
    detail::reducer_has_broadcast<R> && detail::reducer_has_scalar_reductions<R> &&
    detail::reducer_has_all_gather<R> && detail::reducer_has_accepts<R>;

// ---- optional capabilities (docs/concepts.md#optional-capabilities) ----------------------------

/// Capability: told where the step is (`set_position(epoch, step)` before each step), so a
/// collective that times out can say where.
template <class R>
concept reducer_tracks_position = requires(R& r, std::size_t epoch, std::size_t step) {
  r.set_position(epoch, step);
};

/// Capability: the seconds its last `all_reduce_mean` waited for the slowest rank, which the
/// ledger charges to the wait account instead of the reduction's.
template <class R>
concept reducer_reports_wait = requires(const R& r) {
  { r.last_wait_seconds() } -> std::convertible_to<double>;
};

/// Capability: the bytes a mean of `floats` values moves (a compressing reducer moves fewer
/// than 4 per value), for the ledger and the sparse exchange's choice.
template <class R>
concept reducer_counts_wire_bytes = requires(const R& r, std::size_t floats) {
  { r.wire_bytes(floats) } -> std::convertible_to<std::uint64_t>;
};

/// Capability: keeps its own clock (`clock_seconds()`, seconds from any fixed origin), which
/// times the sparse exchange's trial steps (`sparse_exchange_policy::measured`) and, on host
/// spaces, the step accounts (the ledger, the rank table) in place of the host's steady clock:
/// a reducer over a simulated link reports the time that link would take, so a policy's choice
/// and the accounts can be tested from costs they are handed, never from timings.
template <class R>
concept reducer_keeps_clock = requires(const R& r) {
  { r.clock_seconds() } -> std::convertible_to<double>;
};

/// Capability: lends the gradient arena (`shared_gradient_arena(count)`: memory it reduces
/// without copies, or an empty span to decline), as `mpi_allreduce` does with a shared-memory
/// window. Host spaces.
template <class R>
concept reducer_lends_gradient_arena = requires(R& r, std::size_t count) {
  { r.shared_gradient_arena(count) } -> std::same_as<std::span<float>>;
};

/// Capability: says whether its collectives may run on another thread than the one that built
/// it (the overlapped reduction's communication thread); without it, they may.
template <class R>
concept reducer_says_thread_safety = requires(const R& r) {
  { r.callable_from_another_thread() } -> std::convertible_to<bool>;
};

/// Capability: starts a mean without waiting for it (`start_all_reduce_mean`), ordered after
/// the work already queued for its data, and orders later work after everything it started
/// (`finish_started`). Enables the overlapped reduction on a device space (`nccl_ring`).
template <class R>
concept reducer_starts_collectives = requires(R& r, std::span<float> s) {
  r.start_all_reduce_mean(s);
  r.finish_started();
};

/// Capability: gathers every rank's `mine` (memory of the model's space) into `all`, rank-major,
/// without the host waiting (`nccl_ring`: `ncclAllGather` on its stream). Enables the row-sparse
/// step on several device ranks: the touched rows and their gradients travel by all_gather,
/// never as the dense table.
template <class R>
concept reducer_gathers_on_space = requires(R& r, std::span<const std::int32_t> ids,
                                            std::span<std::int32_t> all_ids,
                                            std::span<const float> values,
                                            std::span<float> all_values) {
  r.all_gather_on_space(ids, all_ids);
  r.all_gather_on_space(values, all_values);
};

/// Asserts `tutti::gradient_reducer` member by member, then that a member with an optional
/// capability's name has its signature; returns true when all hold.
template <class R>
consteval bool check_gradient_reducer() {
  static_assert(detail::reducer_has_rank<R>,
                "tutti::gradient_reducer: missing `int rank() const` and `int world_size() const` "
                "(see docs/concepts.md#gradient-reducer)");
  static_assert(detail::reducer_has_all_reduce_mean<R>,
                "tutti::gradient_reducer: missing `void all_reduce_mean(std::span<float>)` "
                "(see docs/concepts.md#gradient-reducer)");
  static_assert(detail::reducer_has_broadcast<R>,
                "tutti::gradient_reducer: missing `void broadcast(std::span<float>, int root)` "
                "(see docs/concepts.md#gradient-reducer)");
  static_assert(detail::reducer_has_scalar_reductions<R>,
                "tutti::gradient_reducer: missing `void all_reduce_sum(std::span<double>)` and "
                "`void all_reduce_max(std::span<double>)` (see docs/concepts.md#gradient-reducer)");
  static_assert(detail::reducer_has_all_gather<R>,
                "tutti::gradient_reducer: missing `void all_gather(std::span<const std::uint64_t> "
                "mine, std::span<std::uint64_t> all)` (see docs/concepts.md#gradient-reducer)");
  static_assert(detail::reducer_has_accepts<R>,
                "tutti::gradient_reducer: missing `template <class Space> static constexpr bool "
                "accepts` (see docs/concepts.md#gradient-reducer)");
  static_assert(!detail::names_set_position<R> || reducer_tracks_position<R>,
                "tutti::gradient_reducer: `set_position` is not the capability "
                "tutti::reducer_tracks_position; expected `void set_position(std::size_t epoch, "
                "std::size_t step)` (see docs/concepts.md#optional-capabilities)");
  static_assert(!detail::names_last_wait_seconds<R> || reducer_reports_wait<R>,
                "tutti::gradient_reducer: `last_wait_seconds` is not the capability "
                "tutti::reducer_reports_wait; expected `double last_wait_seconds() const` "
                "(see docs/concepts.md#optional-capabilities)");
  static_assert(!detail::names_wire_bytes<R> || reducer_counts_wire_bytes<R>,
                "tutti::gradient_reducer: `wire_bytes` is not the capability "
                "tutti::reducer_counts_wire_bytes; expected `std::uint64_t wire_bytes(std::size_t "
                "floats) const` (see docs/concepts.md#optional-capabilities)");
  static_assert(
      !detail::names_shared_gradient_arena<R> || reducer_lends_gradient_arena<R>,
      "tutti::gradient_reducer: `shared_gradient_arena` is not the capability "
      "tutti::reducer_lends_gradient_arena; expected `std::span<float> "
      "shared_gradient_arena(std::size_t count)` (see docs/concepts.md#optional-capabilities)");
  static_assert(
      !detail::names_callable_from_another_thread<R> || reducer_says_thread_safety<R>,
      "tutti::gradient_reducer: `callable_from_another_thread` is not the capability "
      "tutti::reducer_says_thread_safety; expected `bool "
      "callable_from_another_thread() const` (see docs/concepts.md#optional-capabilities)");
  static_assert(!detail::names_start_all_reduce_mean<R> || reducer_starts_collectives<R>,
                "tutti::gradient_reducer: `start_all_reduce_mean` is not the capability "
                "tutti::reducer_starts_collectives; expected `void "
                "start_all_reduce_mean(std::span<float>)` and `void finish_started()` "
                "(see docs/concepts.md#optional-capabilities)");
  static_assert(!detail::names_clock_seconds<R> || reducer_keeps_clock<R>,
                "tutti::gradient_reducer: `clock_seconds` is not the capability "
                "tutti::reducer_keeps_clock; expected `double clock_seconds() const` "
                "(see docs/concepts.md#optional-capabilities)");
  return true;
}

}  // namespace tutti
