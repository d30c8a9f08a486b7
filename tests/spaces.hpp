// SPDX-License-Identifier: Apache-2.0
// The execution spaces every space-generic test runs on: host always, cuda under nvcc.
#pragma once

#include <tutti/space/host.hpp>

#if defined(TUTTI_HAS_CUDA)
#include <tutti/space/cuda.hpp>
#define TUTTI_TEST_SPACES tutti::host_space, tutti::cuda_space
#else
#define TUTTI_TEST_SPACES tutti::host_space
#endif

namespace tutti_test {

/// Host memory and OpenMP kernels that the library must treat as a device's: it never reads
/// or writes this space's memory from host code, so the trainer takes the path it takes on a
/// GPU (kernels through `parallel_for` and Thrust, copies through `copy_to_host`). Runs that
/// path's logic on a machine without one.
struct opaque_host_space : tutti::host_space {
  static constexpr bool host_accessible = false;
  static constexpr const char* name() noexcept { return "opaque-host"; }
  friend constexpr bool operator==(const opaque_host_space&, const opaque_host_space&) noexcept {
    return true;
  }
};

}  // namespace tutti_test
