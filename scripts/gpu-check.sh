#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check: builds the CUDA test executable for sm_90 (+ PTX) unless a prebuilt one is
# handed in (build-gpu/cuda_tests), runs it, and writes the results under $OUT.
#
#   bash scripts/gpu-check.sh            # on a machine with an NVIDIA GPU and the CUDA toolkit
#
# The device machine has CUDA and CMake but no Debian -dev packages: doctest is taken from
# /usr/include or from .deps/include (copy /usr/include/doctest there and carry .deps).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/build-gpu/out}
mkdir -p "$out" build-gpu
{ nvidia-smi || true; } > "$out/nvidia-smi.txt" 2>&1
if [ ! -x build-gpu/cuda_tests ]; then
  inc=(-Iinclude -Itests)
  [ -d .deps/include ] && inc+=(-I.deps/include)
  nvcc -std=c++20 -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90 \
    --expt-relaxed-constexpr -Xcompiler -fopenmp "${inc[@]}" \
    -DTUTTI_TEST_DATA_DIR="\"$PWD/tests/data\"" -DTUTTI_DATASETS_DIR="\"$PWD/../shared/datasets\"" \
    tests/cuda/cuda_tests.cu -o build-gpu/cuda_tests 2>&1 | tee "$out/build.txt"
fi
set +e
OMP_WAIT_POLICY=passive build-gpu/cuda_tests --duration=true 2>&1 | tee "$out/cuda_tests.txt"
rc=${PIPESTATUS[0]}
for b in build-gpu/bench_*; do
  [ -x "$b" ] && "$b" --json "$out/$(basename "$b").json" 2>&1 | tee "$out/$(basename "$b").txt"
done
exit "$rc"
