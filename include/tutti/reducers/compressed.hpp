// SPDX-License-Identifier: Apache-2.0
/// @file reducers/compressed.hpp
/// @brief `tutti::compressed<R, bf16>`: a reducer decorator that all-reduces gradients in
/// bfloat16, halving the bytes on the wire, with an fp32 pre-divide against overflow and fp32
/// accumulation.
///
/// The trainer's gradient arena ends with two flag floats (this rank's finite flag, its stop
/// request) whose only meaning is "nonzero on some rank". They travel compressed like the
/// gradients: after the pre-divide a flag of 1 becomes 1/W, which bf16 represents as a nonzero
/// (exactly for W a power of two, to 2^-8 relative otherwise), and a sum of nonnegative nonzero
/// terms stays nonzero; a NaN or an infinity stays non-finite through the division, the rounding
/// and the sum. `tests/test_compressed.cpp` checks that a NaN and a flag survive.
#pragma once

#include <tutti/concepts/reducer.hpp>
#include <tutti/detail/bf16.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace tutti {

namespace detail {

template <class R>
concept reducer_has_all_reduce_sum_bf16 = requires(R& r, std::span<std::uint16_t> v) {
  r.all_reduce_sum_bf16(v);
};
template <class R>
concept reducer_has_bytes_reduced = requires(const R& r) {
  { r.bytes_reduced() } -> std::convertible_to<std::uint64_t>;
};

}  // namespace detail

/// Wraps the reducer `R` so that `all_reduce_mean` of float gradients moves bf16: each rank
/// divides its gradient by W in fp32 (so the sum of W terms cannot overflow where the mean would
/// not), rounds it to bf16 (ties to even), the ranks sum the bf16 values with additions done in
/// fp32 and one rounding per hop (`R::all_reduce_sum_bf16`), and the result is widened back into
/// the float span. Each element of the mean is within 2^-8 · (mean of |x| + |mean|) of the exact
/// mean of its inputs on `local_ring` (one rounding of the terms, one of the sum; each further
/// hop that rounds adds 2^-8 of its partial sum); every rank gets the same bits when `R` gives
/// them for its sum (`local_ring`, `single_rank`, and `mpi_allreduce` as MPI advises). Even with
/// W = 1 the gradient is rounded to bf16, so a run's precision does not depend on its world size.
///
/// Everything else (`broadcast`, `all_reduce_sum`, `all_reduce_max`, `all_gather`, `rank`,
/// `world_size`, and `set_position`, `last_wait_seconds` and `bytes_reduced` where `R` has them)
/// is forwarded to `R` unchanged and uncompressed: parameters and scalars must stay exact.
///
/// @tparam R a `tutti::gradient_reducer` with `void all_reduce_sum_bf16(std::span<std::uint16_t>)`
/// (`local_ring`, `single_rank`, `mpi_allreduce`)
/// @tparam Format the wire format; only `tutti::bf16`
template <class R, class Format = bf16>
class compressed {
  static_assert(std::is_same_v<Format, bf16>,
                "tutti::compressed<R, Format>: the only format is tutti::bf16 "
                "(see docs/reducers.md#compressedr-bf16)");
  static_assert(detail::reducer_has_all_reduce_sum_bf16<R>,
                "tutti::compressed<R, bf16>: R is missing `void "
                "all_reduce_sum_bf16(std::span<std::uint16_t>)`, the bf16 sum it reduces with "
                "(local_ring, single_rank and mpi_allreduce have it; see "
                "docs/reducers.md#compressedr-bf16)");

 public:
  /// The conversions run on the host, so only host memory for now, and only what `R` accepts.
  template <class Space>
  static constexpr bool accepts = bool(Space::host_accessible) && bool(R::template accepts<Space>);

  /// Decorates `inner` (moved in: `mpi_allreduce` is move-only).
  explicit compressed(R inner) : m_inner(std::move(inner)) {}

  /// The decorated reducer.
  R& inner() noexcept { return m_inner; }
  /// The decorated reducer.
  const R& inner() const noexcept { return m_inner; }

  /// `R`'s rank.
  int rank() const noexcept(noexcept(std::declval<const R&>().rank())) { return m_inner.rank(); }
  /// `R`'s world size.
  int world_size() const noexcept(noexcept(std::declval<const R&>().world_size())) {
    return m_inner.world_size();
  }

  /// Replaces `grads` on every rank by the element-wise mean over ranks, reduced in bf16: divide
  /// by W in fp32, round to bf16 into a scratch buffer kept between calls,
  /// `R::all_reduce_sum_bf16`, widen back into `grads`.
  void all_reduce_mean(std::span<float> grads) {
    const float divisor = static_cast<float>(m_inner.world_size());
    const std::size_t n = grads.size();
    m_scratch.resize(n);
    std::uint16_t* wire = m_scratch.data();
    float* g = grads.data();
    for (std::size_t i = 0; i < n; ++i) wire[i] = detail::float_to_bf16(g[i] / divisor);
    m_inner.all_reduce_sum_bf16(std::span<std::uint16_t>(wire, n));
    for (std::size_t i = 0; i < n; ++i) g[i] = detail::bf16_to_float(wire[i]);
  }

  /// Bytes that travel for `floats` gradient values: 2 per value instead of 4.
  std::size_t wire_bytes(std::size_t floats) const noexcept { return 2 * floats; }

  /// `R`'s broadcast, uncompressed: parameters must arrive exactly.
  template <class T>
  requires std::same_as<T, float> || std::same_as<T, double>
  void broadcast(std::span<T> values, int root) { m_inner.broadcast(values, root); }
  /// `R`'s sum, uncompressed.
  void all_reduce_sum(std::span<double> values) { m_inner.all_reduce_sum(values); }
  /// `R`'s maximum, uncompressed.
  void all_reduce_max(std::span<double> values) { m_inner.all_reduce_max(values); }
  /// `R`'s gather.
  void all_gather(std::span<const std::uint64_t> mine, std::span<std::uint64_t> all) {
    m_inner.all_gather(mine, all);
  }

  /// `R`'s count: with `all_reduce_mean` going through `all_reduce_sum_bf16`, the bf16 bytes,
  /// half the float bytes handed to `all_reduce_mean`.
  std::uint64_t bytes_reduced() const noexcept requires detail::reducer_has_bytes_reduced<R> {
    return m_inner.bytes_reduced();
  }

  /// Forwarded to `R` (the trainer's position, for a timeout's message).
  void set_position(std::size_t epoch,
                    std::size_t step) noexcept requires reducer_tracks_position<R> {
    m_inner.set_position(epoch, step);
  }

  /// Forwarded to `R`: whether its collectives may run on another thread (MPI's level).
  bool callable_from_another_thread() const requires reducer_says_thread_safety<R> {
    return m_inner.callable_from_another_thread();
  }

  /// Forwarded to `R`: its wait for the slowest rank in the last reduction.
  double last_wait_seconds() const requires reducer_reports_wait<R> {
    return m_inner.last_wait_seconds();
  }

  /// Forwarded to `R`: its own clock, which times the sparse exchange's trials.
  double clock_seconds() const requires reducer_keeps_clock<R> { return m_inner.clock_seconds(); }

 private:
  R m_inner;
  std::vector<std::uint16_t> m_scratch;
};

}  // namespace tutti
