#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch twin of tutti_bench_gpu_mf: the same matrix factorisation (logistic loss, L2 on
the touched rows, Adam), on the same data, from the same initial parameters, in the same batch
order, on the same GPU. Prints per-epoch loss and samples/s and, with --compare, the ratio table
against tutti's JSON report.

    python3 benchmarks/peers/torch_mf.py DIR [--variant V] [--json out.json] [--compare tutti.json]

DIR is what `tutti_bench_gpu_mf --out DIR` wrote. --variant says how PyTorch runs:
 - eager:   nn.Parameter tables indexed per batch, torch.optim.Adam (its default; the same
            arithmetic as tutti's Adam, so the final losses agree);
 - fused:   the same with torch.optim.Adam(fused=True);
 - sparse:  F.embedding(sparse=True) + torch.optim.SparseAdam for the tables, Adam for the
            global bias (PyTorch's documented option for large tables; lazy, so its loss differs);
 - compile: eager's loss wrapped in torch.compile (where the installed PyTorch has it; otherwise
            the report says skipped and why).
--device cpu runs the same on the CPU (a check of the script where no GPU is).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--json")
    ap.add_argument("--compare")
    ap.add_argument("--fused", action="store_true", help="--variant fused")
    ap.add_argument("--variant", choices=["eager", "fused", "sparse", "compile"], default="eager")
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    variant = "fused" if a.fused else a.variant
    peer = "pytorch-eager" + {"eager": "", "fused": "-fused-adam", "sparse": "-sparse-adam",
                              "compile": "-compile"}[variant]
    if variant == "compile" and not hasattr(torch, "compile"):
        why = f"torch.compile is not in PyTorch {torch.__version__}"
        print(f"skipped: {why}")
        if a.json:
            json.dump({"peer": peer, "torch": torch.__version__, "skipped": why},
                      open(a.json, "w"), indent=2)
        return
    meta = json.load(open(os.path.join(a.dir, "meta.json")))
    dev = torch.device(a.device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()
    users = torch.from_numpy(np.fromfile(os.path.join(a.dir, "users.i32"), dtype=np.int32)).to(dev).long()
    items = torch.from_numpy(np.fromfile(os.path.join(a.dir, "items.i32"), dtype=np.int32)).to(dev).long()
    labels = torch.from_numpy(np.fromfile(os.path.join(a.dir, "labels.f32"), dtype=np.float32)).to(dev)
    init = np.fromfile(os.path.join(a.dir, "init.f32"), dtype=np.float32)
    seg = {s["name"]: s for s in meta["segments"]}

    def param(name):
        s = seg[name]
        v = init[s["offset"]: s["offset"] + s["rows"] * s["cols"]].reshape(s["rows"], s["cols"])
        return torch.nn.Parameter(torch.from_numpy(v.copy()).to(dev))

    P, Q = param("user_embedding"), param("item_embedding")
    bu, bi, g = param("user_bias"), param("item_bias"), param("global_bias")
    tables = [P, Q, bu, bi]
    if variant == "sparse":
        opts = [torch.optim.SparseAdam(tables, lr=meta["lr"]), torch.optim.Adam([g], lr=meta["lr"])]
    else:
        opts = [torch.optim.Adam(tables + [g], lr=meta["lr"],
                                 **({"fused": True} if variant == "fused" else {}))]
    l2, batch, n = meta["l2"], meta["batch"], meta["rows"]
    orders = [torch.from_numpy(np.fromfile(os.path.join(a.dir, f"order{e}.u64"), dtype=np.uint64)
                               .astype(np.int64)).to(dev) for e in range(meta["epochs"])]
    sparse = variant == "sparse"

    def losses(u, i, y):
        if sparse:
            pu, qi = F.embedding(u, P, sparse=True), F.embedding(i, Q, sparse=True)
            bu_u, bi_i = F.embedding(u, bu, sparse=True)[:, 0], F.embedding(i, bi, sparse=True)[:, 0]
        else:
            pu, qi, bu_u, bi_i = P[u], Q[i], bu[u, 0], bi[i, 0]
        s = g[0, 0] + bu_u + bi_i + (pu * qi).sum(1)
        data = F.binary_cross_entropy_with_logits(s, y, reduction="none")
        reg = l2 * ((pu * pu).sum(1) + (qi * qi).sum(1) + bu_u * bu_u + bi_i * bi_i)
        return (data + reg).mean(), data.detach().sum()

    step_losses = torch.compile(losses) if variant == "compile" else losses
    sync()

    rows = []
    for e in range(meta["epochs"]):
        order = orders[e]
        loss_sum = torch.zeros((), device=dev)
        sync()
        t0 = time.perf_counter()
        for b in range(0, n, batch):
            idx = order[b:b + batch]
            loss, data_sum = step_losses(users[idx], items[idx], labels[idx])
            for opt in opts:
                opt.zero_grad(set_to_none=sparse)
            loss.backward()
            for opt in opts:
                opt.step()
            loss_sum += data_sum
        sync()
        secs = time.perf_counter() - t0
        rows.append({"epoch": e + 1, "seconds": secs, "train_loss": loss_sum.item() / n,
                     "samples_per_s": n / secs})

    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    print(f"PyTorch {torch.__version__} ({peer}) on {name}: {n} interactions, dim {meta['dim']}, "
          f"batch {batch}, lr {meta['lr']}")
    print(f"{'epoch':>6}  {'seconds':>10}  {'train loss':>12}  {'samples/s':>14}")
    for r in rows:
        print(f"{r['epoch']:>6}  {r['seconds']:>10.4f}  {r['train_loss']:>12.6f}  {r['samples_per_s']:>14.0f}"
              + ("  (warm-up)" if r["epoch"] == 1 else ""))
    report = {"peer": peer, "torch": torch.__version__, "gpu": name, "results": rows}
    if a.json:
        json.dump(report, open(a.json, "w"), indent=2)
    if a.compare:
        t = json.load(open(a.compare))
        print("\ntutti / PyTorch, epochs after the warm-up (median):")
        tt = sorted(r["samples_per_s"] for r in t["results"][1:])
        pt = sorted(r["samples_per_s"] for r in rows[1:])
        med = lambda v: v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
        print(f"  samples/s  tutti {med(tt):.0f}  pytorch {med(pt):.0f}  ratio {med(tt) / med(pt):.2f}x")
        print(f"  final train loss  tutti {t['results'][-1]['train_loss']:.6f}  "
              f"pytorch {rows[-1]['train_loss']:.6f}")
        print(f"  tutti roofline share (vs device copy {t['copy_gbs']:.0f} GB/s): "
              f"{100 * sorted(r['roofline_share'] for r in t['results'][1:])[len(t['results'][1:]) // 2]:.1f}%")


if __name__ == "__main__":
    main()
