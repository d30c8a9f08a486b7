#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, configures (Release), builds and runs the whole test suite.
# The build folder is `build` in the repository root, or $TUTTI_BUILD_DIR.
# Arguments are passed to ctest (e.g. `scripts/test.sh -R consumer`). Exits non-zero on any
# failure.
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
cd "${build}"
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
set +e
ctest --output-on-failure -j "${jobs}" "$@" | tee "${log}"
status=${PIPESTATUS[0]}
set -e

# Skipped tests are counted apart from passed ones. Under CI a skip is a failure unless the
# machine cannot run the test: without a GPU the CUDA cases (not built: one entry, cuda/not-built,
# says so) and the runs of the cuda and nccl package consumers (which are still built), with one
# GPU the case across GPUs; $TUTTI_ALLOWED_SKIPS (an extended regex over test names) replaces
# that rule.
skipped="$(sed -nE 's/^[[:space:]]*[0-9]+ - (.*) \(Skipped\)$/\1/p' "${log}")"
count=0
[[ -n "${skipped}" ]] && count=$(wc -l <<<"${skipped}")
echo "scripts/test.sh: ${count} skipped"
if [[ -n "${skipped}" ]]; then
  sed 's/^/  skipped: /' <<<"${skipped}"
fi
if [[ "${CI:-}" == true && -n "${skipped}" ]]; then
  if [[ -n "${TUTTI_ALLOWED_SKIPS:-}" ]]; then
    allowed="${TUTTI_ALLOWED_SKIPS}"
  elif command -v nvidia-smi >/dev/null 2>&1 && [[ $(nvidia-smi -L 2>/dev/null | grep -c '^GPU') -ge 1 ]]; then
    allowed='^cuda/nccl_ring across GPUs'
  else
    allowed='^(cuda/|consumer\.component\.(cuda|nccl)$)'
  fi
  unexpected="$(grep -vE "${allowed}" <<<"${skipped}" || true)"
  if [[ -n "${unexpected}" ]]; then
    echo "scripts/test.sh: skipped on a machine set up to run them (CI installs OpenBLAS, Open MPI" >&2
    echo "and libsodium; the datasets are in ../shared/datasets):" >&2
    sed 's/^/  /' <<<"${unexpected}" >&2
    exit 1
  fi
fi
exit "${status}"
