#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch.distributed (gloo backend, CPU) peer of `tutti_bench_peer_allreduce`: the mean of a
float32 buffer over W processes, timed with the same loop, step for step.

    /usr/bin/python3 benchmarks/peers/gloo_allreduce.py [--world 2] [--min-bytes 4096]
        [--max-bytes 67108864] [--factor 4] [--json out.json]

Per size: rank r fills its buffer with r + 1 + (i mod 7); after a one-value MAX all_reduce that
lines the ranks up, `warmup` untimed calls estimate the time of one call, the ranks agree on the
slowest estimate and so on the number of timed iterations; each timed iteration starts right
after a line-up, each rank times its own all_reduce(SUM) followed by the division by W (gloo has
no AVG; tutti's all_reduce_mean divides too), and an iteration's time is the slowest rank's.
time is the median over iterations; algbw = bytes / time, busbw = algbw * 2(W-1)/W. The buffer
must then hold the mean (W+1)/2 + (i mod 7) within 1e-6 relative; #wrong counts the values that
do not, and any makes the script exit with 1.
"""
import argparse
import json
import math
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def line_up():
    dist.all_reduce(torch.zeros(1, dtype=torch.float64), op=dist.ReduceOp.MAX)


def measure(rank, W, nbytes, a):
    n = nbytes // 4
    pattern = (torch.arange(n, dtype=torch.int64) % 7).to(torch.float32)
    buf = pattern + float(rank + 1)

    def mean():
        dist.all_reduce(buf)
        buf.div_(W)

    line_up()
    t0 = time.perf_counter()
    for _ in range(a.warmup):
        mean()
    per_iter = torch.tensor([(time.perf_counter() - t0) / max(a.warmup, 1)], dtype=torch.float64)
    dist.all_reduce(per_iter, op=dist.ReduceOp.MAX)
    want = a.seconds_per_size / per_iter.item() if per_iter.item() > 0 else 1e6
    iters = min(max(math.ceil(want), a.min_iters), 1000000)
    seconds = torch.zeros(iters, dtype=torch.float64)
    for k in range(iters):
        line_up()
        t0 = time.perf_counter()
        mean()
        seconds[k] = time.perf_counter() - t0
    dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # per iteration, the slowest rank
    expected = pattern.double() + (W + 1) / 2.0
    wrong = torch.tensor([float((~((buf.double() - expected).abs() <= 1e-6 * expected.abs())).sum())],
                         dtype=torch.float64)
    dist.all_reduce(wrong)
    t = statistics.median(seconds.tolist())
    algbw = nbytes / t / 1e9 if t > 0 else 0.0
    return {"reducer": "gloo", "ranks": W, "bytes": nbytes, "count": n, "iters": iters,
            "time_us": t * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (W - 1) / W,
            "wrong": int(wrong.item())}


def rank_main(rank, a, port):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.world)
    rows = []
    b = a.min_bytes
    while b <= a.max_bytes:
        rows.append(measure(rank, a.world, b, a))
        b *= a.factor
    if rank == 0:
        print(f"gloo_allreduce: PyTorch {torch.__version__} gloo, {a.world} processes; "
              "time = median over iterations of the slowest rank")
        print(f"{'size(B)':>12} {'count':>10} {'iters':>7} {'time(us)':>12} {'algbw':>10} {'busbw':>10} {'#wrong':>7}")
        for r in rows:
            print(f"{r['bytes']:>12} {r['count']:>10} {r['iters']:>7} {r['time_us']:>12.1f} "
                  f"{r['algbw_gbs']:>10.3f} {r['busbw_gbs']:>10.3f} {r['wrong']:>7}")
        if a.json:
            json.dump({"benchmark": "peer_allreduce", "peer": "torch.distributed gloo",
                       "torch": torch.__version__, "results": rows}, open(a.json, "w"), indent=2)
        wrong = sum(r["wrong"] for r in rows)
        if wrong:
            print(f"gloo_allreduce: {wrong} wrong values", file=sys.stderr)
    dist.destroy_process_group()
    if rank == 0 and sum(r["wrong"] for r in rows):
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--min-bytes", type=int, default=4096)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seconds-per-size", type=float, default=0.2)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    mp.spawn(rank_main, args=(a, free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
