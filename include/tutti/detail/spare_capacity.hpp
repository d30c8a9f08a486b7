// SPDX-License-Identifier: Apache-2.0
/// @file detail/spare_capacity.hpp
/// @brief `release_spare_capacity`: the pages a vector holds beyond its size handed back to the
/// system, without the copy that `shrink_to_fit` makes; `return_free_heap_pages`: the heaps'
/// free pages handed back.
///
/// A split keeps its training rows where the log's rows were: the arrays keep the log's length
/// as capacity, a tenth of it unused. `shrink_to_fit` copies every kept row into a new array and
/// frees the old one: for a 20 M-row log, hundreds of megabytes copied into memory never touched
/// before (on a virtual machine whose free memory goes back to its host, a first touch costs far
/// more than the copy). Releasing the spare pages keeps the rows where they are and the capacity
/// reserved; the resident memory falls to the size, as with the copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tutti::detail {

/// Hands back to the system the whole pages of `v`'s spare capacity (between `size()` and
/// `capacity()`); the elements, the size and the capacity are unchanged, and a released page that
/// the vector writes again (when it grows) comes back zeroed. Where the system cannot release
/// pages (not Linux, or `madvise` refused), the vector is shrunk by `shrink_to_fit` instead.
/// Returns the bytes released in place (0 where it shrank by a copy or less than a page was
/// spare).
template <class T>
std::size_t release_spare_capacity(std::vector<T>& v) {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>,
                "release_spare_capacity: the spare capacity holds no objects to keep");
#if defined(__linux__)
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto used = reinterpret_cast<std::uintptr_t>(v.data() + v.size());
  const auto reserved = reinterpret_cast<std::uintptr_t>(v.data() + v.capacity());
  const std::uintptr_t lo = (used + page - 1) / page * page;  // the first page past the elements
  const std::uintptr_t hi = reserved / page * page;           // the last whole page reserved
  if (hi <= lo) return 0;
  // The range lies inside the vector's own allocation: no other object, and no allocator record
  // while it is allocated, lives there.
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) == 0)
    return static_cast<std::size_t>(hi - lo);
#endif
  v.shrink_to_fit();
  return 0;
}

/// Hands back to the system the free pages the C library's heaps keep (glibc's `malloc_trim`):
/// a parser's many short-lived buffers leave freed memory inside the heaps, resident until
/// reused. A program calls it once its data are loaded, before the tables are allocated.
/// Elsewhere it does nothing.
inline void return_free_heap_pages() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

}  // namespace tutti::detail
