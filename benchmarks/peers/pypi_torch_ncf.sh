#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# `tutti train --model ncf` against the same NeuMF in the current PyTorch from PyPI, on the CPU:
# the same rows (a CSV of 0/1 labels this script writes: 4,000 learners, 500 courses, 215,441
# rows, the size of tutti train's synthetic default's training set), batch 4,096, Adam at 0.01,
# GMF 32, layers 64,32,16, two epochs (the second measured), no L2 on either side.
#   tutti: tutti train --model ncf --ranks 1 (its defaults otherwise);
#   torch: benchmarks/peers/torch_ncf.py with Adam (eager), Adam(fused=True) and torch.compile +
#          Adam(fused=True).
# Every run is repeated ROUNDS times, the side that goes first alternating by round; prints a
# table (median [min-max] over rounds, M samples/s) and writes ncf.json with every run's figure,
# /proc/loadavg before and after each run and each side's threads. Never asserts a timing.
#
#   bash benchmarks/peers/pypi_torch_ncf.sh [ROUNDS]     # default 3
#
# Environment: PYPI_TORCH_PY (a python that imports torch; default the virtual environment
# benchmarks/peers/pypi_torch.sh creates, build-peers/pypi-torch/venv), TUTTI (the tutti program;
# default build/apps/tutti), PYPI_TORCH_OUT (default build-peers/pypi-torch/ncf),
# PYPI_TORCH_THREADS (both sides, default nproc). OMP_WAIT_POLICY is left as the caller has it.
# Not part of CI (.ci/run does not call it): it needs PyTorch.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-3}"
py="${PYPI_TORCH_PY:-${root}/build-peers/pypi-torch/venv/bin/python}"
tutti="${TUTTI:-${root}/build/apps/tutti}"
out="${PYPI_TORCH_OUT:-${root}/build-peers/pypi-torch/ncf}"
threads="${PYPI_TORCH_THREADS:-$(nproc)}"
[[ ${rounds} =~ ^[1-9][0-9]*$ ]] || {
  echo "pypi_torch_ncf.sh: ROUNDS must be a positive integer, got '${rounds}'" >&2
  exit 2
}
"${py}" -c 'import torch, numpy' 2>/dev/null || {
  echo "pypi_torch_ncf.sh: ${py} cannot import torch; run benchmarks/peers/pypi_torch.sh (it" \
    "creates that environment) or set PYPI_TORCH_PY" >&2
  exit 2
}
[[ -x ${tutti} ]] || { echo "pypi_torch_ncf.sh: no tutti program at ${tutti} (set TUTTI)" >&2; exit 2; }
mkdir -p "${out}"

rows="${out}/rows.csv"
"${py}" - "${rows}" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(5)
n = 215441
users = rng.integers(0, 4000, n)
items = rng.integers(0, 500, n)
labels = (rng.random(n) < 0.5).astype(np.int64)
users[:4000] = np.arange(4000)  # every learner and course appears
items[:500] = np.arange(500)
np.savetxt(sys.argv[1], np.stack([users, items, labels], 1), fmt="%d", delimiter=",",
           header="user,item,label", comments="")
EOF

run() {  # run NAME COMMAND...: output in NAME.txt, load before and after in NAME.load
  local name=$1
  shift
  cat /proc/loadavg >"${out}/${name}.load"
  "$@" >"${out}/${name}.txt" 2>&1 || { tail -n 20 "${out}/${name}.txt" >&2; exit 1; }
  cat /proc/loadavg >>"${out}/${name}.load"
}
tutti_side() {
  run "tutti-$1" env OMP_NUM_THREADS="${threads}" "${tutti}" train --data "${rows}" \
    --user-col user --item-col item --label-col label --implicit --test-fraction 0 \
    --model ncf --dim 32 --layers 64,32,16 --l2 0 --batch 4096 --lr 0.01 --optimizer adam \
    --schedule constant --epochs 2 --ranks 1 --seed 7 --quiet --json "${out}/tutti-$1.json"
}
torch_side() {
  local v
  for v in eager fused compile-fused; do
    run "torch-${v}-$1" "${py}" "${root}/benchmarks/peers/torch_ncf.py" "${rows}" \
      --variant "${v}" --threads "${threads}" --json "${out}/torch-${v}-$1.json"
  done
}
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then tutti_side "${r}"; torch_side "${r}"; else torch_side "${r}"; tutti_side "${r}"; fi
done

"${py}" - "${out}" "${rounds}" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def second_epoch(path, key):
    j = json.load(open(path))
    if j.get("skipped"):
        return None
    return j["epochs"][-1][key]
sides = {"tutti adam": [f"{out}/tutti-{r}.json" for r in range(1, rounds + 1)]}
for v in ["eager", "fused", "compile-fused"]:
    sides[f"torch {v}"] = [f"{out}/torch-{v}-{r}.json" for r in range(1, rounds + 1)]
table, runs = {}, {}
for name, paths in sides.items():
    key = "samples_per_second"
    vals = [second_epoch(p, key) for p in paths]
    runs[name] = {"samples_per_second": vals,
                  "load": [open(p.replace(".json", ".load")).read().split("\n")[:2] for p in paths]}
    got = [v for v in vals if v is not None]
    table[name] = (statistics.median(got), min(got), max(got)) if got else None
print("| side | M samples/s, median [min-max] of", rounds, "rounds |\n|---|---|")
for name, t in table.items():
    print(f"| {name} | " + (f"{t[0]/1e6:.3f} [{t[1]/1e6:.3f}-{t[2]/1e6:.3f}]" if t else "skipped") + " |")
best_torch = max((t[0] for n, t in table.items() if n.startswith("torch") and t), default=None)
if best_torch and table["tutti adam"]:
    print(f"tutti / best torch (medians): {table['tutti adam'][0] / best_torch:.2f}x")
json.dump({"rounds": rounds, "runs": runs}, open(f"{out}/ncf.json", "w"), indent=1)
EOF
