"""torch's top-level tensor functions whose torch meaning differs from oarlock's same-named function (those
that agree are forwarded by name in facade/__init__.py): (values, indices) returns, split by piece size,
gather/scatter with dim first, where with one argument, tensordot's dims, ..."""

from __future__ import annotations

from collections import namedtuple

import oarlock

from oarlock_torch_proxy import tensor_methods as tm

_SVD = namedtuple("svd", ["U", "S", "V"])


def max(input, dim=None, keepdim=False, *, out=None):
    if isinstance(dim, oarlock.Tensor):
        return oarlock.maximum(input, dim)
    return oarlock.max(input) if dim is None else tm._ValuesIndices["max"](
        oarlock.max(input, dim, keepdim=keepdim), oarlock.argmax(input, dim, keepdim=keepdim))


def min(input, dim=None, keepdim=False, *, out=None):
    if isinstance(dim, oarlock.Tensor):
        return oarlock.minimum(input, dim)
    return oarlock.min(input) if dim is None else tm._ValuesIndices["min"](
        oarlock.min(input, dim, keepdim=keepdim), oarlock.argmin(input, dim, keepdim=keepdim))


def sort(input, dim=-1, descending=False, stable=False, *, out=None):
    return tm._sort(input, dim, descending)


def argsort(input, dim=-1, descending=False, stable=False):
    return oarlock.argsort(input, axis=dim, descending=descending, stable=True)


def median(input, dim=None, keepdim=False):
    return tm._median(input, dim, keepdim)


def split(tensor, split_size_or_sections, dim=0):
    return tm._split(tensor, split_size_or_sections, dim)


def chunk(input, chunks, dim=0):
    """torch.chunk: pieces of ceil(n / chunks), the last one smaller (possibly fewer than `chunks` pieces)."""
    length = input.shape[dim]
    size = -(-length // chunks)
    return tm._split(input, size, dim) if size else (input,)


def tensor_split(input, indices_or_sections, dim=0):
    length = input.shape[dim]
    if isinstance(indices_or_sections, int):
        q, r = divmod(length, indices_or_sections)
        sizes = [q + 1] * r + [q] * (indices_or_sections - r)
    else:
        bounds = [0, *indices_or_sections, length]
        sizes = [b - a for a, b in zip(bounds, bounds[1:])]
    return tuple(oarlock.split(input, sizes, axis=dim))


def unbind(input, dim=0):
    return tm._unbind(input, dim)


def gather(input, dim, index, *, sparse_grad=False, out=None):
    return oarlock.take_along_axis(input, index, dim, broadcast=False)


def scatter(input, dim, index, src=None, *, value=None, reduce=None):
    values = src if src is not None else value
    if not isinstance(values, oarlock.Tensor):
        values = oarlock.full(index.shape, values, dtype=input.dtype)
    elif values.shape != index.shape:   # torch uses the leading part of src that index covers
        values = values[tuple(slice(0, n) for n in index.shape)]
    mode = {None: "assign", "add": "add", "multiply": "mul"}[reduce]
    return oarlock.put_along_axis(input, index, values, dim, reduce=mode, broadcast=False)


def scatter_add(input, dim, index, src):
    return scatter(input, dim, index, src, reduce="add")


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    mode = {"sum": "add", "prod": "mul", "mean": "mean", "amax": "amax", "amin": "amin"}[reduce]
    if src.shape != index.shape:
        src = src[tuple(slice(0, n) for n in index.shape)]
    return oarlock.put_along_axis(input, index, src, dim, reduce=mode, include_self=include_self,
                                  broadcast=False)


def index_select(input, dim, index, *, out=None):
    return oarlock.index_select(input, index, axis=dim)


def where(condition, input=None, other=None):
    if input is None and other is None:
        return tuple(oarlock.nonzero(condition, as_tuple=True))
    return oarlock.where(condition, input, other)


def tensordot(a, b, dims=2):
    return oarlock.tensordot(a, b, axes=dims)


def take_along_dim(input, indices, dim=None):
    if dim is None:
        return oarlock.take_along_axis(input.flatten(), indices.flatten(), 0)
    return oarlock.take_along_axis(input, indices, dim)


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return input.var(dim, unbiased, keepdim, correction=correction)


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return input.std(dim, unbiased, keepdim, correction=correction)


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(input, dim, unbiased, keepdim, correction=correction), oarlock.mean(input, dim, keepdim=keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return std(input, dim, unbiased, keepdim, correction=correction), oarlock.mean(input, dim, keepdim=keepdim)


def numel(input):
    return tm._numel(input)


def clamp(input, min=None, max=None, *, out=None):
    return oarlock.clip(input, min, max)


def norm(input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    """torch.norm: the vector p-norm over `dim` (all elements when None); "fro" is the 2-norm."""
    from oarlock_torch_proxy.facade.linalg import vector_norm
    if dtype is not None:
        input = input.astype(dtype)
    if p == "nuc":
        from oarlock_torch_proxy.missing import not_implemented
        not_implemented("torch.norm", "with p='nuc'")
    order = 2 if p in ("fro", None) else p
    return vector_norm(input.flatten() if dim is None else input, order, dim, keepdim)


def svd(input, some=True, compute_uv=True, *, out=None):
    """torch.svd (deprecated in torch, still used by optimizers): U, S, V with V not transposed. Computed by
    numpy's LAPACK on the host; not differentiable (asking for a gradient through it is reported)."""
    import numpy as np
    if oarlock.is_grad_enabled() and not input.stop_gradient:
        from oarlock_torch_proxy.missing import not_implemented
        not_implemented("torch.svd", "with a gradient")
    u, s, vh = np.linalg.svd(input.numpy(), full_matrices=not some)
    return _SVD(*(oarlock.to_tensor(np.ascontiguousarray(a)) for a in (u, s, np.swapaxes(vh, -1, -2))))


def clamp_min(input, min):
    return oarlock.clip(input, min=min)


def clamp_max(input, max):
    return oarlock.clip(input, max=max)


def cumprod(input, dim, *, dtype=None, out=None):
    """torch.cumprod as running products (differentiable through zeros, unlike exp(cumsum(log)))."""
    pieces = oarlock.unbind(input, axis=dim)
    acc, results = None, []
    for piece in pieces:
        acc = piece if acc is None else acc * piece
        results.append(acc)
    return oarlock.stack(results, axis=dim)


def broadcast_tensors(*tensors):
    return tuple(oarlock.broadcast_tensors(list(tensors)))


def meshgrid(*tensors, indexing="ij"):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    return tuple(oarlock.meshgrid(*tensors, indexing=indexing))


def einsum(equation, *operands):
    """torch.einsum(eq, a, b) or (eq, [a, b]) (oarlock.einsum takes both, 0-d operands included)."""
    return oarlock.einsum(equation, *operands)


def is_tensor(obj) -> bool:
    return isinstance(obj, oarlock.Tensor)


def is_nonzero(input) -> bool:
    return bool(input.item())


def fmod(input, other):
    return input - (input / other).trunc() * other


def masked_fill(input, mask, value):
    return input.masked_fill(mask, value)


def cat(tensors, dim=0, *, out=None):
    return oarlock.concat(list(tensors), axis=dim)


def stack(tensors, dim=0, *, out=None):
    return oarlock.stack(list(tensors), axis=dim)


def flatten(input, start_dim=0, end_dim=-1):
    return oarlock.flatten(input, start_dim, end_dim)


def finfo(dtype=None):
    return oarlock.finfo(dtype or oarlock.get_default_dtype())


def iinfo(dtype):
    return oarlock.iinfo(dtype)


def compile(model=None, **kwargs):
    """torch.compile: the model or function itself (the façade runs eagerly, with the same results)."""
    if model is None:
        return lambda fn: fn
    return model


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    return oarlock.unique(input, return_inverse=return_inverse, return_counts=return_counts, axis=dim)


def broadcast_shapes(*shapes):
    import numpy as np
    return tm.Size(np.broadcast_shapes(*[tuple(s) if not isinstance(s, int) else (s,) for s in shapes]))


def _foreach(method):
    """torch._foreach_<op>(tensors, *others): the in-place op on each tensor, the other operands zipped in
    when they are lists."""

    def run(tensors, *others, **kwargs):
        for i, t in enumerate(tensors):
            args = [o[i] if isinstance(o, (list, tuple)) else o for o in others]
            getattr(t, method)(*args, **kwargs)

    run.__name__ = f"_foreach_{method}"
    return run


FOREACH = {f"_foreach_{m}": _foreach(m) for m in ("add_", "sub_", "mul_", "div_", "lerp_", "addcmul_", "addcdiv_",
                                                 "sqrt_", "sign_", "zero_", "copy_", "clamp_min_", "clamp_max_")}
