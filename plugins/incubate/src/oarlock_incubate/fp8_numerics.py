"""The float8 arithmetic every FP8 function of oarlock-incubate shares, in numpy: saturating casts to e4m3 / e5m2,
Paddle's scale rule (its kernels' `ScaleWrapper`), and 1-D / 2-D block maxima with ragged last blocks.

Casts follow CUDA's `__nv_fp8_e4m3(float)` / `cvt.rn.satfinite`: round to nearest even, finite values beyond the
format's largest one (and +-inf) saturate to +-max, NaN stays NaN. ml_dtypes rounds to nearest even but turns
overflow into NaN (e4m3fn) or inf (e5m2), so values are clipped to +-max first (np.clip keeps NaN).

Scales are float32, computed with float32 operations in the kernels' order (448.0f / amax, then 1.0f / scale), so
the results are Paddle's bit for bit, not merely close."""

from __future__ import annotations

import ml_dtypes
import numpy as np

BLOCK = 128
FORMATS = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
FORMAT_MAX = {"e4m3": np.float32(448.0), "e5m2": np.float32(57344.0)}
# unit roundoff (half an ulp, relative) of the normal range, and half the subnormal spacing (absolute): the
# per-element error of a cast is at most max(UNIT_ROUNDOFF * |v|, SUBNORMAL_HALF_STEP)
UNIT_ROUNDOFF = {"e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}
SUBNORMAL_HALF_STEP = {"e4m3": 2.0 ** -10, "e5m2": 2.0 ** -17}
_POW2_INF_SCALE = np.float32(2.0 ** 127)                   # 0x1.0p127
_INF_SCALE = np.float32(np.ldexp(np.float32(0x1FE) / np.float32(256), 127))   # 0x1.FEp127


# float8 byte -> float32 value: a table lookup is several times faster than ml_dtypes' cast back to float32
_DECODE = {fmt: np.arange(256, dtype=np.uint8).view(dtype).astype(np.float32) for fmt, dtype in FORMATS.items()}


def to_float32(q: np.ndarray) -> np.ndarray:
    """The float32 values of a float8 (ml_dtypes) array, exactly."""
    fmt = "e4m3" if q.dtype == FORMATS["e4m3"] else "e5m2"
    return _DECODE[fmt][q.view(np.uint8)]


def check_format(fn: str, fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"{fn}(): float8 format {fmt!r}; accepted: {', '.join(map(repr, FORMATS))}")
    return fmt


def cast(values: np.ndarray, fmt: str = "e4m3") -> np.ndarray:
    """float32 values -> float8 (ml_dtypes array), saturating; NaN stays NaN."""
    top = FORMAT_MAX[fmt]
    return np.clip(np.asarray(values, np.float32), -top, top).astype(FORMATS[fmt])


def scale_of(amax: np.ndarray, epsilon: float = 0.0, pow2: bool = True, fmt: str = "e4m3") -> np.ndarray:
    """The multiplier that maps a block of absolute maximum `amax` onto the format (Paddle's ScaleWrapper):
    max(amax, eps) == 0 -> 1; fmt_max / max(amax, eps) in float32; an infinite quotient (a subnormal amax) ->
    2^127 (pow2) or 0x1.FEp127; a zero quotient (amax inf) stays 0; pow2 rounds down to a power of two."""
    amax = np.maximum(np.asarray(amax, np.float32), np.float32(epsilon))
    with np.errstate(divide="ignore", over="ignore"):
        scale = FORMAT_MAX[fmt] / amax
    if pow2:
        mantissa, exponent = np.frexp(scale)                     # scale = m * 2^e, m in [0.5, 1)
        finite = np.isfinite(scale) & (scale > 0)
        scale = np.where(finite, np.ldexp(np.float32(1), exponent - 1).astype(np.float32), scale)
    scale = np.where(np.isinf(scale), _POW2_INF_SCALE if pow2 else _INF_SCALE, scale)
    return np.where(amax == 0, np.float32(1), scale).astype(np.float32)


def decode_scale(scale: np.ndarray) -> np.ndarray:
    """What the kernels store: 1.0f / scale (inf where the scale is 0, i.e. the block held an inf)."""
    with np.errstate(divide="ignore"):
        return (np.float32(1) / np.asarray(scale, np.float32)).astype(np.float32)


def _block_max(a: np.ndarray, axes) -> np.ndarray:
    # np.fmax, like fmaxf and __hmax, ignores NaN: a NaN never becomes a block's maximum (0 starts the fold)
    return np.fmax.reduce(a, axis=axes, initial=np.float32(0))


def _padded_abs(values: np.ndarray, rows: int, cols: int) -> np.ndarray:
    a = np.abs(np.asarray(values, np.float32))
    m, k = a.shape
    return a if (rows, cols) == (m, k) else np.pad(a, ((0, rows - m), (0, cols - k)))


def blocks(length: int, size: int = BLOCK) -> int:
    return -(-length // size)


def row_block_amax(values: np.ndarray, size: int = BLOCK) -> np.ndarray:
    """[M, K] -> [M, ceil(K/size)]: the max |value| of each 1 x size block of each row (last block ragged)."""
    m, k = values.shape
    a = _padded_abs(values, m, blocks(k, size) * size)
    return _block_max(a.reshape(m, -1, size), 2)


def tile_amax(values: np.ndarray, size: int = BLOCK) -> np.ndarray:
    """[M, K] -> [ceil(M/size), ceil(K/size)]: the max |value| of each size x size tile."""
    m, k = values.shape
    a = _padded_abs(values, blocks(m, size) * size, blocks(k, size) * size)
    return _block_max(a.reshape(blocks(m, size), size, -1, size), (1, 3))


def expand_rows(per_block: np.ndarray, k: int, size: int = BLOCK) -> np.ndarray:
    """[M, nb] per-block values -> [M, k], each repeated over its block's columns."""
    return np.repeat(per_block, size, axis=1)[:, :k]


def expand_tiles(per_tile: np.ndarray, m: int, k: int, size: int = BLOCK) -> np.ndarray:
    """[mb, kb] per-tile values -> [m, k]."""
    return np.repeat(np.repeat(per_tile, size, axis=0), size, axis=1)[:m, :k]


def quantize_rows(values: np.ndarray, epsilon: float = 0.0, pow2: bool = True, fmt: str = "e4m3",
                  size: int = BLOCK):
    """1 x size blocks of [M, K] float32 -> (float8 [M, K], decode scales [M, ceil(K/size)])."""
    scale = scale_of(row_block_amax(values, size), epsilon, pow2, fmt)
    with np.errstate(invalid="ignore"):
        q = cast(np.asarray(values, np.float32) * expand_rows(scale, values.shape[1], size), fmt)
    return q, decode_scale(scale)


def quantize_tiles(values: np.ndarray, epsilon: float = 0.0, pow2: bool = True, fmt: str = "e4m3",
                   size: int = BLOCK):
    """size x size tiles of [M, K] float32 -> (float8 [M, K], decode scales [ceil(M/size), ceil(K/size)])."""
    scale = scale_of(tile_amax(values, size), epsilon, pow2, fmt)
    with np.errstate(invalid="ignore"):
        q = cast(np.asarray(values, np.float32) * expand_tiles(scale, *values.shape, size), fmt)
    return q, decode_scale(scale)


def quantize_cols(values: np.ndarray, epsilon: float = 0.0, pow2: bool = True, fmt: str = "e4m3",
                  size: int = BLOCK):
    """size x 1 blocks of each column of [M, K] (quantize_rows of values.T, without the transposed copy) ->
    (float8 [M, K], decode scales [ceil(M/size), K])."""
    m, k = values.shape
    a = _padded_abs(values, blocks(m, size) * size, k)
    scale = scale_of(_block_max(a.reshape(-1, size, k), 1), epsilon, pow2, fmt)
    with np.errstate(invalid="ignore"):
        q = cast(np.asarray(values, np.float32) * np.repeat(scale, size, axis=0)[:m], fmt)
    return q, decode_scale(scale)


def dequantize_cols(q: np.ndarray, decode: np.ndarray, size: int = BLOCK) -> np.ndarray:
    """float32 values of quantize_cols' (q, decode)."""
    return to_float32(q) * np.repeat(decode, size, axis=0)[:q.shape[0]]


def dequantize_rows(q: np.ndarray, decode: np.ndarray, size: int = BLOCK) -> np.ndarray:
    """float32 values of quantize_rows' (q, decode): q * decode per block."""
    return to_float32(q) * expand_rows(decode, q.shape[1], size)


def dequantize_tiles(q: np.ndarray, decode: np.ndarray, size: int = BLOCK) -> np.ndarray:
    """float32 values of quantize_tiles' (q, decode)."""
    return to_float32(q) * expand_tiles(decode, *q.shape, size)


def quantize_tensor(values: np.ndarray, scale: np.float32, fmt: str = "e4m3") -> np.ndarray:
    """Per-tensor quantization with a given (encode) scale: cast(values * scale)."""
    with np.errstate(invalid="ignore"):
        return cast(np.asarray(values, np.float32) * np.float32(scale), fmt)


def expand_scale(scale: np.ndarray, rows: int, k: int, one_d: bool) -> np.ndarray:
    """A decode scale in the GEMM layout ([kb, rows] or [kb, rb]) -> [rows, kb] per row and K-block."""
    per_row = scale.T if one_d else np.repeat(scale.T, BLOCK, axis=0)[:rows]
    return np.ascontiguousarray(per_row, np.float32)


def blockwise_matmul(a: np.ndarray, a_scale: np.ndarray, b: np.ndarray, b_scale: np.ndarray) -> np.ndarray:
    """float32 [M, N]: float8 values a [M, K], b [N, K] (as float32) with per-row-per-K-block decode scales
    a_scale [M, kb], b_scale [N, kb]; one float32 product per 128-slice of K, promoted with its scales."""
    m, k = a.shape
    out = np.zeros([m, b.shape[0]], np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for j in range(blocks(k)):
            cols = slice(j * BLOCK, (j + 1) * BLOCK)
            partial = a[:, cols] @ b[:, cols].T
            out += partial * (a_scale[:, j:j + 1] * b_scale[None, :, j])
    return out
