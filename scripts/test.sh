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

cmake -S "${root}" -B "${build}" -DCMAKE_BUILD_TYPE=Release
cmake --build "${build}" -j "${jobs}"
cd "${build}"
ctest --output-on-failure -j "${jobs}" "$@"
