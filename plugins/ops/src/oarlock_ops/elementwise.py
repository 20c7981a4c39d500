"""Elementwise ops with broadcasting: arithmetic (with torch's `alpha` and `rounding_mode`) and its
in-place forms (add_, mul_, div_...), maximum/minimum, fmax/fmin, clip, where, comparisons, logical
and bitwise ops, predicates (isnan...), sign, rounding (floor, ceil, trunc), square, and cast. Float
math and activations are in unary.py.

Binary ops take Tensors or Python numbers, promoted together (PyTorch/Paddle 3 rules). The kernels
of the ops behind Python operators (+, <, &, ...) are single xp ufunc calls, so the dispatcher's fast
path costs one function call on top of the ufunc.

In-place ops follow torch: y broadcasts to x's shape (not the other way), the result is computed in
the promoted dtype and stored in x's dtype, and a result of a higher kind (a float into an integer
x) is refused. They are not differentiable (the dispatcher refuses them under grad mode when an
input wants a gradient).
"""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock import dtypes as D
from oarlock.dtypes import get_default_dtype
from oarlock_ops._inplace import define_variants
from oarlock_ops._grad import unbroadcast

NUMERIC = ("int", "float", "complex")
REAL = ("int", "float")
UNARY = "(x: Tensor) -> Tensor"
BINARY_ALIASES = {"input": "x", "other": "y"}
ROUNDING_MODES = (None, "trunc", "floor")


def binary(attrs=""):
    """The signature (after the name) of a binary op; `attrs` adds attribute parameters."""
    return f"(x: TensorOrScalar, y: TensorOrScalar{attrs}) -> Tensor"


BINARY = binary()


def public(names, functional=False):
    """The public names of an op: each spelling at top level and as a Tensor method, plus
    oarlock.nn.functional.<first name> for activations."""
    names = (names,) if isinstance(names, str) else names
    out = [qualified for name in names for qualified in (name, f"Tensor.{name}")]
    return out + [f"oarlock.nn.functional.{names[0]}"] if functional else out


def ufunc(name):
    """A kernel that is one call of xp.<name> (looked up on whichever xp it is given)."""
    return lambda xp, *arrays: getattr(xp, name)(*arrays)


def _nan_ignoring(name):
    """fmax/fmin. ml_dtypes' 16-bit loops warn about the very NaNs these skip, so 16-bit floats compute
    in float32 (exact: the result is one of the inputs)."""
    def kernel(xp, x, y):
        if x.dtype.itemsize < 4 and x.dtype.kind not in "biu":
            return getattr(xp, name)(x.astype(xp.float32), y.astype(xp.float32)).astype(x.dtype)
        return getattr(xp, name)(x, y)
    return kernel


def _check_integer_divisor(xp, y):
    """numpy returns 0 (with a warning) for an integer divided by zero; Paddle and PyTorch refuse, and
    so do we. Float division by zero gives inf/nan as usual."""
    if y.dtype.kind in "iu" and bool(xp.any(y == 0)):
        raise ValueError("integer division by zero: the divisor 'y' has zero elements")


def _integer_division(name):
    """floor_divide/remainder, refusing an integer division by zero."""
    def kernel(xp, x, y):
        _check_integer_divisor(xp, y)
        return getattr(xp, name)(x, y)
    return kernel


def _scaled(xp, y, alpha):
    """alpha * y in y's dtype (torch's `alpha` of add and sub): an integer tensor takes an integer alpha
    only, a real one a real alpha, as in torch."""
    if not isinstance(alpha, (int, float, complex, np.generic)):
        raise TypeError(f"argument 'alpha' must be a Python number, got {type(alpha).__name__} {alpha!r}")
    if (y.dtype.kind in "iu" and not isinstance(alpha, (int, np.integer))) or (
            y.dtype.kind != "c" and isinstance(alpha, (complex, np.complexfloating))):
        raise TypeError(f"argument 'alpha' must be {'an int' if y.dtype.kind in 'iu' else 'a real number'} "
                        f"for {y.dtype} input, got {type(alpha).__name__} {alpha!r}")
    return (y * alpha).astype(y.dtype, copy=False)  # ml_dtypes' bfloat16 times a float would be float32


# alpha is an Any attribute checked by _scaled, and alpha=1 is tested first: `x + y` runs add, and a
# Scalar converter plus a call would cost it a fifth of its time
def _add(xp, x, y, alpha=1):
    if alpha.__class__ is int and alpha == 1:
        return xp.add(x, y)
    return xp.add(x, _scaled(xp, y, alpha))


def _subtract(xp, x, y, alpha=1):
    if alpha.__class__ is int and alpha == 1:
        return xp.subtract(x, y)
    return xp.subtract(x, _scaled(xp, y, alpha))


def _divide(xp, x, y, rounding_mode=None):
    """True division (integers divide in the default float dtype), or torch's and Paddle 3.2's
    rounding_mode: 'trunc' rounds toward zero, 'floor' down (Python's //); both keep integer dtypes."""
    if rounding_mode is None:
        if x.dtype.kind in "biu":
            dtype = get_default_dtype().np
            x, y = x.astype(dtype), y.astype(dtype)
        return xp.divide(x, y)
    if rounding_mode not in ROUNDING_MODES:
        raise ValueError(f"argument 'rounding_mode' must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    if x.dtype.kind not in "iu":  # floats: floor is Python's // (exact, like torch), trunc rounds x / y
        return xp.floor_divide(x, y) if rounding_mode == "floor" else xp.trunc(xp.divide(x, y))
    _check_integer_divisor(xp, y)
    out = xp.floor_divide(x, y)
    if rounding_mode == "trunc":  # floor is one below trunc where the exact quotient is negative, not whole
        out += (xp.remainder(x, y) != 0) & ((x < 0) != (y < 0))
    return out


_KIND_ORDER = ("bool", "int", "float", "complex")


def _in_place(kernel):
    """The kernel of an in-place op from its out-of-place kernel: computes in the promoted dtype, then
    writes into x (see the module docstring for the rules)."""
    def run(xp, x, y, **attrs):
        x_dtype, y_dtype = D.from_numpy_dtype(x.dtype), D.from_numpy_dtype(y.dtype)
        work = D.promote_types(x_dtype, y_dtype).np
        out = kernel(xp, x.astype(work, copy=False), y.astype(work, copy=False), **attrs)
        if tuple(out.shape) != tuple(x.shape):
            raise ValueError(f"x (shape {list(x.shape)}) and y (shape {list(y.shape)}) broadcast to "
                             f"{list(out.shape)}, but an in-place op must keep x's shape; y must broadcast to x")
        out_dtype = D.from_numpy_dtype(out.dtype)
        if _KIND_ORDER.index(out_dtype.kind) > _KIND_ORDER.index(x_dtype.kind):
            raise TypeError(f"the result has dtype {out_dtype.name}, which cannot be stored in x of dtype "
                            f"{x_dtype.name}; use the out-of-place op, or cast x first")
        x[...] = out
        return x
    return run


def _clip(xp, x, min=None, max=None):
    dtype = x.dtype
    if dtype.kind in "iu" and (isinstance(min, float) or isinstance(max, float)):
        dtype = get_default_dtype().np  # a float bound makes an int tensor float (PyTorch, Paddle 3.3)
    out = x
    if min is not None:
        out = xp.maximum(out, min)
    if max is not None:
        out = xp.minimum(out, max)
    # numpy lifts bfloat16 with a Python float to float32, and int64 with a float to float64
    return out.astype(dtype, copy=out is x)


def _where(xp, condition, x, y):
    if condition.dtype != xp.bool_:
        raise TypeError(f"argument 'condition' must be a bool tensor, got dtype {condition.dtype}; "
                        f"compare first (e.g. x > 0) or cast it with .astype('bool')")
    return xp.where(condition, x, y)


# -- backward rules -----------------------------------------------------------------------------------

def _needs(ctx, i):
    return ctx.edges[i] is not None


def _add_grad(ctx, g):
    alpha = ctx.attrs["alpha"]
    return unbroadcast(ctx, 0, g), unbroadcast(ctx, 1, g if alpha == 1 else g * alpha) if _needs(ctx, 1) else None


def _subtract_grad(ctx, g):
    return unbroadcast(ctx, 0, g), unbroadcast(ctx, 1, g * -ctx.attrs["alpha"]) if _needs(ctx, 1) else None


def _zero_grads(ctx, *grads):
    """Rounded results are flat almost everywhere: every input that wants a gradient gets zeros (torch)."""
    return tuple(None if edge is None else oarlock.zeros(list(meta[0]), dtype=meta[1], place=ctx.place)
                 for edge, meta in zip(ctx.edges, ctx.meta))


def _overwritten(ctx, g):
    """fill_ / zero_: every old value is overwritten, so it gets no gradient."""
    return (None,)


def _fill_kernel(xp, x, value):
    x[...] = D.fit_scalar(value, x.dtype, "argument 'value'")   # no nan into an int tensor (PyTorch's check)
    return x


def _zero_kernel(xp, x):
    x[...] = 0
    return x


def _scale(xp, x, scale=1.0, bias=0.0, bias_after_scale=True):
    out = x * scale + bias if bias_after_scale else (x + bias) * scale
    return out.astype(x.dtype, copy=False)


def _scale_grad(ctx, g):
    return g * ctx.attrs["scale"]


def _multiply_grad(ctx, g):
    x, y = ctx.saved
    return (unbroadcast(ctx, 0, g * y) if _needs(ctx, 0) else None,
            unbroadcast(ctx, 1, g * x) if _needs(ctx, 1) else None)


def _divide_grad(ctx, g):
    if ctx.attrs["rounding_mode"] is not None:
        return _zero_grads(ctx, g)
    y, out = ctx.saved
    gx = g / y
    # d(x/y)/dy = -x/y^2 = -out/y
    return unbroadcast(ctx, 0, gx), unbroadcast(ctx, 1, -gx * out) if _needs(ctx, 1) else None


def _remainder_grad(ctx, g):
    # x mod y = x - floor(x/y) * y; floor is flat almost everywhere
    x, y = ctx.saved
    return unbroadcast(ctx, 0, g), unbroadcast(ctx, 1, -g * oarlock.floor_divide(x, y)) if _needs(ctx, 1) else None


def _pow_grad(ctx, g):
    x, y, out = ctx.saved
    # d(x^y)/dx = y x^(y-1), taken as 0 where y == 0 (PyTorch's convention, not 0 * 0^-1 = nan)
    gx = unbroadcast(ctx, 0, g * oarlock.where(y == 0, 0.0, y * x ** (y - 1))) if _needs(ctx, 0) else None
    gy = None
    if _needs(ctx, 1):
        # d(x^y)/dy = x^y log x; at x == 0 take log as 0, so 0^y (y >= 0) gets gradient 0 as in
        # PyTorch and Paddle instead of 0 * -inf = nan
        safe_x = oarlock.where(x == 0, 1.0, x)
        gy = unbroadcast(ctx, 1, g * out * oarlock.log(safe_x))
    return gx, gy


def _select_grad(ctx, g, x_wins):
    """maximum/minimum: the gradient goes to the selected input; ties split it evenly (as PyTorch and
    Paddle do), so the gradients of x and y always add up to g."""
    x, y = ctx.saved
    share = oarlock.where(x == y, 0.5, oarlock.cast(x_wins(x, y), g.dtype))
    return (unbroadcast(ctx, 0, g * share) if _needs(ctx, 0) else None,
            unbroadcast(ctx, 1, g * (1 - share)) if _needs(ctx, 1) else None)


def _maximum_grad(ctx, g):
    return _select_grad(ctx, g, oarlock.greater_than)


def _minimum_grad(ctx, g):
    return _select_grad(ctx, g, oarlock.less_than)


def _nan_select_grad(ctx, g, x_wins):
    """fmax/fmin: the gradient goes to the selected input; x takes ties and y's NaNs (torch and Paddle)."""
    x, y = ctx.saved
    to_x = x_wins(x, y) | oarlock.isnan(y)
    return (unbroadcast(ctx, 0, oarlock.where(to_x, g, 0.0)) if _needs(ctx, 0) else None,
            unbroadcast(ctx, 1, oarlock.where(to_x, 0.0, g)) if _needs(ctx, 1) else None)


def _fmax_grad(ctx, g):
    return _nan_select_grad(ctx, g, oarlock.greater_equal)


def _fmin_grad(ctx, g):
    return _nan_select_grad(ctx, g, oarlock.less_equal)


def _where_grad(ctx, g):
    (condition,) = ctx.saved
    return (None,
            unbroadcast(ctx, 1, oarlock.where(condition, g, 0.0)) if _needs(ctx, 1) else None,
            unbroadcast(ctx, 2, oarlock.where(condition, 0.0, g)) if _needs(ctx, 2) else None)


def _clip_grad(ctx, g):
    # the gradient passes where min <= x <= max (bounds included, as in PyTorch and Paddle)
    (x,) = ctx.saved
    low, high = ctx.attrs["min"], ctx.attrs["max"]
    inside = None
    if low is not None:
        inside = x >= low
    if high is not None:
        inside = x <= high if inside is None else inside & (x <= high)
    return g if inside is None else oarlock.where(inside, g, 0.0)


def _neg_grad(ctx, g):
    return -g


def _abs_grad(ctx, g):
    (x,) = ctx.saved
    return g * oarlock.sign(x)


def _square_grad(ctx, g):
    (x,) = ctx.saved
    return g * 2 * x


def _rounding(name):
    """floor/ceil/trunc: integers are already whole and keep their dtype (numpy would make them float)."""
    def kernel(xp, x):
        return x.copy() if x.dtype.kind in "biu" else getattr(xp, name)(x)
    return kernel


def _cast_grad(ctx, g):
    return oarlock.cast(g, ctx.meta[0][1])


# -- the tables ---------------------------------------------------------------------------------------

ALPHA = ", *, alpha: Any = 1"  # torch's add/sub(input, other, alpha=1): x + alpha * y
ROUNDING_MODE = ", *, rounding_mode: Any = None"  # checked by _divide (a converter would slow `x / y` down)

# name, other spellings, kernel, backward rule, saved tensors, accepted kinds, extra OpDef options
# ("attrs": attribute parameters after x and y)
ARITHMETIC = [
    ("add", (), _add, _add_grad, (), NUMERIC, {"attrs": ALPHA}),
    ("subtract", ("sub",), _subtract, _subtract_grad, (), NUMERIC, {"attrs": ALPHA}),
    ("multiply", ("mul",), ufunc("multiply"), _multiply_grad, ("x:y", "y:x"), NUMERIC, {}),
    # true division (integers divide in the default float dtype) or rounded division
    ("divide", ("div", "true_divide"), _divide, _divide_grad, ("y", "out:y"), REAL, {"attrs": ROUNDING_MODE}),
    ("floor_divide", (), _integer_division("floor_divide"), None, (), REAL, {}),
    # the sign of the divisor, like Python's % (numpy.remainder), not C's fmod
    ("remainder", ("mod", "floor_mod"), _integer_division("remainder"), _remainder_grad, ("x", "y"), REAL, {}),
    ("pow", (), ufunc("power"), _pow_grad, ("x", "y", "out:y"), REAL,
     {"aliases": {**BINARY_ALIASES, "exponent": "y"}, "amp": "black"}),
    ("maximum", (), ufunc("maximum"), _maximum_grad, ("x", "y"), REAL, {}),
    ("minimum", (), ufunc("minimum"), _minimum_grad, ("x", "y"), REAL, {}),
    # maximum/minimum that ignore a NaN operand
    ("fmax", (), _nan_ignoring("fmax"), _fmax_grad, ("x", "y"), REAL, {}),
    ("fmin", (), _nan_ignoring("fmin"), _fmin_grad, ("x", "y"), REAL, {}),
]

# in-place forms: name, the out-of-place op, public names
IN_PLACE = [
    ("add_", "add", ["Tensor.add_"]),
    ("subtract_", "subtract", ["Tensor.subtract_", "Tensor.sub_"]),
    ("multiply_", "multiply", ["multiply_", "Tensor.multiply_", "Tensor.mul_"]),
    ("divide_", "divide", ["divide_", "div_", "Tensor.divide_", "Tensor.div_"]),
]

# binary ops without a gradient: name, other spellings, xp function, accepted kinds (None: all)
PREDICATES2 = [
    ("equal", ("eq",), "equal", None),
    ("not_equal", ("ne",), "not_equal", None),
    ("less_than", ("lt", "less"), "less", None),
    ("less_equal", ("le",), "less_equal", None),
    ("greater_than", ("gt", "greater"), "greater", None),
    ("greater_equal", ("ge",), "greater_equal", None),
    ("logical_and", (), "logical_and", None),
    ("logical_or", (), "logical_or", None),
    ("logical_xor", (), "logical_xor", None),
    ("bitwise_and", (), "bitwise_and", ("bool", "int")),
    ("bitwise_or", (), "bitwise_or", ("bool", "int")),
    ("bitwise_xor", (), "bitwise_xor", ("bool", "int")),
]

# unary ops without a gradient (sign's is zero almost everywhere)
PREDICATES1 = [
    ("logical_not", (), "logical_not", None),
    ("bitwise_not", ("bitwise_invert",), "bitwise_not", ("bool", "int")),
    ("isnan", (), "isnan", NUMERIC),
    ("isinf", (), "isinf", NUMERIC),
    ("isfinite", (), "isfinite", NUMERIC),
    ("sign", (), "sign", REAL),
]


def register(ops):
    arithmetic = {}
    for name, spellings, kernel, rule, saves, kinds, options in ARITHMETIC:
        options = {"aliases": BINARY_ALIASES, **options}
        attrs = options.pop("attrs", "")
        arithmetic[name] = (kernel, kinds, attrs)
        ops.define(name + binary(attrs), public=public((name, *spellings)), promote=True, dtypes=kinds, grad=rule,
                   saves=saves, **options)
        ops.kernel(name)(kernel)
    for name, base, names in IN_PLACE:
        kernel, kinds, attrs = arithmetic[base]
        ops.define(f"{name}(x: Tensor, y: TensorOrScalar{attrs}) -> Tensor", public=names, dtypes=kinds,
                   aliases=BINARY_ALIASES, inplace="x", grad_of=base,
                   doc=f"x = {base}(x, y) in place (y broadcasts to x; the result keeps x's dtype); returns x.")
        ops.kernel(name)(_in_place(kernel))
    for name, spellings, function, kinds in PREDICATES2:
        ops.define(name + BINARY, public=public((name, *spellings)), promote=True, dtypes=kinds,
                   aliases=BINARY_ALIASES)
        ops.kernel(name)(ufunc(function))
    for name, spellings, function, kinds in PREDICATES1:
        ops.define(name + UNARY, public=public((name, *spellings)), dtypes=kinds, aliases={"input": "x"})
        ops.kernel(name)(ufunc(function))

    ops.define("neg" + UNARY, public=public(("neg", "negative")), dtypes=REAL, grad=_neg_grad,
               aliases={"input": "x"})
    ops.kernel("neg")(ufunc("negative"))
    ops.define("abs" + UNARY, public=public(("abs", "absolute")), dtypes=REAL, grad=_abs_grad, saves=("x",),
               aliases={"input": "x"})
    ops.kernel("abs")(ufunc("abs"))
    ops.define("square" + UNARY, public=public("square"), dtypes=REAL, grad=_square_grad, saves=("x",),
               aliases={"input": "x"}, amp="black")
    ops.kernel("square")(ufunc("square"))
    for name in ("floor", "ceil", "trunc"):
        ops.define(name + UNARY, public=public(name), dtypes=REAL, grad=_zero_grads, aliases={"input": "x"})
        ops.kernel(name)(_rounding(name))
    ops.define("round(x: Tensor, decimals: int = 0) -> Tensor", public=public("round"), dtypes=REAL, grad=_zero_grads,
               aliases={"input": "x"}, doc="Round half to even (Paddle 3.2 and numpy), to `decimals` places.")
    ops.kernel("round")(lambda xp, x, decimals=0: x.copy() if x.dtype.kind in "biu" and decimals >= 0
                        else xp.round(x, decimals))

    ops.define("clip(x: Tensor, min: Scalar|None = None, max: Scalar|None = None) -> Tensor",
               public=public(("clip", "clamp")), dtypes=REAL, grad=_clip_grad, saves=("x",),
               aliases={"input": "x"})
    ops.kernel("clip")(_clip)
    # Tensor.where follows Paddle: the tensor it is called on is the condition
    ops.define("where(condition: Tensor, x: TensorOrScalar, y: TensorOrScalar) -> Tensor",
               public=public("where"), promote=("x", "y"), nondiff=("condition",), grad=_where_grad,
               saves=("condition",), aliases=BINARY_ALIASES)
    ops.kernel("where")(_where)

    ops.define("cast(x: Tensor, dtype: DType) -> Tensor", public=["cast", "Tensor.cast", "Tensor.astype"],
               grad=_cast_grad, aliases={"input": "x"})
    ops.kernel("cast")(lambda xp, x, dtype: x.astype(dtype))
    ops.define("scale(x: Tensor, scale: float = 1.0, bias: float = 0.0, bias_after_scale: bool = True) -> Tensor",
               public=["scale", "Tensor.scale"], dtypes=REAL, grad=_scale_grad,
               doc="x * scale + bias (bias_after_scale) or (x + bias) * scale, in x's dtype (Paddle's scale).")
    ops.kernel("scale")(_scale)
    ops.define("fill_(x: Tensor, value: Scalar) -> Tensor", public=["Tensor.fill_"], inplace="x",
               grad=_overwritten, doc="Set every element of x to value, in place; returns x.")
    ops.define("zero_(x: Tensor) -> Tensor", public=["Tensor.zero_"], inplace="x", grad=_overwritten,
               doc="Set every element of x to zero, in place; returns x.")
    ops.kernel("fill_")(_fill_kernel)
    ops.kernel("zero_")(_zero_kernel)
    define_variants(ops, ("scale",))
    # remainder_ also has Paddle's spellings mod_ and floor_mod_ (as remainder has mod and floor_mod)
    ops.define_inplace("remainder", public=[f"{ns}.{name}_" for name in ("remainder", "mod", "floor_mod")
                                            for ns in ("oarlock", "Tensor")])
    define_variants(ops, ("abs", "neg", "ceil", "floor", "trunc", "round", "square", "clip", "pow",
                          "floor_divide",
                          "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "logical_and", "logical_or",
                          "logical_xor", "logical_not", "equal", "not_equal", "less_than", "less_equal", "greater_than",
                          "greater_equal"))
