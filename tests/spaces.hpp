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
