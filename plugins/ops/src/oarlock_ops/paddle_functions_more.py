"""More Paddle 3.2 functions built from existing ops (exported by the paddle_math family): rot90, heaviside,
copysign, hypot, sinc, diagflat, logspace, vander, block_diag, cartesian_prod, and the data-dependent-shape
queries unique, unique_consecutive and bincount (computed on the host from the values, then placed where x is;
they have no gradient, as in Paddle). Also Paddle's constants e, pi, inf, nan and newaxis."""

from __future__ import annotations

import math

import numpy as np

import oarlock


def rot90(x, k=1, axes=(0, 1), name=None):
    """x rotated by 90 degrees k times in the plane of `axes` (from the first axis towards the second)."""
    a, b = (ax % x.ndim for ax in axes)
    if a == b or x.ndim < 2:
        raise ValueError(f"oarlock.rot90(): axes must be two different axes of x, got {list(axes)} for shape "
                         f"{x.shape}")
    k %= 4
    perm = list(range(x.ndim))
    perm[a], perm[b] = perm[b], perm[a]
    if k == 1:
        return oarlock.flip(x, [b]).transpose(perm)
    if k == 2:
        return oarlock.flip(x, [a, b])
    if k == 3:
        return oarlock.flip(x, [a]).transpose(perm)
    return x.clone()


def heaviside(x, y, name=None):
    """0 where x < 0, y where x == 0, 1 where x > 0."""
    one, zero = oarlock.ones_like(x), oarlock.zeros_like(x)
    return oarlock.where(x > 0, one, oarlock.where(x < 0, zero, y * one))


def copysign(x, y, name=None):
    """|x| with the sign (bit) of y."""
    x = x if x.dtype.is_floating_point else x.astype(oarlock.get_default_dtype())
    y = y if isinstance(y, oarlock.Tensor) else oarlock.full_like(x, y)
    negative = oarlock.signbit(y)
    return oarlock.where(negative, -oarlock.abs(x), oarlock.abs(x))


def hypot(x, y, name=None):
    """sqrt(x^2 + y^2)."""
    return oarlock.sqrt(x * x + y * y)


def sinc(x, name=None):
    """sin(pi x) / (pi x), 1 at 0."""
    x = x if x.dtype.is_floating_point else x.astype(oarlock.get_default_dtype())
    zero = x == 0
    safe = oarlock.where(zero, oarlock.ones_like(x), x) * math.pi
    return oarlock.where(zero, oarlock.ones_like(x), oarlock.sin(safe) / safe)


def diagflat(x, offset=0, name=None):
    """A 2-d tensor with x flattened on its `offset` diagonal."""
    return oarlock.diag(x.reshape([-1]), offset)


def logspace(start, stop, num, base=10.0, dtype=None, name=None):
    """base ** linspace(start, stop, num)."""
    value = [v.item() if isinstance(v, oarlock.Tensor) else v for v in (start, stop, num, base)]
    start, stop, num, base = value
    dtype = oarlock.dtypes.convert_dtype(dtype or oarlock.get_default_dtype())
    out = np.power(float(base), np.linspace(float(start), float(stop), int(num)))
    return oarlock.to_tensor(out.astype(dtype.np) if dtype.is_floating_point else np.trunc(out).astype(dtype.np))


def vander(x, n=None, increasing=False, name=None):
    """The Vandermonde matrix of the 1-d x: columns x^(n-1) ... x^0 (or increasing powers)."""
    if x.ndim != 1:
        raise ValueError(f"oarlock.vander(): x must be 1-d, got shape {x.shape}")
    n = x.shape[0] if n is None else n
    powers = list(range(n)) if increasing else list(range(n - 1, -1, -1))
    cols = [oarlock.ones_like(x) if p == 0 else x ** p for p in powers]
    return oarlock.stack(cols, axis=1) if cols else oarlock.zeros([x.shape[0], 0], dtype=x.dtype)


def block_diag(inputs, name=None):
    """A block-diagonal matrix of the (0-, 1- or 2-d) inputs."""
    blocks = [t.reshape([1, 1]) if t.ndim == 0 else t.reshape([1, -1]) if t.ndim == 1 else t for t in inputs]
    cols = sum(b.shape[1] for b in blocks)
    rows, left = [], 0
    for b in blocks:
        right = cols - left - b.shape[1]
        parts = [oarlock.zeros([b.shape[0], left], dtype=b.dtype), b, oarlock.zeros([b.shape[0], right], dtype=b.dtype)]
        rows.append(oarlock.concat(parts, axis=1))
        left += b.shape[1]
    return oarlock.concat(rows, axis=0)


def cartesian_prod(x, name=None):
    """All combinations of the elements of the 1-d tensors in x, as rows."""
    if len(x) == 1:
        return x[0]
    grids = oarlock.meshgrid(*x)
    return oarlock.stack([g.reshape([-1]) for g in grids], axis=1)


def _host(x, fn):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"oarlock.{fn}(): x must be an oarlock.Tensor, got {type(x).__name__}")
    return x.numpy()


def _placed(array, like, dtype=None):
    return oarlock.to_tensor(np.asarray(array), dtype=dtype, place=like.place)


def unique(x, return_index=False, return_inverse=False, return_counts=False, axis=None, dtype="int64", name=None):
    """The sorted unique elements of x (or unique slices along axis), with the first indices, the inverse and
    the counts when asked (indices in `dtype`)."""
    values, index, inverse, counts = np.unique(_host(x, "unique"), return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    out = [_placed(values, x, x.dtype)]
    for wanted, array in ((return_index, index), (return_inverse, inverse.reshape(-1)), (return_counts, counts)):
        if wanted:
            out.append(_placed(array, x, dtype))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(x, return_inverse=False, return_counts=False, axis=None, dtype="int64", name=None):
    """x with runs of equal consecutive elements (or slices along axis) collapsed to one."""
    data = _host(x, "unique_consecutive")
    data = data.reshape(-1) if axis is None else np.moveaxis(data, axis, 0)
    if len(data) == 0:
        starts = np.zeros(0, np.int64)
    else:
        change = np.any((data[1:] != data[:-1]).reshape(len(data) - 1, -1), axis=1)
        starts = np.concatenate([[0], np.nonzero(change)[0] + 1])
    values = data[starts] if axis is None else np.moveaxis(data[starts], 0, axis)
    out = [_placed(values, x, x.dtype)]
    if return_inverse:
        out.append(_placed(np.cumsum(np.isin(np.arange(len(data)), starts)) - 1, x, dtype))
    if return_counts:
        out.append(_placed(np.diff(np.append(starts, len(data))), x, dtype))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x, weights=None, minlength=0, name=None):
    """How often each value 0..max(x) occurs in the 1-d non-negative integer x (summing weights if given)."""
    data = _host(x, "bincount")
    if data.ndim != 1 or not np.issubdtype(data.dtype, np.integer) or (data.size and data.min() < 0):
        raise ValueError(f"oarlock.bincount(): x must be a 1-d tensor of non-negative integers, got shape "
                         f"{x.shape} and dtype {x.dtype.name}")
    w = None if weights is None else weights.numpy()
    out = np.bincount(data, weights=w, minlength=minlength)
    dtype = "int64" if weights is None else weights.dtype
    return _placed(out, x, dtype)


FUNCTIONS = [rot90, heaviside, copysign, hypot, sinc, diagflat, logspace, vander, block_diag, cartesian_prod, unique,
             unique_consecutive, bincount]
NOT_METHODS = {"logspace", "block_diag", "cartesian_prod"}
CONSTANTS = {"e": math.e, "pi": math.pi, "inf": math.inf, "nan": math.nan, "newaxis": None}
