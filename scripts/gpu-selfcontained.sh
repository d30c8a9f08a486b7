#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Proves, on a machine without a GPU, that the GPU check is self-contained: the build half of
# scripts/gpu-check.sh runs in a mount namespace in which every file of the Debian packages a
# bare GPU machine lacks (the -dev packages the build uses, and the runtime libraries of
# libsodium, OpenBLAS, the reference BLAS and Open MPI) is hidden behind /dev/null, on a copy of
# what the device tool carries: the files git tracks or would track, and build-gpu/include and
# build-gpu/lib from scripts/gpu-prebuild.sh (not its binaries, so all three are rebuilt).
# Then each binary must load with nothing missing but the GPU driver (libcuda), `tutti --help`
# must run, and cuda_tests must list its cases and report "no device" (exit 77).
#
#   bash scripts/gpu-selfcontained.sh      # as root (mount namespaces); ~10 min on 2 cores
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
bash scripts/gpu-prebuild.sh --no-binaries  # the headers and libraries, as they are carried

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
mkdir -p "${work}/repo/build-gpu"
git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "${work}/repo"
cp -r build-gpu/include build-gpu/lib "${work}/repo/build-gpu/"
du -sh "${work}/repo" | sed 's/^/gpu-selfcontained: carried /'

hidden=(doctest-dev libcli11-dev nlohmann-json3-dev zlib1g-dev libsodium-dev libsodium23
  libopenblas-dev libopenblas-pthread-dev libopenblas0 libopenblas0-pthread libblas-dev libblas3
  liblapack-dev liblapack3 libopenmpi-dev libopenmpi3 libthrust-dev libcub-dev)
masks="${work}/masks.txt"
for p in "${hidden[@]}"; do
  dpkg -s "${p}" >/dev/null 2>&1 || continue
  dpkg -L "${p}" | while read -r f; do
    [[ "${f}" == /usr/include/* || "${f}" == /usr/lib/* || "${f}" == /lib/* ]] || continue
    [[ -f "${f}" && ! -d "${f}" ]] && echo "${f}"
  done
done | sort -u >"${masks}"
echo "gpu-selfcontained: hiding $(wc -l <"${masks}") files of ${#hidden[@]} packages"

unshare --mount --propagation private bash -s "${work}" "${masks}" <<'INNER'
set -euo pipefail
work="$1" masks="$2"
while read -r f; do mount --bind /dev/null "${f}"; done <"${masks}"
# What a bare machine sees: the headers are empty, the libraries do not load.
! echo '#include <doctest/doctest.h>
int main() { doctest::Context c; }' | g++ -std=c++20 -x c++ - -o /dev/null 2>/dev/null ||
  { echo "gpu-selfcontained: doctest is still visible"; exit 1; }
cd "${work}/repo"
OUT="${work}/out" bash scripts/gpu-check.sh --build-only
status=0
for bin in cuda_tests bench_gpu_mf tutti; do
  missing="$(ldd "build-gpu/${bin}" | grep 'not found' | grep -v 'libcuda\.so' || true)"
  if [[ -n "${missing}" ]]; then
    echo "FAIL  build-gpu/${bin} cannot load:${missing}"
    status=1
  else
    echo "PASS  build-gpu/${bin} loads (the driver's libcuda aside)"
  fi
done
if build-gpu/tutti --help >/dev/null; then echo "PASS  tutti --help"; else echo "FAIL  tutti --help"; status=1; fi
cases="$(build-gpu/cuda_tests --list-test-cases | grep -c . || true)"
set +e
build-gpu/cuda_tests >/dev/null 2>&1
rc=$?
set -e
if [[ "${cases}" -gt 10 && ${rc} -eq 77 ]]; then
  echo "PASS  cuda_tests lists ${cases} lines of cases and, without a device, exits 77"
else
  echo "FAIL  cuda_tests: ${cases} lines listed, exit ${rc} without a device (expected 77)"
  status=1
fi
exit "${status}"
INNER
echo "gpu-selfcontained: the build half of scripts/gpu-check.sh needs nothing but what is carried"
