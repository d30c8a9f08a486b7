// SPDX-License-Identifier: Apache-2.0
// Entry point of the CUDA test executable: without a usable device a run reports "skipped" to
// ctest (exit code 77), never "passed". Listing the cases (ctest's discovery, at build time)
// needs no device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <tutti/space/cuda.hpp>

#include "../skip.hpp"

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    for (const char* flag : {"--list-test-cases", "-ltc", "--list-test-suites", "-lts"})
      listing = listing || std::strcmp(argv[i], flag) == 0;
  if (!listing && tutti::cuda_device_count() == 0) {
    std::printf("tutti CUDA tests: no CUDA device visible; skipped\n");
    return 77;
  }
  return context.run();
}
