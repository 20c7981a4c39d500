"""The communication-backend interface: NCCL's shape, which Paddle's XCCL also follows.

A backend is an object registered through `oarlock_register_comm_backends`. It
sees raw arrays (numpy for "mpi", cupy for "nccl"), never Tensors, exactly as
kernels do. Every operation is asynchronous: it returns a `Work` that the
frontend polls (so the collective watchdog can time it out) or waits on.
Counts are in elements, `dtype` is an oarlock DType, `op` a ReduceOp, and
`stream` the device stream to enqueue on (None for hosts without streams).
In-place operations pass the same array as `send` and `recv`.
"""

from __future__ import annotations

import enum


class ReduceOp(enum.IntEnum):
    """Reduction operators, with Paddle's values (paddle.distributed.ReduceOp)."""

    SUM = 0
    MAX = 1
    MIN = 2
    PROD = 3
    AVG = 4


class Work:
    """An operation in flight. `test()` polls without blocking; `wait()` blocks."""

    def test(self) -> bool:
        raise NotImplementedError

    def wait(self) -> None:
        while not self.test():
            pass


class DoneWork(Work):
    """An operation that completed when it was issued."""

    def test(self) -> bool:
        return True

    def wait(self) -> None:
        return None


DONE = DoneWork()


class CommBackend:
    """Base class of communication backends; subclasses implement every method below.

    `name` is the backend's name ("mpi", "nccl"); `device_types` the device types
    whose arrays it moves. `all_to_all` is optional (`has_all_to_all`); without it
    the frontend posts grouped sends and receives, as NCCL users do.
    """

    name: str = ""
    device_types: tuple = ()
    unique_id_size: int = 0
    has_all_to_all: bool = False
    plugin: str | None = None     # set by the registry

    def available(self) -> tuple[bool, str]:
        """(usable, reason): False with the reason when the library or device is missing."""
        return True, ""

    # -- communicators ---------------------------------------------------------------------
    def get_unique_id(self) -> bytes:
        """A fresh id of `unique_id_size` bytes, made on one rank and handed to the others."""
        raise NotImplementedError

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int):
        """A communicator of `nranks` ranks; every member calls this with the same id."""
        raise NotImplementedError

    def comm_destroy(self, comm) -> None:
        raise NotImplementedError

    # -- collectives -------------------------------------------------------------------------
    def all_reduce(self, send, recv, count, dtype, op, comm, stream=None) -> Work:
        raise NotImplementedError

    def broadcast(self, send, recv, count, dtype, root, comm, stream=None) -> Work:
        raise NotImplementedError

    def reduce(self, send, recv, count, dtype, op, root, comm, stream=None) -> Work:
        """`recv` matters on `root` only."""
        raise NotImplementedError

    def all_gather(self, send, recv, count, dtype, comm, stream=None) -> Work:
        """`count` elements from each rank; `recv` holds nranks * count, in rank order."""
        raise NotImplementedError

    def reduce_scatter(self, send, recv, count, dtype, op, comm, stream=None) -> Work:
        """`send` holds nranks * count; rank r receives the reduction of block r."""
        raise NotImplementedError

    def all_to_all(self, send, send_counts, recv, recv_counts, dtype, comm, stream=None) -> Work:
        """Flat buffers with per-peer element counts, blocks in rank order."""
        raise NotImplementedError

    # -- point to point ------------------------------------------------------------------------
    def send(self, send, count, dtype, peer, comm, stream=None) -> Work:
        raise NotImplementedError

    def recv(self, recv, count, dtype, peer, comm, stream=None) -> Work:
        raise NotImplementedError

    def group_start(self) -> None:
        """Sends and receives until `group_end` are issued together (no deadlock on exchanges)."""
        raise NotImplementedError

    def group_end(self) -> Work:
        """Issue the grouped operations; the Work completes when all of them have."""
        raise NotImplementedError
