#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check, for a machine with an NVIDIA GPU, the CUDA toolkit, CMake and Python with
# PyTorch, but no Debian -dev packages and no network. It needs build-gpu/ from
# scripts/gpu-prebuild.sh (the headers and libraries such a machine lacks, and usually the
# binaries): carry it along. Then:
#   1. builds what is missing or stale (scripts/gpu-build.sh, the same lines as the prebuild, in
#      parallel; a binary whose sources changed since it was built is stale);
#   2. runs every CUDA test case once, in groups: host ≡ cuda parity for every model and
#      optimizer, checkpoint resume on cuda, nccl_ring (one rank, the overlapped path, and across
#      GPUs where there are two), and the rest;
#   3. `tutti train --space cuda` against `--space host` from the same seed (final loss), with
#      Adam and with the row-sparse step (lazy Adam), neural CF (--model ncf), a warm start from
#      an export (--init-from), and that step at 1,000,000 learners and on the 8 GB-class model
#      (30,000,000 learners, dim 64); the step replayed from a CUDA Graph against every kernel
#      launched one by one (same checksum, samples/s of both);
#   4. `tutti bench allreduce --reducer nccl` on every visible GPU (#wrong must be 0);
#   5. the package's cuda and nccl consumer programs (examples/consumer-components);
#   6. the MF benchmark against PyTorch eager on the same batches (the losses must agree), and
#      against PyTorch's sparse embeddings + SparseAdam and torch.compile (labelled peers); the
#      row-sparse step (lazy Adam, from a CUDA Graph) against SparseAdam on the same batches, and
#      each side's best against the other's (target 5x);
# and prints one screen, PASS/FAIL/SKIP per item with the ratios. Everything it ran is written
# under $OUT (default build-gpu/out), with gpu-check.json. Exits non-zero on any FAIL.
#
#   bash scripts/gpu-check.sh [--build-only]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${root}"
out="${OUT:-${root}/build-gpu/out}"
mkdir -p "${out}" build-gpu
start=${SECONDS}
# shellcheck source=scripts/gpu-build.sh
source scripts/gpu-build.sh
gpu_find_nccl
export LD_LIBRARY_PATH="${root}/build-gpu/lib${gpu_nccl_lib:+:${gpu_nccl_lib}}:${LD_LIBRARY_PATH:-}"
export OMP_WAIT_POLICY=passive
results="${out}/items.tsv"  # item <TAB> PASS|FAIL|SKIP <TAB> detail
: >"${results}"
item() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"${results}"; }

if gpu_build_missing "${out}"; then
  item "build (missing binaries, $((SECONDS - start)) s)" PASS "NCCL from ${gpu_nccl_lib:-nowhere}"
else
  item "build (missing binaries)" FAIL "see ${out}/build-*.txt"
fi
if [[ "${1:-}" == --build-only ]]; then
  cat "${results}"
  ! grep -q $'\tFAIL\t' "${results}"
  exit
fi
{ nvidia-smi || true; } >"${out}/nvidia-smi.txt" 2>&1

# ---- the CUDA test cases, each exactly once ---------------------------------------------------
groups=("host and cuda parity, every model and optimizer|*host and cuda*"
  "checkpoint resume on cuda|*resumed from its checkpoint*"
  "nccl_ring: one rank, overlapped, across GPUs|*nccl_ring*,*NCCL*")
exclude=""
run_cases() {  # name, log, doctest filter arguments...
  local name="$1" log="$2"
  shift 2
  if [[ ! -x build-gpu/cuda_tests ]]; then
    item "${name}" FAIL "build-gpu/cuda_tests missing"
    return
  fi
  build-gpu/cuda_tests "$@" >"${log}" 2>&1
  local rc=$?
  local line ran skipped
  line="$(grep -E 'test cases:' "${log}" | tail -n 1)"
  ran="$(sed -nE 's/.*test cases: *([0-9]+) *\|.*/\1/p' <<<"${line}")"
  skipped="$(grep -c 'tutti-test: skipped:' "${log}")"
  if [[ ${rc} -eq 77 ]]; then
    item "${name}" FAIL "no CUDA device visible"
  elif [[ ${rc} -ne 0 || -z "${ran}" || "${ran}" -eq 0 ]]; then
    item "${name}" FAIL "exit ${rc}; ${line:-no summary} (${log})"
  else
    local note=""
    [[ "${skipped}" -gt 0 ]] && note="; ${skipped} case(s) skipped here (${log})"
    item "${name}" PASS "${line#*test cases: }${note}"
  fi
}
i=0
for g in "${groups[@]}"; do
  run_cases "CUDA tests: ${g%%|*}" "${out}/cuda_tests_${i}.txt" "--test-case=${g#*|}"
  exclude+="${exclude:+,}${g#*|}"
  i=$((i + 1))
done
run_cases "CUDA tests: all other cases" "${out}/cuda_tests_rest.txt" "--test-case-exclude=${exclude}"

# ---- the program on the GPU and on the host, from the same seed -------------------------------
if [[ -x build-gpu/tutti ]]; then
  for space in cuda host; do
    build-gpu/tutti train --space "${space}" --ranks 1 --seed 7 --quiet \
      --json "${out}/train_${space}.json" >"${out}/train_${space}.txt" 2>&1
  done
  # The row-sparse step on the device (lazy Adam), against the host's, and at 1,000,000 learners.
  for space in cuda host; do
    build-gpu/tutti train --space "${space}" --ranks 1 --seed 7 --quiet --optimizer lazy-adam \
      --json "${out}/train_rows_${space}.json" >"${out}/train_rows_${space}.txt" 2>&1
  done
  # A log of positives: negatives sampled on the device, the softmax list loss with the popularity
  # sampler's correction, against the host's.
  for space in cuda host; do
    build-gpu/tutti train --space "${space}" --ranks 1 --seed 7 --quiet --feedback implicit \
      --holdout last --loss softmax --negative-sampler popularity --sampled-negatives 8 \
      --json "${out}/train_sampled_${space}.json" >"${out}/train_sampled_${space}.txt" 2>&1
  done
  # Neural CF on the device (cuBLAS for the layers, the output layer fused with the loss),
  # against the host's; its samples/s.
  for space in cuda host; do
    build-gpu/tutti train --space "${space}" --ranks 1 --seed 7 --quiet --model ncf --dim 32 \
      --layers 64,32,16 --json "${out}/train_ncf_${space}.json" >"${out}/train_ncf_${space}.txt" 2>&1
  done
  # A warm start on the device: the host's lazy-Adam export (its rows, optimizer state and step
  # count) continued for two epochs on the device and on the host.
  warm0="$(mktemp -d)"
  build-gpu/tutti train --space host --ranks 1 --seed 7 --quiet --optimizer lazy-adam \
    --export "${warm0}/model" >"${out}/train_warm_export.txt" 2>&1
  for space in cuda host; do
    build-gpu/tutti train --space "${space}" --ranks 1 --seed 7 --quiet --optimizer lazy-adam \
      --init-from "${warm0}/model" --epochs 2 --json "${out}/train_warm_${space}.json" \
      >"${out}/train_warm_${space}.txt" 2>&1
  done
  rm -rf "${warm0}"
  # The steady step replayed from a CUDA Graph (the default) against every kernel launched one by
  # one: the same parameters, bit for bit, and the samples/s of both.
  build-gpu/tutti train --space cuda --ranks 1 --seed 7 --quiet --optimizer lazy-adam \
    --step-graphs off --json "${out}/train_rows_nograph_cuda.json" \
    >"${out}/train_rows_nograph_cuda.txt" 2>&1
  for graphs in on off; do
    suffix=$([[ ${graphs} == on ]] && echo "" || echo "_nograph")
    build-gpu/tutti train --space cuda --ranks 1 --seed 7 --quiet --optimizer lazy-adam \
      --learners 1000000 --courses 5000 --dim 64 --epochs 2 --step-graphs "${graphs}" \
      --json "${out}/train_rows_1m${suffix}_cuda.json" >"${out}/train_rows_1m${suffix}_cuda.txt" 2>&1
  done
  # The 8 GB-class model (30,000,000 learners x dim 64: 7.8 GB of parameters, 31 GB with the
  # gradient and lazy Adam's moments) on one GPU, one epoch; bounded so the check stays short.
  timeout 300 build-gpu/tutti train --space cuda --ranks 1 --seed 7 --quiet \
    --optimizer lazy-adam --learners 30000000 --courses 5000 --dim 64 --epochs 1 \
    --json "${out}/train_rows_30m_cuda.json" >"${out}/train_rows_30m_cuda.txt" 2>&1
  build-gpu/tutti bench allreduce --reducer nccl --max-bytes 268435456 \
    --json "${out}/allreduce_nccl.json" >"${out}/allreduce_nccl.txt" 2>&1
fi

# ---- the package's GPU consumers: a small trainer on the CUDA space, nccl_ring's mean ----------
for consumer in cuda nccl; do
  exe="build-gpu/consumer_${consumer}"
  if [[ ! -x "${exe}" ]]; then
    item "consumer (${consumer})" FAIL "${exe} missing"
    continue
  fi
  "${exe}" >"${out}/consumer_${consumer}.txt" 2>&1
  rc=$?
  case ${rc} in
    0) item "consumer (${consumer})" PASS "$(tail -n 1 "${out}/consumer_${consumer}.txt")" ;;
    77) item "consumer (${consumer})" FAIL "no CUDA device visible" ;;
    *) item "consumer (${consumer})" FAIL "exit ${rc} (${out}/consumer_${consumer}.txt)" ;;
  esac
done

# ---- the MF benchmark against PyTorch eager ---------------------------------------------------
work="$(mktemp -d)"
if [[ -x build-gpu/bench_gpu_mf ]]; then
  build-gpu/bench_gpu_mf --out "${work}" --json "${out}/gpu_mf.json" ${GPU_MF_ARGS:-} \
    >"${out}/gpu_mf.txt" 2>&1
  # The row-sparse step (lazy Adam, replayed as a CUDA Graph) on the same data and batches: the
  # twin of PyTorch's sparse embeddings + SparseAdam.
  build-gpu/bench_gpu_mf --optimizer lazy-adam --json "${out}/gpu_mf_lazy.json" \
    ${GPU_MF_ARGS:-} >"${out}/gpu_mf_lazy.txt" 2>&1
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    python3 benchmarks/peers/torch_mf.py "${work}" --json "${out}/torch_mf.json" \
      --compare "${out}/gpu_mf.json" >"${out}/torch_mf.txt" 2>&1
    # PyTorch's other settings, each reported on its own line: sparse embeddings + SparseAdam
    # (its documented option for large tables), and torch.compile where it has it.
    for variant in sparse compile; do
      python3 benchmarks/peers/torch_mf.py "${work}" --variant "${variant}" \
        --json "${out}/torch_mf_${variant}.json" >"${out}/torch_mf_${variant}.txt" 2>&1
    done
  fi
fi
rm -rf "${work}"

python3 - "${out}" "${results}" $((SECONDS - start)) <<'PY'
import json, os, sys
out, results, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
items = [line.rstrip("\n").split("\t") for line in open(results) if line.strip()]
def load(name):
    p = os.path.join(out, name)
    try:
        return json.load(open(p)) if os.path.exists(p) else None
    except ValueError:
        return None
def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)
med = lambda v: sorted(v)[len(v) // 2]

def cuda_vs_host(name, prefix):  # the final train loss of train_<prefix>{cuda,host}.json, 1e-4
    c, h = load(f"{prefix}cuda.json"), load(f"{prefix}host.json")
    if not (c and h):
        items.append([name, "FAIL", f"no report ({prefix}*.txt)"])
        return
    lc, lh = c["epochs"][-1]["train_loss"], h["epochs"][-1]["train_loss"]
    items.append([name, "PASS" if rel(lc, lh) <= 1e-4 else "FAIL",
                  f"final loss {lc:.6f} vs {lh:.6f} (rel {rel(lc, lh):.1e}, limit 1e-4); "
                  f"{c['seconds']:.2f} s vs {h['seconds']:.2f} s"])

cuda_vs_host("tutti train --space cuda vs host", "train_")
cuda_vs_host("tutti train --optimizer lazy-adam: the row-sparse step, cuda vs host", "train_rows_")
cuda_vs_host("tutti train --feedback implicit --loss softmax: sampled negatives, cuda vs host",
             "train_sampled_")
cuda_vs_host("tutti train --init-from: a warm start with the optimizer's state, cuda vs host",
             "train_warm_")
cuda_vs_host("tutti train --model ncf: neural CF, cuda vs host", "train_ncf_")
m = load("train_rows_1m_cuda.json")
if m:
    e = m["epochs"][-1]
    items.append(["row-sparse step on cuda, 1,000,000 learners x 5,000 courses, dim 64", "PASS",
                  f"{e['weighted_samples'] / e['step_seconds'] / 1e6:.2f} M samples/s "
                  f"(second epoch), AUC {m['eval']['value']:.4f}"])
else:
    items.append(["row-sparse step on cuda, 1,000,000 learners", "FAIL",
                  "no report (train_rows_1m_cuda.txt)"])

def graph_vs_kernels(name, graph, kernels):  # same checksum, replays taken, samples/s of both
    g, k = load(graph), load(kernels)
    if not (g and k):
        items.append([name, "FAIL", f"no report ({graph}, {kernels})"])
        return
    rate = lambda r: r["epochs"][-1]["weighted_samples"] / r["epochs"][-1]["step_seconds"] / 1e6
    ok = (g["parameters_checksum"] == k["parameters_checksum"] and g.get("replayed_steps", 0) > 0
          and not g.get("step_graph_refused"))
    items.append([name, "PASS" if ok else "FAIL",
                  f"checksum {g['parameters_checksum']} vs {k['parameters_checksum']}, "
                  f"{g.get('replayed_steps', 0)} steps replayed"
                  + (f", refused: {g['step_graph_refused']}" if g.get("step_graph_refused") else "")
                  + f"; {rate(g):.2f} vs {rate(k):.2f} M samples/s ({rate(g) / rate(k):.2f}x)"])

graph_vs_kernels("row-sparse step from a CUDA Graph vs kernel by kernel (4,000 learners)",
                 "train_rows_cuda.json", "train_rows_nograph_cuda.json")
graph_vs_kernels("row-sparse step from a CUDA Graph vs kernel by kernel (1,000,000 learners)",
                 "train_rows_1m_cuda.json", "train_rows_1m_nograph_cuda.json")

m = load("train_rows_30m_cuda.json")
if m:
    e = m["epochs"][-1]
    items.append(["the 8 GB-class model on one GPU (30,000,000 learners, dim 64, lazy Adam)",
                  "PASS" if e["train_loss"] == e["train_loss"] else "FAIL",
                  f"{e['weighted_samples'] / e['step_seconds'] / 1e6:.2f} M samples/s, "
                  f"train loss {e['train_loss']:.4f}, {m['seconds']:.0f} s in all"])
else:
    items.append(["the 8 GB-class model on one GPU (30,000,000 learners)", "FAIL",
                  "no report within 300 s (train_rows_30m_cuda.txt)"])

a = load("allreduce_nccl.json")
if a and a.get("results"):
    wrong = sum(r["wrong"] for r in a["results"])
    ranks = sorted({r["ranks"] for r in a["results"]})
    items.append(["tutti bench allreduce --reducer nccl", "PASS" if wrong == 0 else "FAIL",
                  f"{len(a['results'])} sizes on {ranks} GPU(s), #wrong {wrong}, busbw up to "
                  f"{max(r['busbw_gbs'] for r in a['results']):.1f} GB/s"])
else:
    items.append(["tutti bench allreduce --reducer nccl", "FAIL", "no report (allreduce_nccl.txt)"])

t, p = load("gpu_mf.json"), load("torch_mf.json")
ratio = None
if t and p:
    ts = med([r["samples_per_s"] for r in t["results"][1:]])
    ps = med([r["samples_per_s"] for r in p["results"][1:]])
    lt, lp = t["results"][-1]["train_loss"], p["results"][-1]["train_loss"]
    ratio = ts / ps
    ok = rel(lt, lp) <= 1e-4
    items.append(["MF benchmark vs PyTorch eager (same batches)", "PASS" if ok else "FAIL",
                  f"tutti {ts:,.0f} samples/s, PyTorch {ps:,.0f}: {ratio:.2f}x; final loss "
                  f"{lt:.6f} vs {lp:.6f} (rel {rel(lt, lp):.1e}, limit 1e-4); "
                  f"{100 * med([r['roofline_share'] for r in t['results'][1:]]):.1f}% of the copy "
                  f"roofline ({t['copy_gbs']:.0f} GB/s)"])
elif t:
    items.append(["MF benchmark vs PyTorch eager (same batches)", "FAIL",
                  "PyTorch with CUDA not available or its run failed (torch_mf.txt)"])
else:
    items.append(["MF benchmark vs PyTorch eager (same batches)", "FAIL", "no report (gpu_mf.txt)"])

# The row-sparse step against PyTorch's option for large tables (the same lazy arithmetic), and
# each side's best against the other's.
tl, ps = load("gpu_mf_lazy.json"), load("torch_mf_sparse.json")
if tl and ps and ps.get("results"):
    ls = med([r["samples_per_s"] for r in tl["results"][1:]])
    vs = med([r["samples_per_s"] for r in ps["results"][1:]])
    a, b = tl["results"][-1]["train_loss"], ps["results"][-1]["train_loss"]
    items.append(["MF benchmark, lazy Adam vs PyTorch sparse embeddings + SparseAdam",
                  "PASS" if rel(a, b) <= 1e-3 and tl.get("replayed_steps", 0) > 0 else "FAIL",
                  f"tutti {ls:,.0f} samples/s, PyTorch {vs:,.0f}: {ls / vs:.2f}x; final loss "
                  f"{a:.6f} vs {b:.6f} (rel {rel(a, b):.1e}, limit 1e-3); "
                  f"{tl.get('replayed_steps', 0)} steps from a CUDA Graph"
                  + (f" (refused: {tl['step_graph_refused']})" if tl.get("step_graph_refused") else "")
                  + f"; {100 * med([r['roofline_share'] for r in tl['results'][1:]]):.1f}% of the "
                  f"copy roofline"])
    if t and p:
        best_t = max(ls, med([r["samples_per_s"] for r in t["results"][1:]]))
        best_p = max(vs, med([r["samples_per_s"] for r in p["results"][1:]]))
        items.append(["MF benchmark: tutti's best vs PyTorch eager's best (target 5x)",
                      "PASS" if best_t >= 5 * best_p else "FAIL",
                      f"{best_t:,.0f} vs {best_p:,.0f} samples/s: {best_t / best_p:.2f}x"])
elif tl:
    items.append(["MF benchmark, lazy Adam vs PyTorch sparse embeddings + SparseAdam", "FAIL",
                  "PyTorch's sparse run failed or is missing (torch_mf_sparse.txt)"])
else:
    items.append(["MF benchmark, lazy Adam", "FAIL", "no report (gpu_mf_lazy.txt)"])

for variant, label in (("sparse", "sparse embeddings + SparseAdam"), ("compile", "torch.compile")):
    v = load(f"torch_mf_{variant}.json")
    name = f"MF benchmark vs PyTorch {label} (labelled peer)"
    if t and v and v.get("skipped"):
        items.append([name, "SKIP", v["skipped"]])
    elif t and v and v.get("results"):
        vs = med([r["samples_per_s"] for r in v["results"][1:]])
        ts = med([r["samples_per_s"] for r in t["results"][1:]])
        items.append([name, "PASS", f"tutti {ts:,.0f} samples/s, PyTorch {vs:,.0f}: {ts / vs:.2f}x; "
                      f"final loss {v['results'][-1]['train_loss']:.6f} (not compared: "
                      f"{'lazy Adam' if variant == 'sparse' else 'compiled kernels'})"])
    elif t:
        items.append([name, "FAIL", f"its run failed (torch_mf_{variant}.txt)"])

failed = [i for i in items if i[1] == "FAIL"]
json.dump({"seconds": seconds, "items": [{"item": i[0], "result": i[1], "detail": i[2]} for i in items],
           "tutti_over_pytorch_eager": ratio, "failed": len(failed)},
          open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
print(f"\n== gpu-check ({seconds} s; everything under {out}) ==")
for name, result, detail in items:
    print(f"{result:<5} {name}\n      {detail}")
skipped = [i for i in items if i[1] == "SKIP"]
print(f"== {len(items) - len(failed) - len(skipped)} passed, {len(skipped)} skipped, "
      f"{len(failed)} failed")
sys.exit(1 if failed else 0)
PY
