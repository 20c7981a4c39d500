"""Elementwise ops with broadcasting: arithmetic, maximum/minimum, clip, where, comparisons, logical
and bitwise ops, predicates (isnan...), sign, and cast. Float math and activations are in unary.py.

Binary ops take Tensors or Python numbers, promoted together (PyTorch/Paddle 3 rules). The kernels
of the ops behind Python operators (+, <, &, ...) are single xp ufunc calls, so the dispatcher's fast
path costs one function call on top of the ufunc.
"""

from __future__ import annotations

import oarlock
from oarlock.dtypes import get_default_dtype
from oarlock_ops._grad import unbroadcast

NUMERIC = ("int", "float", "complex")
REAL = ("int", "float")
BINARY = "(x: TensorOrScalar, y: TensorOrScalar) -> Tensor"
UNARY = "(x: Tensor) -> Tensor"
BINARY_ALIASES = {"input": "x", "other": "y"}


def public(names, functional=False):
    """The public names of an op: each spelling at top level and as a Tensor method, plus
    oarlock.nn.functional.<first name> for activations."""
    names = (names,) if isinstance(names, str) else names
    out = [qualified for name in names for qualified in (name, f"Tensor.{name}")]
    return out + [f"oarlock.nn.functional.{names[0]}"] if functional else out


def ufunc(name):
    """A kernel that is one call of xp.<name> (looked up on whichever xp it is given)."""
    return lambda xp, *arrays: getattr(xp, name)(*arrays)


def _integer_division(name):
    """floor_divide/remainder: numpy returns 0 (with a warning) for an integer divided by zero;
    Paddle and PyTorch refuse, and so do we. Float division by zero gives inf/nan as usual."""
    def kernel(xp, x, y):
        if y.dtype.kind in "iu" and bool(xp.any(y == 0)):
            raise ValueError("integer division by zero: the divisor 'y' has zero elements")
        return getattr(xp, name)(x, y)
    return kernel


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
    return unbroadcast(ctx, 0, g), unbroadcast(ctx, 1, g)


def _subtract_grad(ctx, g):
    return unbroadcast(ctx, 0, g), unbroadcast(ctx, 1, -g) if _needs(ctx, 1) else None


def _multiply_grad(ctx, g):
    x, y = ctx.saved
    return (unbroadcast(ctx, 0, g * y) if _needs(ctx, 0) else None,
            unbroadcast(ctx, 1, g * x) if _needs(ctx, 1) else None)


def _divide_grad(ctx, g):
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


def _cast_grad(ctx, g):
    return oarlock.cast(g, ctx.meta[0][1])


# -- the tables ---------------------------------------------------------------------------------------

# name, other spellings, kernel, backward rule, saved tensors, accepted kinds, extra OpDef options
ARITHMETIC = [
    ("add", (), ufunc("add"), _add_grad, (), NUMERIC, {}),
    ("subtract", ("sub",), ufunc("subtract"), _subtract_grad, (), NUMERIC, {}),
    ("multiply", ("mul",), ufunc("multiply"), _multiply_grad, ("x", "y"), NUMERIC, {}),
    # true division: integers divide in the default float dtype
    ("divide", ("div", "true_divide"), ufunc("divide"), _divide_grad, ("y", "out"), REAL, {"to_float": True}),
    ("floor_divide", (), _integer_division("floor_divide"), None, (), REAL, {}),
    # the sign of the divisor, like Python's % (numpy.remainder), not C's fmod
    ("remainder", ("mod", "floor_mod"), _integer_division("remainder"), _remainder_grad, ("x", "y"), REAL, {}),
    ("pow", (), ufunc("power"), _pow_grad, ("x", "y", "out"), REAL,
     {"aliases": {**BINARY_ALIASES, "exponent": "y"}}),
    ("maximum", (), ufunc("maximum"), _maximum_grad, ("x", "y"), REAL, {}),
    ("minimum", (), ufunc("minimum"), _minimum_grad, ("x", "y"), REAL, {}),
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
    for name, spellings, kernel, rule, saves, kinds, options in ARITHMETIC:
        options = {"aliases": BINARY_ALIASES, **options}
        ops.define(name + BINARY, public=public((name, *spellings)), promote=True, dtypes=kinds, grad=rule,
                   saves=saves, **options)
        ops.kernel(name)(kernel)
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
    ops.define("abs" + UNARY, public=public("abs"), dtypes=REAL, grad=_abs_grad, saves=("x",),
               aliases={"input": "x"})
    ops.kernel("abs")(ufunc("abs"))

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
