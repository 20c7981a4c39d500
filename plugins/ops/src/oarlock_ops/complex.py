"""Complex numbers: complex, real, imag, polar, view_as_complex (alias as_complex), view_as_real
(alias as_real), and is_complex (a plain function: it answers with a Python bool).

dtypes: complex and polar take float32 or float64 parts (promoted together) and make complex64 or
complex128, as Paddle and torch do (neither has 16-bit complex); view_as_complex takes float32/64
with a last dimension of 2. real and imag take complex tensors (Paddle's kernels); real also takes a
real float tensor and returns a copy of it (torch does; imag of a real tensor stays an error).

Gradients follow torch's convention for complex tensors: the gradient of a real loss L with respect
to z = a + ib is dL/da + i dL/db (so a real loss's gradient through real(z) is g + 0i, through
imag(z) it is 0 + ig). Under it view_as_real and view_as_complex are each other's gradient,
complex(a, b) sends real(g) to a and imag(g) to b, and polar(r, t) sends Re(g e^{-it}) to r and
r Im(g e^{-it}) to t. These rules are written with real, imag, complex, cos and sin, so they work
wherever those do. Beyond these ops the engine's complex support is what the other families give
(add, multiply, sum and cast take complex tensors; multiply's rule does not conjugate, so chains of
complex products are not torch-exact).
"""

from __future__ import annotations

import oarlock
from oarlock_ops._grad import unbroadcast

_FLOAT_TO_COMPLEX = {"float32": "complex64", "float64": "complex128"}


def _complex_dtype(xp, dtype, name):
    """The complex dtype with `dtype` parts; only float32 and float64 parts exist."""
    dtype = xp.dtype(dtype)
    if dtype.name not in _FLOAT_TO_COMPLEX:
        raise TypeError(f"argument '{name}' must be float32 or float64 (complex numbers have no {dtype.name} "
                        f"parts), got dtype {dtype.name}")
    return xp.dtype(_FLOAT_TO_COMPLEX[dtype.name])


# -- kernels ----------------------------------------------------------------------------------------

def _complex_kernel(xp, real, imag):
    out = xp.empty(xp.broadcast_shapes(real.shape, imag.shape), dtype=_complex_dtype(xp, real.dtype, "real"))
    out.real = real
    out.imag = imag
    return out


def _polar_kernel(xp, abs, angle):
    out = xp.empty(xp.broadcast_shapes(abs.shape, angle.shape), dtype=_complex_dtype(xp, abs.dtype, "abs"))
    out.real = abs * xp.cos(angle)
    out.imag = abs * xp.sin(angle)
    return out


def _real_kernel(xp, x):
    return xp.real(x).copy()  # a copy: numpy's real of a real array is the array itself


def _imag_kernel(xp, x):
    return xp.imag(x).copy()


def _view_as_complex_kernel(xp, x):
    ctype = _complex_dtype(xp, x.dtype, "input")
    if x.ndim == 0 or x.shape[-1] != 2:
        raise ValueError(f"argument 'input' must have a last dimension of size 2 (real, imaginary), got shape "
                         f"{list(x.shape)}")
    return xp.reshape(xp.ascontiguousarray(x).view(ctype), x.shape[:-1])


def _view_as_real_kernel(xp, x):
    parts = xp.ascontiguousarray(xp.reshape(x, (-1,)))  # 1-D: a 0-d array cannot change its item size
    return xp.reshape(parts.view(parts.real.dtype), x.shape + (2,))


# -- gradients -------------------------------------------------------------------------------------------

def _complex_grad(ctx, g):
    return (unbroadcast(ctx, 0, oarlock.real(g)) if ctx.edges[0] is not None else None,
            unbroadcast(ctx, 1, oarlock.imag(g)) if ctx.edges[1] is not None else None)


def _polar_grad(ctx, g):
    r, t = ctx.saved
    gr, gi = oarlock.real(g), oarlock.imag(g)
    cos, sin = oarlock.cos(t), oarlock.sin(t)
    return (unbroadcast(ctx, 0, gr * cos + gi * sin) if ctx.edges[0] is not None else None,
            unbroadcast(ctx, 1, r * (gi * cos - gr * sin)) if ctx.edges[1] is not None else None)


def _real_grad(ctx, g):
    if not ctx.meta[0][1].is_complex:
        return g
    return oarlock.complex(g, oarlock.zeros_like(g))


def _imag_grad(ctx, g):
    return oarlock.complex(oarlock.zeros_like(g), g)


def is_complex(x) -> bool:
    """Whether x is a Tensor with a complex dtype (complex64 or complex128)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "_data"):
        raise TypeError(f"oarlock.is_complex(): argument 'x' must be a Tensor, got {type(x).__name__}")
    return bool(dtype.is_complex)


# -- registration -------------------------------------------------------------------------------------------

def _public(*names):
    return [form for n in names for form in (n, f"Tensor.{n}")]


def register(ops):
    ops.define("complex(real: Tensor, imag: Tensor) -> Tensor", public=["complex"], promote=True, dtypes=("float",),
               grad=_complex_grad, doc="real + i imag (broadcast): float32 parts give complex64, float64 complex128.")
    ops.kernel("complex")(_complex_kernel)
    ops.define("polar(abs: Tensor, angle: Tensor) -> Tensor", public=["polar"], promote=True, dtypes=("float",),
               grad=_polar_grad, saves=("abs", "angle"), doc="abs * (cos(angle) + i sin(angle)), broadcast.")
    ops.kernel("polar")(_polar_kernel)

    ops.define("real(x: Tensor) -> Tensor", public=_public("real"), aliases={"input": "x"},
               dtypes=("float", "complex"), grad=_real_grad,
               doc="The real part of a complex tensor (a real float tensor gives a copy of itself).")
    ops.kernel("real")(_real_kernel)
    ops.define("imag(x: Tensor) -> Tensor", public=_public("imag"), aliases={"input": "x"}, dtypes=("complex",),
               grad=_imag_grad, doc="The imaginary part of a complex tensor.")
    ops.kernel("imag")(_imag_kernel)

    ops.define("view_as_complex(input: Tensor) -> Tensor", public=_public("view_as_complex", "as_complex"),
               aliases={"x": "input"}, dtypes=("float",),
               grad=lambda ctx, g: oarlock.view_as_real(g),
               doc="A float32/float64 tensor [..., 2] read as complex [...] (last dimension: real, imaginary).")
    ops.kernel("view_as_complex")(_view_as_complex_kernel)
    ops.define("view_as_real(input: Tensor) -> Tensor", public=_public("view_as_real", "as_real"),
               aliases={"x": "input"}, dtypes=("complex",),
               grad=lambda ctx, g: oarlock.view_as_complex(g),
               doc="A complex tensor [...] as a float tensor [..., 2] of (real, imaginary) pairs.")
    ops.kernel("view_as_real")(_view_as_real_kernel)


def register_api(api):
    """is_complex answers with a Python bool, so it is a plain function rather than an op."""
    api.export("oarlock", "is_complex", is_complex)
    api.export("Tensor", "is_complex", is_complex)
