#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The gradient noise scale `tutti train` reports, against the large-batch study's limits.

For each model x dataset pair of docs/large-batch.md, trains the study's baseline cell (recipe
`same` at batch 256, the tuned Adam rate, 10 epochs, cosine) with `tutti train --ranks 2`, which
measures B_simple = tr(Sigma)/|G|^2 every 16th step, for seeds 1, 2, 3, and once more with
`--noise-scale-every 4` (seed 1). Reads the study's measured limits from
docs/data/large-batch.json and docs/data/large-batch-2048.json, and writes

  docs/img/noise-vs-study.json   every figure of the comparison, with the commands and commit
  docs/img/noise-vs-study.svg    B_simple (or its lower bound) over the epochs, per pair, on a
                                 log axis, with the study's limit marked

and prints the comparison table. Run from the repository root:

  OMP_WAIT_POLICY=passive /usr/bin/python3 benchmarks/noise_vs_study.py \
      [--tutti build/apps/tutti] [--insteval ../shared/datasets/insteval.tsv] [--seeds 3]

The runs are one at a time; on 2 cores the whole script takes about 80 s.
"""

import argparse
import datetime
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import tempfile

PAIRS = [  # model, dataset, tuned Adam base rate at batch 256 (docs/large-batch.md's tables)
    ("mf", "insteval", 0.001),
    ("mf", "synthetic", 0.01),
    ("ncf", "insteval", 0.0001),
    ("ncf", "synthetic", 0.01),
]
NAMES = {"mf": "MF", "ncf": "NCF", "insteval": "InstEval", "synthetic": "synthetic"}
TOLERANCE = 1.0  # percent, the study's --tolerance
LONG_DECAY = 0.998  # the prediction run's moving-average weight on the past (~1,000 measurements)


def train_command(tutti, insteval, model, dataset, lr, seed, every, json_path, decay=None):
    cmd = [tutti, "train", "--ranks", "2", "--batch", "256", "--model", model]
    # The study's model sizes: MF dim 32; NCF GMF dim 16 (tutti train's --dim) and layers 32,16.
    cmd += ["--dim", "32"] if model == "mf" else ["--dim", "16", "--layers", "32,16"]
    cmd += ["--l2", "0.03", "--lr", f"{lr:g}", "--schedule", "cosine", "--epochs", "10"]
    cmd += ["--reference-batch", "256", "--test-fraction", "0.1", "--seed", str(seed)]
    if dataset == "insteval":
        cmd += ["--data", insteval, "--user-col", "s", "--item-col", "d", "--label-col", "y"]
    else:
        cmd += ["--learners", "4000", "--courses", "500"]
    if every != 16:
        cmd += ["--noise-scale-every", str(every)]
    if decay is not None:
        cmd += ["--noise-scale-decay", f"{decay:g}"]
    cmd += ["--quiet", "--json", json_path]
    return cmd


def noise_value(n):
    """(value, is_lower_bound) of one noise_scale object, or (None, None) when unmeasured."""
    if n.get("b_simple") is not None:
        return n["b_simple"], False
    if n.get("b_simple_at_least"):
        return n["b_simple_at_least"], True
    return None, None


def run_one(args, model, dataset, lr, seed, every, tmp, decay=None):
    path = os.path.join(tmp, f"{model}-{dataset}-{seed}-{every}-{decay}.json")
    cmd = train_command(args.tutti, args.insteval, model, dataset, lr, seed, every, path, decay)
    shown = " ".join(shlex.quote(c) for c in cmd).replace(" --json " + shlex.quote(path), "")
    print("+", shown, file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(path) as f:
        j = json.load(f)
    epochs = []
    for e in j["epochs"]:
        v, lower = noise_value(e["noise_scale"])
        epochs.append({"epoch": e["epoch"], "b_simple": v, "lower_bound": lower,
                       "grad_sq": e["noise_scale"].get("grad_sq"),
                       "grad_sq_error": e["noise_scale"].get("grad_sq_error"),
                       "trace_sigma": e["noise_scale"].get("trace_sigma"),
                       "measurements": e["noise_scale"].get("measurements"),
                       "test": e["test"]})
    v, lower = noise_value(j["noise_scale"])
    return {"command": shown, "seed": seed, "every": every, "decay": decay or 0.95,
            "seconds": j["seconds"],
            "test": j["eval"], "end": {"b_simple": v, "lower_bound": lower,
                                       **{k: j["noise_scale"].get(k) for k in (
                                           "grad_sq", "grad_sq_error", "trace_sigma",
                                           "measurements", "small_batch", "big_batch")}},
            "epochs": epochs}


def pooled(runs):
    """B_simple from the seeds' end-of-run estimates, pooled: the mean of |G|^2 and tr(Sigma)
    over the seeds (independent runs), |G|^2's standard error from each run's own,
    sqrt(sum se^2) / n; resolved, as in the tracker, when |G|^2 > 2 standard errors."""
    ends = [r["end"] for r in runs]
    n = len(ends)
    gm = statistics.fmean(e["grad_sq"] for e in ends)
    tm = statistics.fmean(e["trace_sigma"] for e in ends)
    se = math.sqrt(sum(e["grad_sq_error"] ** 2 for e in ends)) / n
    out = {"runs": n, "grad_sq": gm, "grad_sq_error": se, "trace_sigma": tm}
    if gm > 2 * se:
        out.update(b_simple=tm / gm, lower_bound=False)
    else:
        out.update(b_simple=tm / (max(gm, 0.0) + 2 * se), lower_bound=True)
    return out


def study_limits(model, dataset, studies):
    """The study's cells of one pair (both reports), the largest batch within TOLERANCE of the
    baseline (any recipe, and Adam recipes only), the smallest batch above it that misses, and
    the fewest epochs to within 1% per batch (Adam recipes; the epochs-to-target curve)."""
    cells = {}
    for s in studies:
        for c in s["cells"]:
            if c["model"] == model and c["dataset"] == dataset:
                cells[(c["batch"], c["recipe"])] = c
    batches = sorted({b for b, _ in cells})
    out = {"batches": batches, "per_batch": []}
    for b in batches:
        row = [c for (bb, _), c in cells.items() if bb == b]
        best = min(row, key=lambda c: c["gap_percent"])
        adam = [c for c in row if c["optimizer"] == "adam"]
        best_adam = min(adam, key=lambda c: c["gap_percent"])
        reached = [c["epochs_to_tolerance"] for c in adam if c["epochs_to_tolerance"] is not None]
        out["per_batch"].append({
            "batch": b, "steps_per_epoch": best["steps_per_epoch"],
            "best_recipe": best["recipe"], "best_gap_percent": best["gap_percent"],
            "best_adam_recipe": best_adam["recipe"],
            "best_adam_gap_percent": best_adam["gap_percent"],
            "adam_epochs_to_tolerance": min(reached) if reached else None})

    def limit(key):
        held = [p["batch"] for p in out["per_batch"] if p[key] <= TOLERANCE]
        hold = max(held) if held else None
        missed = [p["batch"] for p in out["per_batch"] if hold is not None and p["batch"] > hold]
        return {"holds_at": hold, "misses_at": min(missed) if missed else None,
                "at_least": bool(hold is not None and not missed)}

    out["limit"] = limit("best_gap_percent")
    out["limit_adam"] = limit("best_adam_gap_percent")
    return out


def fmt(v, lower=False):
    return ("≥" if lower else "") + f"{v:,.0f}"


def svg_chart(results, path):
    """2 x 2 panels: B_simple (filled) or its lower bound (open, pointing up) after every epoch,
    one thin line per seed and a thick one for the seed mean, a dashed one for
    --noise-scale-every 4; the study's limit as a band (holds at .. misses at) or a line with
    an arrow (holds at the largest batch studied)."""
    pw, ph, ml, mt, mr, mb = 440, 270, 62, 46, 16, 40
    W, H = 2 * pw, 2 * ph + 80
    ylo, yhi = 64, 65536
    seed_colors = ["#9ecae1", "#6baed6", "#3182bd", "#08519c"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="#ffffff"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">Gradient noise scale '
           'B_simple at batch 256 (tutti train --ranks 2) against the large-batch study\'s limit'
           '</text>']
    for i, r in enumerate(results):
        ox, oy = (i % 2) * pw, 30 + (i // 2) * ph
        x0, x1, y0, y1 = ox + ml, ox + pw - mr, oy + mt, oy + ph - mb

        def px(e):
            return x0 + (e - 1) / 9 * (x1 - x0)

        def py(v):
            v = min(max(v, ylo), yhi)
            return y1 - (math.log2(v) - math.log2(ylo)) / (math.log2(yhi) - math.log2(ylo)) * (y1 - y0)

        out.append(f'<g data-pair="{r["model"]}/{r["dataset"]}">')
        out.append(f'<text x="{(x0 + x1) / 2}" y="{oy + 30}" text-anchor="middle" '
                   f'font-size="13">{NAMES[r["model"]]} on {NAMES[r["dataset"]]} '
                   f'(Adam {r["lr"]:g})</text>')
        out.append(f'<rect x="{x0}" y="{y0}" width="{x1 - x0}" height="{y1 - y0}" '
                   'fill="none" stroke="#999"/>')
        for k in range(6, 17, 2):
            v = 2 ** k
            out.append(f'<line x1="{x0}" x2="{x1}" y1="{py(v):.1f}" y2="{py(v):.1f}" '
                       'stroke="#eee"/>')
            out.append(f'<text x="{x0 - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{v}</text>')
        for e in range(1, 11):
            out.append(f'<text x="{px(e):.1f}" y="{y1 + 14}" text-anchor="middle">{e}</text>')
        out.append(f'<text x="{(x0 + x1) / 2}" y="{y1 + 30}" text-anchor="middle">epoch</text>')
        out.append(f'<text transform="translate({ox + 14},{(y0 + y1) / 2}) rotate(-90)" '
                   'text-anchor="middle">B_simple (samples)</text>')
        # The study's limit.
        lim = r["study"]["limit"]
        hold, miss = lim["holds_at"], lim["misses_at"]
        if miss is not None:
            out.append(f'<rect x="{x0}" y="{py(miss):.1f}" width="{x1 - x0}" '
                       f'height="{py(hold) - py(miss):.1f}" fill="#59a14f" fill-opacity="0.15"/>')
            label = f'study: holds at {hold}, misses at {miss}'
        else:
            label = f'study: holds at {hold}, the largest batch studied'
            xa = x1 - 14
            out.append(f'<path d="M{xa},{py(hold) - 4:.1f} L{xa},{py(hold) - 26:.1f} '
                       f'M{xa - 4},{py(hold) - 20:.1f} L{xa},{py(hold) - 26:.1f} '
                       f'L{xa + 4},{py(hold) - 20:.1f}" stroke="#3a7d34" fill="none"/>')
        out.append(f'<line x1="{x0}" x2="{x1}" y1="{py(hold):.1f}" y2="{py(hold):.1f}" '
                   'stroke="#3a7d34" stroke-width="1.5"/>')
        out.append(f'<text x="{x0 + 4}" y="{py(hold) - 4:.1f}" fill="#3a7d34">{label}</text>')
        la = r["study"]["limit_adam"]
        if la["holds_at"] != hold:
            out.append(f'<line x1="{x0}" x2="{x1}" y1="{py(la["holds_at"]):.1f}" '
                       f'y2="{py(la["holds_at"]):.1f}" stroke="#3a7d34" stroke-dasharray="6,3"/>')
            # Labelled under the main line, clear of the data below.
            out.append(f'<text x="{x0 + 4}" y="{py(hold) + 13:.1f}" fill="#3a7d34">'
                       f'dashed: Adam recipes hold at {la["holds_at"]}, miss at '
                       f'{la["misses_at"]}</text>')
        # The batch trained.
        out.append(f'<line x1="{x0}" x2="{x1}" y1="{py(256):.1f}" y2="{py(256):.1f}" '
                   'stroke="#888" stroke-dasharray="2,3"/>')
        out.append(f'<text x="{x1 - 4}" y="{py(256) + 13:.1f}" text-anchor="end" '
                   'fill="#666">batch trained, 256</text>')

        def series(epochs, color, width, dash, name):
            pts = [(e["epoch"], e["b_simple"], e["lower_bound"]) for e in epochs
                   if e["b_simple"] is not None]
            d = " ".join(f"{px(e):.1f},{py(v):.1f}" for e, v, _ in pts)
            data = ",".join(f'{e}:{"&gt;" if lo else ""}{v:.0f}' for e, v, lo in pts)
            s = [f'<g data-series="{name}" data-points="{data}">',
                 f'<polyline points="{d}" fill="none" stroke="{color}" stroke-width="{width}"'
                 + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"]
            for e, v, lo in pts:
                x, y = px(e), py(v)
                if lo:  # a lower bound: an open triangle pointing up
                    s.append(f'<path d="M{x:.1f},{y - 4:.1f} L{x - 3.5:.1f},{y + 2.5:.1f} '
                             f'L{x + 3.5:.1f},{y + 2.5:.1f} Z" fill="#fff" stroke="{color}"/>')
                else:
                    s.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}"/>')
            s.append("</g>")
            return s

        for k, run in enumerate(r["runs"]):
            out += series(run["epochs"], seed_colors[k % 3], 1, None,
                          f'{r["model"]}/{r["dataset"]}/seed{run["seed"]}')
        out += series(r["mean_epochs"], "#08306b", 2.5, None,
                      f'{r["model"]}/{r["dataset"]}/mean')
        if r.get("every4"):
            out += series(r["every4"]["epochs"], "#e15759", 1.2, "5,3",
                          f'{r["model"]}/{r["dataset"]}/every4-seed1')
        if r.get("long"):
            out += series(r["long"]["epochs"], "#f28e2b", 2, "2,2",
                          f'{r["model"]}/{r["dataset"]}/long-seed1')
        out.append("</g>")
    # Legend, two rows.
    ly = H - 36
    items = [("#6baed6", 1, None, "seeds 1, 2, 3"), ("#08306b", 2.5, None, "seed mean"),
             ("#e15759", 1.2, "5,3", "every 4, seed 1"),
             ("#f28e2b", 2, "2,2", "every step, decay 0.998"),
             ("#3a7d34", 1.5, None, "study: largest within 1%"),
             ("#3a7d34", 1, "6,3", "Adam recipes only")]
    x = 40
    for color, w, dash, text in items:
        out.append(f'<line x1="{x}" x2="{x + 26}" y1="{ly}" y2="{ly}" stroke="{color}" '
                   f'stroke-width="{w}"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        out.append(f'<text x="{x + 32}" y="{ly + 4}">{text}</text>')
        x = round(x + 44 + 5.8 * len(text))
    ly, x = H - 16, 40
    out.append(f'<path d="M{x + 13},{ly - 4} L{x + 9.5},{ly + 2.5} L{x + 16.5},{ly + 2.5} Z" '
               'fill="#fff" stroke="#08306b"/>')
    out.append(f'<text x="{x + 32}" y="{ly + 4}">lower bound: |G|² not resolved, B_simple is at '
               'least this</text>')
    x += 360
    out.append(f'<circle cx="{x + 13}" cy="{ly}" r="3" fill="#08306b"/>')
    out.append(f'<text x="{x + 32}" y="{ly + 4}">B_simple resolved</text>')
    x += 150
    out.append(f'<rect x="{x + 3}" y="{ly - 6}" width="20" height="12" fill="#59a14f" '
               'fill-opacity="0.15"/>')
    out.append(f'<text x="{x + 32}" y="{ly + 4}">holds .. misses (study)</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def mean_epochs(runs):
    """The seed mean after every epoch; a lower bound if any seed's is one."""
    out = []
    for k in range(len(runs[0]["epochs"])):
        es = [r["epochs"][k] for r in runs]
        if any(e["b_simple"] is None for e in es):
            out.append({"epoch": k + 1, "b_simple": None, "lower_bound": None})
            continue
        out.append({"epoch": k + 1, "b_simple": statistics.fmean(e["b_simple"] for e in es),
                    "lower_bound": any(e["lower_bound"] for e in es)})
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tutti", default="build/apps/tutti")
    ap.add_argument("--insteval", default="../shared/datasets/insteval.tsv")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default="docs/img/noise-vs-study")
    a = ap.parse_args()
    studies = [json.load(open(p)) for p in
               ("docs/data/large-batch.json", "docs/data/large-batch-2048.json")]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, dataset, lr in PAIRS:
            runs = [run_one(a, model, dataset, lr, s, 16, tmp) for s in range(1, a.seeds + 1)]
            every4 = run_one(a, model, dataset, lr, 1, 4, tmp)
            # The prediction: one run that measures every step and averages ~1,000 of them.
            long = run_one(a, model, dataset, lr, 1, 1, tmp, LONG_DECAY)
            results.append({"model": model, "dataset": dataset, "lr": lr, "runs": runs,
                            "every4": every4, "long": long, "mean_epochs": mean_epochs(runs),
                            "pooled_end": pooled(runs),
                            "study": study_limits(model, dataset, studies)})
    for r in results:
        ends = [x["end"] for x in r["runs"]]
        lower = any(e["lower_bound"] for e in ends)
        m = statistics.fmean(e["b_simple"] for e in ends)
        r["end_mean"] = {"b_simple": m, "lower_bound": lower}
        e1 = [x["epochs"][0] for x in r["runs"]]
        r["epoch1_mean"] = {"b_simple": statistics.fmean(e["b_simple"] for e in e1),
                            "lower_bound": any(e["lower_bound"] for e in e1)}
        # The prediction is the one long-average run's end; against the largest batch that
        # holds; the study brackets the limit between it and the smallest that misses, or
        # (holding at the largest batch studied) only bounds it.
        m, lower = r["long"]["end"]["b_simple"], r["long"]["end"]["lower_bound"]
        lim = r["study"]["limit"]
        hold, miss = lim["holds_at"], lim["misses_at"]
        # A bound against a bound constrains no ratio.
        r["ratio"] = None if lower and lim["at_least"] else m / hold
        r["ratio_text"] = ("none (bound against bound)" if r["ratio"] is None else
                           ("≥" if lower else "") + f"{m / hold:.2g}")
        if lower and lim["at_least"]:
            r["verdict"] = "consistent, not a test (a lower bound against a lower bound)"
        elif lower:
            r["verdict"] = ("consistent, not decisive" if m <= 2 * miss else
                            "off by more than 2x") + f" (a lower bound against {hold}..{miss})"
        elif lim["at_least"]:
            r["verdict"] = ("consistent" if 2 * m >= hold else "off by more than 2x") + \
                " (a value against a lower bound)"
        else:
            r["verdict"] = "within 2x" if hold / 2 <= m <= 2 * miss else "off by more than 2x"
    report = {
        "what": "gradient noise scale B_simple from tutti train --ranks 2 at the study's "
                "baseline cell, against the batch limits of docs/data/large-batch*.json",
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "script": "OMP_WAIT_POLICY=passive /usr/bin/python3 benchmarks/noise_vs_study.py "
                  f"--tutti {a.tutti} --insteval {a.insteval} --seeds {a.seeds}",
        "tolerance_percent": TOLERANCE,
        "pairs": results,
    }
    with open(a.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    svg_chart(results, a.out + ".svg")
    print(f"commit {commit}, {report['date']}")
    print("| pair | B_simple at end, mean (seeds) | after epoch 1 | every 4 (seed 1) | seeds "
          "pooled | one run, every step, decay 0.998 | study limit (any / Adam) | ratio | verdict |")
    for r in results:
        ends = [x["end"] for x in r["runs"]]
        seeds = ", ".join(fmt(e["b_simple"], e["lower_bound"]) for e in ends)
        lim, la = r["study"]["limit"], r["study"]["limit_adam"]
        lims = ("≥" if lim["at_least"] else "") + f"{lim['holds_at']}"
        lims += "" if lim["at_least"] else f" (misses {lim['misses_at']})"
        lims += f" / {la['holds_at']}" + ("" if la["at_least"] else f" (misses {la['misses_at']})")
        e4, p, lg = r["every4"]["end"], r["pooled_end"], r["long"]["end"]
        print(f"| {NAMES[r['model']]}-{NAMES[r['dataset']]} | "
              f"{fmt(r['end_mean']['b_simple'], r['end_mean']['lower_bound'])} ({seeds}) | "
              f"{fmt(r['epoch1_mean']['b_simple'], r['epoch1_mean']['lower_bound'])} | "
              f"{fmt(e4['b_simple'], e4['lower_bound'])} | {fmt(p['b_simple'], p['lower_bound'])} | "
              f"{fmt(lg['b_simple'], lg['lower_bound'])} | "
              f"{lims} | {r['ratio_text']} | {r['verdict']} |")
        curve = ", ".join(f"{q['batch']}:{q['adam_epochs_to_tolerance']}"
                          for q in r["study"]["per_batch"])
        print(f"    epochs to within 1% (best Adam recipe) by batch: {curve}")


if __name__ == "__main__":
    main()
