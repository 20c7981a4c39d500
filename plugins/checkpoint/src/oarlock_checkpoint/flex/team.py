"""The ranks that take part in one save or load, and the three collectives a checkpoint needs from
them: gather a small object from everyone, exchange byte buffers (all-to-all), and a barrier.

A single process that was not launched as part of a job needs no communication
library at all; a job of several ranks uses oarlock.distributed (oarlock-xccl),
so the bytes move over whatever backend the group uses.
"""

from __future__ import annotations

import numpy as np

import oarlock


class Team:
    """`rank` and `size` of the process group (group ranks), with its collectives."""

    def __init__(self, group=None, rank: int = 0, size: int = 1):
        self.group, self.rank, self.size = group, rank, size

    def gather_all(self, obj) -> list:
        """`obj` from every rank, in rank order (the same list on every rank)."""
        if self.group is None:
            return [obj]
        out = []
        oarlock.distributed.all_gather_object(out, obj, group=self.group)
        return out

    def gather_checked(self, make, where: str) -> tuple:
        """Run make() -> (kept, shared) here and return (kept, [shared of every rank]); an exception on
        any rank is raised on every rank (on the failing one as itself), so no rank is left waiting
        in a later collective."""
        try:
            (kept, shared), error = make(), None
        except Exception as exc:
            kept = shared = None
            error = exc
        everyone = self.gather_all((shared, None if error is None else f"{type(error).__name__}: {error}"))
        if error is not None:
            raise error
        failed = [(rank, message) for rank, (_, message) in enumerate(everyone) if message]
        if failed:
            raise RuntimeError(f"{where}: rank {failed[0][0]} failed: {failed[0][1]}")
        return kept, [value for value, _ in everyone]

    def exchange(self, outgoing: list, incoming_sizes: list) -> list:
        """Send outgoing[r] (a uint8 array) to rank r; returns what each rank sent here, of the sizes
        the caller expects (every rank knows them from the shared plan)."""
        if self.group is None:
            return [outgoing[0]]
        send = np.concatenate(outgoing) if outgoing else np.empty(0, np.uint8)
        recv = oarlock.to_tensor(np.empty(sum(incoming_sizes), np.uint8), place="cpu")
        oarlock.distributed.alltoall_single(recv, oarlock.to_tensor(send, place="cpu"),
                                            [len(o) for o in outgoing], list(incoming_sizes), group=self.group)
        flat, out, start = np.asarray(recv), [], 0
        for size in incoming_sizes:
            out.append(flat[start:start + size])
            start += size
        return out

    def barrier(self) -> None:
        if self.group is not None:
            oarlock.distributed.barrier(group=self.group)


def team_for(process_group, where: str) -> Team:
    """The team of `process_group`, or of the whole job when None (starting it if needed, as Paddle's
    save_state_dict does); a process that is not part of a job is a team of one."""
    distributed = oarlock.distributed
    if process_group is None:
        if not hasattr(distributed, "get_world_size"):
            return Team()   # no oarlock-xccl: only single-process checkpoints
        if distributed.get_world_size() == 1 and not distributed.is_initialized():
            return Team()
        process_group = distributed.init_parallel_env() if not distributed.is_initialized() else \
            distributed.get_group(0)
    if not process_group.is_member():
        raise ValueError(f"{where}: this rank is not a member of process_group {process_group!r}; only its "
                         f"members take part in the checkpoint")
    if process_group.nranks == 1:
        return Team()
    return Team(process_group, process_group.rank, process_group.nranks)
