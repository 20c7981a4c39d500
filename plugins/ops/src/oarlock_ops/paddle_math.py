"""Paddle 3.2 math that the other families lack: the rest of the elementary functions (tan, asin, acos,
atan, sinh, cosh, asinh, acosh, atanh, expm1, log2, log10, with their in-place forms), atan2, flip, roll
and einsum (with ellipses; gradients by einsum itself). Its api hook also exports the compositions of
paddle_functions.py (unbind, meshgrid, nonzero, kron, tensordot, ...).

Integer inputs of the float functions compute in the default float dtype (as Paddle and exp/log do here);
half-precision inputs compute in float32 and round once."""

from __future__ import annotations

import math
import string

import numpy as np

import oarlock
from oarlock_ops._grad import sum_to_shape
from oarlock_ops._inplace import define_variants
from oarlock_ops.elementwise import REAL, public
from oarlock_ops.unary import _in_float32, _in_float32_pair

LN2, LN10 = math.log(2.0), math.log(10.0)


def _of(derivative, saved):
    """A rule g * derivative(t), t the one tensor the op saves."""
    return lambda ctx, g: g * derivative(ctx.saved[0])


# name, kernel, derivative of the saved tensor, which tensor is saved
FLOAT_MATH = [
    ("tan", lambda xp, x: xp.tan(x), lambda out: 1 + out * out, "out"),
    ("asin", lambda xp, x: xp.arcsin(x), lambda x: oarlock.rsqrt(1 - x * x), "x"),
    ("acos", lambda xp, x: xp.arccos(x), lambda x: -oarlock.rsqrt(1 - x * x), "x"),
    ("atan", lambda xp, x: xp.arctan(x), lambda x: 1 / (1 + x * x), "x"),
    ("sinh", lambda xp, x: xp.sinh(x), lambda x: oarlock.cosh(x), "x"),
    ("cosh", lambda xp, x: xp.cosh(x), lambda x: oarlock.sinh(x), "x"),
    ("asinh", lambda xp, x: xp.arcsinh(x), lambda x: oarlock.rsqrt(x * x + 1), "x"),
    ("acosh", lambda xp, x: xp.arccosh(x), lambda x: oarlock.rsqrt(x * x - 1), "x"),
    ("atanh", lambda xp, x: xp.arctanh(x), lambda x: 1 / (1 - x * x), "x"),
    ("expm1", lambda xp, x: xp.expm1(x), lambda out: out + 1, "out"),
    ("log2", lambda xp, x: xp.log2(x), lambda x: 1 / (x * LN2), "x"),
    ("log10", lambda xp, x: xp.log10(x), lambda x: 1 / (x * LN10), "x"),
]


def _atan2_grad(ctx, g):
    x, y = ctx.saved
    r2 = x * x + y * y
    return sum_to_shape(g * y / r2, x.shape), sum_to_shape(-g * x / r2, y.shape)


def _axes(axis, ndim):
    axes = [axis] if isinstance(axis, int) else list(axis)
    return tuple(a % ndim if ndim else 0 for a in axes)


def _flip_kernel(xp, x, axis):
    return xp.ascontiguousarray(xp.flip(x, _axes(axis, x.ndim))) if x.ndim else x.copy()


def _roll_kernel(xp, x, shifts, axis=None):
    if axis is None:
        return xp.roll(x, shifts if isinstance(shifts, int) else tuple(shifts))
    return xp.roll(x, tuple(shifts) if not isinstance(shifts, int) else shifts,
                   axis=tuple(axis) if not isinstance(axis, int) else axis)


def _roll_grad(ctx, g):
    shifts = ctx.attrs["shifts"]
    back = -shifts if isinstance(shifts, int) else [-s for s in shifts]
    return oarlock.roll(g, back, ctx.attrs["axis"])


# -- einsum ----------------------------------------------------------------------------------------------

def _parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Explicit subscripts (inputs, output) of an einsum equation, ellipses replaced by letters the equation
    does not use; an implicit output is the letters used once, sorted, after the ellipsis axes (numpy's rule)."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(ranks):
        raise ValueError(f"oarlock.einsum(): the equation {equation!r} has {len(inputs)} operand(s), got "
                         f"{len(ranks)} tensors")
    free = [c for c in string.ascii_letters if c not in eq]
    ell_rank = max((r - len(s.replace("...", "")) for s, r in zip(inputs, ranks) if "..." in s), default=0)
    ell = "".join(free[:ell_rank])
    explicit = []
    for s, r in zip(inputs, ranks):
        if "..." in s:
            n = r - len(s.replace("...", ""))
            s = s.replace("...", ell[ell_rank - n:] if n else "")
        if len(s) != r or not all(c.isalpha() for c in s):   # "" is a 0-d operand's (valid) subscripts
            raise ValueError(f"oarlock.einsum(): subscripts {s!r} do not fit an operand with {r} dimensions "
                             f"(equation {equation!r})")
        explicit.append(s)
    if arrow:
        out = out.replace("...", ell)
    else:
        letters = "".join(explicit)
        out = ell + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in ell))
    return explicit, out


def _einsum_kernel(xp, operands, equation):
    inputs, out = _parse(equation, [o.ndim for o in operands])
    dtype = operands[0].dtype if operands else None
    half = dtype is not None and dtype.kind == "f" and dtype.itemsize < 4 or str(dtype) == "bfloat16"
    if half:   # numpy has no einsum loops for bfloat16/float16: sum in float32, round once
        operands = [o.astype(xp.float32) for o in operands]
    if len(operands) >= 2 and all(len(set(s)) == len(s) for s in inputs):
        out = _contract_pairwise(xp, list(operands), list(inputs), out)
    else:   # one operand (a sum or transpose), or a diagonal ("ii,i"): einsum's own loop
        out = xp.einsum(",".join(inputs) + "->" + out, *operands)
    return out.astype(dtype) if half else out


def _contract_pairwise(xp, operands, inputs, out):
    """einsum of >= 2 operands as a chain of batched matmuls on contiguous arrays, in numpy's greedy order.
    Why not xp.einsum: its loop sums term by term (0.28 off over 9240 float32 terms, where torch is within 1e-5),
    and even optimize= hands matmul transposed views, which numpy multiplies without BLAS, just as naively.
    A contiguous matmul uses BLAS's blocked sums for floats and exact loops for integers."""
    sizes = {c: n for s, o in zip(inputs, operands) for c, n in zip(s, o.shape)}
    shapes = [np.broadcast_to(np.empty((), np.int8), o.shape) for o in operands]   # no data: only the path
    path = np.einsum_path(",".join(inputs) + "->" + out, *shapes, optimize="greedy")[0][1:]
    for step in path:   # a step names 1, 2 or more operands; the result goes last, as in numpy's path
        picked = [(inputs.pop(i), operands.pop(i)) for i in sorted(step, reverse=True)]
        s, o = picked.pop()
        if not picked:   # a lone operand: sum away the letters no one else needs
            s, o = _matmul_pair(xp, s, o, "", xp.ones((), o.dtype), set(out).union(*inputs), sizes)
        while picked:
            t, b = picked.pop()
            s, o = _matmul_pair(xp, s, o, t, b, set(out).union(*inputs, *(u for u, _ in picked)), sizes)
        inputs.append(s), operands.append(o)
    return xp.einsum(f"{inputs[0]}->{out}", operands[0])


def _matmul_pair(xp, sa, a, sb, b, needed, sizes):
    """(subscripts, array) of the contraction of a and b keeping the `needed` letters, as one batched matmul of
    contiguous (batch, rows, summed) @ (batch, summed, cols) arrays."""
    batch = [c for c in sa if c in sb and c in needed]
    summed = [c for c in sa if c in sb and c not in needed]
    left = [c for c in sa if c not in sb and c in needed]
    right = [c for c in sb if c not in sa and c in needed]

    def matrix(s, o, order):   # einsum first sums letters of this operand alone that no one needs
        size = [math.prod(sizes[c] for c in group) for group in order]
        return xp.ascontiguousarray(xp.einsum(f"{s}->{''.join(sum(order, []))}", o)).reshape(size)

    ab = xp.matmul(matrix(sa, a, [batch, left, summed]), matrix(sb, b, [batch, summed, right]))
    return "".join(batch + left + right), ab.reshape([sizes[c] for c in batch + left + right])


def _einsum_grad(ctx, g):
    operands = ctx.saved[0] if isinstance(ctx.saved[0], list) else list(ctx.saved)
    inputs, out = _parse(ctx.attrs["equation"], [o.ndim for o in operands])
    grads = []
    for i, (sub, x) in enumerate(zip(inputs, operands)):
        if len(set(sub)) != len(sub):
            raise NotImplementedError(f"oarlock.einsum(): no gradient for an operand with a repeated subscript "
                                      f"({sub!r}, a diagonal) yet")
        others = [(s, o) for j, (s, o) in enumerate(zip(inputs, operands)) if j != i]
        known = set(out).union(*(set(s) for s, _ in others))
        kept = "".join(c for c in sub if c in known)   # letters summed in this operand alone come back by expand
        grad = oarlock.einsum(",".join([out] + [s for s, _ in others]) + "->" + kept, g, *(o for _, o in others))
        if kept != sub:   # `kept` is `sub` without those letters, in sub's order: add them as size-1 axes
            grad = grad.reshape([x.shape[k] if c in kept else 1 for k, c in enumerate(sub)]).expand(x.shape)
        grads.append(grad)
    return grads


def einsum(equation, *operands):
    """Paddle's einsum(equation, *operands): the Einstein summation `equation` (with "..." and implicit output)
    of the operand tensors; differentiable in every operand."""
    if not isinstance(equation, str):
        raise TypeError(f"oarlock.einsum(): equation must be a str, got {type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    return _einsum_op(list(operands), equation=equation)


def register(ops):
    for name, kernel, derivative, saves in FLOAT_MATH:
        ops.define(f"{name}(x: Tensor) -> Tensor", public=public(name), to_float=True, dtypes=REAL,
                   grad=_of(derivative, saves), saves=(saves,), aliases={"input": "x"})
        ops.kernel(name)(_in_float32(kernel))
    define_variants(ops, [name for name, *_ in FLOAT_MATH])

    ops.define("atan2(x: Tensor, y: Tensor) -> Tensor", public=public("atan2"), promote=True, to_float=True,
               dtypes=REAL, grad=_atan2_grad, saves=("x", "y"), aliases={"input": "x", "other": "y"})
    ops.kernel("atan2")(_in_float32_pair(lambda xp, x, y: xp.arctan2(x, y)))

    ops.define("flip(x: Tensor, axis: Axis) -> Tensor", public=public("flip"), aliases={"input": "x", "dims": "axis"},
               grad=lambda ctx, g: oarlock.flip(g, ctx.attrs["axis"]),
               doc="x with the order of its elements reversed along `axis` (an int or a list of ints).")
    ops.kernel("flip")(_flip_kernel)
    ops.define("roll(x: Tensor, shifts: Axis, axis: Axis|None = None) -> Tensor", public=public("roll"),
               aliases={"input": "x", "dims": "axis"}, grad=_roll_grad,
               doc="x with its elements shifted by `shifts` along `axis` (wrapping around); with axis None, "
                   "the flattened x is shifted and the shape restored.")
    ops.kernel("roll")(_roll_kernel)

    global _einsum_op
    _einsum_op = ops.define("einsum(operands: TensorList, equation: str) -> Tensor", internal=True,
                            promote=True, dtypes=("int", "float", "complex"), grad=_einsum_grad, saves=("operands",),
                            display="oarlock.einsum", doc="einsum over a list of operands.")
    ops.kernel("einsum")(_einsum_kernel)


def _late_method(name):
    def method(self, *args, **kwargs):
        return getattr(oarlock, name)(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"oarlock.{name} with this tensor as its first argument."
    return method


TENSOR_TOO = ("add_n", "atleast_1d", "atleast_2d", "atleast_3d", "broadcast_shape", "broadcast_tensors", "concat",
              "stack", "is_tensor", "rank", "slice", "cov", "corrcoef", "matrix_transpose", "create_parameter")


def register_api(api):
    from oarlock_ops import paddle_functions
    api.export("oarlock", "einsum", einsum)
    for fn in paddle_functions.TOP:
        api.export("oarlock", fn.__name__, fn)
        if fn.__name__ not in paddle_functions.NOT_METHODS:
            api.export("Tensor", fn.__name__, fn)
    api.export("oarlock", "row_stack", paddle_functions.row_stack)
    from oarlock_ops import paddle_functions_more as more
    for fn in more.FUNCTIONS:
        api.export("oarlock", fn.__name__, fn)
        if fn.__name__ not in more.NOT_METHODS:
            api.export("Tensor", fn.__name__, fn)
    for name, value in more.CONSTANTS.items():
        api.export("oarlock", name, value)
    # top-level functions that Paddle 3.2 also has as Tensor methods (resolved when called: some come from
    # plugins registered after this one)
    for name in TENSOR_TOO:
        api.export("Tensor", name, _late_method(name))
    from oarlock_ops.tensor_module import TensorFunctionOrModule
    api.export("oarlock", "tensor", TensorFunctionOrModule(oarlock.ops.creation.tensor))
