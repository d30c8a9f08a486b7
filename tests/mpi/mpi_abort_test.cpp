// SPDX-License-Identifier: Apache-2.0
/// @file mpi_abort_test.cpp
/// @brief An error on one process must end every process: rank 1 throws after a collective
/// while the others wait for it in the next one. Run under mpiexec; the test passes when the
/// job ends quickly, non-zero, with a line naming rank 1 (tests/mpi/run_and_check.cmake). With
/// the argument `shared` the gradients are in the reducer's shared arena: rank 1 then unwinds
/// past a shared-memory window, which must not wait for the others on its way to MPI_Abort.
#include <tutti/reducers/mpi.hpp>

#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  tutti::mpi_session session(argc, argv);
  const bool shared = argc > 1 && std::string_view(argv[1]) == "shared";
  try {
    tutti::mpi_abort_on_exception([shared] {
      tutti::mpi_allreduce reducer;
      std::vector<float> own(1 << 16, 1.f);
      const std::span<float> grads = shared ? reducer.shared_gradient_arena(own.size()) : own;
      if (grads.size() != own.size()) throw tutti::error("no shared arena on one host");
      double ready[1] = {1.0};
      reducer.all_reduce_sum(std::span<double>(ready));
      if (reducer.rank() == 1) throw tutti::error("injected failure after the first collective");
      // Every other rank waits here for rank 1, which never comes.
      reducer.all_reduce_mean(grads);
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
