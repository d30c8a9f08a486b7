// SPDX-License-Identifier: Apache-2.0
// Entry point of the CUDA test executable: without a usable device the whole executable reports
// "skipped" to ctest (exit code 77), never "passed".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <tutti/space/cuda.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  if (tutti::cuda_device_count() == 0) {
    std::printf("tutti CUDA tests: no CUDA device visible; skipped\n");
    return 77;
  }
  return context.run();
}
