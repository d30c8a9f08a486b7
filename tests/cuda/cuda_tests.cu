// SPDX-License-Identifier: Apache-2.0
// The CUDA test executable is one translation unit: nvcc takes ~20 s or more per unit on two
// cores, so the space-generic test sources are compiled together, each instantiated for
// tutti::host_space and tutti::cuda_space (TUTTI_TEST_SPACES in tests/spaces.hpp).
#include "main.cpp"

#include "../test_large_batch_optimizers.cpp"
#include "../test_list_losses.cpp"
#include "../test_metrics.cpp"
#include "../test_models.cpp"
#include "../test_ncf.cpp"  // neural_cf: compiles to nothing without <cblas.h>
#include "../test_optimizers.cpp"
#include "../test_ranking.cpp"
#include "../test_space.cpp"
#include "parity.cpp"
#if defined(TUTTI_TEST_NCCL)
#include "nccl.cpp"
#endif
