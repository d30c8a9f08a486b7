// SPDX-License-Identifier: Apache-2.0
/// @file mpi_stall_test.cpp
/// @brief A stalled rank must end every process within the collective timeout, named: rank 1
/// sleeps far past the timeout before joining a collective; rank 0, waiting in it with a 2 s
/// timeout, must end the whole job with a line naming rank 1 (tests/mpi/run_and_check.cmake).
/// With the argument `shared` the gradients are in the reducer's shared arena (the in-place
/// reduction's own collectives must time out the same way).
#include <tutti/reducers/mpi.hpp>

#include <chrono>
#include <cstdio>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  tutti::mpi_session session(argc, argv);
  const bool shared = argc > 1 && std::string_view(argv[1]) == "shared";
  tutti::mpi_abort_on_exception([shared] {
    tutti::mpi_allreduce reducer(MPI_COMM_WORLD, {.timeout = std::chrono::seconds(2)});
    std::vector<float> own(1 << 12, 1.f);
    const std::span<float> grads = shared ? reducer.shared_gradient_arena(own.size()) : own;
    if (grads.size() != own.size()) throw tutti::error("no shared arena on one host");
    double ready[1] = {1.0};
    reducer.all_reduce_sum(std::span<double>(ready));
    reducer.set_position(0, 41);
    if (reducer.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
    reducer.all_reduce_mean(grads);
    std::printf("rank %d: passed a collective that rank 1 joined a minute late\n", reducer.rank());
  });
  return 3;  // reached only if nobody timed out
}
