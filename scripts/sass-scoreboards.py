#!/usr/bin/env python3
"""Prints the scoreboard use of sm_90 kernels in a cubin, without a disassembler.

usage: scripts/sass-scoreboards.py FILE.cubin [KERNEL-NAME-PART]
e.g.   nvcc -O3 -cubin -arch=sm_90a -std=c++20 --expt-relaxed-constexpr -I. -o k.cubin k.cu
       (k.cu includes a kernel header and instantiates the kernel explicitly)

The build machine has nvcc and ptxas but no cuobjdump or nvdisasm, and which scoreboard
ptxas gives each load decides what every later wait waits for. Each 128-bit sm_90
instruction carries its control bits in the top word: stall cycles (bits 41-44), yield
(45), the scoreboard it sets on completion ("W", 46-48) or on reading its operands ("R",
49-51; 7 = none) and the scoreboards it waits for (52-57). The opcode is the low 12 bits
of the bottom word, the destination register bits 16-23. Checked against cuobjdump
-sass of the same kernels on the GPU machine (session 17). Prints the global loads, the
HMMAs, the branches and every instruction that waits, with its offset (cubin.py reads the
instructions).
"""
import sys

import cubin


def main(path, part):
    for name, code in cubin.kernels(path, part):
        print("==", name)
        for pc, lo, hi in code:
            op = cubin.name(lo)
            write, read, wait = (hi >> 46) & 7, (hi >> 49) & 7, (hi >> 52) & 0x3F
            waits = [b for b in range(6) if wait >> b & 1]
            if op in ("LDG", "HMMA", "BRA") or waits:
                print(
                    f"{pc:05x} {op:5s} R{(lo >> 16) & 0xFF:<3d}"
                    f" {'W%d' % write if write != 7 else '  '}"
                    f" {'R%d' % read if read != 7 else '  '}"
                    f" {'wait ' + ','.join(map(str, waits)) if waits else ''}"
                )


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "")
