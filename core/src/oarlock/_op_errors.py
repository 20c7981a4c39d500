"""The error an op raises when its kernel (or numpy under it) refuses the input: numpy's own text, such as
"Unable to allocate 4.00 PiB ..." or "Python int too large to convert to C long", names no op and no
argument, so the dispatcher re-raises it through `kernel_error`, which adds the op, the argument it can
tell is at fault (a size with billions of elements, an int beyond int64, a nan or inf), the inputs and
the attributes. None of this runs unless a kernel has raised: the call path only has a try around it.
"""

from __future__ import annotations

import math
import numbers
import reprlib

from oarlock.dtypes import ScalarConversionError, fit_scalar

_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 3

_BIG = 1 << 31       # a size or count at least this large is worth naming when memory runs out
_INT64 = (-(1 << 63), (1 << 63) - 1)
# numpy's texts for a size it cannot even address (ValueError, not MemoryError)
_SIZE_TEXTS = ("array is too big", "Maximum allowed size exceeded", "Maximum allowed dimension exceeded")


def human_bytes(n: int) -> str:
    """1536 -> '1.50 KiB'; binary units up to EiB."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024:
            return f"{n} bytes" if unit == "bytes" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} EiB"


def kernel_error(op, exc: BaseException, inputs: str, args: tuple, attrs: dict) -> BaseException:
    """The exception to raise, from `exc`, for op's kernel call with tensor arguments `args` (described by
    `inputs`) and attributes `attrs`: the same type where it can carry a message (MemoryError for
    numpy's allocation error), else OpError."""
    raw = str(exc)
    sizes = isinstance(exc, MemoryError) or any(t in raw for t in _SIZE_TEXTS)
    if isinstance(exc, MemoryError):
        text = _memory_text(exc)
    elif sizes:
        text = f"the result would be too large to allocate (numpy: {raw})"
    else:
        text = raw
    if "argument '" not in text:   # the kernel's own checks name their argument already
        suspects = _suspects(op, args, attrs, sizes)
        if suspects:
            text = f"{'; '.join(suspects)}: {text}"
    message = f"{op.display}(): {text} (inputs: {inputs or 'none'}"
    message += f"; attributes: {_attrs_text(attrs)})" if attrs else ")"
    kind = MemoryError if isinstance(exc, MemoryError) else type(exc)
    try:
        return kind(message)
    except Exception:   # an exception type whose constructor wants other arguments
        from oarlock.dispatch import OpError
        return OpError(message)


def scalar_error(op, name: str, value, dtype) -> BaseException:
    """The error for a Python number that cannot become an input of `dtype` (int32 x * 2**40): fit_scalar's
    message, naming the op and the argument."""
    what = f"{op.display}(): argument '{name}'"
    hint = f"; the op computes in {dtype.name}, its tensor input's dtype: cast that tensor to a wider dtype first"
    try:
        fit_scalar(value, dtype, what)
    except ScalarConversionError as exc:
        return ScalarConversionError(f"{exc}{hint}")
    return ScalarConversionError(f"{what} {value!r} cannot be converted to {dtype.name}{hint}")


def _memory_text(exc: MemoryError) -> str:
    shape, dtype = getattr(exc, "shape", None), getattr(exc, "dtype", None)
    if shape is None or dtype is None:
        return f"out of memory ({exc})" if str(exc) else "out of memory"
    nbytes = math.prod(shape) * dtype.itemsize
    return (f"out of memory: cannot allocate {human_bytes(nbytes)} ({nbytes} bytes) for an array of shape "
            f"{list(shape)} and dtype {dtype}")


def _suspects(op, args: tuple, attrs: dict, sizes: bool) -> list:
    """'argument ...' phrases for the values that explain a numpy failure: ints beyond int64, nan or inf,
    and (with sizes=True: an allocation failed) sizes and counts of at least 2**31 elements."""
    found = []
    values = [(p.name, a) for p, a in zip(op.tensor_params, args)] + list(attrs.items())
    for name, value in values:
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, numbers.Integral):
            if not _INT64[0] <= value <= _INT64[1]:
                found.append(f"argument '{name}' = {_SHORT.repr(value)} is beyond int64")
            elif sizes and abs(value) >= _BIG:
                found.append(f"argument '{name}' = {value}")
        elif isinstance(value, numbers.Real) and not math.isfinite(value):
            found.append(f"argument '{name}' is {value}")
        elif sizes and isinstance(value, (tuple, list)) and value and \
                all(isinstance(v, numbers.Integral) for v in value):
            count = math.prod(abs(int(v)) for v in value)
            if count >= _BIG:
                found.append(f"argument '{name}' = {list(value)} asks for {count} elements")
    return found


def _attrs_text(attrs: dict) -> str:
    """The attributes, each shortened (a to_tensor of a million-element list must not print it)."""
    return "{" + ", ".join(f"{k!r}: {_SHORT.repr(v)}" for k, v in attrs.items()) + "}"
