"""Paddle's collectives on tensors: all_reduce, broadcast, reduce, all_gather, reduce_scatter,
alltoall, alltoall_single, scatter, gather and barrier.

Ranks named in arguments (src, dst) are global ranks, as in Paddle. With
sync_op=False a call returns a Task at once; list outputs are filled and staged
tensors written back when the task completes.

Before any data moves, the members check that they all make the same call (see
oarlock_xccl.agreement); each collective tells `begin` what must agree.
"""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_xccl.backend import ReduceOp
from oarlock_xccl.agreement import applies, check_counts
from oarlock_xccl.calls import begin, check_op, check_tensor, same_dtype


def all_reduce(tensor, op=ReduceOp.SUM, group=None, sync_op=True):
    """Reduce `tensor` over the group with `op`; every rank gets the result in place."""
    check_tensor(tensor, "all_reduce", "tensor")
    op = check_op(op, "all_reduce")
    call = begin("all_reduce", group, [tensor], op=op, same_shape=True)
    if call is None:
        return None
    array = call.inout(tensor)
    return call.finish(call.backend.all_reduce(array, array, array.size, tensor.dtype, op, call.comm), sync_op)


def broadcast(tensor, src, group=None, sync_op=True):
    """Copy `tensor` of global rank `src` into `tensor` on every rank of the group."""
    check_tensor(tensor, "broadcast", "tensor")
    call = begin("broadcast", group, [tensor], root=src, same_shape=True)
    if call is None:
        return None
    array = call.inout(tensor)
    return call.finish(call.backend.broadcast(array, array, array.size, tensor.dtype, call.root, call.comm), sync_op)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None, sync_op=True):
    """Reduce `tensor` over the group into `tensor` on global rank `dst`; the others keep theirs."""
    check_tensor(tensor, "reduce", "tensor")
    op = check_op(op, "reduce")
    call = begin("reduce", group, [tensor], op=op, root=dst, same_shape=True)
    if call is None:
        return None
    root = call.root
    array = call.inout(tensor) if call.group.rank == root else call.input(tensor)
    return call.finish(call.backend.reduce(array, array, array.size, tensor.dtype, op, root, call.comm), sync_op)


def _fill_list(call, outputs: list, stacked, shape, what: str, argument: str):
    """After a gather: put row i of `stacked` into outputs[i], or append new tensors to an empty list."""
    if outputs:
        for index, target in enumerate(outputs):
            if list(target.shape) != list(shape) or target.dtype.np != stacked.dtype:
                raise ValueError(f"{what}(): {argument}[{index}] has shape {target.shape} and dtype "
                                 f"{target.dtype.name}; expected {list(shape)} and {stacked.dtype}")

    rows = stacked.reshape(len(stacked), -1)     # 1-d rows even for 0-d tensors

    def fill():
        if outputs:
            for target, row in zip(outputs, rows):
                target.set_value(call.tensor(row.reshape(shape)))
        else:
            outputs.extend(call.tensor(row.reshape(shape)) for row in rows)

    call.then(fill)


def _check_list(value, length: int, what: str, argument: str, allow_empty: bool) -> list:
    if not isinstance(value, list):
        raise TypeError(f"{what}(): {argument} must be a list of Tensors, got {type(value).__name__}")
    if value or not allow_empty:
        if len(value) != length:
            raise ValueError(f"{what}(): {argument} has {len(value)} tensor(s); the group has {length} ranks"
                             + (" (or pass an empty list to have it filled)" if allow_empty else ""))
        for index, item in enumerate(value):
            check_tensor(item, what, f"{argument}[{index}]")
    return value


def _check_concatenated(whole, tensor, n: int, what: str):
    """The one-tensor form of a list of n tensors like `tensor`: them concatenated along axis 0
    (stacked for 0-d tensors), in tensor's dtype."""
    shape = list(tensor.shape)
    expected = [n * shape[0], *shape[1:]] if shape else [n]
    if list(whole.shape) != expected or whole.dtype is not tensor.dtype:
        raise ValueError(f"{what}(): tensor_list, given as one tensor, has shape {whole.shape} and dtype "
                         f"{whole.dtype.name}; expected {expected} and {tensor.dtype.name}")


def all_gather(tensor_list, tensor, group=None, sync_op=True):
    """Gather `tensor` from every rank: into the list `tensor_list` (filled in place; an empty list
    is extended), or into one Tensor holding the pieces concatenated along axis 0."""
    check_tensor(tensor, "all_gather", "tensor")
    call = begin("all_gather", group, [tensor])
    if call is None:
        return None
    n, shape = call.group.nranks, list(tensor.shape)
    send = call.input(tensor)
    if isinstance(tensor_list, oarlock.Tensor):
        _check_concatenated(tensor_list, tensor, n, "all_gather")
        recv = call.inout(tensor_list)
    else:
        _check_list(tensor_list, n, "all_gather", "tensor_list", allow_empty=True)
        recv = call.empty([n, *shape], tensor.dtype)
        _fill_list(call, tensor_list, recv, shape, "all_gather", "tensor_list")
    return call.finish(call.backend.all_gather(send, recv, send.size, tensor.dtype, call.comm), sync_op)


def reduce_scatter(tensor, tensor_list, op=ReduceOp.SUM, group=None, sync_op=True):
    """Reduce block r of every rank's `tensor_list` (a list of group-size tensors, or one tensor
    split along axis 0) with `op` into `tensor` on rank r."""
    check_tensor(tensor, "reduce_scatter", "tensor")
    op = check_op(op, "reduce_scatter")
    call = begin("reduce_scatter", group, [tensor], op=op)
    if call is None:
        return None
    n, shape = call.group.nranks, list(tensor.shape)
    if isinstance(tensor_list, oarlock.Tensor):
        _check_concatenated(tensor_list, tensor, n, "reduce_scatter")
        send = call.input(tensor_list)
    else:
        _check_list(tensor_list, n, "reduce_scatter", "tensor_list", allow_empty=False)
        same_dtype(tensor_list, tensor.dtype, "reduce_scatter", "tensor_list")
        for index, item in enumerate(tensor_list):
            if list(item.shape) != shape:
                raise ValueError(f"reduce_scatter(): tensor_list[{index}] has shape {item.shape}; every block "
                                 f"must have the output's shape {shape}")
        send = call.xp.stack([call.input(item) for item in tensor_list]) if n else call.empty([0], tensor.dtype)
    recv = call.inout(tensor)
    work = call.backend.reduce_scatter(send, recv, recv.size, tensor.dtype, op, call.comm)
    return call.finish(work, sync_op)


def _exchange(call, sends: list, recvs: list, dtype):
    """Send sends[i] to and receive recvs[i] from group rank i: one all_to_all where the backend has
    it, else grouped sends and receives (NCCL's way). Arrays are flat and contiguous."""
    backend = call.backend
    if backend.has_all_to_all:
        flat_send = call.xp.concatenate(sends) if sends else call.empty([0], dtype)
        flat_recv = call.empty([sum(r.size for r in recvs)], dtype)
        offsets = np.cumsum([0] + [r.size for r in recvs])

        def scatter_back():
            for out, start in zip(recvs, offsets):
                out[...] = flat_recv[start:start + out.size]

        call.then(scatter_back)
        return backend.all_to_all(flat_send, [s.size for s in sends], flat_recv, [r.size for r in recvs],
                                  dtype, call.comm)
    backend.group_start()
    try:
        for peer, (send, recv) in enumerate(zip(sends, recvs)):
            backend.send(send, send.size, dtype, peer, call.comm)
            backend.recv(recv, recv.size, dtype, peer, call.comm)
    finally:
        work = backend.group_end()
    return work


def alltoall(out_tensor_list, in_tensor_list, group=None, sync_op=True):
    """Send in_tensor_list[i] to rank i and receive out_tensor_list[i] from it (Paddle 3.2's
    argument order: outputs first). An empty out_tensor_list is filled with tensors shaped like
    the inputs; tensors may differ in shape per peer when the outputs are given."""
    if not isinstance(in_tensor_list, list) or not in_tensor_list:
        raise TypeError(f"alltoall(): in_tensor_list must be a non-empty list of Tensors (one per rank), "
                        f"got {in_tensor_list!r}")
    call = begin("alltoall", group, [check_tensor(in_tensor_list[0], "alltoall", "in_tensor_list[0]")],
                 counted=False)
    if call is None:
        return None
    n = call.group.nranks
    _check_list(in_tensor_list, n, "alltoall", "in_tensor_list", allow_empty=False)
    _check_list(out_tensor_list, n, "alltoall", "out_tensor_list", allow_empty=True)
    dtype = in_tensor_list[0].dtype
    same_dtype(in_tensor_list, dtype, "alltoall", "in_tensor_list")
    same_dtype(out_tensor_list, dtype, "alltoall", "out_tensor_list")
    sends = [call.input(t).reshape(-1) for t in in_tensor_list]
    if out_tensor_list:
        outs = list(out_tensor_list)
    else:
        shapes = {tuple(t.shape) for t in in_tensor_list}
        if len(shapes) != 1:
            raise ValueError("alltoall(): in_tensor_list holds tensors of different shapes; pass out_tensor_list "
                             "with the shapes to receive")
        outs = [call.tensor(call.empty(in_tensor_list[0].shape, dtype)) for _ in range(n)]
        call.then(lambda: out_tensor_list.extend(outs))
    recvs = [call.inout(t).reshape(-1) for t in outs]
    check_counts(call, [s.size for s in sends], [r.size for r in recvs])
    return call.finish(_exchange(call, sends, recvs, dtype), sync_op)


def _split_sizes(sizes, rows: int, n: int, what: str, argument: str) -> list:
    if sizes is None or len(sizes) == 0:
        if rows % n:
            raise ValueError(f"alltoall_single(): {what} has {rows} rows along axis 0, which {n} ranks cannot "
                             f"split evenly; pass {argument}")
        return [rows // n] * n
    sizes = [int(s) for s in sizes]
    if len(sizes) != n or sum(sizes) != rows or min(sizes) < 0:
        raise ValueError(f"alltoall_single(): {argument}={sizes} must be {n} non-negative row counts summing to "
                         f"{rows}, the rows of {what}")
    return sizes


def alltoall_single(out_tensor, in_tensor, in_split_sizes=None, out_split_sizes=None, group=None, sync_op=True):
    """Split `in_tensor` along axis 0 by in_split_sizes (even split when None), send piece i to rank
    i, and concatenate what arrives into `out_tensor` by out_split_sizes."""
    check_tensor(in_tensor, "alltoall_single", "in_tensor")
    check_tensor(out_tensor, "alltoall_single", "out_tensor")
    call = begin("alltoall_single", group, [in_tensor, out_tensor], counted=False)
    if call is None:
        return None
    if out_tensor.dtype is not in_tensor.dtype:
        raise ValueError(f"alltoall_single(): out_tensor has dtype {out_tensor.dtype.name} but in_tensor has "
                         f"{in_tensor.dtype.name}")
    n = call.group.nranks
    send, recv = call.input(in_tensor), call.inout(out_tensor)
    if send.ndim == 0 or recv.ndim == 0 or send.shape[1:] != recv.shape[1:]:
        raise ValueError(f"alltoall_single(): in_tensor {in_tensor.shape} and out_tensor {out_tensor.shape} must "
                         f"have at least one axis and agree past axis 0")
    row = int(np.prod(send.shape[1:], dtype=np.int64))
    send_rows = _split_sizes(in_split_sizes, send.shape[0], n, "in_tensor", "in_split_sizes")
    recv_rows = _split_sizes(out_split_sizes, recv.shape[0], n, "out_tensor", "out_split_sizes")
    flat_send, flat_recv = send.reshape(-1), recv.reshape(-1)
    sends = list(_pieces(flat_send, [r * row for r in send_rows]))
    recvs = list(_pieces(flat_recv, [r * row for r in recv_rows]))
    check_counts(call, [s.size for s in sends], [r.size for r in recvs])
    return call.finish(_exchange(call, sends, recvs, in_tensor.dtype), sync_op)


def _pieces(flat, counts):
    start = 0
    for count in counts:
        yield flat[start:start + count]
        start += count


def scatter(tensor, tensor_list=None, src=0, group=None, sync_op=True):
    """Global rank `src` sends tensor_list[i] to group rank i, which receives it into `tensor`."""
    check_tensor(tensor, "scatter", "tensor")
    call = begin("scatter", group, [tensor], root=src)
    if call is None:
        return None
    root, n, backend = call.root, call.group.nranks, call.backend
    recv = call.inout(tensor)
    if call.group.rank != root:
        backend.group_start()
        backend.recv(recv, recv.size, tensor.dtype, root, call.comm)
        return call.finish(backend.group_end(), sync_op)
    _check_list(tensor_list, n, "scatter", "tensor_list", allow_empty=False)
    same_dtype(tensor_list, tensor.dtype, "scatter", "tensor_list")
    sends = [call.input(item) for item in tensor_list]
    for index, send in enumerate(sends):
        if send.size != recv.size:
            raise ValueError(f"scatter(): tensor_list[{index}] has shape {tensor_list[index].shape}, the output "
                             f"tensor {tensor.shape}")
    recv[...] = sends[root].reshape(recv.shape)
    backend.group_start()
    for peer, send in enumerate(sends):
        if peer != root:
            backend.send(send, send.size, tensor.dtype, peer, call.comm)
    return call.finish(backend.group_end(), sync_op)


def gather(tensor, gather_list=None, dst=0, group=None, sync_op=True):
    """Global rank `dst` receives every rank's `tensor` into gather_list (filled in place; an empty
    list is extended); the other ranks only send."""
    check_tensor(tensor, "gather", "tensor")
    call = begin("gather", group, [tensor], root=dst)
    if call is None:
        return None
    root, n, backend = call.root, call.group.nranks, call.backend
    send = call.input(tensor)
    backend.group_start()
    if call.group.rank != root:
        backend.send(send, send.size, tensor.dtype, root, call.comm)
        return call.finish(backend.group_end(), sync_op)
    if gather_list is None:
        backend.group_end()
        raise ValueError(f"gather(): gather_list must be a list on the destination rank {dst}, got None")
    _check_list(gather_list, n, "gather", "gather_list", allow_empty=True)
    stacked = call.empty([n, *tensor.shape], tensor.dtype)
    rows = stacked.reshape(n, -1)
    rows[root] = send.reshape(-1)
    for peer in range(n):
        if peer != root:
            backend.recv(rows[peer], send.size, tensor.dtype, peer, call.comm)
    _fill_list(call, gather_list, stacked, list(tensor.shape), "gather", "gather_list")
    return call.finish(backend.group_end(), sync_op)


def barrier(group=None):
    """Wait until every rank of the group has reached the barrier."""
    token = oarlock.zeros([1], dtype="int32")
    call = begin("barrier", group, [token])
    if call is None or applies(call.group, call.sequence):
        return None         # begin's agreement check, an all_gather over every member, was the barrier
    array = call.inout(token)
    call.finish(call.backend.all_reduce(array, array, 1, token.dtype, ReduceOp.SUM, call.comm), True)
    return None


def wait(tensor, group=None, use_calc_stream=True):
    """Paddle's dist.wait: collectives here complete before their tasks report done, so there is
    nothing left to wait for on the host."""
    check_tensor(tensor, "wait", "tensor")
    return None


__all__ = ["all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "alltoall", "alltoall_single",
           "scatter", "gather", "barrier", "wait"]
