// SPDX-License-Identifier: Apache-2.0
/// @file mpi_abort_test.cpp
/// @brief An error on one process must end every process: rank 1 throws after a collective
/// while the others wait for it in the next one. Run under mpiexec; the test passes when the
/// job ends quickly, non-zero, with a line naming rank 1 (tests/mpi/run_and_check.cmake).
#include <tutti/reducers/mpi.hpp>

#include <cstdio>
#include <span>
#include <vector>

int main(int argc, char** argv) {
  tutti::mpi_session session(argc, argv);
  try {
    tutti::mpi_abort_on_exception([] {
      tutti::mpi_reducer reducer;
      double ready[1] = {1.0};
      reducer.all_reduce_sum(std::span<double>(ready));
      if (reducer.rank() == 1) throw tutti::error("injected failure after the first collective");
      // Every other rank waits here for rank 1, which never comes.
      std::vector<float> grads(1 << 16, 1.f);
      reducer.all_reduce_mean(std::span<float>(grads));
      std::printf("rank %d: passed a collective that rank 1 never joined\n", reducer.rank());
    });
  } catch (const std::exception& e) {
    // What a program does without the abort path (the `tutti` program's main would print and
    // return): the session's MPI_Finalize then waits for ranks stuck in the collective, and the
    // job hangs. Reaching this line is a failure.
    std::fprintf(stderr, "mpi_abort_test: the exception came back instead of aborting: %s\n",
                 e.what());
    return 4;
  }
  // Reached only if the job was not aborted: fail distinctly.
  return 3;
}
