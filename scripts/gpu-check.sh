#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check, for a machine with an NVIDIA GPU and no network: builds the CUDA tests and the
# GPU benchmark for sm_90 (+ PTX) unless prebuilt ones are handed in under build-gpu/, runs the
# GPU tests, runs the benchmark against its PyTorch twin, and writes everything under $OUT.
#
#   bash scripts/gpu-check.sh
#
# Such a machine has the CUDA toolkit, CMake and PyTorch but no Debian -dev packages: headers
# the build needs (doctest, CLI11, nlohmann-json) are taken from /usr/include or .deps/include
# (copy them there and carry .deps). NCCL comes from the CUDA install or from PyTorch's
# nvidia-nccl wheel.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/build-gpu/out}
mkdir -p "$out" build-gpu
{ nvidia-smi || true; } > "$out/nvidia-smi.txt" 2>&1

nccl_dir=""
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  [ -e "$d/libnccl.so.2" ] && nccl_dir=$d && break
done
if [ -z "$nccl_dir" ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl as m; import os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
fi
export LD_LIBRARY_PATH="${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-}"
echo "NCCL from: ${nccl_dir:-not found}" | tee "$out/nccl.txt"

flags=(-std=c++20 -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
       --expt-relaxed-constexpr -Xcompiler -fopenmp -Iinclude -Itests)
[ -d .deps/include ] && flags+=(-I.deps/include)
if [ ! -x build-gpu/cuda_tests ]; then
  nvcc "${flags[@]}" -DTUTTI_TEST_NCCL=1 -DTUTTI_TEST_DATA_DIR="\"$PWD/tests/data\"" \
    -DTUTTI_DATASETS_DIR="\"$PWD/../shared/datasets\"" tests/cuda/cuda_tests.cu \
    -o build-gpu/cuda_tests -L"$nccl_dir" -l:libnccl.so.2 2>&1 | tee "$out/build-tests.txt"
fi
if [ ! -x build-gpu/bench_gpu_mf ]; then
  nvcc "${flags[@]}" benchmarks/gpu_mf.cu -o build-gpu/bench_gpu_mf 2>&1 | tee "$out/build-bench.txt"
fi

OMP_WAIT_POLICY=passive build-gpu/cuda_tests 2>&1 | tee "$out/cuda_tests.txt"
rc=${PIPESTATUS[0]}

work=$(mktemp -d)
OMP_WAIT_POLICY=passive build-gpu/bench_gpu_mf --out "$work" --json "$out/gpu_mf.json" ${GPU_MF_ARGS:-} \
  2>&1 | tee "$out/gpu_mf.txt"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 benchmarks/peers/torch_mf.py "$work" --json "$out/torch_mf.json" \
    --compare "$out/gpu_mf.json" 2>&1 | tee "$out/torch_mf.txt"
  python3 benchmarks/peers/torch_mf.py "$work" --fused --json "$out/torch_mf_fused.json" \
    --compare "$out/gpu_mf.json" 2>&1 | tee "$out/torch_mf_fused.txt"
else
  echo "PyTorch with CUDA not available: peer comparison skipped" | tee "$out/torch_mf.txt"
fi
rm -rf "$work"
exit "$rc"
