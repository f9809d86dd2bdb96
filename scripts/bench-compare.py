#!/usr/bin/env python3
"""Compares qmm-kernel-bench runs of several variants side by side (an A/B in one call).

usage: scripts/bench-compare.py RUN.json... | DIR
A variant is a file's name without its round suffix: base-r1.json and base-r2.json are two
rounds of "base". Prints, for each (scheme, K, N, M), the median headline time (us, graph
timing) of each variant over its rounds, and each variant's change against the first one
(the files' variants in name order; name the baseline so that it sorts first, or pass it
first). Rounds that disagree by more than 3% are flagged with '~'.
"""
import glob
import json
import os
import re
import statistics
import sys


def variant_of(path):
    name = os.path.basename(path)
    name = re.sub(r"\.json$", "", name)
    return re.sub(r"-r\d+$", "", name)


def main(args):
    if not args:
        sys.exit(__doc__)
    paths = []
    for a in args:
        paths += sorted(glob.glob(os.path.join(a, "*.json"))) if os.path.isdir(a) else [a]
    variants = []
    times = {}  # (scheme, k, n, m) -> variant -> [us]
    for path in paths:
        v = variant_of(path)
        if v not in variants:
            variants.append(v)
        with open(path) as f:
            run = json.load(f)
        for r in run["results"]:
            key = (r["scheme"], r["k"], r["n"], r["m"])
            times.setdefault(key, {}).setdefault(v, []).append(r["us"])
    print("| scheme | K | N | M | " + " | ".join(variants) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(variants))
    for key in sorted(times, key=lambda k: (k[0], k[1], k[2], k[3])):
        cells = []
        base = None
        for v in variants:
            runs = times[key].get(v)
            if not runs:
                cells.append("-")
                continue
            med = statistics.median(runs)
            spread = "~" if max(runs) > min(runs) * 1.03 else ""
            if base is None:
                base = med
                cells.append(f"{med:.2f}{spread}")
            else:
                cells.append(f"{med:.2f}{spread} ({(med / base - 1) * 100:+.1f}%)")
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
