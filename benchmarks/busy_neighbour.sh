#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One rank of `tutti train` on the host while other work starts beside it, mid-run: how each
# way of waiting between parallel regions holds up. For each round, each scenario (no
# neighbour; 1 or 2 CPU-bound busy loops started mid-run) and
# each variant, in an order that alternates round by round (the neighbours start
# NEIGHBOUR_AFTER seconds after the run's fit starts, past its setup):
#   share:   tutti train's default: its threads follow the machine (--share-cores on: every
#            100 ms it looks at the runnable tasks outside the process) and spin a bounded while
#            (OMP_WAIT_POLICY=active, GOMP_SPINCOUNT=300000);
#   active:  OMP_WAIT_POLICY=active, --share-cores off: what a start-up probe of an idle machine
#            chose before;
#   passive: OMP_WAIT_POLICY=passive, --share-cores off: what a busy machine at the start chose.
# Each run's intervals of 100 steps (its log's records) are classed by the neighbours: those
# that ended before they started ("alone") and those that began after ("beside"); the table
# gives each run's median interval of a class, as the median and range over the rounds, and
# the JSON every run's epochs and medians.
#
# Usage: benchmarks/busy_neighbour.sh [ROUNDS]  (default 3)
# Environment: BUILD (a build with apps/tutti, default build), OUT (default
# build-neighbour), NEIGHBOUR_LEARNERS (synthetic learners, default 60000: about 3.6 M rows),
# NEIGHBOUR_EPOCHS (default 14), NEIGHBOUR_AFTER (seconds, default 2), NEIGHBOUR_OPTIMIZER
# (default lazy-adam).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-3}"
build="${BUILD:-${root}/build}"
out="${OUT:-${root}/build-neighbour}"
tutti="${build}/apps/tutti"
learners="${NEIGHBOUR_LEARNERS:-60000}"
epochs="${NEIGHBOUR_EPOCHS:-14}"
after="${NEIGHBOUR_AFTER:-2}"
optimizer="${NEIGHBOUR_OPTIMIZER:-lazy-adam}"
[[ -x ${tutti} ]] || {
  echo "busy_neighbour.sh: no ${tutti}; expected a build (cmake --build ${build} --target tutti)" >&2
  exit 2
}
rm -rf "${out}"
mkdir -p "${out}"

variant_env() {
  case $1 in
    share) echo "--unset=OMP_WAIT_POLICY --unset=GOMP_SPINCOUNT" ;;
    active) echo "OMP_WAIT_POLICY=active --unset=GOMP_SPINCOUNT" ;;
    passive) echo "OMP_WAIT_POLICY=passive --unset=GOMP_SPINCOUNT" ;;
  esac
}
variant_flags() { [[ $1 == share ]] && echo "--share-cores on" || echo "--share-cores off"; }

# Runs one variant with `n` busy loops started `after` seconds into the fit; writes NAME.json, the
# step log NAME.log (a record every 100 steps) and NAME.begun (the log's lines when the
# neighbours started; empty without).
run_one() {
  local name=$1 variant=$2 n=$3
  local pids=()
  # shellcheck disable=SC2046
  env -u TUTTI_OTHER_RUNNABLE $(variant_env "${variant}") "${tutti}" train --learners "${learners}" \
    --courses 2000 --test-fraction 0 --ranks 1 --optimizer "${optimizer}" --batch 4096 \
    --epochs "${epochs}" --seed 7 --quiet $(variant_flags "${variant}") \
    --log "${out}/${name}.log" --log-every 100 --json "${out}/${name}.json" >/dev/null &
  local run=$!
  local begun=""
  if ((n > 0)); then
    # The neighbours start `after` seconds into the training, past the setup: the log's first
    # record (the learning rate) is written as the fit starts.
    until [[ -s ${out}/${name}.log ]] || ! kill -0 "${run}" 2>/dev/null; do sleep 0.05; done
    sleep "${after}"
    # The log's records so far were written before the neighbours started.
    begun=$(wc -l <"${out}/${name}.log")
    for ((k = 0; k < n; ++k)); do
      sh -c 'while :; do :; done' &
      pids+=($!)
    done
  fi
  wait "${run}"
  ((${#pids[@]} == 0)) || kill "${pids[@]}" 2>/dev/null || true
  echo "${begun}" >"${out}/${name}.begun"
}

echo "busy_neighbour: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); ${learners} learners," \
  "${optimizer}, ${epochs} epochs; neighbours after ${after} s; ${rounds} round(s)"
variants=(share active passive)
for ((r = 1; r <= rounds; ++r)); do
  order=("${variants[@]}")
  ((r % 2)) || order=(passive active share)
  for n in 0 1 2; do
    for v in "${order[@]}"; do
      run_one "r${r}-n${n}-${v}" "${v}" "${n}"
      echo "  round ${r}, ${n} neighbour(s), ${v}: done"
    done
  done
done

python3 - "${out}" "${rounds}" <<'PY'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = []
for r in range(1, rounds + 1):
    for n in (0, 1, 2):
        for v in ("share", "active", "passive"):
            name = f"r{r}-n{n}-{v}"
            j = json.load(open(f"{out}/{name}.json"))
            begun = open(f"{out}/{name}.begun").read().strip()
            lines = open(f"{out}/{name}.log").read().splitlines()
            # Each record's interval (since the record before) at its samples/s: "alone" if it
            # was written before the neighbours started, "beside" if the record before it was
            # written after, "across" for the one between; the first interval is left out.
            alone, beside = [], []
            last = None
            for index, line in enumerate(lines, start=1):
                rec = json.loads(line)
                if "step" not in rec:
                    continue
                if last is not None and rec["seconds"] > last[0]:
                    rate = rec["samples"] / (rec["seconds"] - last[0]) / 1e6
                    if not begun or index <= int(begun):
                        alone.append(rate)
                    elif last[1] > int(begun):
                        beside.append(rate)
                last = (rec["seconds"], index)
            epochs = [{"epoch": e["epoch"], "m_samples_per_s": e["samples_per_second"] / 1e6}
                      for e in j["epochs"]]
            runs.append({"round": r, "neighbours": n, "variant": v, "epochs": epochs,
                         "alone": statistics.median(alone) if alone else None,
                         "beside": statistics.median(beside) if beside else None,
                         "omp_wait_policy": j.get("omp_wait_policy"),
                         "gomp_spincount": j.get("gomp_spincount"), "cores": j.get("cores"),
                         "parameters_checksum": j.get("parameters_checksum")})
def cell(values):
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
rows = []
print(f"\n{'variant':<8} {'neighbours':>10} {'alone (M samples/s)':>24} {'beside':>24}")
for n in (0, 1, 2):
    for v in ("share", "active", "passive"):
        mine = [x for x in runs if x["neighbours"] == n and x["variant"] == v]
        # Each run's median interval of a class, then the median and range over the rounds.
        alone = [x["alone"] for x in mine if x["alone"] is not None]
        beside = [x["beside"] for x in mine if x["beside"] is not None]
        rows.append({"variant": v, "neighbours": n, "alone": alone, "beside": beside})
        print(f"{v:<8} {n:>10} {cell(alone):>24} {cell(beside):>24}")
sums = {x["parameters_checksum"] for x in runs}
print(f"\nparameter checksums over all {len(runs)} runs: {len(sums)} distinct")
load = open("/proc/loadavg").read().split()[:3]
json.dump({"cores": os.cpu_count(), "load_after": load, "rounds": rounds, "summary": rows,
           "runs": runs}, open(f"{out}/neighbour.json", "w"), indent=1)
print(f"load after: {' '.join(load)}; JSON: {out}/neighbour.json")
PY
