#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs ctest in the build folder $1 with the arguments after it (on every core, output shown on
# failure) and accounts for the skipped tests: they are counted apart from the passed ones and
# listed. Under CI a skip is a failure unless the machine cannot run the test: without a GPU the
# CUDA cases (not built: one entry, cuda/not-built, says so) and the runs of the cuda and nccl
# package consumers (which are still built), with one GPU the case across GPUs;
# $TUTTI_ALLOWED_SKIPS (an extended regex over test names) replaces that rule.
# scripts/test.sh and scripts/build-check.sh run their tests through it. Exits with ctest's status,
# or 1 for a skip CI does not allow.
set -euo pipefail

build="$1"
shift
jobs="$(nproc 2>/dev/null || echo 2)"

cd "${build}"
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
set +e
ctest --output-on-failure -j "${jobs}" "$@" | tee "${log}"
status=${PIPESTATUS[0]}
set -e

skipped="$(sed -nE 's/^[[:space:]]*[0-9]+ - (.*) \(Skipped\)$/\1/p' "${log}")"
count=0
[[ -n "${skipped}" ]] && count=$(wc -l <<<"${skipped}")
echo "scripts/run-ctest.sh: ${count} skipped"
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
    echo "scripts/run-ctest.sh: skipped on a machine set up to run them (CI installs OpenBLAS, Open MPI" >&2
    echo "and libsodium; the datasets are in ../shared/datasets):" >&2
    sed 's/^/  /' <<<"${unexpected}" >&2
    exit 1
  fi
fi
exit "${status}"
