#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets fuzz/<target>.cpp with clang++ -fsanitize=fuzzer,address,undefined,
# replays every input that once failed (fuzz/regressions/<target>/), then fuzzes each target for
# a bounded time starting from its seed corpus (fuzz/corpus/<target>/).
#
#   bash scripts/fuzz.sh                     # every target, 60 s each
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh csv_fuzz
#
# Build folder: ${TUTTI_BUILD_DIR:-build}-fuzz, holding per target the binary, the grown corpus
# (the repository's seeds are never modified) and crashes/. A crash, leak, sanitizer report or
# broken property fails the script and leaves the input in <build>-fuzz/<target>/crashes/;
# keep it as a regression with FUZZ_SAVE_REGRESSIONS=1 (copies it to fuzz/regressions/<target>/)
# or by hand; the unit suite replays fuzz/regressions/ too (tests/test_clean.cpp).
# A target's extra link flags are named in its source on a line `// fuzz-link: -lsodium`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TUTTI_BUILD_DIR:-${root}/build}-fuzz"
seconds="${FUZZ_SECONDS:-60}"

# libFuzzer's runtime comes with clang's compiler-rt (Debian: libclang-rt-14-dev).
bash "${root}/scripts/deps.sh" clang-14 libclang-rt-14-dev
cxx="${FUZZ_CXX:-}"
if [[ -z "${cxx}" ]]; then
  for c in clang++-14 clang++; do
    if command -v "${c}" >/dev/null 2>&1; then
      cxx="${c}"
      break
    fi
  done
fi
[[ -n "${cxx}" ]] || { echo "scripts/fuzz.sh: clang++ not found" >&2; exit 1; }

targets=()
if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  for src in "${root}"/fuzz/*_fuzz.cpp; do
    targets+=("$(basename "${src}" .cpp)")
  done
fi

# Thrust is not needed by the loaders; config.hpp still wants its system named for g++/clang++.
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer "-fsanitize=fuzzer,address,undefined"
       "-fno-sanitize-recover=undefined" -DTHRUST_DEVICE_SYSTEM=THRUST_DEVICE_SYSTEM_OMP
       -I"${root}/include")
export ASAN_OPTIONS="detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# One target: build, replay its regressions, fuzz. Its output goes to <dir>/run.log and its
# result (a line) to <dir>/result, so targets can run side by side.
run_target() {
  local t="$1" src="${root}/fuzz/$1.cpp" dir="${build}/$1" started=${SECONDS} result=passed
  local link regressions seeds
  mkdir -p "${dir}/corpus" "${dir}/crashes"
  touch "${dir}/started"  # crashes newer than this are this run's
  read -r -a link <<<"$(sed -n 's|^// fuzz-link: ||p' "${src}" | tr '\n' ' ')"
  echo "== fuzz: ${t}: building with ${cxx}"
  if ! "${cxx}" "${flags[@]}" "${src}" -o "${dir}/${t}" "${link[@]}"; then
    echo "$((SECONDS - started)) s, FAILED (does not compile)" >"${dir}/result"
    return
  fi
  regressions=("${root}/fuzz/regressions/${t}"/*)
  if [[ -e "${regressions[0]}" ]]; then
    echo "== fuzz: ${t}: replaying ${#regressions[@]} regression input(s)"
    if ! "${dir}/${t}" -runs=1 "${regressions[@]}"; then
      result="FAILED (a regression input fails again)"
    fi
  fi
  if [[ "${result}" == passed && "${seconds}" -gt 0 ]]; then
    echo "== fuzz: ${t}: fuzzing for ${seconds} s"
    seeds=()
    [[ -d "${root}/fuzz/corpus/${t}" ]] && seeds=("${root}/fuzz/corpus/${t}")
    # New inputs go to the first folder (the build's); the seeds are only read.
    if ! "${dir}/${t}" -max_total_time="${seconds}" -max_len=8192 -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="${dir}/crashes/" \
      "${dir}/corpus" "${seeds[@]}"; then
      result="FAILED (see ${dir}/crashes/)"
    fi
  fi
  echo "$((SECONDS - started)) s, ${result}" >"${dir}/result"
}

# Each target is one process on one core: as many run at once as there are cores (each still
# fuzzes for its full time), and their logs are printed whole, one after the other.
jobs="$(nproc 2>/dev/null || echo 1)"
for t in "${targets[@]}"; do
  [[ -f "${root}/fuzz/${t}.cpp" ]] || { echo "scripts/fuzz.sh: no fuzz/${t}.cpp" >&2; exit 1; }
  rm -f "${build}/${t}/result"
done
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  mkdir -p "${build}/${t}"
  run_target "${t}" >"${build}/${t}/run.log" 2>&1 &
done
wait

status=0
for t in "${targets[@]}"; do
  dir="${build}/${t}"
  cat "${dir}/run.log"
  [[ -f "${dir}/result" ]] || echo "0 s, FAILED (ended without a result)" >"${dir}/result"
  if [[ "$(cat "${dir}/result")" != *", passed" ]]; then
    status=1
    while IFS= read -r -d '' crash; do
      echo "== fuzz: ${t}: failing input ${crash} ($(stat -c %s "${crash}") bytes):"
      od -A d -c "${crash}" | head -n 20
      if [[ "${FUZZ_SAVE_REGRESSIONS:-0}" == 1 ]]; then
        mkdir -p "${root}/fuzz/regressions/${t}"
        cp "${crash}" "${root}/fuzz/regressions/${t}/"
        echo "== fuzz: ${t}: kept as fuzz/regressions/${t}/$(basename "${crash}")"
      fi
    done < <(find "${dir}/crashes" -type f -newer "${dir}/started" -print0)
  fi
done

echo "== fuzz: summary"
for t in "${targets[@]}"; do
  echo "   ${t}: $(cat "${build}/${t}/result")"
done
exit "${status}"
