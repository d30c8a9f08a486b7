#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The GPU check, for a machine with an NVIDIA GPU and no network: builds the CUDA tests and the
# GPU benchmark for sm_90 (+ PTX) unless prebuilt ones are handed in under build-gpu/ (made by
# scripts/gpu-prebuild.sh on a machine with the Debian packages), runs the
# GPU tests, runs the benchmark against its PyTorch twin, and writes everything under $OUT.
#
#   bash scripts/gpu-check.sh
#
# Such a machine has the CUDA toolkit, CMake and PyTorch but no Debian -dev packages: headers
# the build needs (doctest, CLI11, nlohmann-json) are taken from /usr/include or .deps/include
# (copy them there and carry .deps). NCCL comes from the CUDA install or from PyTorch's
# nvidia-nccl wheel.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/build-gpu/out}
mkdir -p "$out" build-gpu
{ nvidia-smi || true; } > "$out/nvidia-smi.txt" 2>&1

nccl_dir=""
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
  [ -e "$d/libnccl.so.2" ] && nccl_dir=$d && break
done
if [ -z "$nccl_dir" ]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl as m; import os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
fi
# build-gpu/lib may carry runtime libraries the machine lacks (libsodium for the program).
export LD_LIBRARY_PATH="$PWD/build-gpu/lib:${nccl_dir:+$nccl_dir:}${LD_LIBRARY_PATH:-}"
echo "NCCL from: ${nccl_dir:-not found}" | tee "$out/nccl.txt"

flags=(-std=c++20 -O2 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
       --expt-relaxed-constexpr -Xcompiler -fopenmp -Iinclude -Itests)
[ -d .deps/include ] && flags+=(-I.deps/include)
if [ ! -x build-gpu/cuda_tests ]; then
  nvcc "${flags[@]}" -DTUTTI_TEST_NCCL=1 -DTUTTI_TEST_DATA_DIR="\"$PWD/tests/data\"" \
    -DTUTTI_DATASETS_DIR="\"$PWD/../shared/datasets\"" tests/cuda/cuda_tests.cu \
    -o build-gpu/cuda_tests -L"$nccl_dir" -l:libnccl.so.2 -lcublas -lz 2>&1 | tee "$out/build-tests.txt"
fi
if [ ! -x build-gpu/bench_gpu_mf ]; then
  nvcc "${flags[@]}" benchmarks/gpu_mf.cu -o build-gpu/bench_gpu_mf 2>&1 | tee "$out/build-bench.txt"
fi

OMP_WAIT_POLICY=passive build-gpu/cuda_tests 2>&1 | tee "$out/cuda_tests.txt"
rc=${PIPESTATUS[0]}

work=$(mktemp -d)
OMP_WAIT_POLICY=passive build-gpu/bench_gpu_mf --out "$work" --json "$out/gpu_mf.json" ${GPU_MF_ARGS:-} \
  2>&1 | tee "$out/gpu_mf.txt"
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 benchmarks/peers/torch_mf.py "$work" --json "$out/torch_mf.json" \
    --compare "$out/gpu_mf.json" 2>&1 | tee "$out/torch_mf.txt"
  python3 benchmarks/peers/torch_mf.py "$work" --fused --json "$out/torch_mf_fused.json" \
    --compare "$out/gpu_mf.json" 2>&1 | tee "$out/torch_mf_fused.txt"
else
  echo "PyTorch with CUDA not available: peer comparison skipped" | tee "$out/torch_mf.txt"
fi
rm -rf "$work"

# The program itself on the GPU, against the host space from the same seed.
if [ -x build-gpu/tutti ]; then
  for space in cuda host; do
    OMP_WAIT_POLICY=passive build-gpu/tutti train --space "$space" --ranks 1 --seed 7 --quiet \
      --json "$out/train_$space.json" 2>&1 | tee "$out/train_$space.txt"
  done
  # nccl_ring's allreduce sweep on every visible GPU (nccl-tests' columns; #wrong must be 0).
  build-gpu/tutti bench allreduce --reducer nccl --max-bytes 268435456 --json "$out/allreduce_nccl.json" \
    2>&1 | tee "$out/allreduce_nccl.txt"
fi

# One JSON and a short table of everything above.
python3 - "$out" "$rc" <<'PY'
import json, os, re, sys
out, rc = sys.argv[1], int(sys.argv[2])
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
tests = open(os.path.join(out, "cuda_tests.txt")).read() if os.path.exists(os.path.join(out, "cuda_tests.txt")) else ""
m = re.search(r"test cases:\s+(\d+) \|\s+(\d+) passed \|\s+(\d+) failed", tests)
summary = {"gpu_tests": {"cases": int(m.group(1)), "passed": int(m.group(2)), "failed": int(m.group(3))} if m else None,
           "exit_code": rc}
t, p, pf = load("gpu_mf.json"), load("torch_mf.json"), load("torch_mf_fused.json")
med = lambda v: sorted(v)[len(v) // 2]
if t:
    summary["tutti"] = {"samples_per_s": med([r["samples_per_s"] for r in t["results"][1:]]),
                        "roofline_share": med([r["roofline_share"] for r in t["results"][1:]]),
                        "copy_gbs": t["copy_gbs"], "final_loss": t["results"][-1]["train_loss"], "gpu": t["gpu"]}
for key, peer in (("pytorch_eager", p), ("pytorch_fused_adam", pf)):
    if peer and t:
        sp = med([r["samples_per_s"] for r in peer["results"][1:]])
        summary[key] = {"samples_per_s": sp, "final_loss": peer["results"][-1]["train_loss"],
                        "tutti_ratio": summary["tutti"]["samples_per_s"] / sp}
a = load("allreduce_nccl.json")
if a:
    summary["allreduce_nccl"] = {"rows": len(a["results"]), "wrong": sum(r["wrong"] for r in a["results"]),
                                 "ranks": sorted({r["ranks"] for r in a["results"]}),
                                 "largest_busbw_gbs": max(r["busbw_gbs"] for r in a["results"])}
for space in ("cuda", "host"):
    j = load(f"train_{space}.json")
    if j:
        summary[f"tutti_train_{space}"] = {"final_loss": j["epochs"][-1]["train_loss"], "eval": j["eval"]["value"],
                                           "seconds": j["seconds"]}
json.dump(summary, open(os.path.join(out, "gpu-check.json"), "w"), indent=2)
print("\n== gpu-check summary ==")
if summary.get("gpu_tests"):
    g = summary["gpu_tests"]; print(f"GPU tests: {g['passed']}/{g['cases']} passed, {g['failed']} failed")
if "tutti" in summary:
    s = summary["tutti"]
    print(f"MF on {s['gpu']}: tutti {s['samples_per_s']:.0f} samples/s, {100 * s['roofline_share']:.1f}% of copy bandwidth ({s['copy_gbs']:.0f} GB/s)")
for key in ("pytorch_eager", "pytorch_fused_adam"):
    if key in summary:
        s = summary[key]
        print(f"  vs {key}: {s['samples_per_s']:.0f} samples/s -> tutti/peer {s['tutti_ratio']:.2f}x; final loss tutti {summary['tutti']['final_loss']:.6f} peer {s['final_loss']:.6f}")
if "allreduce_nccl" in summary:
    s = summary["allreduce_nccl"]
    print(f"nccl_ring allreduce on {s['ranks']} GPU(s): {s['rows']} sizes, {s['wrong']} wrong values, busbw up to {s['largest_busbw_gbs']:.1f} GB/s")
if "tutti_train_cuda" in summary and "tutti_train_host" in summary:
    c, h = summary["tutti_train_cuda"], summary["tutti_train_host"]
    print(f"tutti train --space cuda vs host: final loss {c['final_loss']:.6f} vs {h['final_loss']:.6f}, test auc {c['eval']:.4f} vs {h['eval']:.4f}, {c['seconds']:.1f} s vs {h['seconds']:.1f} s")
PY
exit "$rc"
