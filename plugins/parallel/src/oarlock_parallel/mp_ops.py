"""The communication ops of tensor parallelism (Paddle's fleet/layers/mpu/mp_ops.py), each an autograd
PyLayer whose backward is the conjugate collective:

- `c_identity`: forward identity, backward all-reduce (sum) of the gradient over the group: the input
  of a column-parallel layer is replicated, so its gradient is the sum of every rank's contribution.
- `mp_allreduce`: forward all-reduce (sum), backward identity: the partial products of a row-parallel
  layer are summed, and every rank already holds the whole output gradient.
- `c_split`: forward this rank's slice of the last dim, backward all-gather on the last dim.
- `c_concat`: forward all-gather on the last dim, backward this rank's slice.

With a one-rank group each is the identity (as Paddle skips them when mp is off).
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock import PyLayer

__all__ = ["c_identity", "mp_allreduce", "c_split", "c_concat", "group_rank_size", "hybrid_group"]


def group_rank_size(group) -> tuple:
    """(this process's rank in `group`, the group's size); `group` is an oarlock.distributed Group."""
    return group.rank, group.nranks


def hybrid_group(where: str):
    """fleet's HybridCommunicateGroup; `where` names the caller in the error raised before fleet.init."""
    try:
        return oarlock.distributed.fleet.get_hybrid_communicate_group()
    except RuntimeError:
        raise RuntimeError(f"{where}: needs fleet's hybrid communicate group, but fleet is not initialised (call "
                           f"oarlock.distributed.fleet.init(is_collective=True, strategy=...) first)") from None


def mp_group_of(group, what: str, argument: str = "group"):
    """`group` (an oarlock.distributed Group), or fleet's model-parallel group when None; `what` and
    `argument` name the caller and its argument in the errors."""
    if group is None:
        return hybrid_group(f"{what} with {argument}=None").get_model_parallel_group()
    if not hasattr(group, "nranks") or not hasattr(group, "rank"):
        raise TypeError(f"{what}: {argument} must be an oarlock.distributed Group or None, got {type(group).__name__}")
    return group


def _all_reduce(tensor, group):
    # a fresh copy: the collective writes in place and the input may be a user's tensor
    out = tensor.clone()
    dist.all_reduce(out, group=group)
    return out


def _slice_last(tensor, group):
    rank, size = group_rank_size(group)
    width = tensor.shape[-1]
    if width % size:
        raise ValueError(f"c_split(): the last dim ({width}) must be divisible by the model-parallel "
                         f"group size ({size})")
    return oarlock.split(tensor, size, axis=-1)[rank].clone()


def _gather_last(tensor, group):
    pieces: list = []
    dist.all_gather(pieces, tensor, group=group)
    return oarlock.concat(pieces, axis=-1)


def _conjugate_pair(name: str, forward, backward):
    """A PyLayer computing forward(x, group), whose backward is backward(grad, group)."""
    def forward_rule(ctx, x, group):
        ctx.group = group
        return forward(x, group)

    def backward_rule(ctx, grad):
        return backward(grad, ctx.group)

    return type(name, (PyLayer,), {"forward": staticmethod(forward_rule), "backward": staticmethod(backward_rule)})


# each op with its conjugate (see the module docstring); the identity's output is a copy, as Paddle's
_Identity = _conjugate_pair("_Identity", lambda x, group: x.clone(), _all_reduce)
_AllReduce = _conjugate_pair("_AllReduce", _all_reduce, lambda grad, group: grad)
_Split = _conjugate_pair("_Split", _slice_last, _gather_last)
_Concat = _conjugate_pair("_Concat", _gather_last, _slice_last)


def _run(op, x, group):
    return x if group.nranks == 1 else op.apply(x, group)


def c_identity(x, group):
    """x unchanged; in backward its gradient is summed over `group`."""
    return _run(_Identity, x, group)


def mp_allreduce(x, group):
    """x summed over `group`; in backward the gradient passes unchanged."""
    return _run(_AllReduce, x, group)


def c_split(x, group):
    """This rank's equal slice of x's last dim; in backward the slices' gradients are gathered."""
    return _run(_Split, x, group)


def c_concat(x, group):
    """Every rank's x concatenated on the last dim (rank order); in backward each rank keeps its slice."""
    return _run(_Concat, x, group)
