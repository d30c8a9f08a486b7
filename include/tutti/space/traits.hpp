// SPDX-License-Identifier: Apache-2.0
/// @file space/traits.hpp
/// @brief The `tutti::execution_space` concept that `host_space` and `cuda_space` model.
#pragma once

#include <concepts>
#include <cstddef>
#include <functional>

namespace tutti {

/// An execution space: where memory lives and kernels run. See docs/spaces.md.
template <class S>
concept execution_space = std::copy_constructible<S> &&
    requires(const S& s, void* p, const void* cp, std::size_t n) {
  { S::host_accessible } -> std::convertible_to<bool>;
  { S::name() } -> std::convertible_to<const char*>;
  s.policy();
  { s.allocate(n) } -> std::same_as<void*>;
  s.deallocate(p, n);
  s.copy_from_host(p, cp, n);
  s.copy_to_host(p, cp, n);
  s.copy(p, cp, n);
  s.fence();
};

/// Capability of a space: it records the work a function enqueues as a graph and replays it
/// (`tutti::cuda_space`: a CUDA Graph). `capture(enqueue)` runs `enqueue` with the space
/// recording instead of running: no kernel runs, and nothing in `enqueue` may wait for the
/// space or copy host memory to it. `replay(graph)` runs the recorded work again, with the
/// arguments its kernels had when it was recorded: what changes between replays must be read
/// from the space's memory. A trainer replays its steady steps this way (docs/spaces.md).
template <class S>
concept space_captures_steps = execution_space<S> &&
    requires(const S& s, const std::function<void()>& enqueue, const typename S::step_graph& g) {
  { s.capture(enqueue) } -> std::same_as<typename S::step_graph>;
  s.replay(g);
};

}  // namespace tutti
