#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two builds of tutti_bench_cpu_mf side by side in one run: for ROUNDS rounds, each build runs
# the four configurations of benchmarks/peers/run.sh's MF rows (1 process x 2 threads, 1 x 1,
# 2 local ranks, 2 MPI processes), the builds alternating; prints the median samples/s of each
# side, the ratio of the medians and the per-round ratios, and fails when the two builds' final
# losses differ in the 6 digits printed (it compares code, not work).
#
#   bash benchmarks/ab_cpu_mf.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]    # default 5
#
# A build of an older commit, for example:
#   git worktree add /tmp/before <commit>
#   cmake -S /tmp/before -B /tmp/before/build -DCMAKE_BUILD_TYPE=Release \
#     -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=OFF
#   cmake --build /tmp/before/build --target tutti_bench_cpu_mf
set -euo pipefail

before="${1:?usage: ab_cpu_mf.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]}"
after="${2:?usage: ab_cpu_mf.sh BEFORE_BINARY AFTER_BINARY [ROUNDS]}"
rounds="${3:-5}"
[[ ${rounds} =~ ^[1-9][0-9]*$ ]] || {
  echo "ab_cpu_mf.sh: ROUNDS must be a positive integer, got '${rounds}'" >&2
  exit 2
}
for b in "${before}" "${after}"; do
  [[ -x ${b} ]] || {
    echo "ab_cpu_mf.sh: ${b} is not an executable" >&2
    exit 2
  }
done
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
cores="$(nproc)"
mpi=(mpiexec --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY -n 2)
[[ $(id -u) -eq 0 ]] && mpi=(mpiexec --allow-run-as-root "${mpi[@]:1}")
out="$(mktemp -d)"
trap 'rm -rf "${out}"' EXIT

# "samples/s loss" of one run of binary $1 with the remaining arguments
one() {
  local bin=$1 prefix=$2
  shift 2
  ${prefix} "${bin}" --epochs 2 "$@" | sed -n 's/.*warm-up: \([0-9]*\); final train loss \(.*\)/\1 \2/p'
}

configs=("1x${cores}" "1x1" "local2" "mpi2")
for ((r = 1; r <= rounds; ++r)); do
  for side in before after; do
    bin="${!side}"
    {
      echo "1x${cores} $(one "${bin}" "env OMP_NUM_THREADS=${cores}")"
      echo "1x1 $(one "${bin}" "env OMP_NUM_THREADS=1")"
      echo "local2 $(one "${bin}" "env OMP_NUM_THREADS=1" --reducer local --ranks 2)"
      echo "mpi2 $(one "${bin}" "${mpi[*]}" --reducer mpi)"
    } >"${out}/${side}${r}.txt"
    echo "round ${r} ${side}: $(tr '\n' ' ' <"${out}/${side}${r}.txt")" >&2
  done
done

python3 - "${out}" "${rounds}" "${configs[@]}" <<'PY'
import statistics, sys
out, rounds, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def read(side, r):
    return {l.split()[0]: (float(l.split()[1]), l.split()[2]) for l in open(f"{out}/{side}{r}.txt")}
runs = {s: [read(s, r) for r in range(1, rounds + 1)] for s in ("before", "after")}
names = {"1x": "1 process x {} threads", "1x1": "1 process x 1 thread",
         "local2": "2 ranks, local_ring (threads)", "mpi2": "2 processes, mpi_allreduce"}
print(f"\n{'configuration':<32} {'before':>11} {'after':>11} {'after/before':>13}  per round")
bad = []
for c in configs:
    b = [x[c][0] for x in runs["before"]]
    a = [x[c][0] for x in runs["after"]]
    label = names.get(c, names["1x"].format(c[2:]) if c.startswith("1x") else c)
    per = " ".join(f"{y / x:.2f}" for x, y in zip(b, a))
    print(f"{label:<32} {statistics.median(b):>11,.0f} {statistics.median(a):>11,.0f} "
          f"{statistics.median(a) / statistics.median(b):>12.2f}x  {per}")
    for r in range(rounds):
        if runs["before"][r][c][1] != runs["after"][r][c][1]:
            bad.append(f"{label}, round {r + 1}: loss {runs['before'][r][c][1]} vs {runs['after'][r][c][1]}")
print(f"\nsamples/s: median over {rounds} rounds of the measured epoch (the second of 2)")
if bad:
    print("final losses differ:", *bad, sep="\n  ", file=sys.stderr)
    sys.exit(1)
print("final train losses equal (6 digits) in every run")
PY
