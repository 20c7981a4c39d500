"""Creation ops: to_tensor/tensor, zeros/ones/full/empty, eye, arange, range, linspace, clone, and the
random ops rand/randn/randint/uniform/normal; and the Python-level creation functions built on them:
the *_like family (zeros_like ... rand_like, randn_like) and as_tensor.

Creation ops take Paddle's arguments plus the torch-style keywords Paddle 3.2 added: `device` (an
alias of `place`), `requires_grad`, `pin_memory` (accepted; it changes nothing for the tensors this
framework makes) and `out` (every op frontend has it). The dispatcher consumes device, requires_grad
and pin_memory itself, so kernels never see them. Sizes come as a list/tuple, as varargs
(`zeros(2, 3)`) or as `size=` (an alias of `shape`). Random kernels draw from the device generator
they are given, which is what makes `oarlock.seed(n)` reproduce their results.

The *_like functions are plain functions over the fill ops rather than ops of their own: an op takes
its place from its tensor inputs, and `zeros_like(x, device=...)` must be able to put the result
somewhere else. Being no op, they never reach a Tensor subclass's `__oarlock_dispatch__`; a subclass
that lays its results out itself (a distributed tensor) defines instead
`__oarlock_like__(x, build, random) -> Tensor`, where `build(shape)` makes the plain filled tensor of
that shape (with every other argument applied) and `random` says whether its values are random draws.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

import oarlock
from oarlock import dtypes as D
from oarlock.plugin_api import default_registry, wrap
from oarlock_ops.draws import normal_into, uniform_into
from oarlock_ops.pydata import python_data_array

# the keywords every creation op without a tensor input takes after its own arguments
_PLACED = "place: Place|None = None, requires_grad: bool = False, pin_memory: bool = False"
_DEVICE = {"device": "place"}
_SIZE = {"size": "shape", **_DEVICE}


def _data_to_host(value):
    """to_tensor's data as something numpy takes: Tensors become host arrays, lists stay lists."""
    from oarlock import Tensor
    if isinstance(value, Tensor):
        return value.numpy()
    if isinstance(value, (list, tuple)) and any(isinstance(v, Tensor) for v in value):
        return [_data_to_host(v) for v in value]
    return value


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


def _shape(shape):
    """A kernel's shape attribute, checked: the Shape converter already made it a tuple of ints."""
    if any(n < 0 for n in shape):
        raise ValueError(f"argument 'shape' must hold non-negative sizes, got {list(shape)}")
    return shape


def _count(name, value):
    """A size argument (num_rows, num): a non-negative integer (0-d integer tensors arrive as ints)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 0:
        raise ValueError(f"argument '{name}' must be a non-negative int, got {type(value).__name__} {value!r}")
    return int(value)


# -- kernels ---------------------------------------------------------------------------------------

def _to_tensor(xp, data, dtype=None):
    data = _data_to_host(data)
    if isinstance(data, (np.ndarray, np.generic)):   # arrays (and Tensors) keep their dtype and numpy's casts
        return xp.array(data, dtype=dtype, copy=True)
    host = python_data_array(data, dtype)   # Python data: checked (no nan into int32, ...)
    return host if xp is np else xp.asarray(host)


def _full(xp, shape, fill_value, dtype=None):
    dtype = _fill_dtype(fill_value) if dtype is None else dtype
    # checked like PyTorch: full([2], nan, dtype='int32') raises instead of filling -2147483648
    return xp.full(_shape(shape), D.fit_scalar(fill_value, dtype, "argument 'fill_value'"), dtype=dtype)


def _eye(xp, num_rows, num_columns=None, dtype=None):
    rows = _count("num_rows", num_rows)
    cols = rows if num_columns is None else _count("num_columns", num_columns)
    return xp.eye(rows, cols, dtype=_float(dtype))


def _arange(xp, start=0, end=None, step=1, dtype=None):
    if end is None:  # arange(5) counts from 0 to 5
        start, end = 0, start
    if step == 0:
        raise ValueError("argument 'step' must not be 0")
    if dtype is None:  # Paddle: all-int arguments give int64, any float gives the default float dtype
        integral = all(isinstance(v, numbers.Integral) for v in (start, end, step))
        dtype = np.dtype(np.int64) if integral else D.get_default_dtype().np
    if xp.dtype(dtype).kind in "iu" or dtype in (np.float32, np.float64):
        return xp.arange(start, end, step, dtype=dtype)
    return xp.arange(start, end, step, dtype=np.float64).astype(dtype)  # bfloat16/float16: no native arange


def _range(xp, start=0, end=None, step=1, dtype=None):
    """Paddle's closed range [start, end]. As in Paddle's kernel, start, end and step are first cast
    to the result dtype, the count is floor((end - start) / step) + 1 computed in that dtype, and the
    values accumulate step by step in it (so float32 results match Paddle's to the bit)."""
    if end is None:  # range(5) is [0, 5]
        start, end = 0, start
    dt = np.dtype(_float(dtype))
    # bfloat16/float16 have no native numpy arithmetic: count and accumulate in float32, then cast
    work = dt if dt.kind in "iu" or dt in (np.float32, np.float64) else np.dtype(np.float32)
    try:
        first, last, delta = (work.type(v) for v in (start, end, step))
    except (OverflowError, ValueError):  # inf, nan or a too large number for an integer dtype
        raise ValueError(f"start, end and step must be finite and fit {dt.name}, got start={start}, end={end}, "
                         f"step={step}") from None
    if delta == 0:
        cast = "" if step == 0 else f" (step={step} is 0 once cast to {dt.name})"
        raise ValueError(f"argument 'step' must not be 0{cast}")
    if work.kind in "iu":
        count = (int(last) - int(first)) // int(delta) + 1
    else:
        quotient = (last - first) / delta
        if not math.isfinite(quotient):
            raise ValueError(f"start, end and step must be finite, got start={start}, end={end}, step={step}")
        count = math.floor(quotient) + 1
    if count <= 0:
        return xp.zeros((0,), dtype=dt)
    steps = xp.concatenate([xp.asarray([first], dtype=work), xp.full((count - 1,), delta, dtype=work)])
    return xp.cumsum(steps, dtype=work).astype(dt)


def _linspace(xp, start, stop, num, dtype=None):
    # computed in float64 and cast: integer dtypes truncate toward zero like Paddle's kernel
    return xp.linspace(start, stop, _count("num", num), dtype=np.float64).astype(_float(dtype))


def _uniform_stream(xp, min, max, seed, generator):
    """The generator uniform/uniform_ draw from, after checking their range."""
    if not min < max:
        raise ValueError(f"min must be less than max, got min={min}, max={max}")
    return xp.random.default_rng(seed) if seed else generator  # Paddle: a non-zero seed, a private stream


# the random kernels fill their result in place, a block at a time (see draws.py): peak memory is the
# result plus one block, where drawing a float64 array and transforming it took up to 5x the result
def _rand(xp, shape, dtype=None, *, generator):
    return uniform_into(xp, generator, xp.empty(_shape(shape), dtype=_float(dtype)), 0.0, 1.0)


def _uniform(xp, shape, dtype=None, min=-1.0, max=1.0, seed=0, *, generator):
    generator = _uniform_stream(xp, min, max, seed, generator)
    return uniform_into(xp, generator, xp.empty(_shape(shape), dtype=_float(dtype)), min, max)


def _uniform_fill(xp, x, min=-1.0, max=1.0, seed=0, *, generator):
    return uniform_into(xp, _uniform_stream(xp, min, max, seed, generator), x, min, max)


def _randn(xp, shape, dtype=None, *, generator):
    return normal_into(xp, generator, xp.empty(_shape(shape), dtype=_float(dtype)))


def _randint(xp, low=0, high=None, shape=(1,), dtype=None, *, generator):
    if high is None:  # randint(5) draws from [0, 5)
        low, high = 0, low
    if low >= high:
        raise ValueError(f"low must be less than high, got low={low}, high={high}")
    dtype = np.dtype(np.int64) if dtype is None else dtype
    if dtype not in (np.int32, np.int64):
        raise TypeError(f"dtype must be int32 or int64, got {dtype.name}")
    return generator.integers(low, high, size=_shape(shape), dtype=dtype)


def _normal(xp, mean, std, shape=None, *, generator):
    if shape is not None and mean.ndim == 0 and std.ndim == 0:
        out_shape = _shape(shape)
    else:  # tensor mean/std decide the shape (Paddle ignores `shape` then)
        out_shape = np.broadcast_shapes(mean.shape, std.shape)  # shape arithmetic on the host
    if xp.any(std < 0):
        raise ValueError("std must be non-negative")
    return normal_into(xp, generator, xp.empty(out_shape, dtype=mean.dtype), mean, std)


def _fill_kernel(fill):
    """zeros/ones/empty: xp.<fill>(shape, dtype), defaulting to the default float dtype."""
    return lambda xp, shape, dtype=None: getattr(xp, fill)(_shape(shape), dtype=_float(dtype))


def _identity_grad(ctx, g):
    return g


def register(ops):
    ops.define("to_tensor(data: Any, dtype: DType|None = None, place: Place|None = None, "
               "stop_gradient: bool = True) -> Tensor",
               public=["oarlock.to_tensor"], aliases=_DEVICE,
               doc="Make a tensor from Python data, a numpy array or a Tensor (copied).")
    ops.kernel("to_tensor")(_to_tensor)
    ops.define("tensor(data: Any, dtype: DType|None = None, device: Place|None = None, requires_grad: bool = False, "
               "pin_memory: bool = False) -> Tensor", internal=True, display="oarlock.tensor",
               aliases={"place": "device"},   # public as oarlock.tensor through paddle_math's TensorFunctionOrModule
               doc="torch.tensor / paddle.tensor: a copy of `data` (Python data, a numpy array or a Tensor, "
                   "which is detached) with to_tensor's dtype rules, on `device`.")
    ops.kernel("tensor")(_to_tensor)

    # -- constant fills ---------------------------------------------------------------------------
    for name, what in (("zeros", "zeros"), ("ones", "ones"), ("empty", "uninitialised values")):
        ops.define(f"{name}(shape: Shape, dtype: DType|None = None, {_PLACED}) -> Tensor", public=[name],
                   varargs="shape", aliases=_SIZE,
                   doc=f"A tensor of `shape` holding {what}; dtype defaults to the default float dtype.")
        ops.kernel(name)(_fill_kernel(name))

    # no varargs: in full(2, 3, 7) the fill value could not be told from the sizes
    ops.define(f"full(shape: Shape, fill_value: Scalar, dtype: DType|None = None, {_PLACED}) -> Tensor",
               public=["full"], aliases=_SIZE,
               doc="A tensor of `shape` filled with fill_value; without dtype, a bool value gives bool, "
                   "a complex one complex128 and any other number the default float dtype (Paddle's rule).")
    ops.kernel("full")(_full)

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
    ops.define(f"range(start: Scalar = 0, end: Scalar|None = None, step: Scalar = 1, dtype: DType|None = None, "
               f"{_PLACED}) -> Tensor", public=["range"], aliases=_DEVICE, dtypes=("int", "float"),
               doc="Values from start to end, BOTH included, by step (Paddle 3.2's range; arange excludes "
                   "end); range(n) is [0, n]. The dtype defaults to the default float dtype, whatever the "
                   "arguments; start, end and step are cast to it first.")
    ops.kernel("range")(_range)
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
               varargs="shape", aliases=_SIZE, random=True, dtypes=float_only, doc="Uniform samples in [0, 1).")
    ops.kernel("rand")(_rand)
    ops.define(f"randn(shape: Shape, dtype: DType|None = None, {_PLACED}) -> Tensor",
               public=["randn", "standard_normal"], varargs="shape", aliases=_SIZE,
               random=True, dtypes=float_only, doc="Standard normal samples (mean 0, std 1).")
    ops.kernel("randn")(_randn)
    ops.define(f"uniform(shape: Shape, dtype: DType|None = None, min: float = -1.0, max: float = 1.0, "
               f"seed: int = 0, {_PLACED}) -> Tensor", public=["uniform"], varargs="shape", aliases=_SIZE,
               random=True, dtypes=float_only,
               doc="Uniform samples in [min, max); a non-zero seed gives its own stream.")
    ops.kernel("uniform")(_uniform)
    ops.define("uniform_(x: Tensor, min: float = -1.0, max: float = 1.0, seed: int = 0) -> Tensor",
               public=["Tensor.uniform_"], dtypes=("float",), random=True, inplace="x",
               grad=lambda ctx, g: (None,), doc="Fill x with uniform samples in [min, max), in place; returns x. "
                                                "The old values get no gradient.")
    ops.kernel("uniform_")(_uniform_fill)
    # randint's dtype defaults to int64, which the dispatcher cannot know: the kernel checks it
    ops.define(f"randint(low: int = 0, high: int|None = None, shape: Shape = [1], dtype: DType|None = None, "
               f"{_PLACED}) -> Tensor", public=["randint"], aliases=_SIZE, random=True,
               doc="Integers drawn uniformly from [low, high), or from [0, low) when high is None; int64 "
                   "unless dtype is int32.")
    ops.kernel("randint")(_randint)
    # no device: with tensor mean/std the result lives where they do
    ops.define("normal(mean: TensorOrScalar = 0.0, std: TensorOrScalar = 1.0, shape: Shape|None = None, "
               "requires_grad: bool = False) -> Tensor",
               public=["normal"], aliases={"size": "shape"}, promote=True, to_float=True, dtypes=("int", "float"),
               random=True, doc="Normal samples; tensor mean/std give the shape (broadcast), otherwise `shape` does.")
    ops.kernel("normal")(_normal)


# -- Python-level creation functions: argument helpers ------------------------------------------------
# These functions check their own arguments so that an error names them (zeros_like, Tensor.new_zeros)
# and the argument the caller gave, not the fill op they call.

_UNSET = object()


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def tensor_arg(fn: str, x, input=_UNSET, name: str = "x"):
    """`x` or its alias `input` (only one of them), which must be a Tensor."""
    if input is not _UNSET:
        if x is not _UNSET:
            raise TypeError(f"{fn}(): got both '{name}' and its alias 'input'; pass only one")
        x = input
    if x is _UNSET:
        raise TypeError(f"{fn}() missing required argument '{name}' (a Tensor)")
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{fn}(): argument '{name}' must be a Tensor, got {type(x).__name__} {x!r}")
    return x


def dtype_arg(fn: str, dtype, default):
    """A DType from any dtype spelling; `default` when dtype is None."""
    if dtype is None:
        return default
    try:
        return D.convert_dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{fn}(): argument 'dtype' must be a dtype (e.g. 'float32' or oarlock.float32), "
                        f"got {type(dtype).__name__} {dtype!r}") from None


def place_arg(fn: str, device, default):
    """A Place from a device string or Place; `default` when device is None."""
    if device is None:
        return default
    return default_registry().parse_place(device, what=f"{fn}(): argument 'device'")


def flag_arg(fn: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}(): argument '{name}' must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def fill_arg(fn: str, value):
    """A fill value: a Python/numpy number or a one-element Tensor (taken as its number)."""
    if isinstance(value, oarlock.Tensor) and value.size == 1:
        return value.item()
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, (str, bytes)):
        return value
    raise TypeError(f"{fn}(): argument 'fill_value' must be a number or a one-element Tensor, "
                    f"got {type(value).__name__} {value!r}")


def sizes_arg(fn: str, name: str, args) -> list:
    """Sizes given as varargs (2, 3) or as one list/tuple/int Tensor ([2, 3]); each a non-negative int
    (a one-element integer Tensor counts as its int)."""
    sizes = args[0] if len(args) == 1 and not _is_int(args[0]) else args
    if isinstance(sizes, oarlock.Tensor) and sizes.dtype.kind == "int":
        sizes = sizes.tolist()
        sizes = [sizes] if _is_int(sizes) else sizes
    if isinstance(sizes, (list, tuple)):
        sizes = [int(s.item()) if isinstance(s, oarlock.Tensor) and s.size == 1 and s.dtype.kind == "int" else s
                 for s in sizes]
    if not isinstance(sizes, (list, tuple)) or not all(_is_int(s) for s in sizes):
        given = args[0] if len(args) == 1 else args
        raise TypeError(f"{fn}(): argument '{name}' must be ints, or one list/tuple of ints, "
                        f"got {type(given).__name__} {given!r}")
    if any(s < 0 for s in sizes):
        raise ValueError(f"{fn}(): argument '{name}' must hold non-negative sizes, got {list(sizes)}")
    return [int(s) for s in sizes]


def make_filled(fn: str, fill: str, shape, fill_value, dtype, place, requires_grad, pin_memory):
    """The fill op `fill` (zeros, ones, empty, full, rand, randn) called with checked arguments."""
    flag_arg(fn, "pin_memory", pin_memory)  # accepted, no effect: see the module docstring
    rg = flag_arg(fn, "requires_grad", requires_grad)
    op = getattr(oarlock, fill)
    if fill == "full":
        return op(shape, fill_value, dtype=dtype, place=place, requires_grad=rg)
    return op(shape, dtype=dtype, place=place, requires_grad=rg)


# -- the *_like family and as_tensor ---------------------------------------------------------------------

def _like(fill: str, what: str, floating: bool = False):
    """zeros_like, ones_like, empty_like, rand_like, randn_like: `fill` in x's shape, with x's dtype and
    device unless dtype/device are given."""
    public = f"oarlock.{fill}_like"

    def like(x=_UNSET, dtype=None, name=None, *, input=_UNSET, device=None, requires_grad=False,
             pin_memory=False):
        x = tensor_arg(public, x, input)
        dt = dtype_arg(public, dtype, x.dtype)
        if floating and not dt.is_floating_point:
            raise TypeError(f"{public}(): random samples need a floating-point dtype, and "
                            f"{'x has' if dtype is None else 'dtype is'} {dt.name}; pass dtype='float32' (or "
                            f"another float dtype)")
        place = place_arg(public, device, x.place)
        return _laid_out_like(x, lambda shape: make_filled(public, fill, shape, None, dt, place, requires_grad,
                                                           pin_memory), fill in ("rand", "randn"))

    like.__name__ = like.__qualname__ = f"{fill}_like"
    like.__doc__ = (f"{public}(x, dtype=None, name=None, *, device=None, requires_grad=False, pin_memory=False): "
                    f"{what} in x's shape, with x's dtype and device unless dtype/device are given (alias of x: "
                    f"input).")
    return like


def full_like(x=_UNSET, fill_value=_UNSET, dtype=None, name=None, *, input=_UNSET, device=None,
              requires_grad=False, pin_memory=False):
    """fill_value in x's shape, with x's dtype and device unless dtype/device are given (alias of x: input)."""
    public = "oarlock.full_like"
    x = tensor_arg(public, x, input)
    if fill_value is _UNSET:
        raise TypeError(f"{public}() missing required argument 'fill_value'")
    value, dt = fill_arg(public, fill_value), dtype_arg(public, dtype, x.dtype)
    place = place_arg(public, device, x.place)
    return _laid_out_like(x, lambda shape: make_filled(public, "full", shape, value, dt, place, requires_grad,
                                                       pin_memory), False)


def _laid_out_like(x, build, random: bool):
    """build(x.shape), or what x's class makes of `build` when it lays its results out itself (the module
    docstring's `__oarlock_like__`)."""
    hook = getattr(type(x), "__oarlock_like__", None)
    return build(x.shape) if hook is None else hook(x, build, random)


def as_tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """`data` as a Tensor, sharing memory where it can (torch.as_tensor): a Tensor of the asked dtype
    and device is returned itself, and a numpy array is wrapped without a copy when the device's
    arrays are numpy arrays and no other dtype is asked for. Anything else is converted (a Tensor
    differentiably, with .to / astype) or copied (Python data, like to_tensor). With
    requires_grad=True the result requires a gradient; a tensor that would come back unchanged
    comes back detached (sharing memory) so the caller's tensor is left as it was."""
    public = "oarlock.as_tensor"
    from oarlock.device import default_place
    dt = dtype_arg(public, dtype, None)
    place = place_arg(public, device, None)
    flag_arg(public, "pin_memory", pin_memory)
    if isinstance(data, oarlock.Tensor):
        out = data if place is None or place is data.place else data.to(place)
        out = out if dt is None or dt is out.dtype else out.astype(dt)
    else:
        target = place or default_place()
        shared = (data.__class__ is np.ndarray and target.backend.xp is np
                  and (dt is None or dt.np == data.dtype) and _known_dtype(data.dtype))
        out = wrap(data, target) if shared else oarlock.to_tensor(data, dtype=dt, place=target)
    if flag_arg(public, "requires_grad", requires_grad) and out.stop_gradient:
        out = (out.detach() if out is data else out).requires_grad_()
    return out


def _known_dtype(np_dtype) -> bool:
    try:
        D.from_numpy_dtype(np_dtype)
        return True
    except (TypeError, ValueError):
        return False


def register_api(api):
    """Export the Python-level creation functions."""
    for fill, what, floating in (("zeros", "Zeros", False), ("ones", "Ones", False),
                                 ("empty", "Uninitialised values", False),
                                 ("rand", "Uniform samples in [0, 1)", True),
                                 ("randn", "Standard normal samples", True)):
        api.export("oarlock", f"{fill}_like", _like(fill, what, floating))
    api.export("oarlock", "full_like", full_like)
    api.export("oarlock", "as_tensor", as_tensor)
