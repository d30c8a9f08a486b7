# SPDX-License-Identifier: Apache-2.0
"""implicit's ALS and BPR, and a popularity baseline, on the split and ranking lists tutti wrote.

    python implicit_quality.py DIR [--json OUT] [--threads 2] [--k 10]

DIR is what `tutti train --holdout last --lists-out DIR` writes: train.csv (user,item dense
indices) and lists.csv (user, sampled, held-out item, sampled items...). Every model is fitted
on train.csv as its users fit it (implicit's own defaults but for the factors and iterations
named below), then ranks each list exactly as tutti does: the held-out item's rank is the
number of sampled candidates scoring at least as high (a tie counts against it), HR@K is the
share of lists ranking it below K, NDCG@K the mean of 1 / log2(rank + 2) over those.
Prints one line per model and writes a JSON summary.
"""

import argparse
import json
import os
import sys
import time

import numpy as np


def read_lists(path):
    users, sampled, items = [], [], []
    with open(path) as f:
        next(f)
        for line in f:
            parts = [int(x) for x in line.split(",")]
            users.append(parts[0])
            sampled.append(parts[1])
            items.append(parts[2:])
    return np.array(users), np.array(sampled), np.array(items)


def ranking(scores, sampled, k):
    """HR@k and NDCG@k of lists of scores whose first column is the held-out item's."""
    width = scores.shape[1]
    mask = np.arange(1, width)[None, :] <= sampled[:, None]
    above = ((scores[:, 1:] >= scores[:, :1]) & mask).sum(axis=1)
    hits = above < k
    ndcg = np.where(hits, 1.0 / np.log2(above + 2.0), 0.0)
    return float(hits.mean()), float(ndcg.mean())


def score_lists(user_factors, item_factors, users, items):
    u = user_factors[users]  # lists x f
    v = item_factors[items]  # lists x width x f
    return np.einsum("lf,lwf->lw", u, v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--json", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--als-factors", type=int, default=64)
    ap.add_argument("--als-iterations", type=int, default=15)
    ap.add_argument("--bpr-factors", type=int, default=64)
    ap.add_argument("--bpr-iterations", type=int, default=100)
    args = ap.parse_args()

    import implicit
    import scipy.sparse as sp
    from threadpoolctl import threadpool_limits

    train = np.loadtxt(os.path.join(args.dir, "train.csv"), delimiter=",", skiprows=1,
                       dtype=np.int64, ndmin=2)
    users, sampled, items = read_lists(os.path.join(args.dir, "lists.csv"))
    n_users = int(max(train[:, 0].max(), users.max())) + 1
    n_items = int(max(train[:, 1].max(), items.max())) + 1
    ui = sp.csr_matrix((np.ones(len(train), dtype=np.float32), (train[:, 0], train[:, 1])),
                       shape=(n_users, n_items))
    ui.data[:] = 1.0  # a repeated pair is one positive, as tutti's --repeats once
    results = []

    counts = np.asarray(ui.sum(axis=0)).ravel()
    hr, nd = ranking(counts[items].astype(np.float64), sampled, args.k)
    results.append({"model": "popularity", "hit_rate": hr, "ndcg": nd, "fit_seconds": 0.0})

    with threadpool_limits(1, "blas"):  # implicit's advice: its own threads, BLAS on one
        for name, make in [
            ("implicit ALS", lambda: implicit.cpu.als.AlternatingLeastSquares(
                factors=args.als_factors, iterations=args.als_iterations,
                num_threads=args.threads, random_state=1)),
            ("implicit BPR", lambda: implicit.cpu.bpr.BayesianPersonalizedRanking(
                factors=args.bpr_factors, iterations=args.bpr_iterations,
                num_threads=args.threads, random_state=1)),
        ]:
            model = make()
            start = time.perf_counter()
            model.fit(ui, show_progress=False)
            seconds = time.perf_counter() - start
            s = score_lists(np.asarray(model.user_factors), np.asarray(model.item_factors),
                            users, items)
            hr, nd = ranking(s, sampled, args.k)
            results.append({"model": name, "hit_rate": hr, "ndcg": nd, "fit_seconds": seconds})

    print(f"{'model':<16} {'HR@%d' % args.k:>8} {'NDCG@%d' % args.k:>8} {'fit s':>8}")
    for r in results:
        print(f"{r['model']:<16} {r['hit_rate']:8.4f} {r['ndcg']:8.4f} {r['fit_seconds']:8.2f}")
    summary = {"implicit_version": implicit.__version__, "k": args.k, "lists": int(len(users)),
               "users": n_users, "items": n_items, "train_rows": int(len(train)),
               "threads": args.threads, "results": results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
