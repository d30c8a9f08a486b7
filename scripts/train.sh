#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the `tutti` program and runs `tutti train` with the arguments given, e.g.
#   scripts/train.sh --ranks 2 --epochs 3
# The build folder is `build` in the repository root, or $TUTTI_BUILD_DIR.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TUTTI_BUILD_DIR:-${root}/build}"
jobs="$(nproc 2>/dev/null || echo 2)"

bash "${root}/scripts/deps.sh"

# Configured quietly so the program's own output is what a user sees.
cmake -S "${root}" -B "${build}" -DCMAKE_BUILD_TYPE=Release >/dev/null
# The program's target is tutti_cli (tutti is the library); its executable is named tutti.
cmake --build "${build}" --target tutti_cli -j "${jobs}"
exec "${build}/apps/tutti" train "$@"
