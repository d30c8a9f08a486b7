#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tutti train` (the program users run) against PyTorch eager on the CPU, at several table sizes
and on one real dataset.

The same work on both sides: matrix factorisation with biases, L2 on the rows a sample reads,
batch 4,096, lr 0.01 (row-wise Adagrad: its default 0.1), a constant schedule, one process.
 - Synthetic rows (--sizes): logistic loss, AUC, on a file written here (users uniform, course
   popularity Zipf-like, labels from a hidden rank-8 model).
 - InstEval (--insteval, a TSV of student `s`, lecturer `d`, rating `y` 1..5; left out with a
   note when absent, or with --no-insteval): squared loss, RMSE; the global bias starts at the
   training ratings' mean on both sides (as `tutti train` does for the squared loss).
Each side trains EPOCHS epochs (the first warms up) and is timed over the training loop of the
last; each side scores its metric on its own random 10 % test split.

PyTorch runs as its users run it: its own default settings (threads: one per core; where its
CPU detection finds fewer, as on some VMs, the core count is set and the JSON says so), with
 - "torch dense Adam":  nn.Embedding + torch.optim.Adam (its default),
 - "torch sparse":      nn.Embedding(sparse=True) + torch.optim.SparseAdam for the tables,
                        Adam for the global bias (its documented option for large tables).
tutti runs `tutti train --ranks 1` with its defaults but the optimizer: adam (dense) and the
row-sparse lazy-adam and rowwise-adagrad. The dense rows run only up to --dense-up-to users.

Besides samples/s and the metric, each run gets the bytes it moves per sample under a stated
model (BYTES_MODEL; unique users and items per batch estimated from 50 random batches) and the
effective bandwidth that makes, as a share of the machine's copy bandwidth (measured once at the
start: a 512 MiB float32 torch copy, best of 5, read + write). The JSON also records each side's
threads and OpenMP wait policy. Prints a table and writes sizes.json. Never asserts a timing.

    python3 benchmarks/peers/sizes.py --tutti build/apps/tutti [--sizes 4000x500x32,...]
"""
import argparse
import dataclasses
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

# Bytes a step of B samples moves, U and I the unique users and items of the batch, r = dim + 1
# values per row (embedding + bias), 4 B each; divided by B.
BYTES_MODEL = (
    "per sample: 24 B of data (user id, item id, label, weight 4 B each, index 8 B) + the "
    "forward's reads of the two rows 2*r*4 B; per touched row (U + I per step): row-sparse "
    "Adam (tutti lazy-adam, torch SparseAdam) 9*r*4 B (parameter r/w, two moments r/w, "
    "gradient write/read/zero), rowwise-adagrad 5*r*4 + 8 B (parameter r/w, gradient "
    "write/read/zero, one accumulator r/w); dense Adam (tutti adam, torch dense Adam): no "
    "touched-row term but (users + items)*r*4*9 B per step (a pass over the whole tables: "
    "parameter r/w, two moments r/w, gradient zero/write/read); r = dim + 1; total / B")

# The optimizer family of each run, for the bytes model.
KIND = {"tutti adam": "dense", "torch dense Adam": "dense", "tutti lazy-adam": "row-sparse",
        "torch sparse + SparseAdam": "row-sparse", "tutti rowwise-adagrad": "rowwise"}
DENSE_RUNS = ("tutti adam", "torch dense Adam")


@dataclasses.dataclass
class Table:
    """One dataset as both sides read it: ids 0..n-1 for torch, the file for tutti."""
    name: str
    u: np.ndarray
    i: np.ndarray
    y: np.ndarray
    users: int
    items: int
    implicit: bool  # 0/1 labels: logistic loss and AUC; else ratings: squared loss and RMSE
    path: str
    cols: tuple  # user, item and label column names of the file


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


def load_insteval(path):
    """InstEval's student, lecturer and rating columns; ids remapped to 0..n-1."""
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
    cols = [header.index(c) for c in ("s", "d", "y")]
    data = np.loadtxt(path, delimiter="\t", skiprows=1, usecols=cols, dtype=np.int64, ndmin=2)
    users, u = np.unique(data[:, 0], return_inverse=True)
    items, i = np.unique(data[:, 1], return_inverse=True)
    return Table("InstEval", u.astype(np.int64), i.astype(np.int64), data[:, 2], len(users),
                 len(items), False, path, ("s", "d", "y"))


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    pos = labels > 0
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def evaluate(scores, labels, implicit):
    if implicit:
        return "auc", auc(scores, labels)
    return "rmse", float(torch.sqrt(((scores.double() - labels.double()) ** 2).mean()))


def copy_bandwidth():
    """Bytes/s of dst.copy_(src) on 512 MiB float32 tensors, best of 5, read + write counted."""
    src = torch.ones(128 << 20, dtype=torch.float32)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touches dst's pages
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.numel() * 4 / best


def batch_uniques(t, seed, batches=50):
    """Mean unique users and items per batch over `batches` random batches of the training rows,
    each as a share of the batch size."""
    rng = np.random.default_rng(seed)
    train = rng.permutation(len(t.u))[len(t.u) // 10:]
    b = min(BATCH, len(train))
    su = si = 0.0
    order, pos = rng.permutation(train), 0
    for _ in range(batches):
        if pos + b > len(order):
            order, pos = rng.permutation(train), 0
        idx = order[pos:pos + b]
        pos += b
        su += len(np.unique(t.u[idx])) / b
        si += len(np.unique(t.i[idx])) / b
    return su / batches, si / batches


def bytes_per_sample(kind, t, dim, uu, ii):
    """BYTES_MODEL for one run: `uu`, `ii` the unique users and items per sample of a batch."""
    r = dim + 1
    per_sample = 24 + 2 * r * 4
    per_row = {"row-sparse": 9 * r * 4, "rowwise": 5 * r * 4 + 8, "dense": 0}[kind]
    dense = (t.users + t.items) * r * 4 * 9 / BATCH if kind == "dense" else 0.0
    return per_sample + per_row * (uu + ii) + dense


def run_torch(t, dim, epochs, sparse, seed):
    torch.manual_seed(seed)
    n = len(t.u)
    perm = torch.randperm(n)
    n_test = n // 10
    test, train = perm[:n_test], perm[n_test:]
    U, I, Y = torch.from_numpy(t.u), torch.from_numpy(t.i), torch.from_numpy(t.y).float()
    P = torch.nn.Embedding(t.users, dim, sparse=sparse)
    Q = torch.nn.Embedding(t.items, dim, sparse=sparse)
    BU = torch.nn.Embedding(t.users, 1, sparse=sparse)
    BI = torch.nn.Embedding(t.items, 1, sparse=sparse)
    for e in (P, Q):
        torch.nn.init.normal_(e.weight, 0, 0.1)
    for e in (BU, BI):
        torch.nn.init.zeros_(e.weight)
    # Squared loss: the global bias starts at the training labels' mean, as tutti's does.
    g = torch.nn.Parameter(torch.zeros(1) if t.implicit else Y[train].mean().reshape(1))
    tables = [P.weight, Q.weight, BU.weight, BI.weight]
    if sparse:
        opts = [torch.optim.SparseAdam(tables, lr=LR), torch.optim.Adam([g], lr=LR)]
    else:
        opts = [torch.optim.Adam(tables + [g], lr=LR)]
    loss_fn = F.binary_cross_entropy_with_logits if t.implicit else F.mse_loss

    def score(uu, ii):
        p, q = P(uu), Q(ii)
        return g + BU(uu).squeeze(1) + BI(ii).squeeze(1) + (p * q).sum(1), p, q

    seconds = 0.0
    for _ in range(epochs):
        order = train[torch.randperm(len(train))]
        t0 = time.perf_counter()
        for a in range(0, len(order), BATCH):
            idx = order[a:a + BATCH]
            uu, ii = U[idx], I[idx]
            s, p, q = score(uu, ii)
            reg = (p * p).sum(1) + (q * q).sum(1) + BU(uu).squeeze(1) ** 2 + BI(ii).squeeze(1) ** 2
            loss = (loss_fn(s, Y[idx], reduction="none") + L2 * reg).mean()
            for o in opts:
                o.zero_grad()
            loss.backward()
            for o in opts:
                o.step()
        seconds = time.perf_counter() - t0
    with torch.no_grad():
        name, value = evaluate(score(U[test], I[test])[0], Y[test], t.implicit)
    return {"samples_per_second": len(train) / seconds, "metric_name": name, "metric": value,
            "threads": torch.get_num_threads(),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}


def run_tutti(binary, t, dim, epochs, optimizer, seed):
    # Each optimizer at tutti train's default rate for it (row-wise Adagrad: 0.1; the rest 0.01).
    lr = [] if optimizer == "rowwise-adagrad" else ["--lr", str(LR)]
    implicit = ["--implicit"] if t.implicit else []  # else ratings: its default squared loss
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        cmd = [binary, "train", "--data", t.path, "--user-col", t.cols[0], "--item-col",
               t.cols[1], "--label-col", t.cols[2], *implicit, "--dim", str(dim), "--batch",
               str(BATCH), *lr, "--l2", str(L2), "--schedule", "constant", "--epochs",
               str(epochs), "--ranks", "1", "--optimizer", optimizer, "--seed", str(seed),
               "--quiet", "--json", out]
        # The PyTorch run before this one ran in this process: let its OpenMP threads finish
        # their spin and sleep, so that tutti's idle probe sees the machine as a user's would.
        time.sleep(0.5)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            r = json.load(f)
    last = r["epochs"][-1]
    return {"samples_per_second": last["weighted_samples"] / last["step_seconds"],
            "metric_name": r["eval"]["metric"], "metric": r["eval"]["value"],
            "omp_threads": r.get("omp_threads"), "omp_wait_policy": r.get("omp_wait_policy"),
            "command": " ".join(cmd[1:])}


def make_runs(a, t, dim):
    """The (name, run) pairs of one table, in the first round's order."""
    def tutti(opt):
        return lambda: run_tutti(a.tutti, t, dim, a.epochs, opt, 1)

    runs = [("tutti adam", tutti("adam")), ("tutti lazy-adam", tutti("lazy-adam")),
            ("tutti rowwise-adagrad", tutti("rowwise-adagrad")),
            ("torch dense Adam", lambda: run_torch(t, dim, a.epochs, False, 1)),
            ("torch sparse + SparseAdam", lambda: run_torch(t, dim, a.epochs, True, 1))]
    if t.users > a.dense_up_to:
        runs = [r for r in runs if r[0] not in DENSE_RUNS]
    return runs


def measure(a, t, dim, copy_bw):
    """Runs every side `a.rounds` times (alternating the order) and returns the table's row:
    each side's median run by samples/s, with its bytes per sample and share of `copy_bw`."""
    uu, ii = batch_uniques(t, seed=3)
    sides = {}
    for rnd in range(a.rounds):
        runs = make_runs(a, t, dim)
        if rnd % 2:
            runs.reverse()
        for name, fn in runs:
            r = fn()
            r["bytes_per_sample"] = bytes_per_sample(KIND[name], t, dim, uu, ii)
            r["effective_gb_per_s"] = r["bytes_per_sample"] * r["samples_per_second"] / 1e9
            r["copy_bw_percent"] = 100 * r["effective_gb_per_s"] * 1e9 / copy_bw
            sides.setdefault(name, []).append(r)
    med = {k: sorted(v, key=lambda r: r["samples_per_second"])[len(v) // 2]
           for k, v in sides.items()}
    best_torch = max(r["samples_per_second"] for k, r in med.items() if k.startswith("torch"))
    return {"dataset": t.name, "users": t.users, "items": t.items, "dim": dim,
            "samples": len(t.u), "rounds": a.rounds, "unique_users_per_batch": uu,
            "unique_items_per_batch": ii, "results": med,
            "best_torch_samples_per_second": best_torch}


def print_row(row):
    print(f"\n{row['dataset']}: {row['users']:,} users x {row['items']:,} courses, dim "
          f"{row['dim']}, {row['samples']:,} samples (median of {row['rounds']} round(s), "
          f"samples/s of the last epoch's training loop; unique users/items per batch "
          f"{row['unique_users_per_batch']:.3f}/{row['unique_items_per_batch']:.3f} of it)")
    print(f"  {'':28s} {'samples/s':>11s}   {'vs torch best':>13s}   {'metric':>11s}"
          f"   {'B/sample':>8s}   {'% copy bw':>9s}")
    for name, r in row["results"].items():
        ratio = r["samples_per_second"] / row["best_torch_samples_per_second"]
        metric = f"{r['metric_name'].upper()} {r['metric']:.4f}"
        print(f"  {name:28s} {r['samples_per_second']/1e6:7.3f} M/s   x{ratio:5.2f} of best  "
              f" {metric:>11s}   {r['bytes_per_sample']:8.0f}   {r['copy_bw_percent']:8.2f}%",
              flush=True)


def parse_args():
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
    ap.add_argument("--insteval", default="/work/shared/datasets/insteval.tsv",
                    help="InstEval as TSV (columns s, d, y): one more row, ratings and RMSE")
    ap.add_argument("--no-insteval", action="store_true", help="leave the InstEval row out")
    ap.add_argument("--insteval-dim", type=int, default=32)
    return ap.parse_args()


def setup_threads():
    """Sets torch's threads where its detection finds fewer than the cores; returns what it found."""
    detected = torch.get_num_threads()
    cores = len(os.sched_getaffinity(0))
    if detected < cores:
        # PyTorch defaults to one thread per physical core; where its CPU detection finds fewer
        # than the cores this process may use (some VMs report 1), set what a user would expect.
        torch.set_num_threads(cores)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads (its own default: "
          f"{detected}); {cores} cores; tutti: its default threads; OMP_WAIT_POLICY "
          f"{os.environ.get('OMP_WAIT_POLICY', 'unset')}", flush=True)
    return detected


def main():
    a = parse_args()
    detected = setup_threads()
    copy_bw = copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e9:.2f} GB/s (512 MiB float32 dst.copy_(src), best of 5, "
          f"read + write)", flush=True)
    rows = []
    tmp = tempfile.mkdtemp(prefix="tutti-sizes-")
    for spec in a.sizes.split(",") if a.sizes else []:
        users, items, dim = (int(x) for x in spec.split("x"))
        samples = int(min(a.max_samples, max(a.min_samples, users * a.samples_per_user)))
        u, i, y = make_data(users, items, samples, seed=7)
        csv = os.path.join(tmp, f"{spec}.csv")
        write_csv(csv, u, i, y)
        t = Table("synthetic", u, i, y, users, items, True, csv, ("user", "item", "label"))
        rows.append(measure(a, t, dim, copy_bw))
        print_row(rows[-1])
        os.remove(csv)
    if a.no_insteval:
        pass
    elif not os.path.exists(a.insteval):
        print(f"\nInstEval: {a.insteval} is absent; its row is left out", flush=True)
    else:
        rows.append(measure(a, load_insteval(a.insteval), a.insteval_dim, copy_bw))
        print_row(rows[-1])
    with open(a.json, "w") as f:
        json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(),
                   "torch_default_threads": detected,
                   "omp_wait_policy_env": os.environ.get("OMP_WAIT_POLICY"),
                   "copy_bandwidth_gb_per_s": copy_bw / 1e9, "bytes_model": BYTES_MODEL,
                   "rows": rows}, f, indent=1)
    print(f"\nwrote {a.json}")


if __name__ == "__main__":
    sys.exit(main())
