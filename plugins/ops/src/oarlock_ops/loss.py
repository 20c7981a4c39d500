"""Loss ops of oarlock.nn.functional: nll_loss, mse_loss, l1_loss, smooth_l1_loss, binary_cross_entropy,
binary_cross_entropy_with_logits and kl_div (cross_entropy lives in softmax.py, next to softmax).

Every loss except nll_loss is pointwise: an unreduced loss l(x, y) per element, optionally times a
weight, then reduced. A `Pointwise` entry gives l written against xp (for the kernel) and its partial
derivatives written with oarlock ops (for the backward rule, so it runs on every device and can be
differentiated again); `_pointwise_op` turns it into the kernel and the rule. The reductions are one
table, REDUCTIONS: how a kernel reduces the loss and how a rule spreads the gradient back.

Semantics follow Paddle 3; where Paddle and PyTorch differ:
- smooth_l1_loss(delta, is_huber=True) is the Huber loss, 0.5 r^2 for |r| <= delta and
  delta (|r| - delta / 2) beyond (torch.nn.functional.huber_loss(delta=delta)); is_huber=False divides
  it by delta, which is torch's smooth_l1_loss(beta=delta). With the default delta=1 all four agree.
  Paddle computes a meaningless loss for delta <= 0 (its docs say it is ignored); we refuse it.
- kl_div takes log-probabilities as input; with log_target=False, label entries <= 0 contribute 0 (and
  no gradient) as in Paddle, where torch gives nan for negative ones. 'batchmean' divides the sum by the
  batch size (a 0-D input is returned as is).
- nll_loss 'mean' divides by the summed weights of the non-ignored labels; when that is 0 (everything
  ignored, or zero weights) the loss is 0, as Paddle's kernel gives, where torch gives nan.
- mse_loss and l1_loss broadcast input against label (Paddle writes them as subtract + square/abs);
  the other pointwise losses need equal shapes, as Paddle's kernels do. A weight (and pos_weight)
  must broadcast to the loss's shape.
- binary_cross_entropy clamps each log at -100 (torch and Paddle do), and its gradient divides by
  max(x (1 - x), 1e-12); binary_cross_entropy_with_logits uses the log-sum-exp form, so large logits
  neither overflow nor lose the loss.
Unlike Paddle, which differentiates only the input, the float labels of the pointwise losses get
gradients too (as in torch); weights and integer labels never do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

import oarlock
from oarlock_ops._grad import unbroadcast
from oarlock_ops.linalg import compute_dtype

LOG_FLOOR = -100.0      # binary_cross_entropy's clamp on log(x) and log(1 - x)
BCE_GRAD_EPS = 1e-12    # ... and the floor of x (1 - x) in its gradient


# -- reductions ----------------------------------------------------------------------------------------

class Reduction(NamedTuple):
    reduce: Callable  # reduce(xp, loss) -> the reduced loss (an array)
    scale: Callable   # scale(loss shape) -> d reduced / d element (a number), None when the gradient is unreduced


def _nan(xp, loss):
    return xp.asarray(xp.nan, dtype=loss.dtype)


def _mean(xp, loss):
    # Paddle: the mean of no elements is nan (computed here without numpy's warning)
    return xp.sum(loss) / loss.size if loss.size else _nan(xp, loss)


def _batchmean(xp, loss):
    if loss.ndim == 0:
        return loss  # Paddle returns a 0-D loss as is
    return xp.sum(loss) / loss.shape[0] if loss.shape[0] else _nan(xp, loss)


REDUCTIONS = {
    "none": Reduction(lambda xp, loss: loss, lambda shape: None),
    "mean": Reduction(_mean, lambda shape: 1.0 / max(math.prod(shape), 1)),
    "sum": Reduction(lambda xp, loss: xp.sum(loss), lambda shape: 1.0),
    "batchmean": Reduction(_batchmean, lambda shape: 1.0 / max(shape[0], 1) if shape else None),
}
STANDARD = ("none", "mean", "sum")


def check_reduction(reduction, accepted=STANDARD):
    if reduction not in accepted:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, accepted))}, got {reduction!r}")


def _reduce(xp, loss, reduction, dtype):
    return xp.asarray(REDUCTIONS[reduction].reduce(xp, loss)).astype(dtype, copy=False)


def _spread(g, reduction, shape):
    """The upstream gradient of each unreduced element: g times d reduced / d element."""
    scale = REDUCTIONS[reduction].scale(list(shape))
    return g if scale is None or scale == 1.0 else g * scale


# -- pointwise losses ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pointwise:
    """One pointwise loss. Its tensor inputs are (input, label, [weight], *params).

    value(xp, x, y, *params, **attrs): the unreduced loss, arrays in the compute dtype.
    partials(x, y, *params, need_x, need_y, **attrs): (d l / d x, d l / d y) as Tensors, None where not needed.
    """

    value: Callable
    partials: Callable
    broadcast: bool = False      # input and label broadcast (else they must have one shape)
    weighted: bool = False       # the third tensor input is a weight multiplying the unreduced loss
    reductions: tuple = STANDARD
    check: Callable | None = None  # check(xp, x, y): extra validation of the inputs' values


def _shape_text(shape):
    return str(list(shape))


def _loss_shape(x_shape, y_shape, broadcast, first="input"):
    """The shape of the unreduced loss (shape arithmetic on the host, whatever the array module)."""
    if not broadcast:
        if tuple(x_shape) != tuple(y_shape):
            raise ValueError(f"{first} and label must have the same shape, got {first} shape "
                             f"{_shape_text(x_shape)} and label shape {_shape_text(y_shape)}")
        return tuple(x_shape)
    try:
        return np.broadcast_shapes(tuple(x_shape), tuple(y_shape))
    except ValueError:
        raise ValueError(f"{first} shape {_shape_text(x_shape)} and label shape {_shape_text(y_shape)} do not "
                         f"broadcast together") from None


def _check_fits(what, t, shape):
    """A weight must broadcast to the loss's shape without enlarging it."""
    try:
        fits = np.broadcast_shapes(t.shape, shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{what} of shape {_shape_text(t.shape)} does not broadcast to the loss shape "
                         f"{_shape_text(shape)}")


def _pointwise_op(spec: Pointwise, names):
    """The kernel and the backward rule of a pointwise loss; `names` are its tensor parameters."""

    def kernel(xp, x, y, *rest, reduction="mean", **attrs):
        check_reduction(reduction, spec.reductions)
        shape = _loss_shape(x.shape, y.shape, spec.broadcast, names[0])
        for name, t in zip(names[2:], rest):
            if t is not None:
                _check_fits(name, t, shape)
        dtype, ct = x.dtype, compute_dtype(xp, x.dtype)
        x, y, *rest = [None if t is None else t.astype(ct, copy=False) for t in (x, y, *rest)]
        if spec.check is not None:
            spec.check(xp, x, y)
        weight, params = (rest[0], rest[1:]) if spec.weighted else (None, rest)
        loss = spec.value(xp, x, y, *params, **attrs)
        if weight is not None:
            loss = loss * weight
        return _reduce(xp, loss, reduction, dtype)

    def rule(ctx, g):
        x, y, *rest = ctx.saved
        weight, params = (rest[0], rest[1:]) if spec.weighted else (None, rest)
        attrs = dict(ctx.attrs)
        reduction = attrs.pop("reduction")
        need_x, need_y = ctx.edges[0] is not None, ctx.edges[1] is not None
        up = _spread(g, reduction, _loss_shape(ctx.meta[0][0], ctx.meta[1][0], spec.broadcast))
        if weight is not None:
            up = up * weight
        dx, dy = spec.partials(x, y, *params, need_x=need_x, need_y=need_y, **attrs)
        return (unbroadcast(ctx, 0, up * dx) if need_x else None,
                unbroadcast(ctx, 1, up * dy) if need_y else None,
                *([None] * len(rest)))

    return kernel, rule


# -- the pointwise losses: value (xp arrays) and partial derivatives (Tensors) --------------------------

def _mse(xp, x, y):
    d = x - y
    return d * d


def _mse_partials(x, y, need_x, need_y):
    dx = 2 * (x - y)
    return dx, -dx if need_y else None


def _l1(xp, x, y):
    return xp.abs(x - y)


def _l1_partials(x, y, need_x, need_y):
    s = oarlock.sign(x - y)  # 0 at x == y, as in Paddle and torch
    return s, -s if need_y else None


def _huber_scale(delta, is_huber):
    """smooth_l1_loss divides the Huber loss by delta when is_huber=False (torch's smooth_l1_loss(beta))."""
    if not delta > 0:
        raise ValueError(f"delta must be positive (the residual size where the loss turns from squared to "
                         f"linear), got {delta}")
    return 1.0 if is_huber else 1.0 / delta


def _smooth_l1(xp, x, y, delta=1.0, is_huber=True):
    scale = _huber_scale(delta, is_huber)
    r = x - y
    a = xp.abs(r)
    loss = xp.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))
    return loss if scale == 1.0 else loss * scale


def _smooth_l1_partials(x, y, need_x, need_y, delta=1.0, is_huber=True):
    # d/dr: r inside [-delta, delta], delta * sign(r) outside; both agree at |r| == delta
    dx = oarlock.clip(x - y, -delta, delta) * _huber_scale(delta, is_huber)
    return dx, -dx if need_y else None


def _clamped_log_xp(xp, p):
    """max(log p, -100) with log 0 = -100 as well, without evaluating log 0 (no warning, no -inf)."""
    positive = p > 0
    return xp.maximum(xp.where(positive, xp.log(xp.where(positive, p, 1)), LOG_FLOOR), LOG_FLOOR)


def _clamped_log(p):
    positive = p > 0
    return oarlock.maximum(oarlock.where(positive, oarlock.log(oarlock.where(positive, p, 1.0)), LOG_FLOOR),
                           LOG_FLOOR)


def _check_probabilities(xp, x, y):
    if x.size and bool(xp.any((x < 0) | (x > 1))):
        raise ValueError(f"input must hold probabilities in [0, 1], got values from {float(xp.min(x))} to "
                         f"{float(xp.max(x))}; apply sigmoid first, or pass the logits to "
                         f"binary_cross_entropy_with_logits")


def _bce(xp, x, y):
    return -(y * _clamped_log_xp(xp, x) + (1 - y) * _clamped_log_xp(xp, 1 - x))


def _bce_partials(x, y, need_x, need_y):
    dx = (x - y) / oarlock.maximum(x * (1 - x), BCE_GRAD_EPS) if need_x else None
    dy = _clamped_log(1 - x) - _clamped_log(x) if need_y else None
    return dx, dy


def _softplus_neg_xp(xp, x):
    """log(1 + exp(-x)) = -log sigmoid(x), as log1p(exp(-|x|)) + max(-x, 0): exp never overflows."""
    return xp.log1p(xp.exp(-xp.abs(x))) + xp.maximum(-x, 0)


def _softplus_neg(x):
    return oarlock.log1p(oarlock.exp(-oarlock.abs(x))) + oarlock.maximum(-x, 0.0)


def _bce_logits(xp, x, y, pos_weight=None):
    # -[pw y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], using log(1 - sigmoid(x)) = -x + log sigmoid(x)
    log_weight = 1 if pos_weight is None else 1 + (pos_weight - 1) * y
    return (1 - y) * x + log_weight * _softplus_neg_xp(xp, x)


def _bce_logits_partials(x, y, pos_weight=None, *, need_x, need_y):
    dx = dy = None
    if need_x:
        s = oarlock.sigmoid(x)
        dx = s - y if pos_weight is None else (1 - y) + (1 + (pos_weight - 1) * y) * (s - 1)
    if need_y:
        dy = -x if pos_weight is None else (pos_weight - 1) * _softplus_neg(x) - x
    return dx, dy


def _kl_div(xp, x, y, log_target=False):
    if log_target:
        return xp.exp(y) * (y - x)
    # y (log y - x) where y > 0, else 0; the masked entries compute 1 * (0 - x), which cannot warn
    positive = y > 0
    safe = xp.where(positive, y, 1)
    return xp.where(positive, safe * (xp.log(safe) - x), 0)


def _kl_div_partials(x, y, need_x, need_y, log_target=False):
    if log_target:
        e = oarlock.exp(y)
        return -e if need_x else None, e * (y - x + 1) if need_y else None
    positive = y > 0
    dx = oarlock.where(positive, -y, 0.0) if need_x else None
    dy = oarlock.where(positive, oarlock.log(oarlock.where(positive, y, 1.0)) + 1 - x, 0.0) if need_y else None
    return dx, dy


# -- nll_loss -------------------------------------------------------------------------------------------
# input [N, C, d1, ...] (log-probabilities), label [N, d1, ...] or [N, 1, d1, ...] of class indices; the
# class axis is 1. Each position's loss is -weight[label] * input[label], 0 where label == ignore_index.

def _check_nll(xp, x, label, weight, ignore_index):
    if x.ndim < 2:
        raise ValueError(f"input must have at least 2 dimensions [N, C, ...] (the class axis is 1), got shape "
                         f"{_shape_text(x.shape)}")
    if label.dtype.kind not in "iu":
        raise TypeError(f"label must hold integer class indices (int64 or int32), got dtype {label.dtype.name}")
    without = x.shape[:1] + x.shape[2:]
    with_one = x.shape[:1] + (1,) + x.shape[2:]
    if label.shape not in (without, with_one):
        raise ValueError(f"label shape {_shape_text(label.shape)} does not fit input shape {_shape_text(x.shape)}: "
                         f"it must be {_shape_text(without)} or {_shape_text(with_one)}")
    classes = x.shape[1]
    bad = (label != ignore_index) & ((label < 0) | (label >= classes))
    if label.size and bool(xp.any(bad)):
        value = int(label[bad].reshape(-1)[0])
        raise IndexError(f"label value {value} is out of range for {classes} classes (valid: 0 to {classes - 1}, "
                         f"or ignore_index={ignore_index})")
    if weight is not None and weight.shape != (classes,):
        raise ValueError(f"weight must have shape [{classes}] (one entry per class), got {_shape_text(weight.shape)}")


def _nll_label(label, ndim):
    """The label without a kept class axis: [N, d1, ...]."""
    return label.reshape(label.shape[:1] + label.shape[2:]) if label.ndim == ndim else label


def _nll_loss(xp, input, label, weight=None, ignore_index=-100, reduction="mean"):
    check_reduction(reduction)
    _check_nll(xp, input, label, weight, ignore_index)
    ct = compute_dtype(xp, input.dtype)
    x = input.astype(ct, copy=False)
    label = _nll_label(label, x.ndim)
    valid = label != ignore_index
    safe = xp.where(valid, label, 0)
    picked = xp.take_along_axis(x, xp.expand_dims(safe, 1), axis=1).reshape(label.shape)
    w = valid.astype(ct) if weight is None else xp.where(valid, xp.take(weight.astype(ct, copy=False), safe), 0)
    loss = 0.0 - picked * w  # 0.0 - ...: an ignored position gives 0, not -0
    if reduction == "mean":
        total = xp.sum(w)
        loss = xp.sum(loss) / (total + (total == 0))  # nothing counted: 0, not nan (Paddle)
    return _reduce(xp, loss, "none" if reduction == "mean" else reduction, input.dtype)


def _nll_loss_grad(ctx, g):
    """d loss / d input[n, c] = -up[n] * w[n] where c == label[n], else 0."""
    x, label, weight = ctx.saved
    a = ctx.attrs
    shape = list(ctx.meta[0][0])
    label = _nll_label(label, len(shape))
    classes = shape[1]
    valid = label != a["ignore_index"]
    w = oarlock.cast(valid, x.dtype)
    if weight is not None:
        safe = oarlock.where(valid, label, oarlock.zeros_like(label))
        w = w * oarlock.reshape(oarlock.gather(oarlock.cast(weight, x.dtype), oarlock.reshape(safe, [-1])),
                                label.shape)
    up = g * w
    if a["reduction"] == "mean":
        total = oarlock.sum(w)
        up = up / (total + oarlock.cast(total == 0, total.dtype))
    positions = oarlock.reshape(oarlock.arange(classes, dtype=label.dtype), [1, classes] + [1] * (len(shape) - 2))
    hit = oarlock.cast(oarlock.unsqueeze(label, 1) == positions, x.dtype)
    return -hit * oarlock.unsqueeze(up, 1), None, None


# -- registration ---------------------------------------------------------------------------------------

FLOAT = ("float",)
REDUCTION = "reduction: str = 'mean'"
PAIR = ("input", "label")
WEIGHTED = ("input", "label", "weight")

# name, signature after the name, its tensor parameters (saved for backward), the Pointwise, docstring
POINTWISE = [
    ("mse_loss", f"(input: Tensor, label: Tensor, {REDUCTION})", PAIR,
     Pointwise(_mse, _mse_partials, broadcast=True),
     "The squared error (input - label)^2, reduced."),
    ("l1_loss", f"(input: Tensor, label: Tensor, {REDUCTION})", PAIR,
     Pointwise(_l1, _l1_partials, broadcast=True),
     "The absolute error |input - label|, reduced."),
    ("smooth_l1_loss", f"(input: Tensor, label: Tensor, {REDUCTION}, delta: float = 1.0, is_huber: bool = True)",
     PAIR, Pointwise(_smooth_l1, _smooth_l1_partials),
     "The Huber loss with threshold delta (divided by delta when is_huber=False), reduced."),
    ("binary_cross_entropy", f"(input: Tensor, label: Tensor, weight: OptTensor = None, {REDUCTION})", WEIGHTED,
     Pointwise(_bce, _bce_partials, weighted=True, check=_check_probabilities),
     "-weight (label log(input) + (1 - label) log(1 - input)) for probabilities, logs clamped at -100."),
    ("binary_cross_entropy_with_logits",
     f"(logit: Tensor, label: Tensor, weight: OptTensor = None, {REDUCTION}, pos_weight: OptTensor = None)",
     ("logit", "label", "weight", "pos_weight"), Pointwise(_bce_logits, _bce_logits_partials, weighted=True),
     "Binary cross entropy of sigmoid(logit), computed stably from the logits; pos_weight scales the "
     "positive term."),
    ("kl_div", f"(input: Tensor, label: Tensor, {REDUCTION}, log_target: bool = False)", PAIR,
     Pointwise(_kl_div, _kl_div_partials, reductions=(*STANDARD, "batchmean")),
     "The KL divergence label (log label - input) for log-probabilities `input` (label in log space with "
     "log_target=True)."),
]


def register(ops):
    for name, signature, tensors, spec, doc in POINTWISE:
        kernel, rule = _pointwise_op(spec, tensors)
        # torch spells the label `target` (and the logits of the _with_logits loss `input`)
        aliases = {"target": "label", **({"input": tensors[0]} if tensors[0] != "input" else {})}
        ops.define(name + signature + " -> Tensor", public=[f"oarlock.nn.functional.{name}"], promote=True,
                   dtypes=FLOAT, nondiff=("weight", "pos_weight"), grad=rule, saves=tensors, amp="black",
                   aliases=aliases, doc=doc)
        ops.kernel(name)(kernel)
    ops.define(f"nll_loss(input: Tensor, label: Tensor, weight: OptTensor = None, ignore_index: int = -100, "
               f"{REDUCTION}) -> Tensor", public=["oarlock.nn.functional.nll_loss"], promote=("input", "weight"),
               dtypes=FLOAT, nondiff=("label", "weight"), grad=_nll_loss_grad, saves=WEIGHTED, amp="black",
               aliases={"target": "label"},
               doc="The negative log-likelihood -weight[label] * input[label] along class axis 1, reduced; "
                   "labels equal to ignore_index count for nothing.")
    ops.kernel("nll_loss")(_nll_loss)
