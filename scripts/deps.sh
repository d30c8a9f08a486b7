#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages tutti's build and tests need, only those missing; packages named
# as arguments are added (scripts/fuzz.sh asks for clang-14 and libclang-rt-14-dev this way).
# Runs `apt-get update` once, and only when something has to be installed. Works as root (CI)
# and through sudo otherwise.
set -euo pipefail

packages=(cmake g++ make doctest-dev libcli11-dev nlohmann-json3-dev clang-format
  libsodium-dev pkg-config zlib1g-dev libopenblas-dev
  libopenmpi-dev openmpi-bin
  python3 python3-numpy ninja-build
  "$@")

# Thrust/CUB ship with the CUDA toolkit's CCCL; Debian's packages stand in where it is absent.
have_thrust=0
for dir in /usr/local/cuda/include/cccl /usr/local/cuda/include; do
  if [[ -f "${dir}/thrust/version.h" ]]; then
    have_thrust=1
    break
  fi
done
if [[ ${have_thrust} -eq 0 ]]; then
  packages+=(libthrust-dev libcub-dev)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "${p}" >/dev/null 2>&1; then
    missing+=("${p}")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "scripts/deps.sh: missing packages: ${missing[*]}" >&2
  echo "scripts/deps.sh: not root and sudo is not available; install them and rerun" >&2
  exit 1
fi

echo "scripts/deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}"
