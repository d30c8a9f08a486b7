// SPDX-License-Identifier: Apache-2.0
/// @file space/host.hpp
/// @brief `tutti::host_space`: the execution space that runs kernels through Thrust's OpenMP
/// system.
#pragma once

#include <tutti/config.hpp>

#include <thrust/system/omp/execution_policy.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include <cstddef>
#include <cstring>
#include <new>

namespace tutti {

/// Execution space of the CPU: kernels run through `thrust::omp::par`, memory is ordinary
/// 64-byte aligned host memory, and from `huge_from` bytes on, whole 2 MiB pages that Linux is
/// asked to back with transparent huge pages. Stateless; every instance is interchangeable.
///
/// A space describes itself with the members below; `tutti::execution_space` checks them, and
/// `tutti::cuda_space` offers the same ones (with a stream) so one kernel source serves both.
struct host_space {
  /// True when memory of this space can be dereferenced by host code.
  static constexpr bool host_accessible = true;
  /// `tutti::parallel_for` runs loops shorter than this serially: below it an OpenMP fork-join
  /// costs more than it saves.
  static constexpr std::size_t serial_below = 4096;
  /// Short name, as printed in reports and accepted by `tutti train --space`.
  static constexpr const char* name() noexcept { return "host"; }

  /// The explicit Thrust policy kernels of this space are dispatched through.
  auto policy() const noexcept { return thrust::omp::par; }

  /// A huge page of x86-64 and AArch64 Linux.
  static constexpr std::size_t huge_page = std::size_t{2} << 20;
  /// Allocations of at least this many bytes are made of whole huge pages. A step of a large
  /// table reads a few thousand rows scattered over hundreds of megabytes: with 4 KiB pages
  /// nearly every row read is a TLB miss and a page walk; a 2 MiB page covers 512 times more.
  static constexpr std::size_t huge_from = std::size_t{8} << 20;

  /// Allocates `bytes` bytes, 64-byte aligned (a cache line; also enough for AVX-512 loads);
  /// from `huge_from` bytes on, whole huge pages, with `madvise(MADV_HUGEPAGE)` (a hint: where
  /// transparent huge pages are off the memory is ordinary pages).
  void* allocate(std::size_t bytes) const {
    if (bytes >= huge_from) {
      const std::size_t whole = (bytes + huge_page - 1) / huge_page * huge_page;
      void* p = ::operator new (whole, std::align_val_t{huge_page});
#if defined(__linux__) && defined(MADV_HUGEPAGE)
      ::madvise(p, whole, MADV_HUGEPAGE);
#endif
      return p;
    }
    return ::operator new (bytes == 0 ? 1 : bytes, std::align_val_t{64});
  }
  /// Releases memory obtained from `allocate(bytes)`.
  void deallocate(void* p, std::size_t bytes) const noexcept {
    ::operator delete (p, std::align_val_t{bytes >= huge_from ? huge_page : 64});
  }
  /// Copies host memory into memory of this space.
  void copy_from_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  /// Copies memory of this space to host memory; complete when it returns.
  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  /// Copies within this space (ordered after earlier work of this space instance).
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  /// Waits for all work submitted to this space instance; a no-op on the host.
  void fence() const noexcept {}

  friend constexpr bool operator==(const host_space&, const host_space&) noexcept {
    return true;
  }
};

}  // namespace tutti
