#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The PyTorch twin of tutti_bench_gpu_mf: the same matrix factorisation (logistic loss, L2 on
the touched rows, Adam), on the same data, from the same initial parameters, in the same batch
order, on the same GPU; and, with --device cpu, the PyTorch twin of tutti_bench_cpu_mf (and of
`tutti train` with the row-sparse optimizers) for benchmarks/peers/pypi_torch.sh. Prints
per-epoch loss and samples/s and, with --compare, the ratio table against tutti's JSON report.

    python3 benchmarks/peers/torch_mf.py DIR [--variant V] [--json out.json] [--compare tutti.json]

DIR is what `tutti_bench_gpu_mf --out DIR` or `tutti_bench_cpu_mf --out DIR` wrote (the latter's
one-rank batch order, order{e}_w1_r0.u64, is the same sampler's). --variant says how PyTorch runs:
 - eager:   nn.Parameter tables indexed per batch, torch.optim.Adam (its default; the same
            arithmetic as tutti's Adam, so the final losses agree);
 - fused:   the same with torch.optim.Adam(fused=True);
 - sparse:  F.embedding(sparse=True) + torch.optim.SparseAdam for the tables, Adam for the
            global bias (PyTorch's documented option for large tables; lazy, so its loss differs);
 - adagrad: F.embedding(sparse=True) + torch.optim.Adagrad (eps 1e-8, tutti's) for the tables,
            Adagrad for the global bias: the nearest stock twin of tutti's rowwise-adagrad, but
            element-wise (one accumulator per value where tutti keeps one per embedding row);
 - compile: eager's loss wrapped in torch.compile (where the installed PyTorch has it; otherwise
            the report says skipped and why);
 - compile-fused: compile's loss with Adam(fused=True).
A variant that needs a feature the installed PyTorch or machine lacks (fused Adam, compile) is
reported as skipped, with the error, in the printout and the JSON; it does not fail the run.
--device cpu runs the same on the CPU; --threads N sets torch's intra-op threads (default: its
own choice); --lr overrides meta.json's rate. The JSON records torch's threads (and its default)
and OMP_WAIT_POLICY.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

PEERS = {"eager": "", "fused": "-fused-adam", "sparse": "-sparse-adam",
         "adagrad": "-sparse-adagrad", "compile": "-compile",
         "compile-fused": "-compile-fused-adam"}
# Variants whose features the installed PyTorch or machine may lack: their errors are reported.
OPTIONAL = {"fused", "compile", "compile-fused"}
SPARSE = {"sparse", "adagrad"}


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--json")
    ap.add_argument("--compare")
    ap.add_argument("--fused", action="store_true", help="--variant fused")
    ap.add_argument("--variant", choices=list(PEERS), default="eager")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--threads", type=int, default=0,
                    help="torch.set_num_threads (default 0: PyTorch's own choice)")
    ap.add_argument("--lr", type=float, help="learning rate (default: meta.json's)")
    ap.add_argument("--eps", type=float, default=1e-8, help="--variant adagrad's eps (tutti's)")
    return ap.parse_args()


def load_inputs(d, dev):
    """meta.json, the data, the initial parameters and each epoch's batch order from DIR."""
    meta = json.load(open(os.path.join(d, "meta.json")))

    def tensor(name, dtype):
        return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=dtype))

    users = tensor("users.i32", np.int32).to(dev).long()
    items = tensor("items.i32", np.int32).to(dev).long()
    labels = tensor("labels.f32", np.float32).to(dev)
    init = np.fromfile(os.path.join(d, "init.f32"), dtype=np.float32)
    seg = {s["name"]: s for s in meta["segments"]}

    def param(name):
        s = seg[name]
        v = init[s["offset"]: s["offset"] + s["rows"] * s["cols"]].reshape(s["rows"], s["cols"])
        return torch.nn.Parameter(torch.from_numpy(v.copy()).to(dev))

    def order(e):  # gpu_mf's name, else cpu_mf's one-rank order (no padding with one rank)
        name = f"order{e}.u64"
        if not os.path.exists(os.path.join(d, name)):
            name = f"order{e}_w1_r0.u64"
        return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=np.uint64)
                                .astype(np.int64)).to(dev)

    params = {k: param(k) for k in ("user_embedding", "item_embedding", "user_bias",
                                    "item_bias", "global_bias")}
    return meta, (users, items, labels), params, [order(e) for e in range(meta["epochs"])]


def make_optimizers(variant, params, lr, eps):
    tables = [params[k] for k in ("user_embedding", "item_embedding", "user_bias", "item_bias")]
    g = params["global_bias"]
    if variant == "sparse":
        return [torch.optim.SparseAdam(tables, lr=lr), torch.optim.Adam([g], lr=lr)]
    if variant == "adagrad":
        return [torch.optim.Adagrad(tables + [g], lr=lr, eps=eps)]
    fused = {"fused": True} if variant in ("fused", "compile-fused") else {}
    return [torch.optim.Adam(tables + [g], lr=lr, **fused)]


def make_loss(variant, params, l2):
    P, Q = params["user_embedding"], params["item_embedding"]
    bu, bi, g = params["user_bias"], params["item_bias"], params["global_bias"]
    sparse = variant in SPARSE

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

    return torch.compile(losses) if variant.startswith("compile") else losses


def train(variant, meta, data, params, orders, lr, eps, dev):
    """Trains meta's epochs; returns one row per epoch."""
    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    users, items, labels = data
    opts = make_optimizers(variant, params, lr, eps)
    step_losses = make_loss(variant, params, meta["l2"])
    batch, n, sparse = meta["batch"], meta["rows"], variant in SPARSE
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
    return rows


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def print_rows(peer, name, meta, lr, rows):
    print(f"PyTorch {torch.__version__} ({peer}) on {name}: {meta['rows']} interactions, dim "
          f"{meta['dim']}, batch {meta['batch']}, lr {lr}, {torch.get_num_threads()} thread(s)")
    print(f"{'epoch':>6}  {'seconds':>10}  {'train loss':>12}  {'samples/s':>14}")
    for r in rows:
        print(f"{r['epoch']:>6}  {r['seconds']:>10.4f}  {r['train_loss']:>12.6f}  {r['samples_per_s']:>14.0f}"
              + ("  (warm-up)" if r["epoch"] == 1 else ""))


def compare(path, rows):
    t = json.load(open(path))
    print("\ntutti / PyTorch, epochs after the warm-up (median):")
    tt = median([r["samples_per_s"] for r in t["results"][1:]])
    pt = median([r["samples_per_s"] for r in rows[1:]])
    print(f"  samples/s  tutti {tt:.0f}  pytorch {pt:.0f}  ratio {tt / pt:.2f}x")
    print(f"  final train loss  tutti {t['results'][-1]['train_loss']:.6f}  "
          f"pytorch {rows[-1]['train_loss']:.6f}")
    if "copy_gbs" in t:
        print(f"  tutti roofline share (vs device copy {t['copy_gbs']:.0f} GB/s): "
              f"{100 * median([r['roofline_share'] for r in t['results'][1:]]):.1f}%")


def main():
    a = parse_args()
    variant = "fused" if a.fused else a.variant
    peer = "pytorch-eager" + PEERS[variant]
    default_threads = torch.get_num_threads()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    report = {"peer": peer, "variant": variant, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "torch_default_threads": default_threads,
              "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY")}
    dev = torch.device(a.device)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    meta, data, params, orders = load_inputs(a.dir, dev)
    lr = a.lr if a.lr is not None else meta["lr"]
    report.update({"gpu": name, "lr": lr, "dim": meta["dim"], "batch": meta["batch"]})
    why = None
    if variant.startswith("compile") and not hasattr(torch, "compile"):
        why = f"torch.compile is not in PyTorch {torch.__version__}"
    else:
        try:
            rows = train(variant, meta, data, params, orders, lr, a.eps, dev)
        except Exception as e:  # noqa: BLE001 -- reported, for the optional variants only
            if variant not in OPTIONAL:
                raise
            why = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    if why:
        print(f"skipped: {why}")
        report["skipped"] = why
    else:
        print_rows(peer, name, meta, lr, rows)
        report.update({"samples_per_s": median([r["samples_per_s"] for r in rows[1:]]),
                       "final_train_loss": rows[-1]["train_loss"], "results": rows})
    if a.json:
        json.dump(report, open(a.json, "w"), indent=2)
    if a.compare and not why:
        compare(a.compare, rows)


if __name__ == "__main__":
    main()
