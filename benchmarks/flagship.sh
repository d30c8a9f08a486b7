#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The flagship size on one machine: a log of about 30 M distinct learners (80 M positives drawn
# from 34 M learner ids, 20,000 courses, `benchmarks/make_log.py`), trained at dim 64 with
# row-wise Adagrad for one epoch on one rank (`--feedback implicit`: 4 sampled negatives a
# positive). Prints the memory accounts, the peak resident memory, the wait before the first
# step and samples/s, each run, with the load average, and the peak `tutti plan --host`
# forecasts from the run's report; writes OUT/flagship.json.
#
#   bash benchmarks/flagship.sh [TUTTI_BINARY] [OUT_DIR]
#
# Environment: ROWS (80000000), LEARNER_IDS (34000000), COURSES (20000), DIM (64), RUNS (1),
# OPTIMIZER (rowwise-adagrad), LOG (OUT_DIR/log.tsv; written once, about 1 GB, and kept).
# Needs about 16 GB of memory at the default size; not part of CI.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tutti="${1:-${root}/build/apps/tutti}"
out="${2:-${root}/build/flagship}"
rows="${ROWS:-80000000}"
ids="${LEARNER_IDS:-34000000}"
courses="${COURSES:-20000}"
dim="${DIM:-64}"
runs="${RUNS:-1}"
optimizer="${OPTIMIZER:-rowwise-adagrad}"
[[ -x ${tutti} ]] || {
  echo "flagship.sh: ${tutti} is not an executable (build apps/tutti first)" >&2
  exit 2
}
mkdir -p "${out}"
log="${LOG:-${out}/log.tsv}"
if [[ ! -s ${log} ]]; then
  echo "flagship.sh: writing ${log} (${rows} rows) ..." >&2
  python3 "${root}/benchmarks/make_log.py" --rows "${rows}" --learners "${ids}" \
    --courses "${courses}" "${log}.part"
  mv "${log}.part" "${log}"
fi

for ((r = 1; r <= runs; ++r)); do
  load="$(cut -d' ' -f1-3 /proc/loadavg)"
  "${tutti}" train --data "${log}" --user-col user --item-col item --feedback implicit \
    --ranks 1 --epochs 1 --dim "${dim}" --optimizer "${optimizer}" \
    --json "${out}/run${r}.json" | tee "${out}/run${r}.txt"
  echo "${load}" >"${out}/run${r}.load"
  # The forecast `tutti plan --host` makes of the same run, from its report's shape.
  "${tutti}" plan --from "${out}/run${r}.json" --host --json "${out}/plan${r}.json" >/dev/null
done

python3 - "${out}" "${runs}" "${log}" "${dim}" "${optimizer}" <<'PY'
import json, os, sys
out, runs, log, dim, optimizer = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
gb = lambda b: b / 1e9
rows = []
for r in range(1, runs + 1):
    rep = json.load(open(os.path.join(out, f"run{r}.json")))
    mem, setup = rep.get("memory", {}), rep.get("setup", {})
    epoch = rep["epochs"][-1]
    rows.append({
        "run": r,
        "load_average": open(os.path.join(out, f"run{r}.load")).read().split(),
        "memory": mem,
        "setup": setup,
        "samples_per_second": epoch.get("samples_per_second"),
        "epoch_seconds": epoch.get("seconds"),
        "forecast": json.load(open(os.path.join(out, f"plan{r}.json")))["questions"]["fits"]["forecast"],
    })
print(f"\nflagship: {log} ({os.path.getsize(log) / 1e9:.2f} GB), dim {dim}, {optimizer}, one rank")
print("| run | load | parameters | gradients | optimizer state | rows | step buffers | shard |"
      " peak resident | read s | split s | built s | first step s | epoch s | samples/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for x in rows:
    m, s = x["memory"], x["setup"]
    print(f"| {x['run']} | {' '.join(x['load_average'])} | {gb(m.get('parameters', 0)):.2f} GB"
          f" | {gb(m.get('gradients', 0)):.3f} GB | {gb(m.get('optimizer_state', 0)):.2f} GB"
          f" | {gb(m.get('rows', 0)):.2f} GB | {gb(m.get('step_buffers', 0)):.2f} GB"
          f" | {gb(m.get('shard', 0)):.2f} GB | {gb(m.get('peak_resident_bytes', 0)):.2f} GB"
          f" | {s.get('read_seconds', 0):.2f} | {s.get('split_seconds', 0):.2f}"
          f" | {s.get('init_seconds', 0):.2f} | {s.get('first_step_seconds', 0):.2f}"
          f" | {x['epoch_seconds']:.1f} | {x['samples_per_second']:.0f} |")
for x in rows:
    f, m = x["forecast"], x["memory"]
    exact = all(f[k] == m.get(k) for k in
                ("parameters", "gradients", "optimizer_state", "rows", "step_buffers", "shard"))
    print(f"run {x['run']}: tutti plan --host forecast a peak of {gb(f['peak']):.2f} GB against"
          f" {gb(m.get('peak_resident_bytes', 0)):.2f} GB measured"
          f" ({100 * (f['peak'] / m['peak_resident_bytes'] - 1):+.1f} %); the trainer's accounts"
          f" {'equal' if exact else 'differ from'} the run's")
json.dump({"log": log, "dim": int(dim), "optimizer": optimizer, "runs": rows},
          open(os.path.join(out, "flagship.json"), "w"), indent=1)
print(f"written: {os.path.join(out, 'flagship.json')}")
PY
