#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, configures (Release), builds and runs the test suite (through
# scripts/run-ctest.sh, which accounts for the skipped tests). The build folder is `build` in the
# repository root, or $TUTTI_BUILD_DIR. Arguments are passed to ctest (e.g. `scripts/test.sh -R
# consumer`); without them every test runs but the compile-only and packaging checks labelled
# build_check, which scripts/build-check.sh runs. Exits non-zero on any failure.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TUTTI_BUILD_DIR:-${root}/build}"
jobs="$(nproc 2>/dev/null || echo 2)"

bash "${root}/scripts/deps.sh"

# Ninja (deps.sh installs it) for a new build folder; one configured before keeps its generator.
generator=()
[[ -f "${build}/CMakeCache.txt" ]] || generator=(-G Ninja)
# What runs here is built here: the nvcc translation units only where a GPU is visible
# ($TUTTI_TEST_CUDA=ON or OFF decides otherwise), the benchmarks never (they are not tests).
# scripts/build-check.sh compiles both where this script leaves them out; CI runs it next.
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && [[ $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') -ge 1 ]]; then
  cuda=ON
fi
cuda="${TUTTI_TEST_CUDA:-${cuda}}"
cmake -S "${root}" -B "${build}" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTUTTI_ENABLE_CUDA="${cuda}" -DTUTTI_BUILD_BENCHMARKS=OFF
cmake --build "${build}" -j "${jobs}"
# With no arguments, every test but those labelled build_check (the headers compiled one by one,
# the package consumers' builds), which scripts/build-check.sh runs; arguments choose instead.
selection=("$@")
[[ $# -gt 0 ]] || selection=(-LE build_check)
exec bash "${root}/scripts/run-ctest.sh" "${build}" "${selection[@]}"
