// SPDX-License-Identifier: Apache-2.0
/// @file concepts.hpp
/// @brief The five policy slots of `tutti::trainer` as C++20 concepts, with readable checks.
///
/// Each concept is the conjunction of one small concept per member, so `check_*<T>()` can
/// `static_assert` them one by one and the compiler's message names the concept, the missing
/// member and the page of docs/concepts.md that shows a minimal class to copy.
#pragma once

#include <tutti/batch.hpp>
#include <tutti/layout.hpp>
#include <tutti/samplers/shard.hpp>
#include <tutti/space/host.hpp>
#include <tutti/space/traits.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace tutti {
namespace detail {

// ---- model -----------------------------------------------------------------------------------
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
template <class M>
concept model_has_initialize = model_has_value_type<M> &&
    requires(const M& m, std::span<typename M::value_type> p, std::uint64_t seed) {
  m.initialize(p, seed);
};
template <class M>
concept model_has_loss_and_gradient = model_has_value_type<M> &&
    requires(M& m, std::span<const typename M::value_type> p, const batch_view& b,
             std::span<typename M::value_type> g, typename M::value_type scale,
             typename M::value_type* loss_sum) {
  m.loss_and_gradient(p, b, g, scale, loss_sum);
};
template <class M>
concept model_has_predict = model_has_value_type<M> &&
    requires(M& m, std::span<const typename M::value_type> p, std::span<const std::int32_t> ids,
             std::span<typename M::value_type> out) {
  m.predict(p, ids, ids, out);
};

// ---- shard sampler ---------------------------------------------------------------------------
template <class S>
concept sampler_has_shard = requires(const S& s, std::size_t n, int world, int rank,
                                     std::uint64_t seed, std::uint64_t epoch) {
  { s.shard(n, world, rank, seed, epoch) } -> std::convertible_to<shard>;
};

// ---- gradient reducer ------------------------------------------------------------------------
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

// ---- LR schedule -----------------------------------------------------------------------------
template <class S>
concept schedule_has_lr = requires(const S& s, std::size_t step, std::size_t total, double base) {
  { s.lr(step, total, base) } -> std::convertible_to<double>;
};

// ---- optimizer -------------------------------------------------------------------------------
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

}  // namespace detail

/// A model: describes its parameter layout and computes loss, gradients and predictions on its
/// execution space. See docs/concepts.md#model.
template <class M>
concept model = detail::model_has_space<M> && detail::model_has_value_type<M> &&
    detail::model_has_layout<M> && detail::model_has_loss<M> && detail::model_has_initialize<M> &&
    detail::model_has_loss_and_gradient<M> && detail::model_has_predict<M>;

/// A shard sampler: gives each rank its share of an epoch's samples.
/// See docs/concepts.md#shard-sampler.
template <class S>
concept shard_sampler = detail::sampler_has_shard<S>;

/// A rank-local shard sampler: each rank holds only its own rows and `fit` receives just those.
/// It says so with `static constexpr bool rank_local = true` and names every rank's row count
/// with `rows_of(rank)`, so the trainer can weigh steps and evaluate across ranks.
/// See docs/samplers.md#owned_shards.
template <class S>
concept rank_local_sampler = shard_sampler<S> && requires(const S& s, int rank) {
  { S::rank_local } -> std::convertible_to<bool>;
  { s.rows_of(rank) } -> std::convertible_to<std::uint64_t>;
} && S::rank_local;

/// A gradient reducer: averages gradients and reduces small values across ranks.
/// See docs/concepts.md#gradient-reducer.
template <class R>
concept gradient_reducer = detail::reducer_has_rank<R> && detail::reducer_has_all_reduce_mean<R> &&
    detail::reducer_has_broadcast<R> && detail::reducer_has_scalar_reductions<R> &&
    detail::reducer_has_all_gather<R> && detail::reducer_has_accepts<R>;

/// A learning-rate schedule: the rate at a step. See docs/concepts.md#lr-schedule.
template <class S>
concept lr_schedule = detail::schedule_has_lr<S>;

/// An optimizer for parameters on `Space`: one fused pass over the arena.
/// See docs/concepts.md#optimizer.
template <class O, class Space = host_space>
concept optimizer = detail::optimizer_has_state_size<O> && detail::optimizer_has_step<O, Space>;

// The checks below are called by `tutti::trainer`; each failed requirement prints one message.

/// Asserts `tutti::model` member by member; returns true when all hold.
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
  static_assert(detail::model_has_initialize<M>,
                "tutti::model: missing `void initialize(std::span<value_type> params, "
                "std::uint64_t seed) const` (see docs/concepts.md#model)");
  static_assert(detail::model_has_loss_and_gradient<M>,
                "tutti::model: missing `void loss_and_gradient(std::span<const value_type> params, "
                "const tutti::batch_view&, std::span<value_type> grads, value_type scale, "
                "value_type* loss_sum)` (see docs/concepts.md#model)");
  static_assert(detail::model_has_predict<M>,
                "tutti::model: missing `void predict(std::span<const value_type> params, "
                "std::span<const std::int32_t> users, std::span<const std::int32_t> items, "
                "std::span<value_type> out)` (see docs/concepts.md#model)");
  return true;
}

/// Asserts `tutti::shard_sampler`; returns true when it holds.
template <class S>
consteval bool check_shard_sampler() {
  static_assert(detail::sampler_has_shard<S>,
                "tutti::shard_sampler: missing `tutti::shard shard(std::size_t n, int world_size, "
                "int rank, std::uint64_t seed, std::uint64_t epoch) const` "
                "(see docs/concepts.md#shard-sampler)");
  return true;
}

/// Asserts `tutti::gradient_reducer` member by member; returns true when all hold.
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
  return true;
}

/// Asserts `tutti::lr_schedule`; returns true when it holds.
template <class S>
consteval bool check_lr_schedule() {
  static_assert(detail::schedule_has_lr<S>,
                "tutti::lr_schedule: missing `double lr(std::size_t step, std::size_t total_steps, "
                "double base_lr) const` (see docs/concepts.md#lr-schedule)");
  return true;
}

/// Asserts `tutti::optimizer` for `Space` member by member; returns true when all hold.
template <class O, class Space>
consteval bool check_optimizer() {
  static_assert(detail::optimizer_has_state_size<O>,
                "tutti::optimizer: missing `std::size_t state_size(std::size_t parameters) const` "
                "(see docs/concepts.md#optimizer)");
  static_assert(detail::optimizer_has_step<O, Space>,
                "tutti::optimizer: missing `template <class Space> void step(const Space&, "
                "std::span<float> params, std::span<const float> grads, std::span<float> state, "
                "float lr, std::uint64_t step) const` (see docs/concepts.md#optimizer)");
  return true;
}

}  // namespace tutti
