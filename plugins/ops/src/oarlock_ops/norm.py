"""Normalisation, embedding and dropout (oarlock.nn.functional): layer_norm, rms_norm, batch_norm,
group_norm, embedding, dropout, dropout1d, dropout2d, dropout3d.

Normalisations. All four are one computation on a reshaped view of x (a `_Plan`): statistics over
some axes of the view, then a per-channel scale and shift that broadcasts over the others. Kernels
are fused (a handful of whole-array xp calls; 16-bit floats compute in float32) and return the mean
and the inverse standard deviation as intermediate outputs (kept by the graph node, not returned),
so the backward, one fused op for all four (_normalize_grad), needs no second pass over the
statistics. _normalize_grad has no rule: when the backward is itself recorded (create_graph=True)
the rules use the same formulas written with public ops (`_composite_grad`), so higher-order
gradients work.

batch_norm follows Paddle: running = momentum * running + (1 - momentum) * batch statistic, with the
*biased* batch variance (Paddle's kernel; torch uses the unbiased one), updated in place by the
kernel; use_global_stats=None means "running statistics unless training".

embedding follows Paddle too: positions whose id equals padding_idx give zero rows (whatever that
weight row holds) and send it no gradient. Its weight gradient is a scatter-add (sort the ids, sum
each run), an op whose own rule is the lookup, so double backward works.

dropout draws its mask (kept entries 1/(1-p), or 1 for 'downscale_in_infer'; dropped ones 0; only
the axes in `axis` get their own draws) from the device generator, so oarlock.seed makes it
reproducible, and keeps it as an intermediate output: backward is g * mask.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import oarlock
from oarlock.nn import functional as F
from oarlock_ops.linalg import compute_dtype

_FLOATS = ("float",)
_CHANNEL_FIRST = ("NC", "NCL", "NCHW", "NCDHW")
_CHANNEL_LAST = ("NLC", "NHWC", "NDHWC")
_DROPOUT_MODES = ("upscale_in_train", "downscale_in_infer")


# -- plans: x as a view, the axes of its statistics, the shape of its scale and shift --------------------

class _Plan(NamedTuple):
    view: tuple    # x reshaped to this
    stats: tuple   # the statistics are taken over these axes of the view
    affine: tuple  # weight and bias take this shape in the view (1 on the axes they broadcast over)

    @property
    def reduce(self):
        """The axes the weight and bias gradients sum over."""
        return tuple(i for i, n in enumerate(self.affine) if n == 1)

    @property
    def stats_shape(self):
        return tuple(1 if i in self.stats else n for i, n in enumerate(self.view))


def _layer_plan(shape, normalized_shape):
    k = len(normalized_shape)
    if k == 0:
        raise ValueError("normalized_shape must name at least one dimension, got []")
    if len(shape) < k or list(shape[len(shape) - k:]) != list(normalized_shape):
        dims = ", ".join(map(str, normalized_shape))
        raise ValueError(f"normalized_shape is {list(normalized_shape)}, so x must have shape [*, {dims}], "
                         f"got x shape {list(shape)}")
    n = math.prod(normalized_shape)
    return _Plan((math.prod(shape[:len(shape) - k]), n), (1,), (1, n))


def _channels(shape, data_format):
    """(channel-last?, number of channels) of an [N, C, *] or [N, *, C] input."""
    if data_format not in _CHANNEL_FIRST + _CHANNEL_LAST:
        raise ValueError(f"data_format must be one of {', '.join(map(repr, _CHANNEL_FIRST + _CHANNEL_LAST))}, "
                         f"got {data_format!r}")
    last = data_format in _CHANNEL_LAST
    if len(shape) < 2:
        layout = "[N, *, C]" if last else "[N, C, *]"
        raise ValueError(f"x must have at least 2 dimensions {layout} (data_format={data_format!r}), "
                         f"got shape {list(shape)}")
    return last, shape[-1] if last else shape[1]


def _batch_plan(shape, data_format):
    last, c = _channels(shape, data_format)
    if last:
        return _Plan((math.prod(shape[:-1]), c), (0,), (1, c)), c
    return _Plan((shape[0], c, math.prod(shape[2:])), (0, 2), (1, c, 1)), c


def _group_plan(shape, num_groups, data_format):
    last, c = _channels(shape, data_format)
    if num_groups <= 0 or c % num_groups:
        raise ValueError(f"num_groups must be positive and divide the number of channels, got num_groups="
                         f"{num_groups} for {c} channels (x shape {list(shape)}, data_format={data_format!r})")
    g, n = num_groups, shape[0]
    if last:
        return _Plan((n, math.prod(shape[1:-1]), g, c // g), (1, 3), (1, 1, g, c // g)), c
    return _Plan((n, g, c // g, math.prod(shape[2:])), (2, 3), (1, g, c // g, 1)), c


def _check_vector(name, a, size):
    if a is not None and (a.ndim != 1 or a.shape[0] != size):
        raise ValueError(f"{name} must have shape [{size}] (one value per channel), got shape {list(a.shape)}")


def _check_layer_affine(name, a, normalized_shape):
    """layer_norm's weight/bias: Paddle's flat [prod(normalized_shape)], or normalized_shape itself (torch)."""
    n = math.prod(normalized_shape)
    if a is not None and list(a.shape) not in ([n], list(normalized_shape)):
        raise ValueError(f"{name} must have shape [{n}] (or normalized_shape {list(normalized_shape)}), "
                         f"got shape {list(a.shape)}")


def _global_stats(training, use_global_stats):
    """Paddle's rule: running statistics when use_global_stats, or, when it is None, unless training."""
    return (not training) if use_global_stats is None else use_global_stats


def _rms_epsilon(eps, itemsize):
    """rms_norm's eps=None: the machine epsilon of float64 for float64 input, of float32 otherwise (Paddle)."""
    if eps is not None:
        return eps
    return 2.0 ** -52 if itemsize == 8 else 2.0 ** -23


# -- kernels ---------------------------------------------------------------------------------------------

def _mean_of_product(xp, a, b, axes):
    """mean(a * b) over `axes`, keeping them. When those are the trailing axes, one vecdot pass
    (no temporary); otherwise a product and a mean."""
    nd = a.ndim
    vecdot = getattr(xp, "vecdot", None)
    if vecdot is not None and axes == tuple(range(nd - len(axes), nd)) and a.shape == b.shape:
        lead = a.shape[:nd - len(axes)]
        m = math.prod(a.shape[nd - len(axes):])
        out = vecdot(a.reshape(*lead, m), b.reshape(*lead, m))
        out /= m
        return out.reshape(lead + (1,) * len(axes))
    return xp.mean(a * b, axis=axes, keepdims=True)


def _as_view(xp, a, plan):
    return a.reshape(plan.view).astype(compute_dtype(xp, a.dtype), copy=False)


def _normalized(xp, x, plan, epsilon, center):
    """(xhat, mean, var, rstd) of x viewed as plan.view and normalised over plan.stats (centred, or not
    for rms_norm: then mean is None). xhat is a fresh array."""
    xv = _as_view(xp, x, plan)
    mean = xp.mean(xv, axis=plan.stats, keepdims=True) if center else None
    xc = xv - mean if center else xv
    var = _mean_of_product(xp, xc, xc, plan.stats)
    rstd = var + epsilon
    rstd = xp.divide(1.0, xp.sqrt(rstd, out=rstd), out=rstd)
    xhat = xp.multiply(xc, rstd, out=xc) if center else xc * rstd
    return xhat, mean, var, rstd


def _affine(xp, out, weight, bias, plan, shape, dtype):
    """out * weight + bias (in place), back in x's shape and dtype."""
    if weight is not None:
        out *= weight.reshape(plan.affine)
    if bias is not None:
        out += bias.reshape(plan.affine)
    return out.reshape(shape).astype(dtype, copy=False)


def _empty(xp, x, plan, center):
    """The outputs for an empty x: no statistics to take."""
    stats = xp.zeros(plan.stats_shape, dtype=compute_dtype(xp, x.dtype))
    return (xp.zeros(x.shape, dtype=x.dtype),) + ((stats, stats) if center else (stats,))


def _normalize(xp, x, weight, bias, plan, epsilon, center=True):
    """(out, [mean,] rstd): the shared forward of layer_norm, rms_norm and group_norm."""
    if x.size == 0:
        return _empty(xp, x, plan, center)
    xhat, mean, _, rstd = _normalized(xp, x, plan, epsilon, center)
    out = _affine(xp, xhat, weight, bias, plan, x.shape, x.dtype)
    return (out, mean, rstd) if center else (out, rstd)


def _layer_norm(xp, x, weight=None, bias=None, normalized_shape=(), epsilon=1e-05):
    plan = _layer_plan(x.shape, normalized_shape)
    _check_layer_affine("weight", weight, normalized_shape)
    _check_layer_affine("bias", bias, normalized_shape)
    return _normalize(xp, x, weight, bias, plan, epsilon)


def _rms_norm(xp, input, weight=None, normalized_shape=(), eps=None):
    plan = _layer_plan(input.shape, normalized_shape)
    _check_layer_affine("weight", weight, normalized_shape)
    return _normalize(xp, input, weight, None, plan, _rms_epsilon(eps, input.dtype.itemsize), center=False)


def _group_norm(xp, x, weight=None, bias=None, num_groups=1, epsilon=1e-05, data_format="NCHW"):
    plan, c = _group_plan(x.shape, num_groups, data_format)
    _check_vector("weight", weight, c)
    _check_vector("bias", bias, c)
    return _normalize(xp, x, weight, bias, plan, epsilon)


def _batch_norm(xp, x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.9,
                epsilon=1e-05, data_format="NCHW", use_global_stats=None):
    plan, c = _batch_plan(x.shape, data_format)
    for name, a in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                    ("bias", bias)):
        _check_vector(name, a, c)
    ct = compute_dtype(xp, x.dtype)
    if _global_stats(training, use_global_stats):
        mean = running_mean.astype(ct).reshape(plan.affine)
        rstd = 1.0 / xp.sqrt(running_var.astype(ct).reshape(plan.affine) + epsilon)
        xhat = _as_view(xp, x, plan) - mean
        xhat *= rstd
    else:
        if math.prod(plan.view[i] for i in plan.stats) == 0:
            raise ValueError(f"batch statistics need at least one value per channel, got x shape {list(x.shape)}; "
                             f"pass training=False (or use_global_stats=True) to use the running statistics")
        xhat, mean, var, rstd = _normalized(xp, x, plan, epsilon, center=True)
        for running, batch in ((running_mean, mean), (running_var, var)):  # in place, as Paddle does
            running[...] = (momentum * running + (1.0 - momentum) * batch.reshape(-1)).astype(running.dtype)
    return _affine(xp, xhat, weight, bias, plan, x.shape, x.dtype), mean, rstd


# The internal ops (no public name) the rules call, as the callables ops.define returned (set by register).
_normalize_grad_op = _embedding_grad_op = None


def _normalize_grad(xp, x, weight, g, mean, rstd, view=(), stats=(), affine=(), fixed=False, bias=True):
    """(dx, dweight, dbias) of out = xhat * weight + bias, xhat = (x - mean) * rstd over the plan's view;
    dweight and dbias are flat (dbias is empty when bias=False). Without `fixed` the statistics are
    x's own (dx = rstd (gh - mean(gh) - xhat mean(gh xhat)), gh = g weight; no mean(gh) without
    centring); fixed statistics (batch_norm's running ones) do not depend on x: dx = gh rstd."""
    plan = _Plan(tuple(view), tuple(stats), tuple(affine))
    ct = compute_dtype(xp, x.dtype)
    if x.size == 0:
        size = math.prod(plan.affine)
        return (xp.zeros(x.shape, dtype=x.dtype), xp.zeros((size,), dtype=x.dtype),
                xp.zeros((size if bias else 0,), dtype=x.dtype))
    rstd = rstd.astype(ct, copy=False)
    xv = _as_view(xp, x, plan)
    if mean is None:
        xhat = xv * rstd
    else:
        xhat = xv - mean.astype(ct, copy=False)
        xhat *= rstd
    gv = _as_view(xp, g, plan)
    gh = gv if weight is None else gv * weight.reshape(plan.affine)
    if fixed:
        dx = gh * rstd
    else:
        dx = xhat * _mean_of_product(xp, gh, xhat, plan.stats)
        dx = xp.subtract(gh, dx, out=dx)
        if mean is not None:
            dx -= xp.mean(gh, axis=plan.stats, keepdims=True)
        dx *= rstd
    dweight = xp.sum(xp.multiply(gv, xhat, out=xhat), axis=plan.reduce)  # xhat is no longer needed
    dbias = xp.sum(gv, axis=plan.reduce) if bias else xp.zeros((0,), dtype=ct)
    return (dx.reshape(x.shape).astype(x.dtype, copy=False), dweight.reshape(-1).astype(x.dtype, copy=False),
            dbias.reshape(-1).astype(x.dtype, copy=False))


# -- backward rules -------------------------------------------------------------------------------------

def _composite_grad(x, weight, g, plan, epsilon, center, fixed=None):
    """_normalize_grad's formulas in public ops (recorded, so differentiable again): (dx, dweight, dbias),
    the last two flat. The statistics are recomputed from x so their own dependence on x is recorded;
    fixed: batch_norm's (mean, rstd) from the running statistics, constants."""
    xv, gv = oarlock.reshape(x, list(plan.view)), oarlock.reshape(g, list(plan.view))
    axes = list(plan.stats)
    if fixed is None:
        xc = xv - oarlock.mean(xv, axis=axes, keepdim=True) if center else xv
        rstd = oarlock.rsqrt(oarlock.mean(xc * xc, axis=axes, keepdim=True) + epsilon)
    else:
        mean, rstd = (oarlock.cast(t.detach(), x.dtype) for t in fixed)
        xc = xv - mean
    xhat = xc * rstd
    gh = gv if weight is None else gv * oarlock.reshape(weight, list(plan.affine))
    if fixed is None:
        dx = gh - xhat * oarlock.mean(gh * xhat, axis=axes, keepdim=True)
        if center:
            dx = dx - oarlock.mean(gh, axis=axes, keepdim=True)
        dx = dx * rstd
    else:
        dx = gh * rstd
    reduce = list(plan.reduce)
    return (oarlock.reshape(dx, list(x.shape)), oarlock.reshape(oarlock.sum(gv * xhat, axis=reduce), [-1]),
            oarlock.reshape(oarlock.sum(gv, axis=reduce), [-1]))


def _wanted(ctx, grads):
    """One gradient per tensor input (None where none is needed), each in that input's shape."""
    out = []
    for edge, meta, grad in zip(ctx.edges, ctx.meta, grads):
        if edge is None or grad is None:
            out.append(None)
        else:
            out.append(grad if tuple(grad.shape) == tuple(meta[0]) else oarlock.reshape(grad, list(meta[0])))
    return tuple(out)


def _norm_grads(ctx, g, plan, epsilon, center, fixed=False, bias=True):
    """(dx, dweight, dbias) for a normalisation node whose saved tensors are (x, weight, [mean,] rstd)."""
    x, weight, *stats = ctx.saved
    if oarlock.is_grad_enabled():  # create_graph: a recorded backward
        return _composite_grad(x, weight, g, plan, epsilon, center, fixed=tuple(stats) if fixed else None)
    mean, rstd = stats if center else (None, stats[0])
    return _normalize_grad_op(x, weight, g, mean, rstd, plan.view, plan.stats, plan.affine, fixed, bias)


def _layer_norm_rule(ctx, g, *_stats):
    a = ctx.attrs
    plan = _layer_plan(ctx.meta[0][0], a["normalized_shape"])
    return _wanted(ctx, _norm_grads(ctx, g, plan, a["epsilon"], center=True, bias=ctx.edges[2] is not None))


def _rms_norm_rule(ctx, g, *_stats):
    plan = _layer_plan(ctx.meta[0][0], ctx.attrs["normalized_shape"])
    epsilon = _rms_epsilon(ctx.attrs["eps"], ctx.meta[0][1].np.itemsize)
    return _wanted(ctx, _norm_grads(ctx, g, plan, epsilon, center=False, bias=False)[:2])


def _group_norm_rule(ctx, g, *_stats):
    a = ctx.attrs
    plan = _group_plan(ctx.meta[0][0], a["num_groups"], a["data_format"])[0]
    return _wanted(ctx, _norm_grads(ctx, g, plan, a["epsilon"], center=True, bias=ctx.edges[2] is not None))


def _batch_norm_rule(ctx, g, *_stats):
    a = ctx.attrs
    plan = _batch_plan(ctx.meta[0][0], a["data_format"])[0]
    fixed = _global_stats(a["training"], a["use_global_stats"])
    dx, dw, db = _norm_grads(ctx, g, plan, a["epsilon"], center=True, fixed=fixed, bias=ctx.edges[4] is not None)
    return _wanted(ctx, (dx, None, None, dw, db))


# -- embedding ------------------------------------------------------------------------------------------

def _padding_row(padding_idx, num_embeddings):
    """padding_idx as a row number (negative counts from the end), or None."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"padding_idx must be in [{-num_embeddings}, {num_embeddings}) for {num_embeddings} "
                         f"embeddings, got {padding_idx}")
    return padding_idx % num_embeddings


def _check_ids(xp, x, num_embeddings):
    if x.dtype.kind not in "iu":
        raise TypeError(f"x must hold integer ids (int32 or int64), got dtype {x.dtype}")
    if x.size:
        low, high = int(xp.min(x)), int(xp.max(x))
        if low < 0 or high >= num_embeddings:
            raise IndexError(f"id {low if low < 0 else high} is out of range for {num_embeddings} embeddings "
                             f"(valid: 0 to {num_embeddings - 1})")


def _renorm_(xp, weight, ids, max_norm, norm_type):
    """Scale, in place, the looked-up rows whose norm exceeds max_norm down to max_norm (Paddle's and
    torch's max_norm; the scaling is not differentiated)."""
    rows = xp.unique(ids.reshape(-1))
    selected = weight[rows].astype(compute_dtype(xp, weight.dtype))
    norms = xp.sum(xp.abs(selected) ** norm_type, axis=1, keepdims=True) ** (1.0 / norm_type)
    scale = xp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    weight[rows] = (selected * scale).astype(weight.dtype)


def _embedding(xp, x, weight, padding_idx=None, sparse=False, max_norm=None, norm_type=2.0,
               scale_grad_by_freq=False):
    if weight.ndim != 2:
        raise ValueError(f"weight must be 2-D [num_embeddings, embedding_dim], got shape {list(weight.shape)}")
    _check_ids(xp, x, weight.shape[0])
    pad = _padding_row(padding_idx, weight.shape[0])
    if max_norm is not None and x.size:
        _renorm_(xp, weight, x, max_norm, norm_type)
    out = xp.take(weight, x, axis=0)
    if pad is not None:
        out[x == pad] = 0
    return out


def _embedding_grad(xp, x, g, num_embeddings=0, padding_idx=None, scale_grad_by_freq=False):
    """The rows of g summed per id. Sorting the ids and summing each run (reduceat) is several times
    faster than an unbuffered scatter-add (add.at), which is the fallback for array modules without it."""
    dim = g.shape[-1]
    ct = compute_dtype(xp, g.dtype)
    ids, rows = x.reshape(-1), g.reshape(-1, dim).astype(ct, copy=False)
    out = xp.zeros((num_embeddings, dim), dtype=ct)
    if ids.size:
        reduceat = getattr(xp.add, "reduceat", None)
        if reduceat is not None:
            order = xp.argsort(ids)
            ordered = ids[order]
            starts = xp.flatnonzero(xp.concatenate([xp.ones(1, dtype=bool), ordered[1:] != ordered[:-1]]))
            sums = reduceat(rows[order], starts, axis=0)
            if scale_grad_by_freq:
                sums /= xp.diff(xp.append(starts, ids.size)).reshape(-1, 1).astype(ct)
            out[ordered[starts]] = sums
        else:
            xp.add.at(out, ids, rows)
            if scale_grad_by_freq:
                out /= xp.maximum(xp.bincount(ids, minlength=num_embeddings), 1).reshape(-1, 1).astype(ct)
    pad = _padding_row(padding_idx, num_embeddings)
    if pad is not None:
        out[pad] = 0
    return out.astype(g.dtype, copy=False)


def _embedding_rule(ctx, g):
    (x,) = ctx.saved
    a = ctx.attrs
    return None, _embedding_grad_op(x, g, ctx.meta[1][0][0], a["padding_idx"], a["scale_grad_by_freq"])


def _embedding_grad_rule(ctx, gg):
    """_embedding_grad is linear in g; its transpose is the lookup. With scale_grad_by_freq the lookup is
    not divided by the id counts (torch's double backward does the same): the rule only runs when
    differentiating through embedding, whose own rule rescales once more, and it is that composition
    that then matches finite differences of the rescaled first gradient."""
    (x,) = ctx.saved
    return None, F.embedding(x, gg, padding_idx=ctx.attrs["padding_idx"])


# -- dropout ---------------------------------------------------------------------------------------------

def _dropout_axes(axis, ndim):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else axis
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axis {a} is out of range for a {ndim}-D input (valid: {-ndim} to {ndim - 1})")
    return {a % ndim for a in axes}


def _dropout_kernel(xp, x, p, axes, training, mode, generator):
    """(out, mask). Only the axes in `axes` (None: all) get their own draws; the mask is 1 on the others."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a probability in [0, 1], got {p}")
    if mode not in _DROPOUT_MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, _DROPOUT_MODES))}, got {mode!r}")
    if not training or p == 0.0:  # no draw: a constant mask of ones (or 1 - p when downscaling at inference)
        scale = 1.0 - p if mode == "downscale_in_infer" and not training else 1.0
        mask = xp.full((1,) * x.ndim, scale, dtype=x.dtype)
        return (x if scale == 1.0 else x * mask), mask
    shape = x.shape if axes is None else tuple(n if i in axes else 1 for i, n in enumerate(x.shape))
    mask = (generator.random(shape, dtype=xp.float32) >= p).astype(x.dtype)
    if mode == "upscale_in_train":
        mask *= 1.0 / (1.0 - p) if p < 1.0 else 0.0
    return x * mask, mask


def _dropout(xp, x, p=0.5, axis=None, training=True, mode="upscale_in_train", *, generator):
    return _dropout_kernel(xp, x, p, _dropout_axes(axis, x.ndim), training, mode, generator)


def _channel_dropout(layouts):
    """The kernel of dropout1d/2d/3d: whole channels share a draw. layouts: {rank: {data_format: axes
    with their own draws}}."""
    def kernel(xp, x, p=0.5, training=True, data_format=None, *, generator):
        formats = layouts.get(x.ndim)
        if formats is None:
            raise ValueError(f"x must be {' or '.join(f'{n}-D' for n in layouts)}, got shape {list(x.shape)}")
        if data_format not in formats:
            raise ValueError(f"data_format must be one of {', '.join(map(repr, formats))}, got {data_format!r}")
        return _dropout_kernel(xp, x, p, formats[data_format], training, "upscale_in_train", generator)
    return kernel


def _dropout_rule(ctx, g, _g_mask):
    (mask,) = ctx.saved
    return None if g is None else g * mask


CHANNEL_DROPOUTS = {  # name: (default data_format, {rank: {data_format: axes with their own draws}})
    "dropout1d": ("NCL", {3: {"NCL": (0, 1), "NLC": (0, 2)}, 2: {"NCL": (0,), "NLC": (1,)}}),
    "dropout2d": ("NCHW", {4: {"NCHW": (0, 1), "NHWC": (0, 3)}}),
    "dropout3d": ("NCDHW", {5: {"NCDHW": (0, 1), "NDHWC": (0, 4)}}),
}


# -- registration ----------------------------------------------------------------------------------------

_ALIASES = {"input": "x", "eps": "epsilon"}  # torch's spellings


def _functional(name):
    return [f"oarlock.nn.functional.{name}"]


def _register_norms(ops):
    # the kernels return (out, mean, rstd), or (out, rstd) for rms_norm; the statistics are intermediate
    saved = ("x", "weight", "out1", "out2")
    ops.define("layer_norm(x: Tensor, normalized_shape: Shape, weight: OptTensor = None, bias: OptTensor = None, "
               "epsilon: float = 1e-05) -> Tensor", public=_functional("layer_norm"), aliases=_ALIASES,
               promote=True, dtypes=_FLOATS, intermediate=2, grad=_layer_norm_rule, saves=saved, amp="black",
               doc="Normalise x over its trailing normalized_shape dims, then scale and shift.")
    ops.kernel("layer_norm")(_layer_norm)
    ops.define("rms_norm(input: Tensor, normalized_shape: Shape, weight: OptTensor = None, eps: float|None = None) "
               "-> Tensor", public=_functional("rms_norm"), aliases={"x": "input", "epsilon": "eps"},
               promote=True, dtypes=_FLOATS, intermediate=1, grad=_rms_norm_rule, saves=("input", "weight", "out1"),
               amp="black", doc="x / sqrt(mean(x^2) + eps) over the trailing normalized_shape dims, times weight; "
                                "eps=None: the machine epsilon of float32 (float64 for float64 input).")
    ops.kernel("rms_norm")(_rms_norm)
    ops.define("group_norm(x: Tensor, num_groups: int, epsilon: float = 1e-05, weight: OptTensor = None, "
               "bias: OptTensor = None, data_format: str = 'NCHW') -> Tensor", public=_functional("group_norm"),
               aliases=_ALIASES, promote=True, dtypes=_FLOATS, intermediate=2, grad=_group_norm_rule, saves=saved,
               amp="black", doc="Normalise each group of channels of each sample, then scale and shift per channel.")
    ops.kernel("group_norm")(_group_norm)
    ops.define("batch_norm(x: Tensor, running_mean: Tensor, running_var: Tensor, weight: OptTensor = None, "
               "bias: OptTensor = None, training: bool = False, momentum: float = 0.9, epsilon: float = 1e-05, "
               "data_format: str = 'NCHW', use_global_stats: bool|None = None) -> Tensor",
               public=_functional("batch_norm"), aliases=_ALIASES, promote=("x", "weight", "bias"),
               dtypes=_FLOATS, nondiff=("running_mean", "running_var"), intermediate=2, grad=_batch_norm_rule,
               saves=saved, amp="black",
               doc="Per-channel normalisation by the batch statistics (updating the running ones in place, "
                   "Paddle's momentum) or by the running statistics.")
    ops.kernel("batch_norm")(_batch_norm)
    global _normalize_grad_op
    _normalize_grad_op = ops.define(
        "_normalize_grad(x: Tensor, weight: OptTensor, g: Tensor, mean: OptTensor, rstd: Tensor, "
        "view: Shape, stats: Axis, affine: Shape, fixed: bool = False, bias: bool = True) "
        "-> tuple[Tensor, Tensor, Tensor]", internal=True, promote=("x", "weight", "g"), dtypes=_FLOATS,
        doc="The fused backward of the normalisations: (dx, flat dweight, flat dbias) from the saved "
            "statistics, over x viewed as `view`.")
    ops.kernel("_normalize_grad")(_normalize_grad)


def _register_embedding(ops):
    # Paddle 3.2's argument order; the gradient op and the lookup are each other's transpose
    ops.define("embedding(x: Tensor, weight: Tensor, padding_idx: int|None = None, sparse: bool = False, "
               "max_norm: float|None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False) -> Tensor",
               public=_functional("embedding"), aliases={"input": "x"}, promote=("weight",), dtypes=_FLOATS,
               nondiff=("x",), grad=_embedding_rule, saves=("x",),
               doc="The rows of weight at the integer ids x (zero rows at padding_idx). sparse is accepted and "
                   "ignored: the weight gradient is dense.")
    ops.kernel("embedding")(_embedding)
    global _embedding_grad_op
    _embedding_grad_op = ops.define(
        "_embedding_grad(x: Tensor, g: Tensor, num_embeddings: int, padding_idx: int|None = None, "
        "scale_grad_by_freq: bool = False) -> Tensor", internal=True, promote=("g",), dtypes=_FLOATS,
        nondiff=("x",), grad=_embedding_grad_rule, saves=("x",),
        doc="The [num_embeddings, dim] gradient of embedding's weight: the rows of g summed per id.")
    ops.kernel("_embedding_grad")(_embedding_grad)


def _register_dropout(ops):
    ops.define("dropout(x: Tensor, p: float = 0.5, axis: Axis|None = None, training: bool = True, "
               "mode: str = 'upscale_in_train') -> Tensor", public=_functional("dropout"), aliases={"input": "x"},
               dtypes=_FLOATS, random=True, intermediate=1, grad=_dropout_rule, saves=("out1",),
               doc="Zero entries with probability p (whole slices when `axis` names the axes that get their own "
                   "draws); 'upscale_in_train' scales the rest by 1/(1-p) in training, 'downscale_in_infer' "
                   "scales x by 1-p outside training.")
    ops.kernel("dropout")(_dropout)
    for name, (data_format, layouts) in CHANNEL_DROPOUTS.items():
        ops.define(f"{name}(x: Tensor, p: float = 0.5, training: bool = True, data_format: str = '{data_format}') "
                   f"-> Tensor", public=_functional(name), aliases={"input": "x"}, dtypes=_FLOATS, random=True,
                   intermediate=1, grad=_dropout_rule, saves=("out1",),
                   doc=f"Zero whole channels with probability p, scaling the rest by 1/(1-p) ({data_format} input).")
        ops.kernel(name)(_channel_dropout(layouts))


def register(ops):
    _register_norms(ops)
    _register_embedding(ops)
    _register_dropout(ops)
