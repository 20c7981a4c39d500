"""oarlock.linalg's matrix functions that Paddle 3.2 has: inv, det, slogdet, solve, cholesky (ops with their
gradients, batched over leading axes, computed in float32 for bfloat16/float16, as LAPACK has no half loops)
and the compositions multi_dot, matrix_transpose,
vecdot, matrix_power, cov, corrcoef, diagonal and cross (also Tensor methods and top-level names where Paddle
has them).

Gradients (standard matrix calculus, Giles 2008; Murray 2016 for Cholesky):
  inv:      dA = -A^-T g A^-T
  det:      dA = g det(A) A^-T
  slogdet:  dA = g_logabsdet A^-T (the sign has no gradient)
  solve:    dB = A^-T g,  dA = -dB X^T
  cholesky: dA = sym(L^-T Phi(L^T g) L^-1), Phi = lower triangle with half the diagonal"""

from __future__ import annotations

import oarlock
from oarlock_ops.paddle_functions import cross

FLOAT = ("float",)


def _lapack(fn):
    """Run a numpy.linalg function in float32 for 1- and 2-byte floats (LAPACK has no half loops)."""
    def kernel(xp, *arrays, **attrs):
        dtype = arrays[0].dtype
        if dtype.itemsize >= 4:
            return fn(xp, *arrays, **attrs)
        out = fn(xp, *(a.astype(xp.float32) for a in arrays), **attrs)
        return tuple(o.astype(dtype) for o in out) if isinstance(out, tuple) else out.astype(dtype)
    return kernel


def _square(x, fn):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"oarlock.linalg.{fn}(): x must be a (batch of) square matrices, got shape {x.shape}")


def _mT(x):  # noqa: N802
    return oarlock.transpose(x, [*range(x.ndim - 2), x.ndim - 1, x.ndim - 2])


def _inv_grad(ctx, g):
    (out,) = ctx.saved
    t = _mT(out)
    return -oarlock.matmul(oarlock.matmul(t, g), t)


def _det_grad(ctx, g):
    x, out = ctx.saved
    return (g * out).unsqueeze(-1).unsqueeze(-1) * _mT(oarlock.linalg.inv(x))


def _slogdet_kernel(xp, x):
    sign, logabs = xp.linalg.slogdet(x)
    return xp.stack([sign, logabs]).astype(x.dtype)


def _slogdet_grad(ctx, g):
    (x,) = ctx.saved
    return g[1].unsqueeze(-1).unsqueeze(-1) * _mT(oarlock.linalg.inv(x))


def _solve_kernel(xp, x, y, left=True):
    if not left:   # X A = B  <=>  A^T X^T = B^T
        return xp.swapaxes(xp.linalg.solve(xp.swapaxes(x, -1, -2), xp.swapaxes(y, -1, -2)), -1, -2)
    if y.ndim == 1:
        return xp.linalg.solve(x, y[:, None])[:, 0]
    return xp.linalg.solve(x, y)


def _solve_grad(ctx, g):
    x, out = ctx.saved
    left = ctx.attrs.get("left", True)
    if not left:   # X = B A^-1: dB = g A^-T, dA = -X^T dB
        gy = _mT(oarlock.linalg.solve(x, _mT(g)))
        gx = -oarlock.matmul(_mT(out), gy)
        return gx, gy
    vector = out.ndim == 1
    g2, out2 = (g.unsqueeze(-1), out.unsqueeze(-1)) if vector else (g, out)
    gy = oarlock.linalg.solve(_mT(x), g2)
    gx = -oarlock.matmul(gy, _mT(out2))
    gx = oarlock.sum(gx, axis=list(range(gx.ndim - x.ndim))) if gx.ndim > x.ndim else gx
    return gx, (gy.squeeze(-1) if vector else gy)


def _cholesky_kernel(xp, x, upper=False):
    lower = xp.linalg.cholesky(x)
    return xp.swapaxes(lower, -1, -2).copy() if upper else lower


def _cholesky_grad(ctx, g):
    (out,) = ctx.saved
    upper = ctx.attrs.get("upper", False)
    lower, g = (_mT(out), _mT(g)) if upper else (out, g)
    p = oarlock.matmul(_mT(lower), g)
    p = oarlock.tril(p) - 0.5 * oarlock.tril(oarlock.triu(p))   # Phi: lower triangle, half diagonal
    inv = oarlock.linalg.inv(lower)
    s = oarlock.matmul(oarlock.matmul(_mT(inv), p), inv)
    return 0.5 * (s + _mT(s))


# -- compositions ---------------------------------------------------------------------------------------------

def multi_dot(x, name=None):
    """The product of a list of matrices (the first may be a vector, so may the last)."""
    if len(x) < 2:
        raise ValueError(f"oarlock.linalg.multi_dot(): needs at least 2 tensors, got {len(x)}")
    out = x[0]
    for t in x[1:]:
        out = oarlock.matmul(out, t)
    return out


def matrix_transpose(x, name=None):
    """x with its last two axes swapped."""
    if x.ndim < 2:
        raise ValueError(f"oarlock.linalg.matrix_transpose(): x must have at least 2 dimensions, got {x.shape}")
    return _mT(x)


def vecdot(x, y, axis=-1, name=None):
    """sum(conj(x) * y) along axis (broadcast)."""
    return ((oarlock.conj(x) if x.dtype.is_complex else x) * y).sum(axis=axis)


def matrix_power(x, n, name=None):
    """x multiplied by itself n times (n < 0: of its inverse; n = 0: the identity)."""
    _square(x, "matrix_power")
    if n < 0:
        x, n = oarlock.linalg.inv(x), -n
    if n == 0:   # the identity, still connected to x (a zero gradient, as in Paddle)
        return x * 0.0 + oarlock.eye(x.shape[-1], dtype=x.dtype)
    result, base = None, x
    while n:   # square-and-multiply
        if n & 1:
            result = base if result is None else oarlock.matmul(result, base)
        n >>= 1
        if n:
            base = oarlock.matmul(base, base)
    return result


def cov(x, rowvar=True, ddof=True, fweights=None, aweights=None, name=None):
    """The covariance matrix of the variables (rows, or columns with rowvar=False) of x."""
    x = x if x.ndim == 2 else x.reshape([1, -1])
    x = x if rowvar else _mT(x)
    n = x.shape[1]
    w = None
    if fweights is not None:
        w = fweights.astype(x.dtype)
    if aweights is not None:
        w = aweights.astype(x.dtype) if w is None else w * aweights.astype(x.dtype)
    if w is None:
        mean = x.mean(axis=1, keepdim=True)
        norm = n - int(bool(ddof))
        xc = x - mean
        return oarlock.matmul(xc, _mT(xc)) / norm
    wsum = w.sum()
    mean = (x * w).sum(axis=1, keepdim=True) / wsum
    xc = x - mean
    if ddof:
        norm = wsum - ((w * aweights.astype(x.dtype)).sum() / wsum if aweights is not None else 1)
    else:
        norm = wsum
    return oarlock.matmul(xc * w, _mT(xc)) / norm


def corrcoef(x, rowvar=True, name=None):
    """Pearson correlation coefficients of the variables of x (clipped to [-1, 1])."""
    c = cov(x, rowvar)
    d = oarlock.sqrt(oarlock.diagonal(c))
    return oarlock.clip(c / d.unsqueeze(1) / d.unsqueeze(0), -1.0, 1.0)


_FP8_ACTIVATIONS = {"identity": lambda t: t, "relu": lambda t: oarlock.nn.functional.relu(t),
                    "gelu": lambda t: oarlock.nn.functional.gelu(t)}


def fp8_fp8_half_gemm_fused(x, y, transpose_x=False, transpose_y=False, bias=None, output_dtype="float16",
                            scale=1.0, act="identity", name=None):
    """act(scale * (x @ y) + bias) in output_dtype (float16 or bfloat16), for float8 x and y: the product is
    computed in float32 from the exact float8 values, as the fused GPU kernel accumulates."""
    for what, t in (("x", x), ("y", y)):
        if t.dtype.name not in ("float8_e4m3fn", "float8_e5m2"):
            raise TypeError(f"oarlock.linalg.fp8_fp8_half_gemm_fused(): {what} must be float8_e4m3fn or "
                            f"float8_e5m2, got {t.dtype.name}")
    if output_dtype not in ("float16", "bfloat16"):
        raise ValueError(f"oarlock.linalg.fp8_fp8_half_gemm_fused(): output_dtype must be 'float16' or "
                         f"'bfloat16', got {output_dtype!r}")
    if act not in _FP8_ACTIVATIONS:
        raise ValueError(f"oarlock.linalg.fp8_fp8_half_gemm_fused(): act must be one of "
                         f"{', '.join(_FP8_ACTIVATIONS)}, got {act!r}")
    out = oarlock.matmul(x.astype("float32"), y.astype("float32"), transpose_x=transpose_x,
                         transpose_y=transpose_y) * scale
    if bias is not None:
        out = out + bias.astype("float32")
    return _FP8_ACTIVATIONS[act](out).astype(output_dtype)


def register(ops):
    ops.define("inv(x: Tensor) -> Tensor", public=["oarlock.linalg.inv", "inverse", "Tensor.inverse"],
                      dtypes=FLOAT, grad=_inv_grad, saves=("out",), doc="The inverse of a (batch of) square matrices.")
    ops.kernel("inv")(_lapack(lambda xp, x: xp.linalg.inv(x)))
    ops.define("det(x: Tensor) -> Tensor", public=["oarlock.linalg.det"], dtypes=FLOAT, grad=_det_grad,
                      saves=("x", "out"), doc="The determinant of a (batch of) square matrices.")
    ops.kernel("det")(_lapack(lambda xp, x: xp.asarray(xp.linalg.det(x), dtype=x.dtype)))
    ops.define("slogdet(x: Tensor) -> Tensor", public=["oarlock.linalg.slogdet"], dtypes=FLOAT,
                          grad=_slogdet_grad, saves=("x",),
                          doc="[sign, log|det|] of a (batch of) square matrices, stacked on a new first axis.")
    ops.kernel("slogdet")(_lapack(_slogdet_kernel))
    ops.define("solve(x: Tensor, y: Tensor, left: bool = True) -> Tensor", public=["oarlock.linalg.solve"],
                        dtypes=FLOAT, promote=True, grad=_solve_grad, saves=("x", "out"),
                        doc="X with x X = y (left=True) or X x = y (left=False).")
    ops.kernel("solve")(_lapack(_solve_kernel))
    ops.define("cholesky(x: Tensor, upper: bool = False) -> Tensor",
                           public=["oarlock.linalg.cholesky", "cholesky", "Tensor.cholesky"], dtypes=FLOAT,
                           grad=_cholesky_grad, saves=("out",),
                           doc="The Cholesky factor of a (batch of) symmetric positive-definite matrices "
                               "(lower, or upper with upper=True).")
    ops.kernel("cholesky")(_lapack(_cholesky_kernel))


def register_api(api):
    for fn in (multi_dot, matrix_transpose, vecdot, matrix_power, cov, corrcoef, fp8_fp8_half_gemm_fused):
        api.export("oarlock.linalg", fn.__name__, fn)
    api.export("oarlock.linalg", "cross", cross)
    api.export("oarlock.linalg", "diagonal", oarlock.diagonal)
    for fn in (matrix_transpose, matrix_power, cov, corrcoef):
        api.export("oarlock", fn.__name__, fn)
    for fn in (matrix_power, multi_dot, vecdot):
        api.export("Tensor", fn.__name__, fn)
