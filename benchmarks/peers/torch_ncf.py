#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch twin of `tutti train --model ncf`: the same NeuMF (a GMF branch of --gmf-dim, an MLP
branch whose embeddings are half its first layer's width, dense layers of --layers with ReLU, one
output unit), the logistic loss, Adam, on the rows of a CSV (user,item,label with a header: the
file `benchmarks/peers/pypi_torch_ncf.sh` writes and gives tutti too), batch after shuffled batch,
on the CPU. Prints each epoch's loss and samples/s and writes --json.

    python3 benchmarks/peers/torch_ncf.py rows.csv [--variant V] [--json out.json]

--variant: eager (torch.optim.Adam, its default), fused (Adam(fused=True)) or compile-fused (the
model's loss under torch.compile, with Adam(fused=True)). A variant the installed PyTorch cannot
run is reported as skipped, with the error, in the printout and the JSON. --threads sets torch's
intra-op threads (default: its own choice); the JSON records them and OMP_WAIT_POLICY.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class NeuMF(nn.Module):
    def __init__(self, users, items, gmf, layers):
        super().__init__()
        mlp = layers[0] // 2
        self.gu, self.gi = nn.Embedding(users, gmf), nn.Embedding(items, gmf)
        self.mu, self.mi = nn.Embedding(users, mlp), nn.Embedding(items, mlp)
        for e in (self.gu, self.gi, self.mu, self.mi):
            nn.init.normal_(e.weight, std=0.01)  # tutti's init_scale, the paper's
        widths = [2 * mlp] + layers
        dense = []
        for a, b in zip(widths, widths[1:]):
            dense += [nn.Linear(a, b), nn.ReLU()]
        self.mlp = nn.Sequential(*dense)
        self.out = nn.Linear(gmf + layers[-1], 1)

    def forward(self, u, i):
        g = self.gu(u) * self.gi(i)
        h = self.mlp(torch.cat([self.mu(u), self.mi(i)], 1))
        return self.out(torch.cat([g, h], 1)).squeeze(1)


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--variant", choices=["eager", "fused", "compile-fused"], default="eager")
    ap.add_argument("--gmf-dim", type=int, default=32)
    ap.add_argument("--layers", default="64,32,16")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json")
    return ap.parse_args()


def main():
    a = parse_args()
    default_threads = torch.get_num_threads()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rows = np.loadtxt(a.rows, delimiter=",", skiprows=1, dtype=np.int64)
    users = torch.from_numpy(rows[:, 0])
    items = torch.from_numpy(rows[:, 1])
    labels = torch.from_numpy(rows[:, 2].astype(np.float32))
    n = len(rows)
    model = NeuMF(int(users.max()) + 1, int(items.max()) + 1, a.gmf_dim,
                  [int(w) for w in a.layers.split(",")])
    report = {"variant": a.variant, "rows": n, "batch": a.batch, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "default_threads": default_threads,
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "epochs": []}
    try:
        opt = torch.optim.Adam(model.parameters(), lr=a.lr,
                               fused=a.variant in ("fused", "compile-fused"))

        def loss_of(u, i, y):
            return F.binary_cross_entropy_with_logits(model(u, i), y)

        step_loss = torch.compile(loss_of) if a.variant == "compile-fused" else loss_of
        for epoch in range(1, a.epochs + 1):
            order = torch.randperm(n)
            start, total = time.perf_counter(), 0.0
            for b in range(0, n, a.batch):
                idx = order[b:b + a.batch]
                opt.zero_grad(set_to_none=True)
                loss = step_loss(users[idx], items[idx], labels[idx])
                loss.backward()
                opt.step()
                total += float(loss) * len(idx)
            seconds = time.perf_counter() - start
            e = {"epoch": epoch, "loss": total / n, "seconds": seconds,
                 "samples_per_second": n / seconds}
            report["epochs"].append(e)
            print(f"epoch {epoch}: loss {e['loss']:.5f}, {e['samples_per_second']:.0f} samples/s")
    except Exception as err:  # a variant this PyTorch or machine cannot run
        report["skipped"] = f"{type(err).__name__}: {err}"
        print(f"skipped: {report['skipped']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
