#!/usr/bin/env python3
"""Prints the loops of sm_90a kernels in a cubin: each backward branch's span, its
instruction count and the mnemonics in it, most frequent first.

usage: scripts/sass-loops.py FILE.cubin [KERNEL-NAME-PART] [MIN-INSTRUCTIONS]
e.g.   nvcc -O3 -DNDEBUG -cubin -arch=sm_90a -std=c++20 --expt-relaxed-constexpr -I. \\
         -o w4a16.cubin kernels/cuda/w4a16.cu
       scripts/sass-loops.py w4a16.cubin GemmKernel 100

Where a kernel is bound by the instructions it issues (the wgmma GEMM at 64 tokens:
docs/performance-log.md), the count of its main loop predicts a change before the GPU runs
it: session 22's descriptor change took the one-group loop from 231 to 194 instructions
here, as cuobjdump on the GPU machine showed. Loops of fewer than MIN-INSTRUCTIONS
(default 20) are left out; the mnemonics come from cubin.py, unknown opcodes as hex.
"""
import collections
import sys

import cubin


def main(path, part, least):
    for name, code in cubin.kernels(path, part):
        loops = []
        for pc, lo, _ in code:
            # A loop ends in a guarded backward branch; an unguarded one (predicate PT,
            # bits 12-15 = 7) jumps back from code placed out of line, such as ptxas's
            # mbarrier wait retries at the kernel's end.
            if cubin.opcode(lo) == cubin.BRA and (lo >> 12) & 0xF != 7:
                start = cubin.branch_target(pc, lo)
                if start <= pc and (pc - start) // 16 + 1 >= least:
                    loops.append((start, pc))
        if not loops:
            continue
        print("==", name)
        for start, end in loops:
            body = [cubin.name(lo) for pc, lo, _ in code if start <= pc <= end]
            mix = collections.Counter(body).most_common()
            print(f"  {start:05x}-{end:05x}: {len(body)} instructions")
            print("    " + ", ".join(f"{op} {n}" for op, n in mix))


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) >= 3 else "",
         int(sys.argv[3]) if len(sys.argv) == 4 else 20)
