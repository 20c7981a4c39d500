"""Paddle 3.2's paddle.distributed.stream (also paddle.distributed.communication.stream): the collectives with
the stream API's signatures, over oarlock.distributed's.

The stream forms take one Tensor where the plain ones take a list (all_gather's output and reduce_scatter's
and scatter's inputs, concatenated along axis 0), which oarlock.distributed's collectives accept already, and
an extra `use_calc_stream` flag. That flag only chooses which CUDA stream Paddle launches on; results and
ordering seen by the caller are the same, so it is checked and otherwise ignored. Note alltoall_single's
parameter order, which differs from the plain API's (out_split_sizes first)."""

from __future__ import annotations

from oarlock_xccl import api as dist   # oarlock.distributed's implementation (its names register after this plugin)

__all__ = ["all_gather", "all_reduce", "alltoall", "alltoall_single", "broadcast", "gather", "recv", "reduce",
           "reduce_scatter", "scatter", "send"]


def _flag(fn: str, use_calc_stream) -> None:
    if not isinstance(use_calc_stream, bool):
        raise TypeError(f"stream.{fn}(): argument 'use_calc_stream' must be a bool; got "
                        f"{type(use_calc_stream).__name__} {use_calc_stream!r}")


def all_gather(tensor_or_tensor_list, tensor, group=None, sync_op=True, use_calc_stream=False):
    """Gather `tensor` from every rank into a list, or into one Tensor concatenated along axis 0."""
    _flag("all_gather", use_calc_stream)
    return dist.all_gather(tensor_or_tensor_list, tensor, group=group, sync_op=sync_op)


def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, sync_op=True, use_calc_stream=False):
    _flag("all_reduce", use_calc_stream)
    return dist.all_reduce(tensor, op=op, group=group, sync_op=sync_op)


def alltoall(out_tensor_or_tensor_list, in_tensor_or_tensor_list, group=None, sync_op=True,
             use_calc_stream=False):
    _flag("alltoall", use_calc_stream)
    return dist.alltoall(out_tensor_or_tensor_list, in_tensor_or_tensor_list, group=group, sync_op=sync_op)


def alltoall_single(out_tensor, in_tensor, out_split_sizes=None, in_split_sizes=None, group=None, sync_op=True,
                    use_calc_stream=False):
    _flag("alltoall_single", use_calc_stream)
    return dist.alltoall_single(out_tensor, in_tensor, in_split_sizes=in_split_sizes,
                                out_split_sizes=out_split_sizes, group=group, sync_op=sync_op)


def broadcast(tensor, src, group=None, sync_op=True, use_calc_stream=False):
    _flag("broadcast", use_calc_stream)
    return dist.broadcast(tensor, src, group=group, sync_op=sync_op)


def gather(tensor, gather_list=None, dst=0, group=None, sync_op=True, use_calc_stream=False):
    _flag("gather", use_calc_stream)
    return dist.gather(tensor, gather_list, dst=dst, group=group, sync_op=sync_op)


def recv(tensor, src=0, group=None, sync_op=True, use_calc_stream=False):
    _flag("recv", use_calc_stream)
    return dist.recv(tensor, src=src, group=group, sync_op=sync_op)


def reduce(tensor, dst=0, op=dist.ReduceOp.SUM, group=None, sync_op=True, use_calc_stream=False):
    _flag("reduce", use_calc_stream)
    return dist.reduce(tensor, dst, op=op, group=group, sync_op=sync_op)


def reduce_scatter(tensor, tensor_or_tensor_list, op=dist.ReduceOp.SUM, group=None, sync_op=True,
                   use_calc_stream=False):
    """Reduce block r of every rank's input (a list, or one Tensor split along axis 0) into `tensor` on rank r."""
    _flag("reduce_scatter", use_calc_stream)
    return dist.reduce_scatter(tensor, tensor_or_tensor_list, op=op, group=group, sync_op=sync_op)


def scatter(tensor, tensor_or_tensor_list=None, src=0, group=None, sync_op=True, use_calc_stream=False):
    _flag("scatter", use_calc_stream)
    return dist.scatter(tensor, tensor_or_tensor_list, src=src, group=group, sync_op=sync_op)


def send(tensor, dst=0, group=None, sync_op=True, use_calc_stream=False):
    _flag("send", use_calc_stream)
    return dist.send(tensor, dst=dst, group=group, sync_op=sync_op)
