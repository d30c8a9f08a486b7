#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prebuilds, on a machine with nvcc and the Debian packages (this one), what scripts/gpu-check.sh
# runs on a GPU machine that has the CUDA toolkit but no -dev packages and no network:
#   build-gpu/cuda_tests     the CUDA test suite (sm_90 + PTX), NCCL and cuBLAS linked
#   build-gpu/bench_gpu_mf   the GPU benchmark
#   build-gpu/tutti          the program, compiled as CUDA (libsodium, OpenBLAS, MPI, NCCL)
#   build-gpu/lib/           the shared libraries those need that a bare machine lacks
# Carry build-gpu to the GPU machine (it is gitignored) and run `bash scripts/gpu-check.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
mkdir -p build-gpu/lib

arch=(-gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90)
common=(-std=c++20 -O2 "${arch[@]}" --expt-relaxed-constexpr -Xcompiler -fopenmp -Iinclude
        -isystem /usr/local/cuda/include/cccl)
cuda_libs=(-L/usr/local/cuda/lib64 -lnccl -lcublas -lz)
blas_libs=($(pkg-config --libs openblas 2>/dev/null || echo -lopenblas))
blas_flags=($(pkg-config --cflags openblas 2>/dev/null || true))

echo "== gpu-prebuild: cuda_tests"
nvcc "${common[@]}" "${blas_flags[@]}" -Itests -DTUTTI_TEST_NCCL=1 \
  -DTUTTI_TEST_DATA_DIR='"tests/data"' -DTUTTI_DATASETS_DIR='"../shared/datasets"' \
  tests/cuda/cuda_tests.cu -o build-gpu/cuda_tests "${cuda_libs[@]}" "${blas_libs[@]}"
echo "== gpu-prebuild: bench_gpu_mf"
nvcc "${common[@]}" benchmarks/gpu_mf.cu -o build-gpu/bench_gpu_mf \
  "${cuda_libs[@]}"
echo "== gpu-prebuild: tutti"
# MPI's flags as nvcc takes them: -I, -L and -l directly, anything else through the host compiler.
mpi=()
if command -v mpicxx >/dev/null 2>&1; then
  mpi+=(-DTUTTI_HAS_MPI=1)
  for f in $(mpicxx --showme:compile) $(mpicxx --showme:link); do
    case "${f}" in
      -I* | -L* | -l*) mpi+=("${f}") ;;
      *) mpi+=("-Xcompiler=${f}") ;;
    esac
  done
fi
nvcc "${common[@]}" "${blas_flags[@]}" -DTUTTI_HAS_NCCL=1 -DTUTTI_HAS_BLAS=1 "${mpi[@]}" \
  -x cu examples/tutti/main.cpp -o build-gpu/tutti "${cuda_libs[@]}" "${blas_libs[@]}" -lsodium

# Shared libraries outside the CUDA toolkit and glibc that the binaries load: carried along.
for bin in build-gpu/cuda_tests build-gpu/bench_gpu_mf build-gpu/tutti; do
  ldd "${bin}" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "${lib}")" in
    libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | ld-linux* | libgcc_s.so* | \
      libstdc++.so* | libcuda.so* | libcudart.so* | libcublas*.so* | libnccl.so*) ;;
    *) cp -L "${lib}" build-gpu/lib/ ;;
  esac
done
ls -la build-gpu build-gpu/lib
du -sh build-gpu
