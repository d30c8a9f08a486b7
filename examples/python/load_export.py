#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Loads a model written by `tutti train --export DIR` with NumPy alone and prints a learner's
top-k unseen courses, as `tutti recommend --model DIR --user ID --k K` does.

    python3 examples/python/load_export.py DIR --user 17 [--k 10] [--json out.json]

When the data's ids are names (`u1`, course slugs, UUIDs), DIR also holds user_names.npy and
item_names.npy (NumPy byte strings, UTF-8): --user takes the learner's name, and the courses are
listed by name.

The arrays are plain .npy files (see DIR/model.json and docs/data.md); in PyTorch,
`torch.from_numpy(np.load(DIR + "/item_factors.npy"))` gives the item table as a tensor.
"""
import argparse
import json
import pathlib
import sys

import numpy as np


def load(directory):
    """model.json and every array it lists, checked against the dtype and shape it records."""
    directory = pathlib.Path(directory)
    model = json.loads((directory / "model.json").read_text())
    if model.get("format") != "tutti-export" or model.get("model") != "mf":
        sys.exit(f"{directory}/model.json: not a tutti export of a matrix factorisation")
    arrays = {}
    for name, f in model["files"].items():
        a = np.load(directory / f["file"])
        if a.dtype != np.dtype(f["dtype"]) or list(a.shape) != f["shape"]:
            sys.exit(f"{directory}/{f['file']}: {a.dtype} {a.shape}; model.json says "
                     f"{f['dtype']} {tuple(f['shape'])}")
        arrays[name] = a
    return model, arrays


def names(a, axis):
    """The ids of `axis` ("user" or "item") as the data spell them: names, or integers."""
    if axis + "_names" in a:
        return [n.decode("utf-8") for n in a[axis + "_names"]]
    return [int(i) for i in a[axis + "_ids"]]


def top_k(model, a, user, k):
    """[(item id, score, raw)] of the k best unseen items; ties in ascending item code."""
    users = names(a, "user")
    key = user if "user_names" in a else int(user)
    if key not in users:
        sys.exit(f"learner id {user} is not in the model")
    u = users.index(key)
    # float32 throughout, in the order tutti adds: ((g + b_u) + b_i) + <p_u, q_i>.
    s = (a["global_bias"] + a["user_bias"][u]) + a["item_bias"] + a["item_factors"] @ a[
        "user_factors"][u]
    seen = a["seen_items"][a["seen_offsets"][u]:a["seen_offsets"][u + 1]]
    candidates = np.setdiff1d(np.arange(s.size), seen)
    order = np.lexsort((a["item_ids"][candidates], -s[candidates]))[:k]
    best = candidates[order]
    raw = s[best].astype(np.float64)
    score = 1.0 / (1.0 + np.exp(-raw)) if model["output"] == "sigmoid" else raw
    items = names(a, "item")
    return [(items[i], float(v), float(r)) for i, v, r in zip(best, score, raw)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="directory written by tutti train --export")
    parser.add_argument("--user", required=True, help="the learner's id, as the data spell it")
    parser.add_argument("--k", type=int, default=10, help="courses to list")
    parser.add_argument("--json", help="also write the list, in tutti recommend's layout")
    args = parser.parse_args()
    model, arrays = load(args.dir)
    best = top_k(model, arrays, args.user, args.k)
    for rank, (item, score, _) in enumerate(best, 1):
        print(f"{args.user:>12}  {rank:5d}  {item!s:>12}  {score:12.6f}")
    if args.json:
        items = [{"item": i, "score": v, "raw": r} for i, v, r in best]
        user = args.user if "user_names" in arrays else int(args.user)
        out = {"model": args.dir, "k": args.k, "output": model["output"],
               "users": [{"user": user, "items": items}]}
        pathlib.Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
