// SPDX-License-Identifier: Apache-2.0
/// @file space/traits.hpp
/// @brief The `tutti::execution_space` concept that `host_space` and `cuda_space` model.
#pragma once

#include <concepts>
#include <cstddef>

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

}  // namespace tutti
