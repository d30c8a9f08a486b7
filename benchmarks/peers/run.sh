#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# tutti against PyTorch on the CPU, side by side, on identical work:
#   (a) MF in one process: tutti_bench_cpu_mf (host space, single_rank) against the same model
#       in libtorch C++ (libtorch_mf/), from tutti's initial parameters in tutti's batch order,
#       once on every core and once on one thread;
#   (b) MF in 2 processes: tutti_bench_cpu_mf --reducer mpi under mpiexec against PyTorch DDP
#       with the gloo backend (ddp_mf.py), each rank on tutti's shard of that rank (mpi_allreduce
#       reduces its shared arena in place, its default on one host; a third tutti run has
#       --shared-arena off, every reduction through MPI_Allreduce); and, as tutti
#       runs 2 ranks on one host by default, tutti's 2 ranks as threads (local_ring) against the
#       same DDP run; each tutti run is followed by one with --sparse-exchange auto (only the
#       embedding rows the step touched travel, when the cost model says that is cheaper; the
#       same parameters), compared with the same DDP run;
#   (c) the mean of a float buffer over 2 ranks, 4 KiB ... 64 MiB: tutti's local_ring (threads)
#       and mpi_allreduce (processes; a private buffer through MPI_Allreduce, and the buffer in its
#       shared arena, "arena") against torch.distributed gloo all_reduce (gloo_allreduce.py),
#       all timed with the same loop.
# It installs what is missing (scripts/deps.sh plus Debian's libtorch-dev and python3-torch, whose
# torch is for /usr/bin/python3), builds tutti's two benchmarks and the libtorch peer in the build
# folder, runs every pair ROUNDS times, alternating which side goes first, and prints a ratio
# table (tutti / peer, of the medians over rounds) with both sides' final losses, which must agree
# within PEERS_LOSS_RTOL on every epoch: the same work. Writes everything, and a summary
# peers.json, under the output folder. Never asserts a timing: it exits non-zero only on a
# failure or a wrong result (losses apart, wrong reduced values).
#
#   bash benchmarks/peers/run.sh [ROUNDS]        # default 5
#
# Environment: PEERS_BUILD (build folder, default build-peers in the checkout), PEERS_OUT (output
# folder, default $PEERS_BUILD/peers), PEERS_EPOCHS (default 2: one warm-up, one measured),
# PEERS_MF_ARGS (extra tutti_bench_cpu_mf options for the data, e.g. "--learners 4000"),
# PEERS_MAX_BYTES (largest allreduce message, default 67108864), PEERS_LOSS_RTOL (default 1e-5),
# PEERS_NO_INSTALL=1 (install nothing). OMP_WAIT_POLICY defaults to passive for every program,
# the setting tutti's programs choose for themselves: libgomp's spinning default slows libtorch
# on two threads several-fold on a busy machine.
# Not part of CI (.ci/run does not call it): it downloads PyTorch.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-5}"
build="${PEERS_BUILD:-${root}/build-peers}"
out="${PEERS_OUT:-${build}/peers}"
epochs="${PEERS_EPOCHS:-2}"
max_bytes="${PEERS_MAX_BYTES:-67108864}"
rtol="${PEERS_LOSS_RTOL:-1e-5}"
read -r -a mf_args <<<"${PEERS_MF_ARGS:-}"
py=/usr/bin/python3  # Debian's python3-torch is installed for the system interpreter
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
cores="$(nproc)"
[[ ${rounds} =~ ^[1-9][0-9]*$ ]] || {
  echo "run.sh: ROUNDS must be a positive integer, got '${rounds}'" >&2
  exit 2
}

say() { printf '== peers: %s\n' "$*"; }

# ---- packages ------------------------------------------------------------------------------------
if [[ "${PEERS_NO_INSTALL:-0}" != 1 ]]; then
  bash "${root}/scripts/deps.sh" libtorch-dev python3-torch
fi
"${py}" -c 'import torch, numpy' || {
  echo "run.sh: ${py} cannot import torch (apt-get install python3-torch)" >&2
  exit 1
}

# ---- build ---------------------------------------------------------------------------------------
if [[ ! -f "${build}/CMakeCache.txt" ]]; then
  cmake -S "${root}" -B "${build}" -DCMAKE_BUILD_TYPE=Release -DTUTTI_ENABLE_CUDA=OFF \
    -DTUTTI_BUILD_TESTS=OFF -DTUTTI_BUILD_EXAMPLES=OFF
fi
cmake --build "${build}" --target tutti_bench_cpu_mf tutti_bench_peer_allreduce -j "${cores}"
cmake -S "${root}/benchmarks/peers/libtorch_mf" -B "${build}/libtorch_mf" \
  -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "${build}/libtorch_mf" -j "${cores}"
bench="${build}/benchmarks"
libtorch_mf="${build}/libtorch_mf/libtorch_mf"

mpi=(mpiexec --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY -n 2)
[[ $(id -u) -eq 0 ]] && mpi=(mpiexec --allow-run-as-root "${mpi[@]:1}")

# ---- inputs --------------------------------------------------------------------------------------
rm -rf "${out}"
mkdir -p "${out}"
data="${out}/data"
"${bench}/tutti_bench_cpu_mf" --epochs "${epochs}" "${mf_args[@]}" --out "${data}" \
  --out-world 1,2 --prepare
uptime >"${out}/load-before.txt"

# Runs "tutti_command" and "peer_command" (strings) in round $1, the order alternating by round.
pair() {
  local round=$1 name=$2 tutti=$3 peer=$4
  if ((round % 2)); then
    say "round ${round}: ${name}: tutti, then the peer"
    eval "${tutti}"
    eval "${peer}"
  else
    say "round ${round}: ${name}: the peer, then tutti"
    eval "${peer}"
    eval "${tutti}"
  fi
}

for ((r = 1; r <= rounds; ++r)); do
  d="${out}/round${r}"
  mkdir -p "${d}"
  cat /proc/loadavg >"${d}/loadavg.txt"
  # (a) one process, every core, then one thread
  pair "${r}" "MF, 1 process x ${cores} threads" \
    "OMP_NUM_THREADS=${cores} '${bench}/tutti_bench_cpu_mf' --epochs ${epochs} ${mf_args[*]} \
       --json '${d}/a_tutti.json' >'${d}/a_tutti.txt'" \
    "'${libtorch_mf}' '${data}' --threads ${cores} --json '${d}/a_libtorch.json' \
       >'${d}/a_libtorch.txt'"
  pair "${r}" "MF, 1 process x 1 thread" \
    "OMP_NUM_THREADS=1 '${bench}/tutti_bench_cpu_mf' --epochs ${epochs} ${mf_args[*]} \
       --json '${d}/a1_tutti.json' >'${d}/a1_tutti.txt'" \
    "'${libtorch_mf}' '${data}' --threads 1 --json '${d}/a1_libtorch.json' \
       >'${d}/a1_libtorch.txt'"
  # (b) two processes, one thread each
  # tutti dense (the same collective DDP makes), then with the sparse exchange it chooses itself
  pair "${r}" "MF, 2 processes: mpi_allreduce vs DDP gloo" \
    "${mpi[*]} '${bench}/tutti_bench_cpu_mf' --reducer mpi --epochs ${epochs} ${mf_args[*]} \
       --json '${d}/b_tutti.json' >'${d}/b_tutti.txt';
     ${mpi[*]} '${bench}/tutti_bench_cpu_mf' --reducer mpi --epochs ${epochs} ${mf_args[*]} \
       --sparse-exchange auto --json '${d}/bs_tutti.json' >'${d}/bs_tutti.txt';
     ${mpi[*]} '${bench}/tutti_bench_cpu_mf' --reducer mpi --epochs ${epochs} ${mf_args[*]} \
       --shared-arena off --json '${d}/bo_tutti.json' >'${d}/bo_tutti.txt'" \
    "'${py}' '${root}/benchmarks/peers/ddp_mf.py' '${data}' --world 2 --threads 1 \
       --json '${d}/b_ddp.json' >'${d}/b_ddp.txt'"
  pair "${r}" "MF, 2 ranks: local_ring (threads) vs DDP gloo" \
    "'${bench}/tutti_bench_cpu_mf' --reducer local --ranks 2 --epochs ${epochs} ${mf_args[*]} \
       --json '${d}/b2_tutti.json' >'${d}/b2_tutti.txt';
     '${bench}/tutti_bench_cpu_mf' --reducer local --ranks 2 --epochs ${epochs} ${mf_args[*]} \
       --sparse-exchange auto --json '${d}/b2s_tutti.json' >'${d}/b2s_tutti.txt'" \
    "'${py}' '${root}/benchmarks/peers/ddp_mf.py' '${data}' --world 2 --threads 1 \
       --json '${d}/b2_ddp.json' >'${d}/b2_ddp.txt'"
  # (c) allreduce, 2 ranks: local_ring and mpi_allreduce against gloo
  pair "${r}" "allreduce, 2 ranks" \
    "'${bench}/tutti_bench_peer_allreduce' --reducer local --ranks 2 --max-bytes ${max_bytes} \
       --json '${d}/c_local.json' >'${d}/c_local.txt';
     ${mpi[*]} '${bench}/tutti_bench_peer_allreduce' --reducer mpi --max-bytes ${max_bytes} \
       --json '${d}/c_mpi.json' >'${d}/c_mpi.txt';
     ${mpi[*]} '${bench}/tutti_bench_peer_allreduce' --reducer mpi --shared-arena \
       --max-bytes ${max_bytes} --json '${d}/c_arena.json' >'${d}/c_arena.txt'" \
    "'${py}' '${root}/benchmarks/peers/gloo_allreduce.py' --world 2 --max-bytes ${max_bytes} \
       --json '${d}/c_gloo.json' >'${d}/c_gloo.txt'"
done
uptime >"${out}/load-after.txt"

# ---- summary -------------------------------------------------------------------------------------
"${py}" - "${out}" "${rounds}" "${rtol}" "${cores}" <<'PY'
import json, os, platform, socket, statistics, sys, time
out, rounds, rtol, cores = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
load = lambda r, name: json.load(open(os.path.join(out, f"round{r}", name)))
med = statistics.median
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
torch_version = load(1, "b_ddp.json")["torch"]
summary = {"machine": {"hostname": socket.gethostname(), "cores": cores, "cpu": cpu,
                       "load_before": open(os.path.join(out, "load-before.txt")).read().strip(),
                       "load_after": open(os.path.join(out, "load-after.txt")).read().strip()},
           "load_per_round": [open(os.path.join(out, f"round{r}", "loadavg.txt")).read().split()[:3]
                              for r in range(1, rounds + 1)],
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rounds": rounds,
           "torch": torch_version, "loss_rtol": rtol, "mf": [], "allreduce": [], "failures": []}

def epoch_losses(j):
    return [r["train_loss"] for r in j["results"]]

print(f"\n== peers on the CPU: {cores} cores ({cpu}), {rounds} rounds, PyTorch {torch_version}")
print("   figures are medians over rounds; tutti / peer is the ratio of the medians, [range] the")
print("   per-round ratios (each round ran both sides back to back)\n")
hdr = f"{'comparison':<50} {'tutti samples/s':>16} {'peer samples/s':>15} {'tutti/peer':>10} {'[range]':>15}  final loss tutti / peer"
print(hdr)
print("-" * len(hdr))
for key, label, tname, pname in (
        ("a", f"(a) 1 process x {cores} threads: vs libtorch", "a_tutti.json", "a_libtorch.json"),
        ("a1", "(a) 1 process x 1 thread: vs libtorch", "a1_tutti.json", "a1_libtorch.json"),
        ("b", "(b) 2 processes: mpi_allreduce vs DDP gloo", "b_tutti.json", "b_ddp.json"),
        ("bo", "(b) 2 processes: mpi_allreduce, no arena vs DDP", "bo_tutti.json", "b_ddp.json"),
        ("b2", "(b) 2 ranks: local_ring threads vs DDP gloo", "b2_tutti.json", "b2_ddp.json"),
        ("bs", "(b) 2 processes: mpi_allreduce, sparse vs DDP gloo", "bs_tutti.json", "b_ddp.json"),
        ("b2s", "(b) 2 ranks: local_ring, sparse vs DDP gloo", "b2s_tutti.json", "b2_ddp.json")):
    ts, ps, ratios = [], [], []
    for r in range(1, rounds + 1):
        t, p = load(r, tname), load(r, pname)
        ts.append(t["samples_per_s"]); ps.append(p["samples_per_s"])
        ratios.append(t["samples_per_s"] / p["samples_per_s"])
        for e, (lt, lp) in enumerate(zip(epoch_losses(t), epoch_losses(p)), 1):
            if not abs(lt - lp) <= rtol * abs(lp):
                summary["failures"].append(f"{label}, round {r}, epoch {e}: loss {lt!r} vs {lp!r}")
        t_last, p_last = t["final_train_loss"], p["final_train_loss"]
    row = {"comparison": key, "label": label, "tutti_samples_per_s": med(ts), "peer_samples_per_s": med(ps),
           "ratio": med(ts) / med(ps), "ratio_range": [min(ratios), max(ratios)],
           "tutti_final_loss": t_last, "peer_final_loss": p_last,
           "tutti_runs": ts, "peer_runs": ps}
    summary["mf"].append(row)
    print(f"{label:<50} {med(ts):>16,.0f} {med(ps):>15,.0f} {row['ratio']:>9.2f}x "
          f"[{min(ratios):.2f}-{max(ratios):.2f}]  {t_last:.6f} / {p_last:.6f}")

print(f"\n(c) allreduce of a float buffer, 2 ranks: median time per size (us), busbw (GB/s),")
print("    tutti / gloo busbw (= gloo time / tutti time), and local_ring against the memory's bound")
print("    (every rank copying its buffer once, measured in the same run: copy time / ring time)\n")
hdr = (f"{'size':>9} {'local_ring us':>14} {'mpi us':>10} {'arena us':>10} {'gloo us':>10} "
       f"{'local busbw':>12} {'mpi busbw':>10} {'arena busbw':>12} {'gloo busbw':>11} "
       f"{'local/gloo':>11} {'mpi/gloo':>9} {'arena/gloo':>11} {'local/bound':>12}")
print(hdr)
print("-" * len(hdr))
rows = {}
for r in range(1, rounds + 1):
    for name in ("local", "mpi", "arena", "gloo"):
        for x in load(r, f"c_{name}.json")["results"]:
            rows.setdefault(x["bytes"], {}).setdefault(name, []).append(x)
            if x["wrong"]:
                summary["failures"].append(f"allreduce {name}, round {r}, {x['bytes']} B: {x['wrong']} wrong")
for b in sorted(rows):
    v = {n: med([x["time_us"] for x in rows[b][n]]) for n in ("local", "mpi", "arena", "gloo")}
    # the copy every rank must at least make (tutti_allreduce.cpp), in the same run as local_ring
    share = med([x.get("bound_share", float("nan")) for x in rows[b]["local"]])
    bw = {n: b / (v[n] * 1e-6) / 1e9 for n in v}  # W = 2: busbw = algbw
    size = f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
    summary["allreduce"].append({"bytes": b, "time_us": v, "busbw_gbs": bw, "local_bound_share": share,
                                 "local_over_gloo": v["gloo"] / v["local"], "mpi_over_gloo": v["gloo"] / v["mpi"],
                                 "arena_over_gloo": v["gloo"] / v["arena"],
                                 "runs_time_us": {n: [x["time_us"] for x in rows[b][n]] for n in v}})
    print(f"{size:>9} {v['local']:>14.1f} {v['mpi']:>10.1f} {v['arena']:>10.1f} {v['gloo']:>10.1f} "
          f"{bw['local']:>12.3f} {bw['mpi']:>10.3f} {bw['arena']:>12.3f} {bw['gloo']:>11.3f} "
          f"{v['gloo'] / v['local']:>10.2f}x {v['gloo'] / v['mpi']:>8.2f}x {v['gloo'] / v['arena']:>10.2f}x "
          f"{100 * share:>11.1f}%")

print(f"\nload before: {summary['machine']['load_before']}")
print(f"load after:  {summary['machine']['load_after']}")
json.dump(summary, open(os.path.join(out, "peers.json"), "w"), indent=2)
print(f"wrote {os.path.join(out, 'peers.json')}")
if summary["failures"]:
    print("\nWRONG RESULTS (not the same work):", *summary["failures"], sep="\n  ", file=sys.stderr)
    sys.exit(1)
print(f"final losses agree within {rtol:g} relative on every epoch of every round")
PY
