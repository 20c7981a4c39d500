"""What a MoE gate needs to see the whole batch when the batch is split over ranks (the gates'
`batch_group`, whose group rank i holds the i-th of equal consecutive shares of every batch):

- `batch_rand`: the uniform numbers of this rank's tokens drawn as one process holding the whole batch
  draws them: every rank draws the numbers of the whole batch from the generator all ranks seed alike and
  keeps its own rows. A token's number is then a function of its position in the global batch, whatever
  the layout, and every rank's generator advances as one process's does.
- `sum_over`: a sum over the group that autograd differentiates. Its backward sums the gradient over the
  group too: every rank's objective contains the whole-batch value, and the trainer's objective is the
  mean over ranks of theirs (gradients are averaged), so a rank's piece of the sum feeds every rank's
  copy. Each rank's gradient is then R times the one-process gradient on its own tokens (R ranks), as a
  rank's mean loss over its share of the batch is, and averaging gives one process's gradient.
- `whole_batch_counts`: integer statistics (per-expert token counts, token totals) summed over the group,
  no gradient.
"""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock import PyLayer

__all__ = ["batch_rand", "sum_over", "whole_batch_counts", "check_batch_group"]


def check_batch_group(owner: str, batch_group):
    """`batch_group`, checked: None or an oarlock.distributed Group."""
    if batch_group is not None and not (hasattr(batch_group, "nranks") and hasattr(batch_group, "rank")):
        raise TypeError(f"{owner}: batch_group must be an oarlock.distributed Group (the ranks holding equal "
                        f"consecutive shares of the batch, in rank order) or None, got {type(batch_group).__name__}")
    return batch_group


def batch_rand(shape: list, group) -> oarlock.Tensor:
    """Uniform [0, 1) numbers of `shape` for this rank's rows: the whole batch's draw, this rank's slice."""
    if group is None or group.nranks <= 1:
        return oarlock.rand(shape, dtype="float32")
    rows = shape[0]
    every = oarlock.rand([rows * group.nranks, *shape[1:]], dtype="float32")
    return every[group.rank * rows:(group.rank + 1) * rows]


def _all_reduce(tensor, group):
    out = tensor.clone()   # the collective writes in place; the input stays the caller's
    dist.all_reduce(out, group=group)
    return out


class _SumOver(PyLayer):
    """Forward: the sum over `group`; backward: the gradient summed over `group` (module docstring)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.group)


def sum_over(x, group):
    """x summed over `group` (x itself with no group or one rank), differentiable (module docstring)."""
    if group is None or group.nranks <= 1:
        return x
    return _SumOver.apply(x, group)


def whole_batch_counts(counts: np.ndarray, group) -> np.ndarray:
    """Integer counts summed over `group` (float64, exact for any count a batch holds)."""
    if group is None or group.nranks <= 1:
        return np.asarray(counts, dtype=np.float64)
    total = oarlock.to_tensor(np.asarray(counts, dtype=np.float64))
    dist.all_reduce(total, group=group)
    return total.numpy()
