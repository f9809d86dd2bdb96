"""Reads sm_90a instructions out of a cubin, without a disassembler (the build machine has
nvcc and ptxas but no cuobjdump or nvdisasm). Shared by sass-scoreboards.py and
sass-loops.py.

Each instruction is 128 bits: the opcode is the low 12 bits of the bottom word (the
register, immediate and constant forms of one mnemonic have different codes), the control
bits sit in the top word. OPCODES names the codes seen in cuobjdump -sass of qmm's kernels
on the GPU machine (sm90a-opcodes.txt, session 22: every code one mnemonic); others print
as hex.
"""
import os
import struct


def _load_opcodes():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sm90a-opcodes.txt")
    with open(path) as f:
        rows = [line.split() for line in f if line.strip() and not line.startswith("#")]
    return {int(code, 16): name for code, name in rows}


OPCODES = _load_opcodes()
BRA = 0x947


def sections(data):
    """(name, offset, size) of every ELF64 section."""
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, strndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQ", data, shoff + i * entsize) for i in range(count)]
    strtab = raw[strndx][4]

    def name(at):
        end = data.index(b"\0", strtab + at)
        return data[strtab + at : end].decode()

    return [(name(s[0]), s[4], s[5]) for s in raw]


def kernels(path, part=""):
    """(name, [(pc, lo, hi)]) of every kernel whose name contains `part`."""
    with open(path, "rb") as f:
        data = f.read()
    for name, offset, size in sections(data):
        if name.startswith(".text.") and part in name:
            words = [struct.unpack_from("<QQ", data, offset + pc) for pc in range(0, size, 16)]
            yield name[len(".text.") :], [(pc * 16, lo, hi) for pc, (lo, hi) in enumerate(words)]


def opcode(lo):
    return lo & 0xFFF


def name(lo):
    return OPCODES.get(opcode(lo), "%03x" % opcode(lo))


def branch_target(pc, lo):
    """Where the BRA at `pc` goes: a signed word offset from the next instruction, its
    low 8 bits in bits 16-23 and the rest from bit 34 (checked against cuobjdump's targets
    of all 329 BRAs of the wgmma GEMM's kernels)."""
    high = lo >> 34
    if high & (1 << 29):
        high -= 1 << 30
    return pc + 16 + ((high << 8) | ((lo >> 16) & 0xFF)) * 4
