#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a platform-like log of positives for the setup and memory benchmarks: `user<TAB>item`
rows, learners drawn uniformly from `--learners` ids, courses skewed to the popular ones
(course = floor(courses * u^2.5)), no timestamps. The default is the 20 M-row file of
docs/training.md's setup figures (253 MB, 8.65 M distinct learners, 20,000 courses).

    python3 benchmarks/make_log.py --rows 20000000 --learners 10000000 --courses 20000 log.tsv
"""
import argparse
import random


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--learners", type=int, default=10_000_000)
    ap.add_argument("--courses", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    with open(a.out, "w", buffering=1 << 22) as f:
        f.write("user\titem\n")
        block = []
        for _ in range(a.rows):
            block.append(f"{rng.randrange(a.learners)}\t{int(a.courses * rng.random() ** 2.5)}\n")
            if len(block) == 65536:
                f.write("".join(block))
                block.clear()
        f.write("".join(block))


if __name__ == "__main__":
    main()
