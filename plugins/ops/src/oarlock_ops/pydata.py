"""Python data made into a host array for to_tensor / tensor, checked so that nothing is stored wrong.

Python numbers and (nested) lists or tuples of them are converted by numpy at their natural dtype
first (bool, int64, float64, complex128), then cast to the dtype asked for after the checks PyTorch's
torch.tensor makes (oarlock.dtypes.fit_scalar states them): nan, inf or an out-of-range value into an
integer dtype, and a complex value with an imaginary part into a real dtype, raise naming the value
and the dtype's range; an int beyond int64 raises unless a float dtype is asked for. The checks are a
min/max over the converted array, cheap next to the list conversion itself.

numpy arrays, numpy scalars and Tensors keep numpy's casting (as torch.tensor(ndarray) does): a cast
between arrays is never checked element by element.
"""

from __future__ import annotations

import numpy as np

from oarlock import dtypes as D

_WHAT = "argument 'data': value"


def python_data_array(data, dtype=None) -> np.ndarray:
    """`data` (Python numbers, lists, tuples; arrays inside lists are taken as their values) as a new host
    array of numpy dtype `dtype`, or of Paddle's default for it (floats: the default float dtype,
    ints: int64, bools: bool, complex: the default complex dtype)."""
    natural = _natural(data, dtype)
    target = _default_dtype(natural) if dtype is None else np.dtype(dtype)
    return _checked(natural, D.from_numpy_dtype(target)).astype(target, copy=False)


def _natural(data, dtype) -> np.ndarray:
    try:
        natural = np.asarray(data)
    except ValueError as exc:   # ragged nesting
        raise ValueError(f"argument 'data' must be a number or nested lists of numbers of a rectangular shape: "
                         f"{exc}") from None
    if natural.dtype.kind == "f" and dtype is None and natural.ndim and max(natural.max(), -natural.min()) >= 2.0 ** 63:
        _refuse_big_ints(data)   # numpy made [1, 2**63] float64; PyTorch refuses ints beyond int64
    if natural.dtype.kind != "O":
        return natural
    # Python ints beyond int64/uint64 (numpy keeps them as objects): a float dtype takes them approximately
    target = None if dtype is None else D.from_numpy_dtype(np.dtype(dtype))
    if target is not None and target.kind in ("float", "complex"):
        wide = np.complex128 if target.kind == "complex" else np.float64
        try:
            return np.asarray(data, dtype=wide)
        except OverflowError:
            pass  # an int beyond float64: fit_scalar below names it
    for value in natural.flat:
        if isinstance(value, int):
            D.fit_scalar(value, target or D.int64, _WHAT)   # raises for the first one out of range
    raise TypeError(f"argument 'data' must hold numbers (bool, int, float, complex), got "
                    f"{sorted({type(v).__name__ for v in natural.flat if not isinstance(v, (int, float, complex))})}")


def _refuse_big_ints(data) -> None:
    """Raise for the first int beyond int64 in all-int data (data with a float in it is float data)."""
    stack, big = [data], None
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (float, complex, np.floating, np.complexfloating, np.ndarray)):
            return
        elif isinstance(item, int) and not -2 ** 63 <= item < 2 ** 63:
            big = item
    if big is not None:
        D.fit_scalar(big, D.int64, _WHAT)


def _default_dtype(natural: np.ndarray) -> np.dtype:
    """Paddle's rule: Python floats -> the default float dtype, ints -> int64, bools -> bool."""
    kind = natural.dtype.kind
    if kind == "f":
        return D.get_default_dtype().np
    if kind == "c":
        return D.default_for_kind("complex").np
    if kind in "iu":
        return np.dtype(np.int64)
    if kind == "b":
        return np.dtype(np.bool_)
    raise TypeError(f"argument 'data' must hold numbers, got data that numpy sees as dtype {natural.dtype}")


def _checked(a: np.ndarray, dt: D.DType) -> np.ndarray:
    """a, or its real part, after fit_scalar's checks of its values against dt (raising on the first bad one)."""
    if dt.kind in ("bool", "complex") or a.size == 0:
        return a
    if a.dtype.kind == "c":
        bad = (a.imag != 0) | np.isnan(a.imag)
        if bad.any():
            D.fit_scalar(a[bad].flat[0].item(), dt, _WHAT)
        a = a.real
    if dt.kind != "int" or a.dtype.kind == "b" or a.dtype == dt.np:
        return a   # like torch.tensor, a float too large for a float dtype becomes inf
    info = np.iinfo(dt.np)
    low = -info.max if info.min == 0 and a.dtype.kind in "iu" else info.min  # fit_scalar's unsigned wrap
    # int64's max is no float64; 2.0**63 is, and no float64 lies between them
    fits = (lambda v: (v >= low) & (v <= info.max)) if a.dtype.kind in "iu" or info.bits < 64 else \
        (lambda v: (v >= low) & (v < 2.0 ** 63))
    if not fits(a.min()) or not fits(a.max()):   # nan propagates through min/max and fails
        D.fit_scalar(a[~fits(a)].flat[0].item(), dt, _WHAT)
    return a
