"""The communication of sequence parallelism (Paddle's fleet/utils/sequence_parallel_utils.py, first half).

Activations are laid out [s, b, h] and split on the sequence dim 0 over the model-parallel group
(`group=None`: the model-parallel group of fleet's HybridCommunicateGroup; an explicit group is an
oarlock extension, used by the layers' `mp_group`):

- functions: `scatter` (this rank's s/n rows), `all_gather` (every rank's rows, rank order),
  `reduce_scatter` (the sum over ranks, then this rank's rows);
- PyLayers, each `.apply(x)` with its conjugate as backward: `ScatterOp` (scatter / all_gather),
  `GatherOp` (all_gather / scatter), `AllGatherOp` (all_gather / reduce_scatter), `ReduceScatterOp`
  (reduce_scatter / all_gather);
- `SPInnerOverlapLinear`: all_gather then linear, whose backward reduce-scatters the input gradient
  asynchronously while it computes the weight gradient (mp_configs' sp_async_reduce_scatter);
- `MPScale`: x / mp_degree in forward, the gradient unchanged in backward.

Every input check runs before any collective, so bad input raises on every rank instead of hanging.
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
import oarlock.nn.functional as F
from oarlock import PyLayer

from oarlock_parallel.mp_ops import mp_group_of

__all__ = ["scatter", "all_gather", "reduce_scatter", "ScatterOp", "GatherOp", "AllGatherOp", "ReduceScatterOp",
           "SPInnerOverlapLinear", "MPScale"]


def check_sequence(x, what: str, degree: int, divisible: bool = True) -> None:
    """x must be a Tensor with a sequence dim 0 that (for a split) the model-parallel degree divides."""
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{what}: x must be a Tensor of layout [s, b, h], got {type(x).__name__}")
    if x.ndim == 0:
        raise ValueError(f"{what}: x must have a sequence dim 0 (layout [s, b, h]), got a 0-d Tensor")
    if divisible and x.shape[0] % degree:
        raise ValueError(f"{what}: the sequence length (dim 0 of x, shape {x.shape}) must be divisible by the "
                         f"model-parallel degree ({degree})")


def _resolved(input, group, what: str, divisible: bool):
    """The group, after checking x: its type first (before the group needs fleet), then its length."""
    check_sequence(input, what, 1)
    group = mp_group_of(group, what)
    if divisible:
        check_sequence(input, what, group.nranks)
    return group


def _scatter(input, group):
    rows = input.shape[0] // group.nranks
    # a copy: the slice must not share memory with the caller's tensor
    return input[group.rank * rows:(group.rank + 1) * rows].clone()


def _all_gather(input, group, sync_op=True):
    out = oarlock.empty([input.shape[0] * group.nranks, *input.shape[1:]], dtype=input.dtype, place=input.place)
    task = dist.all_gather(out, input, group=group, sync_op=sync_op)
    return out if sync_op else (out, task)


def _reduce_scatter(input, group, sync_op=True):
    out = oarlock.empty([input.shape[0] // group.nranks, *input.shape[1:]], dtype=input.dtype, place=input.place)
    task = dist.reduce_scatter(out, input, op=dist.ReduceOp.SUM, group=group, sync_op=sync_op)
    return out if sync_op else (out, task)


def scatter(input, group=None):
    """This rank's equal share of input's dim 0: [s, ...] -> [s/n, ...]."""
    return _scatter(input, _resolved(input, group, "scatter()", True))


def all_gather(input, group=None):
    """Every rank's input concatenated on dim 0 in rank order: [s/n, ...] -> [s, ...]."""
    return _all_gather(input, _resolved(input, group, "all_gather()", False))


def reduce_scatter(input, group=None):
    """input summed over the ranks, then this rank's share of dim 0: [s, ...] -> [s/n, ...]."""
    return _reduce_scatter(input, _resolved(input, group, "reduce_scatter()", True))


def _sequence_op(name: str, forward, backward, divisible: bool, doc: str):
    """A PyLayer `name` whose apply(input, group=None) is forward(input, group) and whose backward is
    backward(grad, group): the conjugate collective over the same group."""
    def forward_rule(ctx, input, group=None):
        ctx.group = _resolved(input, group, f"{name}.apply()", divisible)
        return forward(input, ctx.group)

    def backward_rule(ctx, grad):
        return backward(grad, ctx.group)

    return type(name, (PyLayer,), {"__doc__": doc, "__module__": __name__,
                                   "forward": staticmethod(forward_rule), "backward": staticmethod(backward_rule)})


ScatterOp = _sequence_op("ScatterOp", _scatter, _all_gather, True,
                         "[s, b, h] -> [s/n, b, h]: forward scatter, backward all_gather.")
GatherOp = _sequence_op("GatherOp", _all_gather, _scatter, False,
                        "[s/n, b, h] -> [s, b, h]: forward all_gather, backward scatter.")
AllGatherOp = _sequence_op("AllGatherOp", _all_gather, _reduce_scatter, False,
                           "[s/n, b, h] -> [s, b, h]: forward all_gather, backward reduce_scatter (the full "
                           "sequence feeds a tensor-parallel matmul on every rank, whose gradients are summed).")
ReduceScatterOp = _sequence_op("ReduceScatterOp", _reduce_scatter, _all_gather, True,
                               "[s, b, h] -> [s/n, b, h]: forward reduce_scatter, backward all_gather.")


class SPInnerOverlapLinear(PyLayer):
    """all_gather(x) @ weight + bias, with Paddle's signature. Backward starts the reduce-scatter of the
    input gradient asynchronously and computes the weight and bias gradients while it runs; with
    recompute_allgather the gathered input is not kept but gathered again (also overlapped) in backward."""

    @staticmethod
    def forward(ctx, x, weight, bias, fuse_matmul_bias, recompute_allgather, mp_fused_linear_param_grad_add,
                model_parallel_group):
        what = "SPInnerOverlapLinear.apply()"
        group = _resolved(x, model_parallel_group, what, False)
        if fuse_matmul_bias or mp_fused_linear_param_grad_add:
            raise NotImplementedError(f"{what}: fuse_matmul_bias / mp_fused_linear_param_grad_add need fused "
                                      f"kernels oarlock does not have; set them to False")
        ctx.group, ctx.has_bias = group, bias is not None
        gathered = _all_gather(x, group)
        ctx.save_for_backward(x, weight, None if recompute_allgather else gathered)
        return F.linear(gathered, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        x, weight, gathered = ctx.saved_tensor()
        group, gather_task = ctx.group, None
        if gathered is None:   # recompute_allgather: gather again, overlapped with the matmul below
            gathered, gather_task = _all_gather(x, group, sync_op=False)
        dinput = oarlock.matmul(dy, weight if weight.dtype == dy.dtype else weight.astype(dy.dtype),
                                transpose_y=True)
        if gather_task is not None:
            gather_task.wait()
        dx, scatter_task = _reduce_scatter(dinput, group, sync_op=False)
        # the weight and bias gradients while the input gradient is being reduce-scattered
        dy2 = dy.reshape([-1, dy.shape[-1]])
        dw = oarlock.matmul(gathered.reshape([-1, gathered.shape[-1]]), dy2, transpose_x=True)
        grads = (dx, dw, dy2.sum(axis=0)) if ctx.has_bias else (dx, dw)
        scatter_task.wait()
        return grads


class MPScale(PyLayer):
    """x / mp_degree in forward; the gradient passes unchanged."""

    @staticmethod
    def forward(ctx, x, mp_degree):
        return oarlock.scale(x, 1.0 / mp_degree)

    @staticmethod
    def backward(ctx, dout):
        return dout
