"""The fragment layout of PTX's mma.sync.aligned.m16n8k32.row.col.f32.<e4m3|e5m2>.<e4m3|e5m2>.f32 in Python, as
the PTX ISA states it ("Matrix Fragments for mma.m16n8k32", the 8-bit types), and a launcher of
kernels/fp8_tc.cu's fp8_mma_probe, which runs one MMA on fragments packed by this table.

The table, per lane (groupID g = lane >> 2, threadID_in_group t = lane % 4), element i of the lane's fragment,
four 8-bit elements per 32-bit register, element i in byte i % 4 of register i // 4:

    A (16 x 32), a0..a15: row = g for 0 <= i < 4 or 8 <= i < 12, g + 8 otherwise;
                          col = 4t + (i & 3) for i < 8, 4t + (i & 3) + 16 for i >= 8
    B (32 x 8),  b0..b7:  row = 4t + (i & 3) for i < 4, 4t + (i & 3) + 16 for i >= 4;  col = g
    C, D (16 x 8, f32), c0..c3: row = g for i < 2, g + 8 otherwise;  col = 2t + (i & 1)

It is written here independently of the kernel's C++ (which reads whole registers out of shared-memory tiles),
so the probe checks the model of the instruction in fp8_tc.cu against the table on the CPU (host emulation), and
the instruction against the table on a GPU (bench/fp8_gpu_check.py)."""

from __future__ import annotations

import numpy as np

from oarlock_incubate import fp8_ops


def a_position(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    row = g if (0 <= i < 4 or 8 <= i < 12) else g + 8
    col = 4 * t + (i & 3) + (16 if i >= 8 else 0)
    return row, col


def b_position(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return 4 * t + (i & 3) + (16 if i >= 4 else 0), g


def c_position(lane: int, i: int) -> tuple[int, int]:
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), 2 * t + (i & 1)


def _pack(codes: np.ndarray, position, elements: int) -> np.ndarray:
    """uint32 [32, elements // 4]: each lane's registers, element i in byte i % 4 of register i // 4."""
    regs = np.zeros([32, elements // 4], np.uint32)
    for lane in range(32):
        for i in range(elements):
            regs[lane, i // 4] |= np.uint32(codes[position(lane, i)]) << np.uint32(8 * (i % 4))
    return regs


def pack_a(a_codes: np.ndarray) -> np.ndarray:
    """A [16, 32] uint8 codes -> the lanes' a registers, uint32 [32, 4]."""
    return _pack(np.asarray(a_codes, np.uint8), a_position, 16)


def pack_b(b_codes: np.ndarray) -> np.ndarray:
    """B [32, 8] uint8 codes -> the lanes' b registers, uint32 [32, 2]."""
    return _pack(np.asarray(b_codes, np.uint8), b_position, 8)


def pack_c(c: np.ndarray) -> np.ndarray:
    """C [16, 8] float32 -> the lanes' accumulators, float32 [32, 4]."""
    return np.array([[c[c_position(lane, i)] for i in range(4)] for lane in range(32)], np.float32)


def unpack_d(d: np.ndarray) -> np.ndarray:
    """the lanes' accumulators float32 [32, 4] -> D [16, 8]."""
    out = np.zeros([16, 8], np.float32)
    for lane in range(32):
        for i in range(4):
            out[c_position(lane, i)] = d[lane, i]
    return out


def mma_probe(xp, a_codes, b_codes, c, a_fmt="e4m3", b_fmt="e4m3", model=False):
    """D = C + A B (A [16, 32], B [32, 8] float8 codes, C [16, 8] float32) by one fp8_mma_probe launch: the
    instruction on sm_89+ (model=False), fp8_tc.cu's model of it otherwise (and always on the host emulation)."""
    a_regs, b_regs, c_regs = (xp.asarray(v) for v in (pack_a(a_codes), pack_b(b_codes), pack_c(c)))
    d = xp.zeros((32, 4), xp.float32)
    fp8_ops._run(fp8_ops.PROBES[bool(model)], d, (1,), (32,),
                 (a_regs, b_regs, c_regs, d, np.int32(a_fmt == "e5m2"), np.int32(b_fmt == "e5m2")))
    to_host = getattr(xp, "asnumpy", np.asarray)
    return unpack_d(to_host(d))
