#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The sanitizer jobs: the doctest suite (tutti_tests) built with g++ and
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer (leaks checked), every test case;
#   tsan   ThreadSanitizer, the threaded tests (every tests/test_*.cpp that runs ranks as threads:
#          the local ring and its barrier, the trainer, the guards, the ledger), OpenMP at 1 thread.
#
#   bash scripts/sanitize.sh             # both jobs
#   bash scripts/sanitize.sh asan        # one job (asan or tsan)
#
# Build folders: ${TUTTI_BUILD_DIR:-build}-asan and -tsan (examples, benchmarks and CUDA off;
# only tutti_tests is built) at -O0: building the suite with the sanitizers is nearly all of
# this script's time, and -O0 builds it ~4x faster than -O1 (test_trainer.cpp with ASan+UBSan:
# 35 s against 145 s) while the run, ~25 s at -O1, stays a few minutes; TUTTI_SANITIZE_OPT
# (e.g. -O1) chooses another level. TUTTI_SANITIZE_JOBS sets the build's parallelism (default 2), and
# the run's: the cases are split into 2 x that many ranges, that many run at once.
# Extra arguments after the job name go to the test executable (e.g. -tc='local_ring*');
# TUTTI_SANITIZE_CMAKE_ARGS adds configure options to both builds.
# Exits non-zero on any sanitizer report or failing test, and prints each job's time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
base="${TUTTI_BUILD_DIR:-${root}/build}"
jobs="${TUTTI_SANITIZE_JOBS:-2}"
opt="${TUTTI_SANITIZE_OPT:--O0}"

bash "${root}/scripts/deps.sh"

jobs_to_run=(asan tsan)
if [[ $# -gt 0 && ( "$1" == asan || "$1" == tsan ) ]]; then
  jobs_to_run=("$1")
  shift
fi

# Configures and builds tutti_tests in "${base}-$1" with the sanitizer flags "$2", from the test
# files "$3" (a ;-list of names; empty: every one).
build_job() {
  local dir="${base}-$1" flags="$2" files="${3:-}" extra=() generator=()
  read -r -a extra <<<"${TUTTI_SANITIZE_CMAKE_ARGS:-}"
  [[ -f "${dir}/CMakeCache.txt" ]] || generator=(-G Ninja)
  cmake -S "${root}" -B "${dir}" "${generator[@]}" -DCMAKE_BUILD_TYPE= \
    -DTUTTI_TEST_FILES="${files}" \
    -DCMAKE_CXX_FLAGS="${opt} -g -fno-omit-frame-pointer ${flags}" \
    -DCMAKE_EXE_LINKER_FLAGS="${flags}" \
    -DTUTTI_BUILD_EXAMPLES=OFF -DTUTTI_BUILD_BENCHMARKS=OFF -DTUTTI_ENABLE_CUDA=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON "${extra[@]}" >/dev/null || return 1
  cmake --build "${dir}" --target tutti_tests -j "${jobs}" || return 1
}

# Runs the doctest executable "$1" with the arguments after it as 8 x ${jobs} processes, ${jobs}
# at a time: each runs a contiguous range of the cases that pass the arguments' filters
# (doctest's --first/--last), so every case runs once and the cores are kept busy. Each shard's
# output is printed when all have ended; fails when any shard failed.
run_sharded() {
  local exe="$1"
  shift
  local total
  total=$("${exe}" --count "$@" | sed -nE 's/.*test cases passing the current filters: ([0-9]+).*/\1/p')
  [[ -n "${total}" && "${total}" -gt 0 ]] || {
    echo "sanitize: no test case of ${exe} passes the filters $*" >&2
    return 1
  }
  # Eight shards a job: the cases are in file order and a few files hold most of the time (TSan:
  # two threaded files are ~60 % of it), so small shards keep both cores busy to the end (on
  # this suite's TSan durations, two cores end after 222 s of work with 4 shards, 165 s with 16).
  local shards=$((8 * jobs)) dir k first last status=0
  local size=$(((total + shards - 1) / shards))
  dir="$(mktemp -d)"
  for ((k = 0; k < shards; ++k)); do
    first=$((k * size + 1))
    last=$(((k + 1) * size))
    ((first <= total)) || break
    while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
    (
      "${exe}" "$@" --first="${first}" --last="${last}" >"${dir}/${k}.log" 2>&1
      echo $? >"${dir}/${k}.rc"
    ) &
  done
  wait
  echo "== sanitize: ${total} cases in ${k} shards of up to ${size}"
  for ((first = 0; first < k; ++first)); do
    echo "== sanitize: shard $((first + 1)) of ${k}"
    cat "${dir}/${first}.log"
    [[ "$(cat "${dir}/${first}.rc" 2>/dev/null)" == 0 ]] || status=1
  done
  rm -rf "${dir}"
  return "${status}"
}

run_asan() {
  build_job asan "-fsanitize=address,undefined" || return 1
  # Thrust's `thrust::reference` and system dispatch bind references to null pointers of empty
  # policy types that are never read (NVIDIA/cccl#1645, NVIDIA/thrust#997): UB on paper, and
  # reported by -fsanitize=null on every sort or copy. That one check is suppressed inside
  # Thrust's headers only; UBSan stays recoverable so the suppression can apply, and
  # halt_on_error=1 makes every other report fatal.
  local supp="${base}-asan/ubsan-thrust.supp"
  cat >"${supp}" <<'SUPP'
# Thrust binds references to null pointers of empty system tags (NVIDIA/cccl#1645).
null:*/thrust/*
SUPP
  # OMP_WAIT_POLICY=passive as in ctest (tests/CMakeLists.txt): ranks as threads on shared cores.
  ASAN_OPTIONS="detect_leaks=1:strict_init_order=1:check_initialization_order=1" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=${supp}" \
    OMP_WAIT_POLICY=passive \
    run_sharded "${base}-asan/tests/tutti_tests" "$@"
}

run_tsan() {
  # The threaded tests: every test file that runs ranks as threads (run_local, local_ring,
  # run_comm_group or std::thread), so a new one joins this job by itself. Only they are built.
  local names files
  names=$(grep -l -E 'run_local|local_ring|run_comm_group|std::thread' "${root}"/tests/test_*.cpp |
    sed 's|.*/||')
  files=$(sed 's|^|*|' <<<"${names}" | paste -sd, -)
  build_job tsan "-fsanitize=thread" "$(paste -sd';' - <<<"${names}")" || return 1
  echo "== sanitize: tsan runs ${files}"
  # libgomp is not built with ThreadSanitizer, so TSan cannot see the barrier that ends an
  # OpenMP parallel region: with 2 OpenMP threads it reports ~100 "races" between a worker's
  # reads inside a region (`._omp_fn`) and the calling thread's writes after it (measured on
  # these tests). With OMP_NUM_THREADS=1 every region runs on its calling thread and nothing
  # needs suppressing; the ranks are std::threads synchronised by tutti's own barrier and
  # collectives, which TSan does see, so what it reports is tutti's.
  # Cases that set the OpenMP thread count themselves (to prove results do not depend on it)
  # would bring back those uninstrumented workers; they are left to the ASan job.
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1" \
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
    run_sharded "${base}-tsan/tests/tutti_tests" --source-file="${files}" \
    --test-case-exclude="*OpenMP thread count*" "$@"
}

declare -A took
status=0
for job in "${jobs_to_run[@]}"; do
  echo "== sanitize: ${job}"
  start=${SECONDS}
  # Called in a condition, where `set -e` is off: the functions return on their own failures.
  result=passed
  case "${job}" in
    asan) run_asan "$@" || result=FAILED ;;
    tsan) run_tsan "$@" || result=FAILED ;;
  esac
  [[ "${result}" == passed ]] || status=1
  took[${job}]="$((SECONDS - start)) s, ${result}"
done
echo "== sanitize: summary"
for job in "${jobs_to_run[@]}"; do
  echo "   ${job}: ${took[${job}]}"
done
exit "${status}"
