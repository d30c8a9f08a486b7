#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tutti against the current PyTorch from PyPI, as its users install it, on the CPU: matrix
# factorisation (logistic loss, L2 on the touched rows, one process) at the table sizes of
# sizes.py, every variant a user would try on each side.
#   tutti: tutti_bench_cpu_mf (dense Adam; PyTorch's exact twin: the same data, initial
#          parameters and batch order, so the final losses are comparable), and `tutti train
#          --optimizer lazy-adam | rowwise-adagrad` (the row-sparse steps) on the same rows;
#   torch: torch_mf.py --device cpu with Adam (eager), Adam(fused=True), sparse embeddings +
#          SparseAdam, sparse embeddings + Adagrad, and torch.compile + Adam(fused=True).
# Like-for-like pairs first (adam vs Adam and fused Adam; lazy-adam vs SparseAdam;
# rowwise-adagrad vs sparse Adagrad), then each side's best against the other's.
# It creates (or reuses) a virtual environment with `pip install torch` from PyTorch's CPU index
# (plain PyPI where that index cannot be reached) and numpy, and builds tutti's two programs in
# a build folder of its own. Every run is repeated ROUNDS times, the side that goes first
# alternating by round; it prints a table (median [min-max] over rounds, M samples/s) and writes
# pypi-torch.json with every run's figure, /proc/loadavg before and after each run, and each
# side's threads and OMP_WAIT_POLICY. A variant that cannot run (fused Adam or torch.compile
# missing or failing) is a table cell saying so, with the reason in the JSON. Never asserts a
# timing: it exits non-zero only on a failure.
#
#   bash benchmarks/peers/pypi_torch.sh [ROUNDS]     # default 3
#
# Environment: PYPI_TORCH_DIR (default build-peers/pypi-torch: venv/, build/, out/ under it),
# PYPI_TORCH_OUT (output folder, default $PYPI_TORCH_DIR/out), PYPI_TORCH_SIZES (USERSxITEMSxDIM,...;
# default sizes.py's --sizes), PYPI_TORCH_EPOCHS (default 2: one warm-up, one measured),
# PYPI_TORCH_THREADS (both sides, default nproc), PYPI_TORCH_ADAGRAD_LR (rowwise-adagrad and
# torch Adagrad, default 0.1, tutti train's default for it; Adam's is 0.01 on both sides),
# PYPI_TORCH_DENSE_UP_TO (dense Adam runs only up to this many users, default 250000, as
# sizes.py), PYPI_TORCH_JOBS (build jobs, default 2), PYPI_TORCH_NO_INSTALL=1 (reuse the venv
# as it is), PYPI_TORCH_WAIT (OMP_WAIT_POLICY for every program; default: none set, each side
# its own: PyTorch's libgomp default, tutti train's own choice for one rank, tutti_bench_cpu_mf's
# passive), as users run them; the JSON records what each run had.
# Not part of CI (.ci/run does not call it): it downloads PyTorch.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-3}"
base="${PYPI_TORCH_DIR:-${root}/build-peers/pypi-torch}"
out="${PYPI_TORCH_OUT:-${base}/out}"
venv="${base}/venv"
build="${base}/build"
epochs="${PYPI_TORCH_EPOCHS:-2}"
threads="${PYPI_TORCH_THREADS:-$(nproc)}"
adagrad_lr="${PYPI_TORCH_ADAGRAD_LR:-0.1}"
dense_up_to="${PYPI_TORCH_DENSE_UP_TO:-250000}"
jobs="${PYPI_TORCH_JOBS:-2}"
sizes="${PYPI_TORCH_SIZES:-$(sed -n 's/.*"--sizes", default="\([^"]*\)".*/\1/p' \
  "${root}/benchmarks/peers/sizes.py")}"
[[ -z "${PYPI_TORCH_WAIT:-}" ]] || export OMP_WAIT_POLICY="${PYPI_TORCH_WAIT}"
# The work both sides do, given to every program here (sizes.py's batch; tutti_bench_cpu_mf's
# Adam rate and L2).
batch=4096 adam_lr=0.01 l2=0.0001
[[ ${rounds} =~ ^[1-9][0-9]*$ ]] || {
  echo "pypi_torch.sh: ROUNDS must be a positive integer, got '${rounds}'" >&2
  exit 2
}
[[ -n ${sizes} ]] || { echo "pypi_torch.sh: no sizes (PYPI_TORCH_SIZES)" >&2; exit 2; }

say() { printf '== pypi-torch: %s\n' "$*"; }

# ---- the virtual environment ---------------------------------------------------------------------
# PyTorch's CPU wheel (no CUDA libraries) from its own index; where that index cannot be reached,
# `pip install torch` from PyPI, what a user gets by default (on Linux it pulls CUDA's libraries).
make_venv() {
  python3 -m venv "${venv}"
  "${venv}/bin/pip" install -q --upgrade pip
  if "${venv}/bin/pip" install -q --retries 1 --timeout 30 torch \
    --index-url https://download.pytorch.org/whl/cpu; then
    echo "https://download.pytorch.org/whl/cpu" >"${venv}/torch-index.txt"
  else
    say "PyTorch's CPU index failed; pip install torch from PyPI"
    "${venv}/bin/pip" install -q torch
    echo "https://pypi.org/simple" >"${venv}/torch-index.txt"
  fi
  "${venv}/bin/pip" install -q numpy
}
py="${venv}/bin/python"
if [[ "${PYPI_TORCH_NO_INSTALL:-0}" != 1 ]] && ! "${py}" -c 'import torch, numpy' 2>/dev/null; then
  make_venv
fi
"${py}" -c 'import torch, numpy' || { echo "pypi_torch.sh: ${py} cannot import torch" >&2; exit 1; }

# ---- tutti's programs, in a build folder of this script's own ------------------------------------
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
  cmake -S "${root}" -B "${build}" -DCMAKE_BUILD_TYPE=Release -DTUTTI_ENABLE_CUDA=OFF \
    -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=ON
fi
cmake --build "${build}" --target tutti_bench_cpu_mf tutti_cli -j "${jobs}"
mf="${build}/benchmarks/tutti_bench_cpu_mf"
tutti="${build}/apps/tutti"

# ---- runs ----------------------------------------------------------------------------------------
# run_one DIR NAME COMMAND...: runs COMMAND (its output in DIR/NAME.txt), /proc/loadavg before and
# after in DIR/NAME.load. The command writes DIR/NAME.json itself.
run_one() {
  local d=$1 name=$2
  shift 2
  cat /proc/loadavg >"${d}/${name}.load"
  "$@" >"${d}/${name}.txt" 2>&1 || {
    echo "pypi_torch.sh: ${name} failed ($*):" >&2
    tail -n 20 "${d}/${name}.txt" >&2
    exit 1
  }
  cat /proc/loadavg >>"${d}/${name}.load"
}

# Users of a size: dense Adam above PYPI_TORCH_DENSE_UP_TO users is written down as not run.
dense_ok() { (($1 <= dense_up_to)); }

tutti_side() {
  local d=$1 data=$2 users=$3 dim=$4
  if dense_ok "${users}"; then
    run_one "${d}" tutti-adam env OMP_NUM_THREADS="${threads}" "${mf}" "${mf_args[@]}" \
      --json "${d}/tutti-adam.json"
  fi
  local opt lr
  for opt in lazy-adam rowwise-adagrad; do
    lr="${adam_lr}"
    [[ ${opt} == rowwise-adagrad ]] && lr="${adagrad_lr}"
    run_one "${d}" "tutti-${opt}" env OMP_NUM_THREADS="${threads}" "${tutti}" train \
      --data "${data}/rows.csv" --user-col user --item-col item --label-col label --implicit \
      --test-fraction 0 --dim "${dim}" --batch "${batch}" --lr "${lr}" --l2 "${l2}" \
      --schedule constant --epochs "${epochs}" --ranks 1 --optimizer "${opt}" --seed 7 \
      --quiet --json "${d}/tutti-${opt}.json"
  done
}

torch_side() {
  local d=$1 data=$2 users=$3
  local v lr
  for v in eager fused sparse adagrad compile-fused; do
    [[ ${v} == sparse || ${v} == adagrad ]] || dense_ok "${users}" || continue
    lr="${adam_lr}"
    [[ ${v} == adagrad ]] && lr="${adagrad_lr}"
    run_one "${d}" "torch-${v}" "${py}" "${root}/benchmarks/peers/torch_mf.py" "${data}" \
      --device cpu --variant "${v}" --threads "${threads}" --lr "${lr}" \
      --json "${d}/torch-${v}.json"
  done
}

# The rows as a CSV for `tutti train` (the same rows tutti_bench_cpu_mf and torch_mf.py train).
write_csv() {
  "${py}" - "$1" <<'PY'
import sys
import numpy as np
d = sys.argv[1]
u = np.fromfile(f"{d}/users.i32", dtype=np.int32)
i = np.fromfile(f"{d}/items.i32", dtype=np.int32)
y = np.fromfile(f"{d}/labels.f32", dtype=np.float32).astype(np.int32)
np.savetxt(f"{d}/rows.csv", np.stack([u, i, y], 1), fmt="%d", delimiter=",",
           header="user,item,label", comments="")
PY
}

rm -rf "${out}"
mkdir -p "${out}"
say "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); torch $("${py}" -c 'import torch; print(torch.__version__)'); sizes ${sizes}; ${rounds} round(s)"
IFS=, read -r -a specs <<<"${sizes}"
for spec in "${specs[@]}"; do
  IFS=x read -r users items dim <<<"${spec}"
  # sizes.py's cap: about 4M rows at most (30 positives a learner, fewer for the large tables).
  per_learner=$((2000000 / users))
  ((per_learner > 30)) && per_learner=30
  ((per_learner < 1)) && per_learner=1
  mf_args=(--learners "${users}" --courses "${items}" --per-learner "${per_learner}"
    --dim "${dim}" --epochs "${epochs}" --batch "${batch}" --lr "${adam_lr}" --l2 "${l2}")
  data="${out}/${spec}/data"
  "${mf}" "${mf_args[@]}" --out "${data}" --out-world 1 --prepare >/dev/null
  write_csv "${data}"
  for ((r = 1; r <= rounds; ++r)); do
    d="${out}/${spec}/round${r}"
    mkdir -p "${d}"
    if ((r % 2)); then
      say "${spec}, round ${r}: tutti, then torch"
      tutti_side "${d}" "${data}" "${users}" "${dim}"
      torch_side "${d}" "${data}" "${users}"
    else
      say "${spec}, round ${r}: torch, then tutti"
      torch_side "${d}" "${data}" "${users}"
      tutti_side "${d}" "${data}" "${users}" "${dim}"
    fi
  done
done

# ---- summary -------------------------------------------------------------------------------------
"${py}" - "${out}" "${sizes}" "${rounds}" "${threads}" "${dense_up_to}" \
  "$(cat "${venv}/torch-index.txt" 2>/dev/null || echo "not recorded")" <<'PY'
import json, os, platform, socket, statistics, sys, time
import torch
out, sizes, rounds, threads, dense_up_to, index = sys.argv[1:7]
rounds, dense_up_to = int(rounds), int(dense_up_to)
LABEL = {"tutti-adam": "tutti adam (tutti_bench_cpu_mf)",
         "tutti-lazy-adam": "tutti lazy-adam (tutti train)",
         "tutti-rowwise-adagrad": "tutti rowwise-adagrad (tutti train)",
         "torch-eager": "torch Adam (eager)", "torch-fused": "torch Adam(fused=True)",
         "torch-sparse": "torch sparse + SparseAdam", "torch-adagrad": "torch sparse + Adagrad",
         "torch-compile-fused": "torch.compile + Adam(fused=True)"}
PAIRS = [("tutti-adam", "torch-eager"), ("tutti-adam", "torch-fused"),
         ("tutti-lazy-adam", "torch-sparse"), ("tutti-rowwise-adagrad", "torch-adagrad")]


def figure(name, j):
    """samples/s, final train loss, threads and wait policy of one run's JSON."""
    if name == "tutti-adam":  # tutti_bench_cpu_mf: the median over the epochs after the first
        return {"samples_per_s": j["samples_per_s"], "final_train_loss": j["final_train_loss"],
                "threads": j["threads_per_rank"],
                "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "passive (its own)")}
    if name.startswith("tutti-"):  # tutti train: the last epoch's training steps, as sizes.py
        last = j["epochs"][-1]
        return {"samples_per_s": last["weighted_samples"] / last["step_seconds"],
                "final_train_loss": last.get("train_loss"), "threads": j.get("omp_threads"),
                "omp_wait_policy": j.get("omp_wait_policy")}
    keys = ("samples_per_s", "final_train_loss", "threads", "torch_default_threads",
            "omp_wait_policy", "skipped")
    return {k: j[k] for k in keys if k in j}


def read_run(d, name, users):
    if not os.path.exists(os.path.join(d, name + ".load")):
        return {"skipped": f"dense Adam not run above {dense_up_to} users (PYPI_TORCH_DENSE_UP_TO)"}
    load = open(os.path.join(d, name + ".load")).read().split("\n")
    r = figure(name, json.load(open(os.path.join(d, name + ".json"))))
    r.update({"load_before": load[0].strip(), "load_after": load[1].strip()})
    return r


def cell(runs):
    v = [r["samples_per_s"] / 1e6 for r in runs if "samples_per_s" in r]
    if not v:
        return None, "not run (below)"
    m = statistics.median(v)
    return m, f"{m:.3f} [{min(v):.3f}-{max(v):.3f}]"


def size_block(spec):
    users, _, dim = (int(x) for x in spec.split("x"))
    meta = json.load(open(os.path.join(out, spec, "data", "meta.json")))
    runs = {n: [dict(read_run(os.path.join(out, spec, f"round{r}"), n, users), round=r)
                for r in range(1, rounds + 1)] for n in LABEL}
    cells = {n: cell(v) for n, v in runs.items()}
    print(f"\n{spec}: {meta['rows']:,} rows, {users:,} users x {meta['items']:,} courses, dim {dim}, "
          f"batch {meta['batch']}, {meta['epochs']} epochs (the first a warm-up), {rounds} round(s)")
    print(f"  {'M samples/s: median [min-max]':<52} {'tutti':>22} {'torch':>22} {'tutti/torch':>11}")
    def line(label, t, p):
        (tm, tc), (pm, pc) = cells[t], cells[p]
        ratio = f"{tm / pm:.2f}x" if tm and pm else "-"
        print(f"  {label:<52} {tc:>22} {pc:>22} {ratio:>11}")
        return {"tutti": t, "torch": p, "ratio_of_medians": tm / pm if tm and pm else None}
    pairs = [line(f"{LABEL[t].split(' (')[0]} vs {LABEL[p]}", t, p) for t, p in PAIRS]
    best = lambda side: max((n for n in LABEL if n.startswith(side) and cells[n][0]),
                            key=lambda n: cells[n][0], default=None)
    bt, bp = best("tutti-"), best("torch-")
    short = lambda n: LABEL[n].split(" (")[0].replace("torch.compile", "compile")
    best_row = line(f"best: {short(bt)} vs {short(bp)}", bt, bp) if bt and bp else None
    print(f"\n  {'every run':<52} {'M samples/s [range]':>22} {'final loss':>11}  threads, OMP_WAIT_POLICY")
    for n, v in runs.items():
        last = v[-1]
        loss = f"{last['final_train_loss']:.6f}" if last.get("final_train_loss") is not None else "-"
        print(f"    {LABEL[n]:<50} {cells[n][1]:>22} {loss:>11}  {last.get('threads', '-')}, "
              f"{last.get('omp_wait_policy', '-')}")
    for n, v in runs.items():
        for r in v:
            if "skipped" in r:
                print(f"  not run: {LABEL[n]}, round {r['round']}: {r['skipped']}")
    return {"size": spec, "rows": meta["rows"], "users": users, "items": meta["items"], "dim": dim,
            "batch": meta["batch"], "epochs": meta["epochs"], "runs": runs, "pairs": pairs,
            "best": best_row}


cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), "?")
print(f"\n== tutti vs PyTorch {torch.__version__} (pip, {index}) on the CPU: {os.cpu_count()} cores "
      f"({cpu}); {threads} threads a side, OMP_WAIT_POLICY {os.environ.get('OMP_WAIT_POLICY', 'unset')}")
report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "torch": torch.__version__,
          "torch_index": index, "python": platform.python_version(),
          "machine": {"hostname": socket.gethostname(), "cores": os.cpu_count(), "cpu": cpu},
          "threads": int(threads), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
          "rounds": rounds, "sizes": [size_block(s) for s in sizes.split(",")]}
json.dump(report, open(os.path.join(out, "pypi-torch.json"), "w"), indent=1)
print(f"\nwrote {os.path.join(out, 'pypi-torch.json')}")
PY
