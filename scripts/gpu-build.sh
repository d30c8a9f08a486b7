#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The nvcc builds of the GPU check, sourced (not run) by scripts/gpu-prebuild.sh, on a machine
# with the Debian packages, and by scripts/gpu-check.sh, on a GPU machine that has the CUDA
# toolkit but no -dev packages and no network. Both build from the same lines:
#   build-gpu/cuda_tests     the CUDA test suite (sm_90 + PTX), NCCL, cuBLAS and a CBLAS linked
#   build-gpu/bench_gpu_mf   the GPU benchmark
#   build-gpu/tutti          the program, compiled as CUDA (NCCL, cuBLAS, CBLAS, libsodium)
# Headers and libraries outside the CUDA toolkit come from build-gpu/include and build-gpu/lib
# only (gpu-prebuild.sh fills them), never from /usr/include: what builds here builds there.
# The binaries find build-gpu/lib through their run path ($ORIGIN/lib).

gpu_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
gpu_dir="${gpu_root}/build-gpu"
gpu_cuda="${CUDA_HOME:-/usr/local/cuda}"

# Sets gpu_nccl_lib and gpu_nccl_include: NCCL from the CUDA toolkit, the system, or PyTorch's
# nvidia-nccl wheel; empty when none is found.
gpu_find_nccl() {
  gpu_nccl_lib="" gpu_nccl_include=""
  local d
  for d in "${gpu_cuda}/lib64" "${gpu_cuda}/targets/x86_64-linux/lib" /usr/lib/x86_64-linux-gnu; do
    if [[ -e "${d}/libnccl.so.2" ]]; then
      gpu_nccl_lib="${d}"
      break
    fi
  done
  if [[ -z "${gpu_nccl_lib}" ]]; then
    d="$(python3 -c 'import nvidia.nccl as m, os; print(list(m.__path__)[0])' 2>/dev/null || true)"
    [[ -n "${d}" && -e "${d}/lib/libnccl.so.2" ]] && gpu_nccl_lib="${d}/lib"
  fi
  for d in "${gpu_cuda}/include" "${gpu_cuda}/targets/x86_64-linux/include" /usr/include \
    "${gpu_nccl_lib%/lib}/include"; do
    if [[ -n "${gpu_nccl_lib}" && -f "${d}/nccl.h" ]]; then
      gpu_nccl_include="${d}"
      break
    fi
  done
}

# Builds build-gpu/<target> (cuda_tests, bench_gpu_mf, tutti, consumer_cuda or consumer_nccl);
# the compiler's output goes to stdout. Returns nvcc's status.
gpu_build() {
  local target="$1"
  gpu_find_nccl
  if [[ -z "${gpu_nccl_lib}" || -z "${gpu_nccl_include}" ]]; then
    echo "gpu_build: NCCL not found (CUDA toolkit, /usr/lib or PyTorch's nvidia-nccl wheel)"
    return 1
  fi
  local common=(-std=c++20 -O2 -gencode arch=compute_90,code=sm_90
    -gencode arch=compute_90,code=compute_90 --expt-relaxed-constexpr -Xcompiler -fopenmp
    -I"${gpu_root}/include" -I"${gpu_dir}/include" -isystem "${gpu_cuda}/include/cccl"
    -I"${gpu_nccl_include}")
  # Exact sonames, so no -dev symlink is needed; the run path finds them beside the binary.
  local libs=(-L"${gpu_cuda}/lib64" -L"${gpu_nccl_lib}" -l:libnccl.so.2 -lcublas
    -L"${gpu_dir}/lib" -l:libblas.so.3 -l:libz.so.1 -Xlinker "-rpath=\$ORIGIN/lib")
  case "${target}" in
    cuda_tests)
      nvcc "${common[@]}" -I"${gpu_root}/tests" -DTUTTI_TEST_NCCL=1 \
        -DTUTTI_TEST_DATA_DIR="\"${gpu_root}/tests/data\"" \
        -DTUTTI_DATASETS_DIR="\"${gpu_root}/../shared/datasets\"" \
        "${gpu_root}/tests/cuda/cuda_tests.cu" -o "${gpu_dir}/cuda_tests" "${libs[@]}"
      ;;
    bench_gpu_mf)
      nvcc "${common[@]}" "${gpu_root}/benchmarks/gpu_mf.cu" -o "${gpu_dir}/bench_gpu_mf" "${libs[@]}"
      ;;
    tutti)
      # Without MPI: the check runs the program on the GPUs of one process. As in the CMake
      # build, each command's .cpp is a host translation unit (the host compiler, Thrust on
      # OpenMP) and cuda_parts.cu the one nvcc compiles as CUDA; nvcc links them.
      local app="${gpu_root}/apps/tutti" obj="${gpu_dir}/tutti-obj" f
      local defs=(-DTUTTI_HAS_NCCL=1 -DTUTTI_HAS_BLAS=1 -DTUTTI_CLI_CUDA=1
        -DTUTTI_DATASETS_DIR="\"${gpu_root}/../shared/datasets\"")
      # The host compiler itself: under nvcc, CCCL's headers would take a .cpp for CUDA code.
      local host=(-std=c++20 -O2 -fopenmp -I"${gpu_root}/include" -I"${gpu_dir}/include"
        -isystem "${gpu_cuda}/include/cccl" -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP)
      local objs=()
      mkdir -p "${obj}"
      for f in train study bench plan seal audit recommend main; do
        "${CXX:-c++}" "${host[@]}" "${defs[@]}" -c "${app}/${f}.cpp" -o "${obj}/${f}.o" || return 1
        objs+=("${obj}/${f}.o")
      done
      nvcc "${common[@]}" "${defs[@]}" "${objs[@]}" "${app}/cuda_parts.cu" \
        -o "${gpu_dir}/tutti" "${libs[@]}" -l:libsodium.so.23
      ;;
    consumer_cuda | consumer_nccl)
      # The package's cuda and nccl consumers (examples/consumer-components), with the
      # definitions tutti::cuda and tutti::nccl give them.
      nvcc "${common[@]}" -DTUTTI_HAS_NCCL=1 \
        "${gpu_root}/examples/consumer-components/${target#consumer_}.cu" \
        -o "${gpu_dir}/${target}" "${libs[@]}"
      ;;
    *)
      echo "gpu_build: unknown target '${target}'; expected cuda_tests, bench_gpu_mf, tutti," \
        "consumer_cuda or consumer_nccl"
      return 2
      ;;
  esac
}

# A digest of the sources the binaries are built from (what git tracks under include, apps,
# benchmarks, tests/cuda and examples/consumer-components, and this script), by content, so a
# copy of the tree on another machine has the same one.
gpu_source_digest() {
  (cd "${gpu_root}" && find include apps benchmarks tests/cuda examples/consumer-components \
    scripts/gpu-build.sh -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o \
    -name '*.h' -o -name '*.sh' \) -print0 | sort -z | xargs -0 sha256sum | sha256sum |
    cut -d' ' -f1)
}

# Builds every missing or stale target (one whose sources changed since it was built), in parallel; each one's output goes to "$1/build-<target>.txt".
# Returns non-zero when any build failed.
gpu_build_missing() {
  local logs="$1" target status=0 digest
  local pids=() names=()
  mkdir -p "${logs}" "${gpu_dir}"
  digest="$(gpu_source_digest)"
  for target in cuda_tests bench_gpu_mf tutti consumer_cuda consumer_nccl; do
    # A binary built from other sources than these is stale: built again.
    [[ -x "${gpu_dir}/${target}" && "$(cat "${gpu_dir}/${target}.source" 2>/dev/null)" == "${digest}" ]] &&
      continue
    echo "== building build-gpu/${target}"
    { gpu_build "${target}" && echo "${digest}" >"${gpu_dir}/${target}.source"; } \
      >"${logs}/build-${target}.txt" 2>&1 &
    pids+=($!)
    names+=("${target}")
  done
  local i
  for i in "${!pids[@]}"; do
    if ! wait "${pids[$i]}"; then
      echo "== build-gpu/${names[$i]} failed; the last lines of ${logs}/build-${names[$i]}.txt:"
      tail -n 20 "${logs}/build-${names[$i]}.txt"
      status=1
    fi
  done
  return "${status}"
}
