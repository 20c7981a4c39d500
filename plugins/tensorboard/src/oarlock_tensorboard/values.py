"""Argument checks and conversions shared by SummaryWriter's methods. Each takes the calling method's
name (`fn`) and the argument's name, so that an error says which call and argument it was, what it got
and what it accepts.

Values may be oarlock Tensors (on any device), numpy arrays and scalars, Python numbers, or any object
numpy can read through __array__ (a torch tensor, say); they become float64 numpy arrays.
"""

from __future__ import annotations

import numbers
import os
import time

import numpy as np

import oarlock

_REAL_KINDS = "biuf"  # numpy dtype kinds of bool, signed and unsigned integers, floats
_ACCEPTS = "an oarlock Tensor, a numpy array or a Python number"


def describe(value) -> str:
    """A short account of `value` for an error message."""
    if isinstance(value, oarlock.Tensor):
        return f"a Tensor of shape {list(value.shape)} and dtype {value.dtype}"
    if isinstance(value, np.ndarray):
        return f"a numpy array of shape {value.shape} and dtype {value.dtype}"
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def check_str(fn: str, arg: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{fn}: argument '{arg}' must be a str, got {describe(value)}")
    return value


def check_tag(fn: str, value, arg: str = "tag") -> str:
    check_str(fn, arg, value)
    if not value:
        raise ValueError(f"{fn}: argument '{arg}' must be a non-empty str (TensorBoard shows a series by its "
                         f"tag), got ''")
    return value


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_int(fn: str, arg: str, value, minimum: int) -> int:
    if not _is_int(value) or value < minimum:
        error = ValueError if _is_int(value) else TypeError
        raise error(f"{fn}: argument '{arg}' must be an int >= {minimum}, got {describe(value)}")
    return int(value)


def check_step(fn: str, value) -> int | None:
    """global_step: None (no step) or an int (a Python or numpy integer, or a 0-d integer Tensor)."""
    if value is None:
        return None
    if isinstance(value, oarlock.Tensor) and value.size == 1 and np.dtype(value.numpy().dtype).kind in "iu":
        return int(value.item())
    if not _is_int(value):
        raise TypeError(f"{fn}: argument 'global_step' must be an int or None, got {describe(value)}")
    return int(value)


def check_walltime(fn: str, value) -> float:
    """walltime: seconds since the epoch; None means now."""
    if value is None:
        return time.time()
    if not _is_real(value):
        raise TypeError(f"{fn}: argument 'walltime' must be a number of seconds since the epoch or None, "
                        f"got {describe(value)}")
    return float(value)


def check_positive(fn: str, arg: str, value) -> float:
    if not _is_real(value) or not value > 0:
        error = ValueError if _is_real(value) else TypeError
        raise error(f"{fn}: argument '{arg}' must be a positive number, got {describe(value)}")
    return float(value)


def check_path(fn: str, arg: str, value) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{fn}: argument '{arg}' must be a path (str or os.PathLike) or None, got "
                        f"{describe(value)}")
    return os.fspath(value)


def as_array(fn: str, arg: str, value) -> np.ndarray:
    """`value` as a float64 numpy array; lists and tuples of numbers are accepted too."""
    if isinstance(value, oarlock.Tensor):
        array = value.detach().numpy()
    elif isinstance(value, (np.ndarray, np.generic, numbers.Number, list, tuple)) or hasattr(value, "__array__"):
        try:
            array = np.asarray(value)
        except (ValueError, TypeError):  # ragged nesting
            array = None
    else:
        array = None
    if array is None or array.dtype.kind not in _REAL_KINDS:
        raise TypeError(f"{fn}: argument '{arg}' must be {_ACCEPTS} of real numbers, got {describe(value)}")
    return array.astype(np.float64)


def as_scalar(fn: str, arg: str, value) -> float:
    """One real number: a Python or numpy number, or a tensor or array with exactly one element."""
    array = as_array(fn, arg, value)
    if array.size != 1:
        raise ValueError(f"{fn}: argument '{arg}' must be a single number (a tensor or array with one "
                         f"element), got {describe(value)}")
    return float(array.reshape(()))
