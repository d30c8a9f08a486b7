// SPDX-License-Identifier: Apache-2.0
/// @file detail/host_simd.hpp
/// @brief Host loops in blocks, vectorised through `std::experimental::simd` where the standard
/// library has it.
///
/// g++ does not vectorise a loop that calls `std::sqrt` unless the translation unit is built
/// with `-fno-math-errno` (the scalar call may have to set errno), and a header-only library
/// cannot choose its users' flags. Kernels whose host loop matters (Adam's pass over every
/// parameter, a finite check over the gradient arena) therefore offer a `run(lo, hi)` member
/// that the host calls per block of `host_block` elements; it computes, element by element,
/// the same IEEE operations in the same order as the scalar `operator()(i)` (which the device
/// runs), so the two agree bitwise in a build without FMA contraction (the x86-64 baseline).
/// Where `<experimental/simd>` is missing (libc++, nvcc's front end) `run` is the scalar loop.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/finite.hpp>

#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <cmath>
#include <cstddef>  // before the check: it defines __GLIBCXX__ for libstdc++
#include <type_traits>

#if !defined(__CUDACC__) && defined(__GLIBCXX__) && defined(__has_include)
#if __has_include(<experimental/simd>)
#include <experimental/simd>
#if defined(__cpp_lib_experimental_parallel_simd)
/// 1 when host kernels' `run(lo, hi)` members use `std::experimental::simd`.
#define TUTTI_HOST_SIMD 1
#endif
#endif
#endif
#if !defined(TUTTI_HOST_SIMD)
#define TUTTI_HOST_SIMD 0
#endif

namespace tutti::detail {

#if TUTTI_HOST_SIMD
namespace stdx = std::experimental;
/// The widest float vector the build's target has (4 lanes on the x86-64 baseline).
using host_floats = stdx::native_simd<float>;
#endif

/// out[c] = a * x[c] + b * y[c] for c in [0, n): vectors of floats on the host, one value at a
/// time on a device (the same two products and one sum per value either way).
template <class T>
TUTTI_HOST_DEVICE inline void combine2(T* out, T a, const T* x, T b, const T* y, std::size_t n) {
  std::size_t c = 0;
#if TUTTI_HOST_SIMD && !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) {
    using V = host_floats;
    const V va(a), vb(b);
    for (; c + V::size() <= n; c += V::size()) {
      const V r = va * V(x + c, stdx::element_aligned) + vb * V(y + c, stdx::element_aligned);
      r.copy_to(out + c, stdx::element_aligned);
    }
  }
#endif
  for (; c < n; ++c) out[c] = a * x[c] + b * y[c];
}

/// sum[c] += x[c] for c in [0, n): vectors of floats on the host.
template <class T>
inline void add_into(T* sum, const T* x, std::size_t n) {
  std::size_t c = 0;
#if TUTTI_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    using V = host_floats;
    for (; c + V::size() <= n; c += V::size()) {
      const V r = V(sum + c, stdx::element_aligned) + V(x + c, stdx::element_aligned);
      r.copy_to(sum + c, stdx::element_aligned);
    }
  }
#endif
  for (; c < n; ++c) sum[c] += x[c];
}

/// `add_into(sum, x, n)`, returning nonzero when a value it wrote is an infinity or a NaN (the
/// bits are `add_into`'s). r·0 is NaN for an infinity or a NaN and ±0 otherwise, so a sum of them
/// is NaN exactly when a result was not finite; a build that assumes finite math could fold that
/// away, and checks the bits of each result instead.
template <class T>
inline unsigned add_into_checked(T* sum, const T* x, std::size_t n) {
  std::size_t c = 0;
  unsigned bad = 0;
#if TUTTI_HOST_SIMD && !(defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
  if constexpr (std::is_same_v<T, float>) {
    using V = host_floats;
    const V zero(0.f);
    V acc(0.f);
    for (; c + V::size() <= n; c += V::size()) {
      const V r = V(sum + c, stdx::element_aligned) + V(x + c, stdx::element_aligned);
      r.copy_to(sum + c, stdx::element_aligned);
      acc += r * zero;
    }
    for (std::size_t k = 0; k < V::size(); ++k) bad |= finite_value(acc[k]) ? 0u : 1u;
  }
#endif
  for (; c < n; ++c) {
    sum[c] += x[c];
    if constexpr (std::is_same_v<T, float>)
      bad |= finite_value(sum[c]) ? 0u : 1u;
    else
      bad |= std::isfinite(sum[c]) ? 0u : 1u;
  }
  return bad;
}

/// x[c] /= d for c in [0, n): vectors of floats on the host (a correctly rounded division per
/// value either way, so the bits are the scalar loop's).
template <class T>
inline void divide_by(T* x, T d, std::size_t n) {
  std::size_t c = 0;
#if TUTTI_HOST_SIMD
  if constexpr (std::is_same_v<T, float>) {
    using V = host_floats;
    const V vd(d);
    for (; c + V::size() <= n; c += V::size()) {
      const V r = V(x + c, stdx::element_aligned) / vd;
      r.copy_to(x + c, stdx::element_aligned);
    }
  }
#endif
  for (; c < n; ++c) x[c] /= d;
}

/// Elements per block of a blocked host loop: 32 KiB of floats per array, enough to amortise a
/// block's setup, small enough that a million-element pass still spreads over the threads.
inline constexpr std::size_t host_block = 8192;

/// Functor over block indices: kernel.run(b * host_block, min(n, (b + 1) * host_block)).
template <class Kernel>
struct run_block_fn {
  Kernel kernel;
  std::size_t n;
  void operator()(std::size_t b) const {
    const std::size_t lo = b * host_block;
    kernel.run(lo, lo + host_block < n ? lo + host_block : n);
  }
};

/// Calls `kernel.run(lo, hi)` over [0, n) in blocks of `host_block`, in parallel on a host
/// space's policy (serially below the space's `serial_below`, as `parallel_for` does).
template <class Space, class Kernel>
void parallel_blocks(const Space& space, std::size_t n, const Kernel& kernel) {
  if (n == 0) return;
  if constexpr (requires { Space::serial_below; }) {
    if (n < Space::serial_below) {
      kernel.run(0, n);
      return;
    }
  }
  thrust::for_each_n(space.policy(), thrust::counting_iterator<std::size_t>(0),
                     (n + host_block - 1) / host_block, run_block_fn<Kernel>{kernel, n});
}

/// `op`-reduction, from `init`, of `f(b)` over the blocks b of [0, n) (blocks of `host_block`):
/// in parallel on a host space's policy, a single block on the calling thread.
template <class Space, class T, class F, class Op>
T reduce_blocks(const Space& space, std::size_t n, F f, T init, Op op) {
  const std::size_t blocks = (n + host_block - 1) / host_block;
  if (blocks == 0) return init;
  if (blocks == 1) return op(init, f(0));
  return thrust::transform_reduce(space.policy(), thrust::counting_iterator<std::size_t>(0),
                                  thrust::counting_iterator<std::size_t>(blocks), f, init, op);
}

}  // namespace tutti::detail
