#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch DistributedDataParallel (gloo backend, CPU) peer of
`mpiexec -n W tutti_bench_cpu_mf --reducer mpi`: the same matrix factorisation (logistic loss,
L2 on the touched rows weighted per sample, Adam), on the same data, from the same initial
parameters, each rank visiting the same slots in the same order as tutti's rank of that number.

    /usr/bin/python3 benchmarks/peers/ddp_mf.py DIR [--world 2] [--threads 1] [--json out.json]

DIR is what `tutti_bench_cpu_mf --out DIR --out-world W` wrote. Rank r takes local batch k from
its slots [k*B/W, (k+1)*B/W) and scales its loss by W / (real samples of the global step), so
DDP's mean over ranks is the gradient of the mean loss over the global batch, as in tutti's
trainer. Figures are rank 0's: an epoch's wall time covers its steps (the orders are read from
disk before), and the first epoch is reported as warm-up.
"""
import argparse
import json
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


class MF(torch.nn.Module):
    def __init__(self, init, meta):
        super().__init__()
        seg = {s["name"]: s for s in meta["segments"]}

        def param(name):
            s = seg[name]
            v = init[s["offset"]: s["offset"] + s["rows"] * s["cols"]].reshape(s["rows"], s["cols"])
            return torch.nn.Parameter(torch.from_numpy(v.copy()))

        self.P, self.Q = param("user_embedding"), param("item_embedding")
        self.bu, self.bi, self.g = param("user_bias"), param("item_bias"), param("global_bias")

    def forward(self, u, i):
        pu, qi, bu_u, bi_i = self.P[u], self.Q[i], self.bu[u, 0], self.bi[i, 0]
        s = self.g[0, 0] + bu_u + bi_i + (pu * qi).sum(1)
        reg = (pu * pu).sum(1) + (qi * qi).sum(1) + bu_u * bu_u + bi_i * bi_i
        return s, reg


def load(path, dtype):
    return torch.from_numpy(np.fromfile(path, dtype=dtype))


def rank_main(rank, a, port):
    torch.set_num_threads(a.threads)
    W = a.world
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=W)
    meta = json.load(open(os.path.join(a.dir, "meta.json")))
    users = load(os.path.join(a.dir, "users.i32"), np.int32).long()
    items = load(os.path.join(a.dir, "items.i32"), np.int32).long()
    labels = load(os.path.join(a.dir, "labels.f32"), np.float32)
    init = np.fromfile(os.path.join(a.dir, "init.f32"), dtype=np.float32)
    model = torch.nn.parallel.DistributedDataParallel(MF(init, meta))
    opt = torch.optim.Adam(model.parameters(), lr=meta["lr"])
    l2, batch, epochs = meta["l2"], meta["batch"], meta["epochs"]
    local = batch // W

    orders, weights, global_real = [], [], []
    for e in range(epochs):
        tag = lambda r: f"{e}_w{W}_r{r}"
        orders.append(torch.from_numpy(
            np.fromfile(os.path.join(a.dir, f"order{tag(rank)}.u64"), dtype=np.uint64).astype(np.int64)))
        ws = [np.fromfile(os.path.join(a.dir, f"weight{tag(r)}.f32"), dtype=np.float32) for r in range(W)]
        weights.append(torch.from_numpy(ws[rank]))
        slots = max(len(w) for w in ws)
        steps = (slots + local - 1) // local
        # Real samples of each global step, summed over every rank's slice of it.
        global_real.append([sum(float(w[k * local:(k + 1) * local].sum()) for w in ws) for k in range(steps)])

    rows = []
    for e in range(epochs):
        order, w_all, real = orders[e], weights[e], global_real[e]
        loss_sum = torch.zeros((), dtype=torch.float64)
        dist.barrier()
        t0 = time.perf_counter()
        for k, g_real in enumerate(real):
            idx = order[k * local:(k + 1) * local]
            w = w_all[k * local:(k + 1) * local]
            u, i, y = users[idx], items[idx], labels[idx]
            s, reg = model(u, i)
            data = F.binary_cross_entropy_with_logits(s, y, reduction="none")
            loss = ((data + l2 * reg) * w).sum() * (W / g_real)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
            loss_sum += (data.detach() * w).sum().double()
        secs = time.perf_counter() - t0
        dist.all_reduce(loss_sum)
        n_real = sum(real)
        rows.append({"epoch": e + 1, "seconds": secs, "train_loss": loss_sum.item() / n_real,
                     "samples_per_s": n_real / secs})

    if rank == 0:
        print(f"ddp_mf: PyTorch {torch.__version__} DDP (gloo), {W} processes x {torch.get_num_threads()} "
              f"thread(s), {meta['rows']} interactions, dim {meta['dim']}, global batch {batch}, "
              f"Adam lr {meta['lr']}")
        print(f"{'epoch':>6}  {'seconds':>10}  {'train loss':>12}  {'samples/s':>14}")
        for r in rows:
            print(f"{r['epoch']:>6}  {r['seconds']:>10.4f}  {r['train_loss']:>12.6f}  {r['samples_per_s']:>14.0f}"
                  + ("  (warm-up)" if r["epoch"] == 1 else ""))
        sps = sorted(r["samples_per_s"] for r in rows[1:])
        med = sps[len(sps) // 2] if len(sps) % 2 else 0.5 * (sps[len(sps) // 2 - 1] + sps[len(sps) // 2])
        print(f"median samples/s after the warm-up: {med:.0f}; final train loss {rows[-1]['train_loss']:.6f}")
        if a.json:
            json.dump({"peer": "pytorch-ddp-gloo", "torch": torch.__version__, "world": W,
                       "threads_per_rank": torch.get_num_threads(), "samples_per_s": med,
                       "final_train_loss": rows[-1]["train_loss"], "results": rows},
                      open(a.json, "w"), indent=2)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    ap.add_argument("--json")
    a = ap.parse_args()
    mp.spawn(rank_main, args=(a, free_port()), nprocs=a.world, join=True)


if __name__ == "__main__":
    main()
