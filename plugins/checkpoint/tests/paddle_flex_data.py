"""The state of the Paddle FlexCheckpoint exchange tests, in numpy only (real Paddle's jobs and
oarlock's import it alike): whole tensors of several dtypes and the box each rank holds under a layout.

    layout "rows":  2-D tensors split along axis 0 over the ranks; "cols": along axis 1;
                    "whole": every rank holds everything. 1-D and 0-d tensors are always replicated.
"""

from __future__ import annotations

import numpy as np

BFLOAT16_BITS = "bfloat16"   # stored as uint16 bit patterns here; each framework views them as bfloat16


def tensors() -> dict:
    """{key: numpy array}; bfloat16 values as their uint16 bits (Paddle's numpy form)."""
    rng = np.random.default_rng(7)
    return {
        "model.w": rng.standard_normal((4, 6)).astype(np.float32),
        "model.emb": rng.integers(0, 2**16, (6, 4), dtype=np.uint16),   # bfloat16 bits: NaNs and -0 included
        "model.b": rng.standard_normal(6).astype(np.float64),
        "opt.w_moment1_0": rng.standard_normal((4, 6)).astype(np.float32),
        "opt.step": np.array(5, dtype=np.int64),
    }


def dtype_of(key: str) -> str:
    return BFLOAT16_BITS if key == "model.emb" else str(tensors()[key].dtype)


def box(shape: tuple, layout: str, rank: int, world: int) -> tuple[tuple, tuple]:
    """(global offset, local shape) of `rank`'s box."""
    axis = {"rows": 0, "cols": 1}.get(layout)
    if axis is None or len(shape) < 2:
        return (0,) * len(shape), tuple(shape)
    size = shape[axis] // world
    offset = [0] * len(shape)
    offset[axis] = rank * size
    local = list(shape)
    local[axis] = size
    return tuple(offset), tuple(local)


def local(array: np.ndarray, offset: tuple, shape: tuple) -> np.ndarray:
    return array[tuple(slice(o, o + n) for o, n in zip(offset, shape))].copy()   # C order; 0-d stays 0-d
