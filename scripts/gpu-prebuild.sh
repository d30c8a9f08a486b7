#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prepares, on a machine with nvcc and the Debian packages (a developer's), everything
# scripts/gpu-check.sh needs on a GPU machine that has the CUDA toolkit, CMake and Python with
# PyTorch but no Debian -dev packages and no network:
#   build-gpu/include/   the headers the builds take from Debian: doctest, CLI11, nlohmann-json,
#                        zlib, libsodium, and the reference CBLAS header (as cblas.h)
#   build-gpu/lib/       the shared libraries the binaries load that such a machine lacks:
#                        the reference BLAS (448 KB, where OpenBLAS would be 35 MB), libsodium,
#                        zlib
#   build-gpu/cuda_tests, bench_gpu_mf, tutti, consumer_cuda, consumer_nccl
#                        built by scripts/gpu-build.sh from those alone
# Carry build-gpu (gitignored; with the source tree well under 64 MiB) and run
# `bash scripts/gpu-check.sh` there; it rebuilds any binary that is missing, or stale (built from
# other sources), from the same
# headers and libraries. scripts/gpu-selfcontained.sh proves that on this machine.
#
#   bash scripts/gpu-prebuild.sh [--no-binaries]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
binaries=1
[[ "${1:-}" == --no-binaries ]] && binaries=0
bash scripts/deps.sh libblas-dev
start=${SECONDS}

rm -rf build-gpu/include build-gpu/lib
mkdir -p build-gpu/include build-gpu/lib
inc=/usr/include
multi="$(gcc -print-multiarch)"
cp -r "${inc}/doctest" "${inc}/CLI" "${inc}/nlohmann" "${inc}/sodium" build-gpu/include/
cp "${inc}/sodium.h" "${inc}/zlib.h" build-gpu/include/
for h in "${inc}/zconf.h" "${inc}/${multi}/zconf.h"; do  # where Debian's zlib1g-dev put it
  if [[ -f "${h}" ]]; then
    cp "${h}" build-gpu/include/
    break
  fi
done
cp "${inc}/${multi}/cblas-netlib.h" build-gpu/include/cblas.h
cp "${inc}/${multi}/cblas_mangling.h" build-gpu/include/

# The libraries by the names the builds link (-l:<soname>), found through the dynamic loader.
for soname in libblas.so.3 libsodium.so.23 libz.so.1; do
  case "${soname}" in
    libblas.so.3) path="/usr/lib/${multi}/blas/libblas.so.3" ;;  # netlib's, not OpenBLAS
    # awk reads to the end: an early exit would end ldconfig with SIGPIPE, which pipefail
    # turns into the script's failure (exit 141).
    *) path="$(ldconfig -p | awk -v n="${soname}" '$1 == n && /x86-64/ && !p {p = $NF} END {print p}')" ;;
  esac
  [[ -e "${path}" ]] || { echo "gpu-prebuild: ${soname} not found" >&2; exit 1; }
  cp -L "${path}" "build-gpu/lib/${soname}"
done

if [[ ${binaries} -eq 1 ]]; then
  # shellcheck source=scripts/gpu-build.sh
  source scripts/gpu-build.sh
  gpu_binaries=(build-gpu/cuda_tests build-gpu/bench_gpu_mf build-gpu/tutti
    build-gpu/consumer_cuda build-gpu/consumer_nccl)
  rm -f "${gpu_binaries[@]}"
  gpu_build_missing build-gpu/logs
  strip "${gpu_binaries[@]}"
  # Every library a binary needs is the CUDA toolkit's, NCCL, glibc/libstdc++/libgomp (on every
  # machine with a compiler) or one of build-gpu/lib.
  for bin in "${gpu_binaries[@]}"; do
    ldd "${bin}" | awk '{print $1}' | while read -r lib; do
      case "${lib}" in
        linux-vdso* | /lib64/* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
          libgcc_s.so* | libstdc++.so* | libgomp.so* | libcuda.so* | libcudart.so* | \
          libcublas*.so* | libnccl.so* | libblas.so.3 | libsodium.so.23 | libz.so.1) ;;
        *) echo "gpu-prebuild: ${bin} needs ${lib}, which build-gpu/lib does not carry" >&2
           exit 1 ;;
      esac
    done
  done
fi

source_bytes="$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)"
carried_bytes="$(du -sb build-gpu --exclude=build-gpu/logs --exclude=build-gpu/out | cut -f1)"
total=$((source_bytes + carried_bytes))
awk -v s="${source_bytes}" -v c="${carried_bytes}" -v t=$((SECONDS - start)) 'BEGIN {
  printf "gpu-prebuild: source %.1f MiB + build-gpu %.1f MiB = %.1f MiB (limit 64 MiB) in %d s\n",
    s / 1048576, c / 1048576, (s + c) / 1048576, t }'
if [[ ${total} -gt $((64 << 20)) ]]; then
  echo "gpu-prebuild: more than the 64 MiB that can travel to a GPU machine" >&2
  exit 1
fi
