"""Argument checks and conversions the FP8 functions share: a Tensor's values as float32 numpy with clear
errors, dtype names, and float8 numpy arrays to Tensors."""

from __future__ import annotations

import numpy as np

import oarlock

FLOATING = ("bfloat16", "float16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


def host_float32(t, fn: str, arg: str, ndim: int | None = 2) -> np.ndarray:
    """A Tensor's values as float32 numpy, checked: a floating (or float8) dtype and, when given, ndim."""
    if not isinstance(t, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument '{arg}' must be a Tensor; got {type(t).__name__}")
    if ndim is not None and t.ndim != ndim:
        raise ValueError(f"{fn}(): argument '{arg}' has shape {list(t.shape)}; accepted: a {ndim}-D tensor")
    if dtype_name(t) not in FLOATING:
        raise TypeError(f"{fn}(): argument '{arg}' has dtype {t.dtype}; accepted: a floating dtype")
    return t.numpy().astype(np.float32)


def dtype_name(t) -> str:
    return str(t.dtype).split(".")[-1]


def fp8_tensor(a: np.ndarray) -> oarlock.Tensor:
    return oarlock.to_tensor(np.ascontiguousarray(a))
