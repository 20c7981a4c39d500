"""torch.linalg: the oarlock.linalg functions whose torch meaning oarlock has, and torch's norm/vector_norm."""

from __future__ import annotations

import oarlock

from oarlock_torch_proxy.missing import missing_getattr


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    if ord == float("inf"):
        return oarlock.amax(x.abs(), dim, keepdim=keepdim)
    if ord == 2:
        return oarlock.sqrt(oarlock.sum(x * x, dim, keepdim=keepdim))
    return oarlock.pow(oarlock.sum(x.abs() ** ord, dim, keepdim=keepdim), 1.0 / ord)


def norm(x, ord=None, dim=None, keepdim=False, *, dtype=None):
    if ord is None and (dim is None or isinstance(dim, int) or len(dim) == 1):
        return vector_norm(x.flatten() if dim is None else x, 2, dim, keepdim)
    return oarlock.linalg.norm(x, p=ord, axis=dim, keepdim=keepdim)


for _name in ("cholesky", "eigh", "eigvalsh", "inv", "pinv", "qr", "solve", "svd", "det", "slogdet", "matrix_norm",
              "matrix_rank", "lstsq", "multi_dot", "matrix_power", "cross", "svdvals", "eig", "eigvals", "cond"):
    if hasattr(oarlock.linalg, _name):
        globals()[_name] = getattr(oarlock.linalg, _name)

__getattr__ = missing_getattr("torch.linalg")
