// SPDX-License-Identifier: Apache-2.0
/// @file concepts/sampler.hpp
/// @brief The shard-sampler slot of `tutti::trainer`: the `tutti::shard_sampler` concept, its
/// check, and the sampler's optional capabilities.
#pragma once

#include <tutti/shard.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace tutti {
namespace detail {

template <class S>
concept sampler_has_shard = requires(const S& s, std::size_t n, int world, int rank,
                                     std::uint64_t seed, std::uint64_t epoch) {
  { s.shard(n, world, rank, seed, epoch) } -> std::convertible_to<shard>;
};

template <class S>
concept names_shard_from = requires {
  &S::shard_from;
};
template <class S>
concept names_rows_of = requires {
  &S::rows_of;
};
template <class S>
concept says_rank_local = requires {
  { S::rank_local } -> std::convertible_to<bool>;
}
&&bool(S::rank_local);

}  // namespace detail

/// A shard sampler: gives each rank its share of an epoch's samples.
/// See docs/concepts.md#shard-sampler.
template <class S>
concept shard_sampler = detail::sampler_has_shard<S>;

// ---- optional capabilities (docs/concepts.md#optional-capabilities) ----------------------------

/// Capability: a rank-local sampler. Each rank holds only its own rows and `fit` receives just
/// those. It says so with `static constexpr bool rank_local = true` and names every rank's row
/// count with `rows_of(rank)`, so the trainer can weigh steps and evaluate across ranks.
/// See docs/samplers.md#owned_shards.
template <class S>
concept rank_local_sampler = shard_sampler<S> && requires(const S& s, int rank) {
  { S::rank_local } -> std::convertible_to<bool>;
  { s.rows_of(rank) } -> std::convertible_to<std::uint64_t>;
} && S::rank_local;

/// Capability: writes a shard's positions and weights into memory of a space by a kernel.
/// `outline_from(n, world, rank, seed, epoch, start)` returns `shard_from`'s shard without its
/// positions, and `fill_on_space(space, n, world, rank, seed, epoch, start, indices, weights)`
/// writes that shard's positions and weights into the space's memory. A trainer on a device
/// then never builds an epoch's permutation on the host nor copies it over.
/// See docs/samplers.md#shuffled_shards.
template <class S, class Space>
concept sampler_fills_on_space = requires(const S& s, const Space& space, std::size_t n, int world,
                                          int rank, std::uint64_t seed, std::uint64_t epoch,
                                          std::size_t start, std::uint64_t* indices,
                                          float* weights) {
  { s.outline_from(n, world, rank, seed, epoch, start) } -> std::convertible_to<shard>;
  s.fill_on_space(space, n, world, rank, seed, epoch, start, indices, weights);
};

/// Capability: writes the positions of any run of a shard's slots. `outline_from(n, world, rank,
/// seed, epoch, start)` returns `shard_from`'s shard without its positions, and `fill_slots(n,
/// world, rank, seed, epoch, start, first, count, indices)` writes the positions of its slots
/// [first, first + count) into host memory. A trainer on the host then deals each step's
/// positions as it takes the step: it holds no array of a position a slot for the epoch.
/// See docs/samplers.md#each-steps-positions-dealt-as-the-step-is-taken.
template <class S>
concept sampler_fills_slots = requires(const S& s, std::size_t n, int world, int rank,
                                       std::uint64_t seed, std::uint64_t epoch, std::size_t start,
                                       std::size_t first, std::size_t count,
                                       std::uint64_t* indices) {
  { s.outline_from(n, world, rank, seed, epoch, start) } -> std::convertible_to<shard>;
  s.fill_slots(n, world, rank, seed, epoch, start, first, count, indices);
};

/// Capability: deals what is left of an epoch after its first `start_pos` positions anew.
/// Enables resuming a checkpoint written mid-epoch on another world size.
template <class S>
concept sampler_can_reshard = requires(const S& s, std::size_t n, int world, int rank,
                                       std::uint64_t seed, std::uint64_t epoch,
                                       std::size_t start_pos) {
  { s.shard_from(n, world, rank, seed, epoch, start_pos) } -> std::convertible_to<shard>;
};

/// Asserts `tutti::shard_sampler`, then that a member with an optional capability's name has
/// its signature; returns true when all hold.
template <class S>
consteval bool check_shard_sampler() {
  static_assert(detail::sampler_has_shard<S>,
                "tutti::shard_sampler: missing `tutti::shard shard(std::size_t n, int world_size, "
                "int rank, std::uint64_t seed, std::uint64_t epoch) const` "
                "(see docs/concepts.md#shard-sampler)");
  static_assert(!detail::names_shard_from<S> || sampler_can_reshard<S>,
                "tutti::shard_sampler: `shard_from` is not the capability "
                "tutti::sampler_can_reshard; expected `tutti::shard shard_from(std::size_t n, int "
                "world_size, int rank, std::uint64_t seed, std::uint64_t epoch, std::size_t "
                "start_pos) const` (see docs/concepts.md#optional-capabilities)");
  static_assert(!detail::names_rows_of<S> || !detail::says_rank_local<S> || rank_local_sampler<S>,
                "tutti::shard_sampler: `rank_local` is true and `rows_of` is not the capability "
                "tutti::rank_local_sampler; expected `std::uint64_t rows_of(int rank) const` "
                "(see docs/concepts.md#optional-capabilities)");
  return true;
}

}  // namespace tutti
