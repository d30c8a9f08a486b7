// SPDX-License-Identifier: Apache-2.0
/// @file mpi.cpp
/// @brief tutti::mpi: averages one gradient across the processes mpirun started, with
/// tutti::mpi_allreduce, and exits non-zero unless every process holds the mean.
#include <tutti/reducers/mpi.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#if !TUTTI_HAS_MPI
#error "tutti::mpi defines TUTTI_HAS_MPI=1"
#endif

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int failures = 0;
  try {
    tutti::mpi_allreduce reducer;
    const int rank = reducer.rank(), world = reducer.world_size();
    std::vector<float> grads(1000, static_cast<float>(rank + 1));
    reducer.all_reduce_mean(std::span<float>(grads));
    const float expected = static_cast<float>(world + 1) / 2.0f;  // mean of 1..world
    for (float g : grads) failures += std::fabs(g - expected) > 1e-6f ? 1 : 0;
    std::printf("consumer (mpi) rank %d of %d: mean %.3f, expected %.3f, %d wrong\n", rank, world,
                static_cast<double>(grads.front()), static_cast<double>(expected), failures);
  } catch (const std::exception& e) {
    std::printf("consumer (mpi): %s\n", e.what());
    failures = 1;
  }
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
