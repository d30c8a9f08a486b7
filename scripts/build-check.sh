#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Compiles what scripts/test.sh does not build on a machine without a GPU, so that every source
# is still compiled where CI runs: the benchmarks and, where nvcc is found, every nvcc translation
# unit (the CUDA tests, the CUDA part of the `tutti` program, the GPU benchmark). Then runs the
# tests labelled build_check, which scripts/test.sh leaves out: every public header compiled on its
# own (header_check) and the package consumers (FetchContent, find_package, each component), each
# configured, built and run as a user's project would be. The build folder is `build-check`
# beside `build`, or "${TUTTI_BUILD_DIR}-check". Exits non-zero when anything fails to compile or a
# test fails.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TUTTI_BUILD_DIR:-${root}/build}-check"
jobs="$(nproc 2>/dev/null || echo 2)"

bash "${root}/scripts/deps.sh"

# Ninja: the CUDA part of the program is built as its object file alone (an output path of the
# Ninja build), so the program's host translation units are not compiled a second time here.
# No build type: nothing built here runs for its speed (the benchmarks are compiled, not run; the
# consumers are built and run as checks), and the host compilers' default -O0 spares their
# optimisation passes (nvcc's GPU benchmark unit: 97 s at -O3, 79 s at -O0; the device code is
# optimised either way). scripts/test.sh builds and runs the suite at Release.
cmake -S "${root}" -B "${build}" -G Ninja -DCMAKE_BUILD_TYPE= \
  -DTUTTI_BUILD_BENCHMARKS=ON -DTUTTI_ENABLE_CUDA=ON >/dev/null
targets=(tutti_benchmarks)
all="$(ninja -C "${build}" -t targets all)"
if grep -q '^tests/tutti_cuda_tests:' <<<"${all}"; then
  cuda_part="$(sed -nE 's#^(apps/CMakeFiles/tutti_cli\.dir/tutti/cuda_parts\.cu\.o):.*#\1#p' <<<"${all}")"
  [[ -n "${cuda_part}" ]] || {
    echo "scripts/build-check.sh: no object for apps/tutti/cuda_parts.cu in ${build}" >&2
    exit 1
  }
  targets+=(tutti_cuda_tests "${cuda_part}")
  echo "scripts/build-check.sh: the benchmarks and the nvcc translation units"
else
  echo "scripts/build-check.sh: the benchmarks (no nvcc here: no CUDA translation unit to compile)"
fi
cmake --build "${build}" -j "${jobs}" --target "${targets[@]}"
bash "${root}/scripts/run-ctest.sh" "${build}" -L build_check
