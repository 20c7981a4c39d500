"""A float64 reference of the documented FP8 semantics, written independently of oarlock_incubate.fp8_numerics:
the e4m3 / e5m2 value grids decoded from their bit layouts (not from ml_dtypes), round to nearest even by search
on that grid with saturation, Paddle's ScaleWrapper rule in Python floats, and block loops."""

from __future__ import annotations

import math

import numpy as np

LAYOUT = {"e4m3": (3, 7, 0x7E), "e5m2": (2, 15, 0x7B)}     # mantissa bits, exponent bias, largest finite code
FMT_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def grid(fmt: str) -> np.ndarray:
    """The non-negative finite values of the format, indexed by their code (0 .. largest finite code)."""
    mbits, bias, top = LAYOUT[fmt]
    codes = np.arange(top + 1)
    e, m = codes >> mbits, codes & ((1 << mbits) - 1)
    return np.where(e == 0, m / 2.0 ** mbits * 2.0 ** (1 - bias), (1 + m / 2.0 ** mbits) * 2.0 ** (e - bias))


def encode(values: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values -> uint8 codes: saturate to +-max (inf too), round to nearest, ties to the even code.
    NaN gives 0xFF (compare NaN positions only)."""
    g = grid(fmt)
    v = np.asarray(values, np.float64)
    a = np.minimum(np.abs(np.nan_to_num(v, nan=0.0, posinf=np.inf, neginf=-np.inf)), FMT_MAX[fmt])
    hi = np.clip(np.searchsorted(g, a), 0, len(g) - 1)
    lo = np.maximum(hi - 1, 0)
    up = (g[hi] - a < a - g[lo]) | ((g[hi] - a == a - g[lo]) & (hi % 2 == 0))
    code = np.where(up | (hi == lo), hi, lo).astype(np.uint8)
    code = code | (np.signbit(v).astype(np.uint8) << 7)
    return np.where(np.isnan(v), np.uint8(0xFF), code)


def decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    g = grid(fmt)
    mag = g[np.minimum(codes & 0x7F, len(g) - 1)]
    return np.where(codes & 0x80, -mag, mag)


def scale(amax: float, eps: float = 0.0, pow2: bool = True, fmt: str = "e4m3") -> float:
    """Paddle's ScaleWrapper in Python floats (float32 results: rounding the float64 quotient to float32 is the
    correctly rounded float32 quotient)."""
    a = max(amax, float(np.float32(eps)))
    if a == 0:
        return 1.0
    with np.errstate(over="ignore"):
        s = float(np.float32(FMT_MAX[fmt] / a))
    if math.isinf(s):
        return 2.0 ** 127 if pow2 else float.fromhex("0x1.FEp127")
    if s == 0:
        return 0.0
    return 2.0 ** (math.frexp(s)[1] - 1) if pow2 else s


def block_amax(block: np.ndarray) -> float:
    finite_or_inf = np.abs(block[~np.isnan(block)])
    return float(finite_or_inf.max()) if finite_or_inf.size else 0.0


def quantize_block(block: np.ndarray, eps=0.0, pow2=True, fmt="e4m3"):
    """(codes, decode scale) of one block of float32-exact values."""
    s = scale(block_amax(block), eps, pow2, fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        products = (block.astype(np.float64) * s).astype(np.float32)    # float32 multiply (exact in float64)
    with np.errstate(divide="ignore"):
        return encode(products, fmt), float(np.float32(np.float64(1.0) / s)) if s else math.inf


def quantize_rows(x: np.ndarray, eps=0.0, pow2=True, fmt="e4m3", size=128):
    m, k = x.shape
    nb = -(-k // size)
    codes, scales = np.zeros([m, k], np.uint8), np.zeros([m, nb])
    for i in range(m):
        for j in range(nb):
            cols = slice(j * size, (j + 1) * size)
            codes[i, cols], scales[i, j] = quantize_block(x[i, cols], eps, pow2, fmt)
    return codes, scales


def quantize_tiles(x: np.ndarray, eps=0.0, pow2=True, fmt="e4m3", size=128):
    m, k = x.shape
    mb, kb = -(-m // size), -(-k // size)
    codes, scales = np.zeros([m, k], np.uint8), np.zeros([mb, kb])
    for i in range(mb):
        for j in range(kb):
            rows, cols = slice(i * size, (i + 1) * size), slice(j * size, (j + 1) * size)
            block = x[rows, cols]
            c, scales[i, j] = quantize_block(block.ravel(), eps, pow2, fmt)
            codes[rows, cols] = c.reshape(block.shape)
    return codes, scales


def assert_codes_equal(got_fp8: np.ndarray, want_codes: np.ndarray) -> None:
    """Bit patterns equal, NaN positions equal (any NaN code)."""
    got = got_fp8.view(np.uint8)
    nan_got = np.isnan(got_fp8.astype(np.float32))
    nan_want = want_codes == 0xFF
    np.testing.assert_array_equal(nan_got, nan_want)
    np.testing.assert_array_equal(np.where(nan_want, 0, got), np.where(nan_want, 0, want_codes))


def dequantize(codes, scales_per_element, fmt="e4m3"):
    return decode(codes, fmt) * scales_per_element


def cast_error_bound(values_scaled: np.ndarray, fmt="e4m3") -> np.ndarray:
    """The largest |cast(v) - v| of a finite v within range: half an ulp (relative 2^-(mbits+1)) in the normal
    range, half the subnormal spacing below it (plus float32 rounding of the product before the cast)."""
    mbits, bias, _ = LAYOUT[fmt]
    v = np.abs(values_scaled)
    return np.maximum(v * 2.0 ** -(mbits + 1), 2.0 ** (-bias - mbits)) + v * 2.0 ** -24
