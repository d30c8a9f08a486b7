#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What sampled negatives cost a step: positives per second of `tutti train` with K negatives per
positive (K = 0 trains the rows alone), for the pointwise logistic loss and the list losses, side
by side in one run, rounds alternating. A positive with K negatives is 1 + K rows through the
model and the optimizer, so the bound to hold is cost(K) / cost(0) <= 1 + K, per positive. The
synthetic courses' 0/1 labels are the rows (so K = 0 is a valid run); the second epoch of each run
is measured (the first grows the scratch). Prints a table (median and range of every cell, the
cost ratio against K = 0 and the bound) and, with --json, every run. Asserts nothing.

  python3 benchmarks/negatives_cost.py --tutti build/apps/tutti --rounds 3 --json cost.json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(tutti, extra, k, loss, args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "r.json")
        cmd = [tutti, "train", "--ranks", "1", "--epochs", "2", "--quiet",
               "--learners", str(args.learners), "--courses", str(args.courses),
               "--dim", str(args.dim), "--batch", str(args.batch),
               "--optimizer", args.optimizer, "--sampled-negatives", str(k),
               "--json", out] + (["--loss", loss] if k > 0 else []) + extra
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        e = json.load(open(out))["epochs"][-1]
        return e["weighted_samples"] / e["step_seconds"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tutti", default="build/apps/tutti")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--ks", default="0,1,4,8,16")
    p.add_argument("--losses", default="logistic,bpr,softmax")
    p.add_argument("--learners", type=int, default=16000)
    p.add_argument("--courses", type=int, default=500)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--optimizer", default="lazy-adam")
    p.add_argument("--json")
    args = p.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    losses = args.losses.split(",")
    cells = [(0, "-")] + [(k, loss) for k in ks if k > 0 for loss in losses]
    load = open("/proc/loadavg").read().split()[:3]
    print(f"== negatives_cost: {os.cpu_count()} cores, load {' '.join(load)}; {args.learners} "
          f"learners x {args.courses} courses, dim {args.dim}, batch {args.batch}, "
          f"{args.optimizer}, {args.rounds} rounds")
    rates = {c: [] for c in cells}
    for r in range(args.rounds):
        order = cells if r % 2 == 0 else list(reversed(cells))
        for k, loss in order:
            rates[(k, loss)].append(run(args.tutti, [], k, loss, args))
    base = statistics.median(rates[(0, "-")])
    print(f"{'K':>3} {'loss':<9} {'M positives/s':>14} {'range':>15} {'cost / K=0':>11} "
          f"{'bound 1+K':>10}")
    rows = []
    for k, loss in cells:
        v = rates[(k, loss)]
        m = statistics.median(v)
        ratio = base / m
        print(f"{k:>3} {loss:<9} {m / 1e6:14.3f} {min(v) / 1e6:7.3f}-{max(v) / 1e6:<7.3f} "
              f"{ratio:11.2f} {1 + k:10d}")
        rows.append({"k": k, "loss": loss, "positives_per_second": v, "median": m,
                     "cost_ratio": ratio, "bound": 1 + k})
    if args.json:
        json.dump({"load_before": load, "settings": vars(args), "cells": rows},
                  open(args.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
