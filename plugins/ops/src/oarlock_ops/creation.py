"""Creation ops: to_tensor, zeros/ones/full/empty (and *_like), eye, arange, linspace, clone, and the
random ops rand/randn/randint/uniform/normal.

Creation ops take Paddle's arguments plus the torch-style keywords Paddle 3.2 added: `device` (an
alias of `place`) and `requires_grad`. The dispatcher consumes those two itself (placement and the
output's stop_gradient), so kernels never see them. Random kernels draw from the device generator
they are given, which is what makes `oarlock.seed(n)` reproduce their results.
"""

from __future__ import annotations

import numbers

import numpy as np

from oarlock import dtypes as D

# the keywords every creation op without a tensor input takes after its own arguments
_PLACED = "place: Place|None = None, requires_grad: bool = False"
_DEVICE = {"device": "place"}


def _data_to_host(value):
    """to_tensor's data as something numpy takes: Tensors become host arrays, lists stay lists."""
    from oarlock import Tensor
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return [_data_to_host(v) for v in value]
    return value


def _default_dtype_for(data):
    """Paddle's rule: Python floats -> default float, ints -> int64, bools -> bool; arrays keep theirs."""
    if isinstance(data, np.ndarray) or isinstance(data, np.generic):
        return None
    probe = np.asarray(data)
    if probe.dtype.kind == "f":
        return D.get_default_dtype().np
    if probe.dtype.kind == "c":
        return D.default_for_kind("complex").np
    if probe.dtype.kind in "iu":
        return np.dtype(np.int64)
    if probe.dtype.kind == "b":
        return np.dtype(np.bool_)
    raise TypeError(f"cannot make a tensor from {type(data).__name__} data (numpy sees dtype {probe.dtype})")


def _float(dtype):
    """The dtype a float creation op makes: the one asked for, else the default float dtype."""
    return D.get_default_dtype().np if dtype is None else dtype


def _fill_dtype(value):
    """paddle.full's rule when no dtype is given: bool -> bool, complex -> complex128, else default float."""
    if isinstance(value, bool):
        return np.dtype(np.bool_)
    if isinstance(value, complex):
        return np.dtype(np.complex128)
    return D.get_default_dtype().np


def _count(name, value):
    """A size argument (num_rows, num): a non-negative integer (0-d integer tensors arrive as ints)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {type(value).__name__} {value!r}")
    return int(value)


# -- kernels ---------------------------------------------------------------------------------------

def _to_tensor(xp, data, dtype=None):
    data = _data_to_host(data)
    if dtype is None:
        dtype = _default_dtype_for(data)
    return xp.array(data, dtype=dtype, copy=True)


def _eye(xp, num_rows, num_columns=None, dtype=None):
    rows = _count("num_rows", num_rows)
    cols = rows if num_columns is None else _count("num_columns", num_columns)
    return xp.eye(rows, cols, dtype=_float(dtype))


def _arange(xp, start=0, end=None, step=1, dtype=None):
    if end is None:  # arange(5) counts from 0 to 5
        start, end = 0, start
    if step == 0:
        raise ValueError("step must not be 0")
    if dtype is None:  # Paddle: all-int arguments give int64, any float gives the default float dtype
        integral = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = np.dtype(np.int64) if integral else D.get_default_dtype().np
    if xp.dtype(dtype).kind in "iu" or dtype in (np.float32, np.float64):
        return xp.arange(start, end, step, dtype=dtype)
    return xp.arange(start, end, step, dtype=np.float64).astype(dtype)  # bfloat16/float16: no native arange


def _linspace(xp, start, stop, num, dtype=None):
    # computed in float64 and cast: integer dtypes truncate toward zero like Paddle's kernel
    return xp.linspace(start, stop, _count("num", num), dtype=np.float64).astype(_float(dtype))


def _uniform_draw(xp, generator, shape, dtype, low, high):
    """Uniform samples in [low, high) of `dtype`; values that rounding carried onto `high` wrap to `low`."""
    u = generator.random(shape, dtype=np.float64)
    out = (low + (high - low) * u).astype(dtype)
    return xp.where(out >= high, xp.asarray(low, dtype=dtype), out)


def _rand(xp, shape, dtype=None, *, generator):
    return _uniform_draw(xp, generator, shape, _float(dtype), 0.0, 1.0)


def _uniform(xp, shape, dtype=None, min=-1.0, max=1.0, seed=0, *, generator):
    if not min < max:
        raise ValueError(f"min must be less than max, got min={min}, max={max}")
    if seed:  # Paddle: a non-zero seed gives a private, reproducible stream
        generator = xp.random.default_rng(seed)
    return _uniform_draw(xp, generator, shape, _float(dtype), min, max)


def _randn(xp, shape, dtype=None, *, generator):
    return generator.standard_normal(shape, dtype=np.float64).astype(_float(dtype))


def _randint(xp, low=0, high=None, shape=(1,), dtype=None, *, generator):
    if high is None:  # randint(5) draws from [0, 5)
        low, high = 0, low
    if low >= high:
        raise ValueError(f"low must be less than high, got low={low}, high={high}")
    dtype = np.dtype(np.int64) if dtype is None else dtype
    if dtype not in (np.int32, np.int64):
        raise TypeError(f"dtype must be int32 or int64, got {dtype.name}")
    return generator.integers(low, high, size=shape, dtype=dtype)


def _normal(xp, mean, std, shape=None, *, generator):
    if shape is not None and mean.ndim == 0 and std.ndim == 0:
        out_shape = tuple(shape)
    else:  # tensor mean/std decide the shape (Paddle ignores `shape` then)
        out_shape = np.broadcast_shapes(mean.shape, std.shape)  # shape arithmetic on the host
    if xp.any(std < 0):
        raise ValueError("std must be non-negative")
    z = generator.standard_normal(out_shape, dtype=np.float64)
    return (z * std + mean).astype(mean.dtype)


def _fill_kernel(fill):
    """zeros/ones/empty: xp.<fill>(shape, dtype), defaulting to the default float dtype."""
    return lambda xp, shape, dtype=None: getattr(xp, fill)(shape, dtype=_float(dtype))


def _like_kernel(fill):
    """zeros_like/ones_like/empty_like: xp.<fill>(x, dtype), keeping x's dtype by default."""
    return lambda xp, x, dtype=None: getattr(xp, fill)(x, dtype=dtype)


def _identity_grad(ctx, g):
    return g


def register(ops):
    ops.define("to_tensor(data: Any, dtype: DType|None = None, place: Place|None = None, "
               "stop_gradient: bool = True) -> Tensor",
               public=["oarlock.to_tensor"], aliases=_DEVICE,
               doc="Make a tensor from Python data, a numpy array or a Tensor (copied).")
    ops.kernel("to_tensor")(_to_tensor)

    # -- constant fills ---------------------------------------------------------------------------
    for name, what in (("zeros", "zeros"), ("ones", "ones"), ("empty", "uninitialised values")):
        ops.define(f"{name}(shape: Shape, dtype: DType|None = None, {_PLACED}) -> Tensor", public=[name],
                   varargs="shape", aliases={"size": "shape", **_DEVICE},
                   doc=f"A tensor of `shape` holding {what}; dtype defaults to the default float dtype.")
        ops.kernel(name)(_fill_kernel(name))

    ops.define(f"full(shape: Shape, fill_value: Scalar, dtype: DType|None = None, {_PLACED}) -> Tensor",
               public=["full"], aliases={"size": "shape", **_DEVICE},
               doc="A tensor of `shape` filled with fill_value; without dtype, a bool value gives bool, "
                   "a complex one complex128 and any other number the default float dtype (Paddle's rule).")
    ops.kernel("full")(lambda xp, shape, fill_value, dtype=None:
                       xp.full(shape, fill_value, dtype=_fill_dtype(fill_value) if dtype is None else dtype))

    for name, what in (("zeros_like", "Zeros"), ("ones_like", "Ones"), ("empty_like", "Uninitialised values")):
        ops.define(f"{name}(x: Tensor, dtype: DType|None = None, requires_grad: bool = False) -> Tensor",
                   public=[name], aliases={"input": "x"},
                   doc=f"{what} in x's shape, with x's dtype unless dtype is given.")
        ops.kernel(name)(_like_kernel(name))
    ops.define("full_like(x: Tensor, fill_value: Scalar, dtype: DType|None = None, "
               "requires_grad: bool = False) -> Tensor", public=["full_like"], aliases={"input": "x"},
               doc="fill_value in x's shape, with x's dtype unless dtype is given.")
    ops.kernel("full_like")(lambda xp, x, fill_value, dtype=None:
                            xp.full(x.shape, fill_value, dtype=x.dtype if dtype is None else dtype))

    # -- ranges -----------------------------------------------------------------------------------
    ops.define(f"eye(num_rows: Scalar, num_columns: Scalar|None = None, dtype: DType|None = None, "
               f"{_PLACED}) -> Tensor", public=["eye"], aliases={"n": "num_rows", "m": "num_columns", **_DEVICE},
               doc="A [num_rows, num_columns] matrix with ones on the diagonal.")
    ops.kernel("eye")(_eye)
    ops.define(f"arange(start: Scalar = 0, end: Scalar|None = None, step: Scalar = 1, dtype: DType|None = None, "
               f"{_PLACED}) -> Tensor", public=["arange"], aliases=_DEVICE, dtypes=("int", "float"),
               doc="Values from start (inclusive) to end (exclusive) by step; arange(n) counts 0..n-1. "
                   "Integer arguments give int64, any float argument the default float dtype.")
    ops.kernel("arange")(_arange)
    ops.define(f"linspace(start: Scalar, stop: Scalar, num: Scalar, dtype: DType|None = None, "
               f"{_PLACED}) -> Tensor", public=["linspace"], aliases=_DEVICE, dtypes=("int", "float"),
               doc="num evenly spaced values from start to stop, both included.")
    ops.kernel("linspace")(_linspace)

    ops.define("clone(x: Tensor) -> Tensor", public=["clone"], aliases={"input": "x"}, grad=_identity_grad,
               doc="A copy of x that gradients flow through (Tensor.clone calls it too).")
    ops.kernel("clone")(lambda xp, x: x.copy())

    # -- random -----------------------------------------------------------------------------------
    float_only = ("float",)
    ops.define(f"rand(shape: Shape, dtype: DType|None = None, {_PLACED}) -> Tensor", public=["rand"],
               varargs="shape", aliases={"size": "shape", **_DEVICE}, random=True, dtypes=float_only,
               doc="Uniform samples in [0, 1).")
    ops.kernel("rand")(_rand)
    ops.define(f"randn(shape: Shape, dtype: DType|None = None, {_PLACED}) -> Tensor",
               public=["randn", "standard_normal"], varargs="shape", aliases={"size": "shape", **_DEVICE},
               random=True, dtypes=float_only, doc="Standard normal samples (mean 0, std 1).")
    ops.kernel("randn")(_randn)
    ops.define(f"uniform(shape: Shape, dtype: DType|None = None, min: float = -1.0, max: float = 1.0, "
               f"seed: int = 0, {_PLACED}) -> Tensor", public=["uniform"], aliases=_DEVICE, random=True,
               dtypes=float_only, doc="Uniform samples in [min, max); a non-zero seed gives its own stream.")
    ops.kernel("uniform")(_uniform)
    # randint's dtype defaults to int64, which the dispatcher cannot know: the kernel checks it
    ops.define(f"randint(low: int = 0, high: int|None = None, shape: Shape = [1], dtype: DType|None = None, "
               f"{_PLACED}) -> Tensor", public=["randint"], aliases={"size": "shape", **_DEVICE}, random=True,
               doc="Integers drawn uniformly from [low, high), or from [0, low) when high is None; int64 "
                   "unless dtype is int32.")
    ops.kernel("randint")(_randint)
    ops.define("normal(mean: TensorOrScalar = 0.0, std: TensorOrScalar = 1.0, shape: Shape|None = None) -> Tensor",
               public=["normal"], promote=True, to_float=True, dtypes=("int", "float"), random=True,
               doc="Normal samples; tensor mean/std give the shape (broadcast), otherwise `shape` does.")
    ops.kernel("normal")(_normal)

