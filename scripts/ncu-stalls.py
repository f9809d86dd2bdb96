#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's per-instruction samples.

usage: scripts/ncu-stalls.py SOURCE.csv [--hot PERCENT]
SOURCE.csv: `ncu --import RUN.ncu-rep --page source --print-source sass --csv` of a report
taken with `--section SourceCounters` (and WarpStateStats). For each kernel in it: the
stall reasons' shares of all warp samples, the opcodes that collect the most samples (with
their share of the executed instructions and their main reasons), and every instruction
holding at least --hot percent of the samples (default 1), with its index in the listing,
executed count and SASS. On the H200 the first use of a register that a global load fills
shows as long_sb; a barrier's waiters as `barrier` on the branch after it.
"""
import argparse
import csv
import re
from collections import Counter

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def kernels(path):
    """Yields (kernel name, header, rows) for each kernel's block of the listing."""
    name, header, rows = None, None, []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                if header:
                    yield name, header, rows
                name, header, rows = row[1] if len(row) > 1 else "?", None, []
            elif header is None and SAMPLES in row:
                header = row
            elif header is not None and len(row) == len(header):
                rows.append(row)
    if header:
        yield name, header, rows


def opcode(sass):
    text = re.sub(r"^@!?U?P\w+\s+", "", sass.strip())  # the predicate guard
    return text.split(" ")[0].split(".")[0]


def number(cell):
    try:
        return int(cell)
    except ValueError:
        return 0


def report(name, header, rows, hot):
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(number(r[col[SAMPLES]]) for r in rows) or 1
    executed = sum(number(r[col[EXECUTED]]) for r in rows) or 1
    by_reason = Counter()
    by_op, op_executed, op_reasons = Counter(), Counter(), {}
    for r in rows:
        op = opcode(r[col["Source"]])
        by_op[op] += number(r[col[SAMPLES]])
        op_executed[op] += number(r[col[EXECUTED]])
        for h in reasons:
            v = number(r[col[h]])
            by_reason[h] += v
            op_reasons.setdefault(op, Counter())[h] += v
    reason_total = sum(by_reason.values()) or 1
    print(f"== {name}")
    print(f"   {total} warp samples, {executed} instructions executed (warp level)")
    print("   reasons: " + ", ".join(f"{h[6:]} {v / reason_total * 100:.1f}%"
                                      for h, v in by_reason.most_common(8)))
    print("   opcode      samples  executed  main reasons (points of all samples)")
    for op, v in by_op.most_common(12):
        main = ", ".join(f"{h[6:]} {c / total * 100:.1f}" for h, c in op_reasons[op].most_common(3))
        print(f"   {op:10s} {v / total * 100:7.1f}% {op_executed[op] / executed * 100:8.1f}%  {main}")
    print(f"   instructions with at least {hot}% of the samples:")
    for i, r in enumerate(rows):
        v = number(r[col[SAMPLES]])
        if v * 100 >= hot * total:
            top = max(reasons, key=lambda h: number(r[col[h]]))
            print(f"   {i:6d} x{number(r[col[EXECUTED]]):9d} {v / total * 100:5.1f}% {top[6:]:14s} "
                  f"{r[col['Source']].strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--hot", type=float, default=1.0)
    args = parser.parse_args()
    for name, header, rows in kernels(args.csv):
        report(name, header, rows, args.hot)


if __name__ == "__main__":
    main()
