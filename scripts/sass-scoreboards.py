#!/usr/bin/env python3
"""Prints the scoreboard use of sm_90 kernels in a cubin, without a disassembler.

usage: scripts/sass-scoreboards.py FILE.cubin [KERNEL-NAME-PART] [--check]
e.g.   nvcc -O3 -cubin -arch=sm_90a -std=c++20 --expt-relaxed-constexpr -I. -o k.cubin k.cu
       (k.cu includes a kernel header and instantiates the kernel explicitly)
       --check prints only the per-kernel check, one line a kernel.

The build machine has nvcc and ptxas but no cuobjdump or nvdisasm, and which scoreboard
ptxas gives each load decides what every later wait waits for. Each 128-bit sm_90
instruction carries its control bits in the top word: stall cycles (bits 41-44), yield
(45), the scoreboard it sets on completion ("W", 46-48) or on reading its operands ("R",
49-51; 7 = none) and the scoreboards it waits for (52-57). The opcode is the low 12 bits
of the bottom word, the destination register bits 16-23. Checked against cuobjdump
-sass of the same kernels on the GPU machine (session 17). Prints the global loads, the
HMMAs, the branches and every instruction that waits, with its offset, destination and
first two source registers (cubin.py reads the instructions), so that a load's register
can be followed to the instruction that waits for it.

Then, per kernel, the check that session 41 made of it: the MMAs (HMMA, IMMA) that wait
for the weights' scoreboard (which one, below). A warp's weight loads all share it, so
such a wait holds the MMA until every weight load in flight has landed, the refills that
the slot has just issued included: one memory latency exposed per wait. The decode
kernels expect a wait there only at the first use of a slot's weights (a SHF, LOP3 or
PRMT of its words); an MMA on the list waits because ptxas put one of its activation
loads on that scoreboard (w4a16_decode.cuh, DecodeTile::kRefillStep). The weights'
scoreboard is the one that most LDGs set whose registers no MMA reads as its B operand.
"""
import collections
import sys

import cubin

MMAS = ("HMMA", "IMMA")


def fields(lo, hi):
    """(mnemonic, scoreboard set on completion or None, on operand read or None, waited)."""
    write, read, wait = (hi >> 46) & 7, (hi >> 49) & 7, (hi >> 52) & 0x3F
    return (cubin.name(lo), None if write == 7 else write, None if read == 7 else read,
            [b for b in range(6) if wait >> b & 1])


def main(path, part, check_only):
    for name, code in cubin.kernels(path, part):
        rows = [(pc, lo) + fields(lo, hi) for pc, lo, hi in code]
        if not check_only:
            print("==", name)
            for pc, lo, op, write, read, waits in rows:
                if op in ("LDG",) + MMAS + ("BRA",) or waits:
                    print(
                        f"{pc:05x} {op:5s} R{(lo >> 16) & 0xFF:<3d}"
                        f" a=R{(lo >> 24) & 0xFF:<3d} b=R{(lo >> 32) & 0xFF:<3d}"
                        f" {'W%d' % write if write is not None else '  '}"
                        f" {'R%d' % read if read is not None else '  '}"
                        f" {'wait ' + ','.join(map(str, waits)) if waits else ''}"
                    )
        # Activation loads are those whose registers an MMA reads as its B operand (two
        # registers from bits 32-39); the weights' loads feed the dequantization instead.
        b_regs = {(lo >> 32 & 0xFF) + i for _, lo, op, _, _, _ in rows if op in MMAS
                  for i in (0, 1)}
        loads = collections.Counter(
            w for _, lo, op, w, _, _ in rows
            if op == "LDG" and w is not None
            and not {(lo >> 16 & 0xFF) + i for i in range(4)} & b_regs)
        if not loads:
            continue
        sb = loads.most_common(1)[0][0]
        late = [f"{pc:05x}" for pc, _, op, _, _, waits in rows if op in MMAS and sb in waits]
        print(f"{'' if check_only else 'check: '}{name}: weights' scoreboard SB{sb} "
              f"({loads[sb]} LDGs), {len(late)} MMAs wait for it"
              + (f" ({' '.join(late)})" if late else ""))


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--check"]
    if len(args) not in (1, 2):
        sys.exit(__doc__)
    main(args[0], args[1] if len(args) == 2 else "", "--check" in sys.argv[1:])
