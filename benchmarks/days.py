#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Every day's new data, measured: warm starts day after day against a full retrain.

A log is read as positives, its rows shuffled with a fixed seed and numbered as timestamps, then
cut into a first history (--first of the rows) and --days equal days. Day 0 trains from scratch
and exports. Each day d after it, on the rows up to d (each learner's latest held out by
`--holdout last`, ranked among sampled courses):

  retrain  tutti train --data <days 0..d joined> (tutti's defaults for a log) [--export, with
           --retrain-export: the model written as the warm run writes its own]
  warm     tutti train --data <days 0..d-1> <day d> --replay-share R --init-from <day d-1's
           warm export> --epochs E --export <day d's>

and prints HR@10, NDCG@10 and the seconds of each (the command's wall time and the training time
it reports), the warm start's gap to the retrain, and writes all of it as JSON. With
--retrain-seeds K each day's retrain runs K times (training seeds seed, seed + 1, ...; the same
days, held-out rows and lists: --split-seed): the gap is to the first, and the retrains' own spread (the lowest and highest of the K
against the first) says how far two full retrains of the same data lie apart.

    python3 benchmarks/days.py --tutti build/apps/tutti --data ../shared/datasets/insteval.tsv \\
        --user-col s --item-col d --out /tmp/days
"""
import argparse
import json
import os
import random
import subprocess
import time


def write_days(a):
    with open(a.data) as f:
        header = f.readline().rstrip("\n").split("\t")
        rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
    u, i = header.index(a.user_col), header.index(a.item_col)
    random.Random(a.seed).shuffle(rows)
    first = int(len(rows) * a.first)
    per_day = (len(rows) - first) // a.days
    cuts = [0, first] + [first + per_day * d for d in range(1, a.days)] + [len(rows)]
    paths = []
    for d in range(len(cuts) - 1):
        path = os.path.join(a.out, f"day{d}.tsv")
        with open(path, "w") as f:
            f.write("u\ti\tts\n")
            for k in range(cuts[d], cuts[d + 1]):
                f.write(f"{rows[k][u]}\t{rows[k][i]}\t{k}\n")
        paths.append(path)
    return paths


def joined(paths, out):
    with open(out, "w") as f:
        f.write("u\ti\tts\n")
        for p in paths:
            with open(p) as g:
                g.readline()
                f.write(g.read())
    return out


def train(a, data, extra, name, seed=None):
    report = os.path.join(a.out, name + ".json")
    cmd = [a.tutti, "train", "--data", *data, "--user-col", "u", "--item-col", "i",
           "--timestamp-col", "ts", "--feedback", "implicit", "--holdout", "last",
           "--seed", str(a.seed if seed is None else seed), "--split-seed", str(a.seed),
           "--quiet", "--json", report, *extra]
    start = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - start
    with open(report) as f:
        r = json.load(f)
    return {"hr10": r["ranking"]["hit_rate"], "ndcg10": r["ranking"]["ndcg"],
            "wall_s": wall, "train_s": r["seconds"],
            "rows": r["dataset"]["rows_used"], "replay": r["dataset"].get("replay")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tutti", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--user-col", required=True)
    ap.add_argument("--item-col", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--days", type=int, default=10)
    ap.add_argument("--first", type=float, default=0.5, help="share of the rows in day 0")
    ap.add_argument("--replay", type=float, default=0.2, help="--replay-share of the warm runs")
    ap.add_argument("--warm-epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--warm-args", default="",
                    help="more options of the warm runs, e.g. \"--lr 0.01\"")
    ap.add_argument("--retrain-export", action="store_true",
                    help="the retrain writes its model too (--export), as a daily job would")
    ap.add_argument("--retrain-seeds", type=int, default=1,
                    help="retrains a day, each with its own training seed: their spread")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    paths = write_days(a)
    load = [os.getloadavg()[0]]
    model = os.path.join(a.out, "model-0")
    subprocess.run(["rm", "-rf", model], check=True)
    day0 = train(a, [paths[0]], ["--export", model], "day0")
    out = {"data": a.data, "days": a.days, "first": a.first, "replay_share": a.replay,
           "warm_epochs": a.warm_epochs, "warm_args": a.warm_args,
           "retrain_export": a.retrain_export, "seed": a.seed, "retrain_seeds": a.retrain_seeds,
           "day0": day0, "rows": []}
    print(f"day 0: {day0['rows']} rows, HR@10 {day0['hr10']:.4f}, NDCG@10 {day0['ndcg10']:.4f}")
    print(f"{'day':>3} {'rows':>7} {'retrain HR':>10} {'warm HR':>8} {'gap':>7} "
          f"{'retrain NDCG':>12} {'warm NDCG':>9} {'gap':>7} {'retrain s':>9} {'warm s':>7} "
          f"{'time':>6}" + ("  retrains' spread HR, NDCG" if a.retrain_seeds > 1 else ""))
    for d in range(1, len(paths)):
        upto = joined(paths[: d + 1], os.path.join(a.out, f"upto{d}.tsv"))
        kept = os.path.join(a.out, f"retrained-{d}")
        subprocess.run(["rm", "-rf", kept], check=True)
        full = train(a, [upto], ["--export", kept] if a.retrain_export else [], f"retrain{d}")
        others = [train(a, [upto], [], f"retrain{d}-seed{a.seed + k}", a.seed + k)
                  for k in range(1, a.retrain_seeds)]
        nxt = os.path.join(a.out, f"model-{d}")
        subprocess.run(["rm", "-rf", nxt], check=True)
        history = joined(paths[:d], os.path.join(a.out, f"history{d}.tsv"))
        warm = train(a, [history, paths[d]],
                     ["--replay-share", str(a.replay), "--init-from", model,
                      "--epochs", str(a.warm_epochs), "--export", nxt, *a.warm_args.split()],
                     f"warm{d}")
        model = nxt
        load.append(os.getloadavg()[0])
        row = {"day": d, "retrain": full, "warm": warm,
               "hr_gap": warm["hr10"] / full["hr10"] - 1,
               "ndcg_gap": warm["ndcg10"] / full["ndcg10"] - 1,
               "time_ratio": warm["wall_s"] / full["wall_s"]}
        spread = ""
        if others:
            row["retrains"] = others
            for key, name in (("hr10", "hr"), ("ndcg10", "ndcg")):
                gaps = [0.0] + [o[key] / full[key] - 1 for o in others]
                row[name + "_spread"] = [min(gaps), max(gaps)]
            spread = "  " + ", ".join(f"{100 * row[n + '_spread'][0]:+.2f}..{100 * row[n + '_spread'][1]:+.2f}%"
                                      for n in ("hr", "ndcg"))
        out["rows"].append(row)
        print(f"{d:>3} {full['rows']:>7} {full['hr10']:>10.4f} {warm['hr10']:>8.4f} "
              f"{100 * row['hr_gap']:>+6.2f}% {full['ndcg10']:>12.4f} {warm['ndcg10']:>9.4f} "
              f"{100 * row['ndcg_gap']:>+6.2f}% {full['wall_s']:>9.2f} {warm['wall_s']:>7.2f} "
              f"{100 * row['time_ratio']:>5.0f}%" + spread)
    out["load_average"] = {"min": min(load), "max": max(load)}
    with open(os.path.join(a.out, "days.json"), "w") as f:
        json.dump(out, f, indent=1)
    print(f"load average {min(load):.2f}-{max(load):.2f}; JSON: {os.path.join(a.out, 'days.json')}")


if __name__ == "__main__":
    main()
