// SPDX-License-Identifier: Apache-2.0
/// @file fuzz/checkpoint_fuzz.cpp
/// @brief libFuzzer target for the checkpoint reader: built by scripts/fuzz.sh with clang++
/// -fsanitize=fuzzer,address,undefined.
// fuzz-link: -lz
#include "checkpoint_fuzz.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string broken = tutti_fuzz::checkpoint_check(data, size);
  if (!broken.empty()) {
    // abort() makes libFuzzer keep the input as a crash file.
    std::fprintf(stderr, "checkpoint_fuzz: property broken: %s\n", broken.c_str());
    std::abort();
  }
  return 0;
}
