#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tutti train` (the program users run) against PyTorch eager on the CPU, at several table sizes.

The same work on both sides: matrix factorisation with biases, logistic loss, L2 on the rows a
sample reads, batch 4,096, lr 0.01 (row-wise Adagrad: its default 0.1), a constant schedule, one process, on the same data file
(written here: users uniform, course popularity Zipf-like, labels from a hidden rank-8 model).
Each side trains EPOCHS epochs (the first warms up) and is timed over the training loop of the
last; each side scores AUC on its own random 10 % test split of the file.

PyTorch runs as its users run it: its own default settings (threads: one per core; where its
CPU detection finds fewer, as on some VMs, the core count is set and the JSON says so), with
 - "torch dense Adam":  nn.Embedding + torch.optim.Adam (its default),
 - "torch sparse":      nn.Embedding(sparse=True) + torch.optim.SparseAdam for the tables,
                        Adam for the global bias (its documented option for large tables).
tutti runs `tutti train --ranks 1` with its defaults but the optimizer: adam (dense) and the
row-sparse lazy-adam and rowwise-adagrad. Prints a table and writes sizes.json. Never asserts a
timing.

    python3 benchmarks/peers/sizes.py --tutti build/apps/tutti [--sizes 4000x500x32,...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

BATCH, LR, L2 = 4096, 0.01, 0.03


def make_data(users, items, samples, seed):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, users, samples, dtype=np.int64)
    u[:users] = np.arange(users)  # every learner appears: the table is the size asked for
    pop = 1.0 / np.arange(1, items + 1) ** 0.8
    i = rng.choice(items, samples, p=pop / pop.sum()).astype(np.int64)
    i[:items] = np.arange(items)
    hu = rng.normal(0, 1, (users, 8)).astype(np.float32)
    hi = rng.normal(0, 1, (items, 8)).astype(np.float32)
    score = np.einsum("ij,ij->i", hu[u], hi[i]) + rng.normal(0, 1, samples)
    y = (score > 0).astype(np.int64)
    return u, i, y


def write_csv(path, u, i, y):
    with open(path, "w") as f:
        f.write("user,item,label\n")
        step = 1 << 20
        for a in range(0, len(u), step):
            b = min(len(u), a + step)
            block = np.stack([u[a:b], i[a:b], y[a:b]], axis=1)
            f.write("\n".join(",".join(map(str, row)) for row in block.tolist()))
            f.write("\n")


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    pos = labels > 0
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def run_torch(u, i, y, users, items, dim, epochs, sparse, seed):
    torch.manual_seed(seed)
    n = len(u)
    perm = torch.randperm(n)
    n_test = n // 10
    test, train = perm[:n_test], perm[n_test:]
    U, I, Y = torch.from_numpy(u), torch.from_numpy(i), torch.from_numpy(y).float()
    P = torch.nn.Embedding(users, dim, sparse=sparse)
    Q = torch.nn.Embedding(items, dim, sparse=sparse)
    BU = torch.nn.Embedding(users, 1, sparse=sparse)
    BI = torch.nn.Embedding(items, 1, sparse=sparse)
    for e in (P, Q):
        torch.nn.init.normal_(e.weight, 0, 0.1)
    for e in (BU, BI):
        torch.nn.init.zeros_(e.weight)
    g = torch.nn.Parameter(torch.zeros(1))
    tables = [P.weight, Q.weight, BU.weight, BI.weight]
    if sparse:
        opts = [torch.optim.SparseAdam(tables, lr=LR), torch.optim.Adam([g], lr=LR)]
    else:
        opts = [torch.optim.Adam(tables + [g], lr=LR)]

    def score(uu, ii):
        p, q = P(uu), Q(ii)
        return g + BU(uu).squeeze(1) + BI(ii).squeeze(1) + (p * q).sum(1), p, q, uu, ii

    seconds = 0.0
    for _ in range(epochs):
        order = train[torch.randperm(len(train))]
        t0 = time.perf_counter()
        for a in range(0, len(order), BATCH):
            idx = order[a:a + BATCH]
            uu, ii = U[idx], I[idx]
            s, p, q, _, _ = score(uu, ii)
            reg = (p * p).sum(1) + (q * q).sum(1) + BU(uu).squeeze(1) ** 2 + BI(ii).squeeze(1) ** 2
            loss = (F.binary_cross_entropy_with_logits(s, Y[idx], reduction="none") + L2 * reg).mean()
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
        seconds = time.perf_counter() - t0
    with torch.no_grad():
        s = score(U[test], I[test])[0]
    return {"samples_per_second": len(train) / seconds, "auc": auc(s, Y[test])}


def run_tutti(binary, csv, dim, epochs, optimizer, seed):
    # Each optimizer at tutti train's default rate for it (row-wise Adagrad: 0.1; the rest 0.01).
    lr = [] if optimizer == "rowwise-adagrad" else ["--lr", str(LR)]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [binary, "train", "--data", csv, "--user-col", "user", "--item-col", "item",
               "--label-col", "label", "--implicit", "--dim", str(dim), "--batch", str(BATCH),
               *lr, "--l2", str(L2), "--schedule", "constant", "--epochs", str(epochs),
               "--ranks", "1", "--optimizer", optimizer, "--seed", str(seed), "--quiet",
               "--json", out]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        r = json.load(open(out))
    last = r["epochs"][-1]
    return {"samples_per_second": last["weighted_samples"] / last["step_seconds"],
            "auc": r["eval"]["value"], "command": " ".join(cmd[1:])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tutti", required=True, help="the tutti program")
    ap.add_argument("--sizes", default="4000x500x32,16000x500x64,200000x2000x32,1000000x5000x32",
                    help="USERSxITEMSxDIM,...")
    ap.add_argument("--samples-per-user", type=float, default=10)
    ap.add_argument("--min-samples", type=int, default=400000)
    ap.add_argument("--max-samples", type=int, default=4000000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--json", default="sizes.json")
    ap.add_argument("--dense-up-to", type=int, default=250000,
                    help="run the dense-Adam rows (tutti adam, torch dense Adam) only up to this "
                         "many users: above it a dense pass over the tables takes minutes an epoch")
    a = ap.parse_args()
    rows = []
    tmp = tempfile.mkdtemp(prefix="tutti-sizes-")
    detected = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0))
    if detected < cores:
        # PyTorch defaults to one thread per physical core; where its CPU detection finds fewer
        # than the cores this process may use (some VMs report 1), set what a user would expect.
        torch.set_num_threads(cores)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads (its own default: "
          f"{detected}); {cores} cores; tutti: its default threads", flush=True)
    for spec in a.sizes.split(","):
        users, items, dim = (int(x) for x in spec.split("x"))
        samples = int(min(a.max_samples, max(a.min_samples, users * a.samples_per_user)))
        u, i, y = make_data(users, items, samples, seed=7)
        csv = os.path.join(tmp, f"{spec}.csv")
        write_csv(csv, u, i, y)
        sides = {}
        for rnd in range(a.rounds):
            runs = [("tutti adam", lambda: run_tutti(a.tutti, csv, dim, a.epochs, "adam", 1)),
                    ("tutti lazy-adam", lambda: run_tutti(a.tutti, csv, dim, a.epochs, "lazy-adam", 1)),
                    ("tutti rowwise-adagrad",
                     lambda: run_tutti(a.tutti, csv, dim, a.epochs, "rowwise-adagrad", 1)),
                    ("torch dense Adam",
                     lambda: run_torch(u, i, y, users, items, dim, a.epochs, False, 1)),
                    ("torch sparse + SparseAdam",
                     lambda: run_torch(u, i, y, users, items, dim, a.epochs, True, 1))]
            if users > a.dense_up_to:
                runs = [r for r in runs if r[0] not in ("tutti adam", "torch dense Adam")]
            if rnd % 2:
                runs.reverse()
            for name, fn in runs:
                sides.setdefault(name, []).append(fn())
        med = {k: sorted(v, key=lambda r: r["samples_per_second"])[len(v) // 2] for k, v in sides.items()}
        best_torch = max(r["samples_per_second"] for k, r in med.items() if k.startswith("torch"))
        row = {"users": users, "items": items, "dim": dim, "samples": samples, "rounds": a.rounds,
               "results": med, "best_torch_samples_per_second": best_torch}
        rows.append(row)
        print(f"\n{users:,} users x {items:,} courses, dim {dim}, {samples:,} samples "
              f"(median of {a.rounds} round(s), samples/s of the last epoch's training loop)")
        for name, r in med.items():
            ratio = r["samples_per_second"] / best_torch
            print(f"  {name:28s} {r['samples_per_second']/1e6:7.3f} M/s   x{ratio:5.2f} of torch's best"
                  f"   AUC {r['auc']:.4f}", flush=True)
        os.remove(csv)
    json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(),
               "torch_default_threads": detected, "rows": rows},
              open(a.json, "w"), indent=1)
    print(f"\nwrote {a.json}")


if __name__ == "__main__":
    sys.exit(main())
