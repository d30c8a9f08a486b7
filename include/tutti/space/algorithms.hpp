// SPDX-License-Identifier: Apache-2.0
/// @file space/algorithms.hpp
/// @brief Space-generic building blocks: `parallel_for`, `transform_reduce`, `fill`.
///
/// Each takes the space instance first and dispatches through its explicit Thrust policy, so a
/// `TUTTI_HOST_DEVICE` functor written once runs on the host (OpenMP) and on a CUDA stream.
#pragma once

#include <tutti/config.hpp>
#include <tutti/detail/host_simd.hpp>
#include <tutti/space/traits.hpp>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

namespace tutti {

/// Calls `f(i)` for every i in [0, n) on `space`, in parallel and in no particular order. A space
/// with a member `launch(n, f)` runs the loop itself (an instrumented space).
template <execution_space Space, class F>
void parallel_for(const Space& space, std::size_t n, F f) {
  if (n == 0) return;
  if constexpr (requires { space.launch(n, f); }) {
    space.launch(n, f);
    return;
  }
  // A fork-join costs microseconds, and far more when the cores are shared: small loops run
  // serially on spaces that say where that pays off.
  if constexpr (requires { Space::serial_below; }) {
    if (n < Space::serial_below) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
  }
  thrust::for_each_n(space.policy(), thrust::counting_iterator<std::size_t>(0), n, f);
}

/// Calls `f(t)` for every element t = i·cols + j of an n × cols grid on `space`, in parallel and
/// in no particular order. On a host space, when `F` has `row(i)` (every element of row i in one
/// loop over its columns, as `f` would compute them), a row at a time: no division per element,
/// and a loop the compiler vectorises. A space with `launch` (an instrumented space) sees the
/// elements, as with `parallel_for`.
template <execution_space Space, class F>
void parallel_grid(const Space& space, std::size_t n, std::size_t cols, F f) {
  if constexpr (
      Space::host_accessible && requires { f.row(std::size_t{}); } &&
      !requires { space.launch(n, f); }) {
    if constexpr (requires { Space::serial_below; }) {
      if (n * cols < Space::serial_below) {
        for (std::size_t i = 0; i < n; ++i) f.row(i);
        return;
      }
    }
    const auto rows = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < rows; ++i) f.row(static_cast<std::size_t>(i));
  } else {
    parallel_for(space, n * cols, f);
  }
}

/// Returns `op`-reduction of `f(i)` over i in [0, n), starting from `init`.
/// On a device space this synchronises (it returns a host value); keep it out of training steps.
template <execution_space Space, class T, class F, class Op>
T transform_reduce(const Space& space, std::size_t n, F f, T init, Op op) {
  if (n == 0) return init;
  return thrust::transform_reduce(space.policy(), thrust::counting_iterator<std::size_t>(0),
                                  thrust::counting_iterator<std::size_t>(n), f, init, op);
}

namespace detail {
template <class T>
struct fill_fn {
  T* out;
  T value;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { out[i] = value; }
  /// Host blocks: memset when every byte of `value` is zero (clearing a gradient arena).
  void run(std::size_t lo, std::size_t hi) const {
    if constexpr (std::is_trivially_copyable_v<T>) {
      unsigned char bytes[sizeof(T)];
      std::memcpy(bytes, &value, sizeof(T));
      if (std::all_of(bytes, bytes + sizeof(T), [](unsigned char b) { return b == 0; })) {
        std::memset(static_cast<void*>(out + lo), 0, (hi - lo) * sizeof(T));
        return;
      }
    }
    std::fill(out + lo, out + hi, value);
  }
};
template <class T>
struct scale_fn {
  T* out;
  T factor;
  TUTTI_HOST_DEVICE void operator()(std::size_t i) const { out[i] *= factor; }
};
}  // namespace detail

/// Sets every element of a span of `space`'s memory to `value`.
template <execution_space Space, class T>
void fill(const Space& space, std::span<T> s, T value) {
  if constexpr (Space::host_accessible)
    detail::parallel_blocks(space, s.size(), detail::fill_fn<T>{s.data(), value});
  else
    parallel_for(space, s.size(), detail::fill_fn<T>{s.data(), value});
}

/// Multiplies every element of a span of `space`'s memory by `factor`.
template <execution_space Space, class T>
void scale(const Space& space, std::span<T> s, T factor) {
  parallel_for(space, s.size(), detail::scale_fn<T>{s.data(), factor});
}

}  // namespace tutti
