"""Vocabulary-parallel softmax cross-entropy (Paddle's c_softmax_with_cross_entropy): the logits are
split on the last dim across the model-parallel group and never gathered.

Each rank all-reduces three [..., 1] tensors: the row max (MAX, for a stable softmax), the sum of
exp(logit - max) (SUM) and the label's shifted logit (SUM: only the rank holding that id contributes).
loss = log(sum_exp) - (logit[label] - max). The gradient with respect to this rank's logits is
softmax - one_hot(label) restricted to its columns, times the loss gradient; ignored tokens get 0.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock import PyLayer
from oarlock_parallel.mp_ops import group_rank_size

__all__ = ["parallel_cross_entropy"]


def _check(logits, label, vocab: int, ignore_index: int):
    """label as [..., 1] int64, after Paddle's shape rules; bad shapes or ids raise on every rank
    (label is replicated, so every rank sees the same error)."""
    where = "ParallelCrossEntropy.forward()"
    if not isinstance(logits, oarlock.Tensor) or not logits.dtype.is_floating_point:
        raise TypeError(f"{where}: input must be a floating-point Tensor of logits, got "
                        f"{getattr(logits, 'dtype', type(logits).__name__)}")
    if not isinstance(label, oarlock.Tensor) or label.dtype not in (oarlock.int32, oarlock.int64):
        raise TypeError(f"{where}: label must be an int32/int64 Tensor, got "
                        f"{getattr(label, 'dtype', type(label).__name__)}")
    if label.ndim == logits.ndim - 1:
        label = oarlock.unsqueeze(label, -1)
    if label.ndim != logits.ndim or label.shape[:-1] != logits.shape[:-1] or label.shape[-1] != 1:
        raise ValueError(f"{where}: label must have shape {logits.shape[:-1]} or {logits.shape[:-1] + [1]} "
                         f"(input's shape {logits.shape} without its vocabulary dim), got {label.shape}")
    label = label.astype(oarlock.int64)
    bad = oarlock.logical_and(oarlock.logical_or(label < 0, label >= vocab), label != ignore_index)
    if bool(bad.any()):
        raise ValueError(f"{where}: label ids must be in [0, {vocab}) (the whole vocabulary) or "
                         f"ignore_index={ignore_index}, got {label[bad].numpy().tolist()[:5]}")
    return label


def _all_reduce(tensor, op, group):
    dist.all_reduce(tensor, op=op, group=group)
    return tensor


class _ParallelSoftmaxCrossEntropy(PyLayer):
    @staticmethod
    def forward(ctx, logits, label, group, ignore_index):
        rank, size = group_rank_size(group)
        width = logits.shape[-1]
        row_max = _all_reduce(logits.max(axis=-1, keepdim=True), dist.ReduceOp.MAX, group)
        shifted = logits - row_max
        exp = oarlock.exp(shifted)
        sum_exp = _all_reduce(exp.sum(axis=-1, keepdim=True), dist.ReduceOp.SUM, group)
        local = label - rank * width
        held = oarlock.logical_and(local >= 0, local < width)
        index = oarlock.where(held, local, oarlock.zeros_like(local))
        target = oarlock.take_along_axis(shifted, index, axis=-1) * held.astype(shifted.dtype)
        target = _all_reduce(target, dist.ReduceOp.SUM, group)
        kept = (label != ignore_index).astype(logits.dtype)
        ctx.saved = (exp / sum_exp, index, held, kept)
        return (oarlock.log(sum_exp) - target) * kept

    @staticmethod
    def backward(ctx, grad):
        softmax, index, held, kept = ctx.saved
        columns = oarlock.arange(softmax.shape[-1], dtype=index.dtype)
        one_hot = oarlock.logical_and(columns == index, held).astype(softmax.dtype)
        return (softmax - one_hot) * (grad * kept), None


def parallel_cross_entropy(logits, label, group, ignore_index=-100):
    """Per-token softmax cross-entropy [..., 1] of logits split on the last dim over `group`."""
    _, size = group_rank_size(group)
    label = _check(logits, label, logits.shape[-1] * size, ignore_index)
    return _ParallelSoftmaxCrossEntropy.apply(logits, label, group, ignore_index)
