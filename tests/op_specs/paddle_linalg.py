"""Specs for the paddle_linalg family (inv, det, slogdet, solve, cholesky). Inputs are shifted (x + 3 I) or
made symmetric positive definite (x x^T + 3 I) in the call and the reference alike, so every matrix is well
conditioned for the float64 and finite-difference checks."""

from __future__ import annotations

import numpy as np

from op_specs.base import FLOATS, Case, In, OpSpec

SHIFT = 3.0


def _shifted(x):
    import oarlock
    if not isinstance(x, np.ndarray) and not x.dtype.is_floating_point:
        return x   # a dtype the op refuses: passed on unchanged, so the op's own error is what is checked
    return x + SHIFT * oarlock.eye(x.shape[-1], dtype=x.dtype) if not isinstance(x, np.ndarray) else \
        x + SHIFT * np.eye(x.shape[-1])


def _spd(x):
    import oarlock
    if isinstance(x, np.ndarray):
        return x @ np.swapaxes(x, -1, -2) + SHIFT * np.eye(x.shape[-1])
    if not x.dtype.is_floating_point:
        return x
    return oarlock.matmul(x, x, transpose_y=True) + SHIFT * oarlock.eye(x.shape[-1], dtype=x.dtype)


def _linalg(name, prepare):
    def call(x, *args, **kwargs):
        import oarlock
        return getattr(oarlock.linalg, name)(prepare(x), *args, **kwargs)
    return call


def _slogdet_ref(x):
    sign, logabs = np.linalg.slogdet(_shifted(x))
    return np.stack([sign, logabs])


def _solve_ref(x, y, left=True):
    a = _shifted(x)
    if not left:
        return np.swapaxes(np.linalg.solve(np.swapaxes(a, -1, -2), np.swapaxes(y, -1, -2)), -1, -2)
    return np.linalg.solve(a, y[:, None])[:, 0] if y.ndim == 1 else np.linalg.solve(a, y)


def _cholesky_ref(x, upper=False):
    lower = np.linalg.cholesky(_spd(x))
    return np.swapaxes(lower, -1, -2) if upper else lower


MATRICES = [Case([In((3, 3), domain=(-1.0, 1.0))], name="3x3"),
            Case([In((2, 4, 4), domain=(-1.0, 1.0))], name="batched")]
SPECS = [
    OpSpec("inv", MATRICES, ref=lambda x: np.linalg.inv(_shifted(x)), dtypes=FLOATS, call=_linalg("inv", _shifted)),
    OpSpec("det", MATRICES, ref=lambda x: np.linalg.det(_shifted(x)), dtypes=FLOATS, call=_linalg("det", _shifted)),
    OpSpec("slogdet", MATRICES, ref=_slogdet_ref, dtypes=FLOATS, call=_linalg("slogdet", _shifted)),
    OpSpec("solve", [Case([In((3, 3), domain=(-1.0, 1.0)), In((3, 2))], name="matrix"),
                     Case([In((3, 3), domain=(-1.0, 1.0)), In((3,))], name="vector"),
                     Case([In((2, 3, 3), domain=(-1.0, 1.0)), In((2, 3, 2))], name="batched"),
                     Case([In((3, 3), domain=(-1.0, 1.0)), In((2, 3))], {"left": False}, name="right")],
           ref=_solve_ref, dtypes=FLOATS, call=_linalg("solve", _shifted)),
    OpSpec("cholesky", [*MATRICES, Case([In((3, 3), domain=(-1.0, 1.0))], {"upper": True}, name="upper")],
           ref=_cholesky_ref, dtypes=FLOATS, call=_linalg("cholesky", _spd)),
]
