"""Sampling ops: multinomial, bernoulli, randperm. Their kernels draw from the device generator the
dispatcher passes (random=True), so `oarlock.seed(n)` reproduces them; none is differentiable.

- multinomial(x, num_samples=1, replacement=False): x holds non-negative weights (not necessarily
  normalised) over the last axis of a 1-D or 2-D tensor; the result is int64 category indices of
  shape [num_samples] or [rows, num_samples]. With replacement each draw inverts the row's
  cumulative distribution; without, the first num_samples of the categories ordered by
  u^(1/p) (Efraimidis and Spirakis: a weighted draw without replacement in one sort). As in Paddle, a
  row needs at least num_samples categories of nonzero weight when replacement is False.
- bernoulli(x, p=None): 1 with probability x (or p, when given, for every element), else 0, in x's
  dtype and shape; probabilities must lie in [0, 1].
- randperm(n, dtype='int64'): a random permutation of 0..n-1 (int32, int64, float32 or float64).
"""

from __future__ import annotations

import numpy as np


def _probabilities(xp, x, what):
    """x as float64, after checking that its values are probabilities or weights."""
    p = x.astype(np.float64)
    if p.size and not bool(xp.all(xp.isfinite(p))):
        raise ValueError(f"argument '{what}' must be finite, got inf or nan")
    if p.size and float(xp.min(p)) < 0:
        raise ValueError(f"argument '{what}' must be non-negative, got a minimum of {float(xp.min(p))}")
    return p


def _multinomial(xp, x, num_samples=1, replacement=False, *, generator):
    if x.ndim not in (1, 2):
        raise ValueError(f"argument 'x' must be 1-D (one distribution) or 2-D (one per row), got shape "
                         f"{list(x.shape)}")
    if num_samples <= 0:
        raise ValueError(f"argument 'num_samples' must be positive, got {num_samples}")
    p = xp.reshape(_probabilities(xp, x, "x"), (-1, x.shape[-1]))
    rows, categories = p.shape
    if categories == 0 or bool(xp.any(p.sum(axis=1) <= 0)):
        raise ValueError("every distribution in argument 'x' needs a positive total weight")
    u = generator.random((rows, num_samples), dtype=np.float64)
    if replacement:
        cdf = xp.cumsum(p, axis=1)
        cdf = cdf / cdf[:, -1:]
        # one searchsorted over all rows: row r's distribution is shifted into [r, r + 1)
        offset = xp.arange(rows, dtype=np.float64)[:, None]
        flat = xp.searchsorted(xp.reshape(cdf + offset, (-1,)), xp.reshape(u + offset, (-1,)), side="right")
        out = xp.reshape(flat, (rows, num_samples)) - (xp.arange(rows) * categories)[:, None]
        out = xp.minimum(out, categories - 1)  # u just below 1 can round past the last boundary
    else:
        fewest = int(xp.min(xp.sum(p > 0, axis=1)))
        if num_samples > fewest:
            raise ValueError(f"without replacement, argument 'num_samples' ({num_samples}) must not exceed the "
                             f"number of categories with nonzero weight ({fewest} in some row)")
        u = generator.random((rows, categories), dtype=np.float64)
        positive = p > 0
        keys = xp.log(u) / xp.where(positive, p, 1.0)  # log(u^(1/p)): the largest keys win
        keys = xp.where(positive, keys, -np.inf)
        out = xp.argsort(-keys, axis=1)[:, :num_samples]
    out = out.astype(np.int64)
    return out[0] if x.ndim == 1 else out


def _bernoulli(xp, x, p=None, *, generator):
    if p is not None and not 0.0 <= p <= 1.0:
        raise ValueError(f"argument 'p' must be a probability in [0, 1], got {p}")
    prob = p if p is not None else _probabilities(xp, x, "x")
    if p is None and prob.size and float(xp.max(prob)) > 1:
        raise ValueError(f"argument 'x' must hold probabilities in [0, 1], got a maximum of {float(xp.max(prob))}")
    return (generator.random(x.shape, dtype=np.float64) < prob).astype(x.dtype)


_PERM_DTYPES = ("int32", "int64", "float32", "float64")


def _randperm(xp, n, dtype=None, *, generator):
    if n < 0:
        raise ValueError(f"argument 'n' must be non-negative, got {n}")
    dtype = np.dtype(dtype or np.int64)
    if dtype.name not in _PERM_DTYPES:  # narrower types cannot hold every index exactly
        raise TypeError(f"argument 'dtype' must be one of {', '.join(_PERM_DTYPES)}, got {dtype.name}")
    return xp.argsort(generator.random((n,), dtype=np.float64)).astype(dtype)


def register(ops):
    ops.define("multinomial(x: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor",
               public=["multinomial", "Tensor.multinomial"], aliases={"input": "x"}, dtypes=("float",), random=True,
               doc="num_samples int64 category indices drawn from the weights in x's last axis (1-D or 2-D).")
    ops.kernel("multinomial")(_multinomial)
    ops.define("bernoulli(x: Tensor, p: float|None = None) -> Tensor", public=["bernoulli", "Tensor.bernoulli"],
               aliases={"input": "x"}, dtypes=("float",), random=True,
               doc="1 with probability x (or p for every element, when given), else 0; x's shape and dtype.")
    ops.kernel("bernoulli")(_bernoulli)
    ops.define("randperm(n: int, dtype: DType = 'int64', place: Place|None = None, requires_grad: bool = False) "
               "-> Tensor", public=["randperm"], aliases={"device": "place"}, dtypes=("int", "float"), random=True,
               doc="A random permutation of 0..n-1.")
    ops.kernel("randperm")(_randperm)
