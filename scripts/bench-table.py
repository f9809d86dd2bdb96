#!/usr/bin/env python3
"""Prints the Markdown tables of docs/PERFORMANCE.md from a qmm-kernel-bench JSON file.

usage: scripts/bench-table.py docs/bench-h200.json
One table per scheme: K, N, M, our time, TB/s, % of the copy ceiling, cuBLAS fp16's time
and the speedup, all from the graph-replay timing, plus the same graph with dependent
launch off ("serialized") and the single-launch time.
"""
import json
import sys


def main(path):
    with open(path) as f:
        run = json.load(f)
    rows = run["results"]
    schemes = []
    for r in rows:
        if r["scheme"] not in schemes:
            schemes.append(r["scheme"])
    for scheme in schemes:
        print(f"### {scheme}\n")
        print("| K | N | M | us | TB/s | % of copy | cuBLAS fp16 us | speedup | serialized us "
              "| single-launch us |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["scheme"] != scheme:
                continue
            print(f"| {r['k']} | {r['n']} | {r['m']} | {r['us']:.2f} | {r['tbps']:.2f} | "
                  f"{r['pct_of_copy']:.1f}% | {r['cublas_fp16_us']:.2f} | "
                  f"{r['speedup_vs_cublas_fp16']:.2f}x | {r['us_graph_serialized']:.2f} | "
                  f"{r['us_single_median']:.2f} |")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
