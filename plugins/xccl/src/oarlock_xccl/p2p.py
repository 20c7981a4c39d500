"""Point-to-point communication with Paddle's names: send, recv, isend, irecv, P2POp and
batch_isend_irecv. Peers are global ranks. A receive waiting on a peer that never sends is
caught by the watchdog like a collective."""

from __future__ import annotations

from oarlock_xccl.calls import begin, check_tensor, group_rank


def _post(kind: str, tensor, peer, group, sync_op: bool):
    what = "send" if kind == "send" else "recv"
    check_tensor(tensor, what, "tensor")
    call = begin(what, group, [tensor], peers=[peer])
    if call is None:
        return None
    rank = group_rank(call.group, peer, what, "dst" if kind == "send" else "src")
    if kind == "send":
        array = call.input(tensor)
        work = call.backend.send(array, array.size, tensor.dtype, rank, call.comm)
    else:
        array = call.inout(tensor)
        work = call.backend.recv(array, array.size, tensor.dtype, rank, call.comm)
    return call.finish(work, sync_op)


def send(tensor, dst=0, group=None, sync_op=True):
    """Send `tensor` to global rank `dst`."""
    return _post("send", tensor, dst, group, sync_op)


def recv(tensor, src=0, group=None, sync_op=True):
    """Receive into `tensor` from global rank `src`."""
    return _post("recv", tensor, src, group, sync_op)


def isend(tensor, dst, group=None):
    return _post("send", tensor, dst, group, False)


def irecv(tensor, src=None, group=None):
    if src is None:
        raise ValueError("irecv(): src must be the global rank to receive from (MPI and NCCL match by peer)")
    return _post("recv", tensor, src, group, False)


class P2POp:
    """One send or receive for batch_isend_irecv: op is `isend` or `irecv`."""

    def __init__(self, op, tensor, peer, group=None):
        if op not in (isend, irecv):
            raise ValueError(f"P2POp(): op must be oarlock.distributed.isend or irecv, got {op!r}")
        self.op, self.tensor, self.peer, self.group = op, check_tensor(tensor, "P2POp", "tensor"), peer, group


def batch_isend_irecv(p2p_op_list) -> list:
    """Issue the sends and receives together (no deadlock on exchanges); one task per op."""
    if not isinstance(p2p_op_list, list) or not all(isinstance(p, P2POp) for p in p2p_op_list):
        raise TypeError(f"batch_isend_irecv(): p2p_op_list must be a list of P2POp, got {p2p_op_list!r}")
    if not p2p_op_list:
        return []
    groups = {id(p.group) for p in p2p_op_list}
    if len(groups) != 1:
        raise ValueError("batch_isend_irecv(): every P2POp must use the same group")
    first = p2p_op_list[0]
    call = begin("batch_isend_irecv", first.group, [p.tensor for p in p2p_op_list],
                 peers=sorted({p.peer for p in p2p_op_list}))
    if call is None:
        return []
    backend = call.backend
    backend.group_start()
    try:
        for p in p2p_op_list:
            is_send = p.op is isend
            rank = group_rank(call.group, p.peer, "batch_isend_irecv", "peer")
            array = call.input(p.tensor) if is_send else call.inout(p.tensor)
            (backend.send if is_send else backend.recv)(array, array.size, p.tensor.dtype, rank, call.comm)
    finally:
        work = backend.group_end()
    task = call.finish(work, sync_op=False)
    return [task] * len(p2p_op_list)


__all__ = ["send", "recv", "isend", "irecv", "P2POp", "batch_isend_irecv"]
