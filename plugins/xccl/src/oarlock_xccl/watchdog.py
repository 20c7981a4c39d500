"""The collective watchdog: a rank that waits on a collective longer than its group's timeout
raises CollectiveTimeoutError naming the collective, the group and the ranks that have not
arrived, instead of hanging forever.

Each rank counts the collectives it has entered on each group. On a timeout the
waiting rank asks every other member, over a private communicator, how far it
got; a small responder thread in every rank answers (it polls, so an idle rank
costs nothing), even while its main thread computes or waits elsewhere. A rank
that does not answer is reported as such: hung outside oarlock, or gone.

A waiting rank polls at full speed for a millisecond (longer for large payloads),
then sleeps between polls with a pause that doubles up to 1 ms, so ranks blocked
on late peers leave their cores to others (see `wait`).
"""

from __future__ import annotations

import itertools
import os
import threading
import time

from oarlock_xccl import world

_QUERY, _REPLY = 1, 2
_POLL_S = 0.05
# Waiting: poll without pause for _SPIN_S plus the time the payload's bytes take at
# _SPIN_BYTES_PER_S (MPI moves data only inside polls, so a transfer under way needs them back to
# back), then sleep between polls, the pause doubling from _FIRST_PAUSE_S up to a cap, so a rank
# whose peers are late does not burn a core. MPICH busy-polls in its blocking calls and its ch4
# device has no sleeping wait (MPIR_CVAR_CH4_PROGRESS_THROTTLE only adds usleep(1) after 4096
# idle polls). With the agreement check on, waiting for late peers happens in the check's small
# all_gather, so the payload starts with every rank present and ends within its spin.
_SPIN_S = 1e-3
_SPIN_BYTES_PER_S = 1e9
_FIRST_PAUSE_S = 10e-6
_MAX_PAUSE_S = 1e-3
_MAX_PAUSE_OVERSUBSCRIBED_S = 100e-6    # more ranks than cores: peers need this rank's core, answer them soon
_entered: dict[int, int] = {}          # group id -> collectives entered on it
_waiting: tuple | None = None           # (group id, sequence, collective name) the main thread waits on
_responder: tuple | None = None         # (thread, stop event)
_query_ids = itertools.count(1)


class CollectiveTimeoutError(RuntimeError):
    """A collective did not complete within its group's timeout."""


def enter(group_id: int) -> int:
    """Count a collective entered on group `group_id`; returns its sequence number (from 1)."""
    sequence = _entered.get(group_id, 0) + 1
    _entered[group_id] = sequence
    return sequence


def wait(work, group, sequence: int | None, name: str, peers=None, nbytes: int = 0) -> None:
    """Poll `work` until it completes; past the group's timeout, raise CollectiveTimeoutError.
    `sequence` is the collective's number on the group; point-to-point calls pass None and
    their `peers` instead. `nbytes`, the data the call moves, lengthens the pause-free polling."""
    if work.test():
        return
    global _waiting
    _waiting = (group.id, sequence, name)
    clock = time.monotonic
    start = clock()
    deadline, spin_until, pause = start + group.timeout, start + _SPIN_S + nbytes / _SPIN_BYTES_PER_S, _FIRST_PAUSE_S
    # With more ranks than cores a polling rank takes the core a peer needs to arrive: it yields
    # between polls (Open MPI's yield_when_idle) and caps its pauses lower.
    oversubscribed = world.oversubscribed()
    max_pause = _MAX_PAUSE_OVERSUBSCRIBED_S if oversubscribed else _MAX_PAUSE_S
    polls = 0
    try:
        while not work.test():
            polls += 1
            if oversubscribed:
                os.sched_yield()
            if polls & 63 and pause == _FIRST_PAUSE_S:
                continue   # the first polls back to back, the clock read every 64th: a 1 MB all_reduce
                # progresses only inside test(), and a clock read in each poll cost it ~10%
            now = clock()
            if now > deadline:
                raise _timed_out(group, sequence, name, peers)
            if now >= spin_until:
                time.sleep(pause)
                pause = min(2 * pause, max_pause)
    finally:
        _waiting = None


def _where(wait_state) -> str:
    if not wait_state:
        return "is not in a collective"
    group_id, sequence, name = wait_state
    return f"waits in {name}()" + (f" #{sequence}" if sequence else "") + f" on group {group_id}"


def _called_other(wait_state, group_id: int, sequence: int, name: str) -> bool:
    """A rank at the same position on the group in another collective (it skipped one)."""
    return bool(wait_state) and wait_state[:2] == (group_id, sequence) and wait_state[2] != name


def _timed_out(group, sequence, name: str, peers) -> CollectiveTimeoutError:
    me = world.MPI.COMM_WORLD.rank
    asked = [rank for rank in (group.ranks if peers is None else peers) if rank != me]
    replies = _ask(asked, group.id, group.timeout)
    late, details = [], []
    for rank in asked:
        reply = replies.get(rank)
        if reply is None:
            late.append(rank)
            details.append(f"rank {rank} did not answer (busy outside oarlock, hung or exited)")
        elif peers is not None or reply[0] < sequence or _called_other(reply[1], group.id, sequence, name):
            late.append(rank)
            details.append(f"rank {rank} has entered {reply[0]} collective(s) on this group and {_where(reply[1])}")
    what = (f"this is collective #{sequence} on that group; ranks that have not arrived: {late}" if peers is None
            else f"its peer(s) {late} have not matched it")
    message = (f"oarlock.distributed.{name}() timed out after {group.timeout:g} s on group {group.id} "
               f"({group.name!r}, ranks {group.ranks}); {what}: " + "; ".join(details) +
               ". The group is unusable from now on. Set the timeout with OARLOCK_COLLECTIVE_TIMEOUT, "
               "`oarlock launch --timeout` or new_group(timeout=...)")
    group.broken = message
    world.mark_broken(message)
    return CollectiveTimeoutError(message)


def _ask(others: list, group_id: int, timeout: float) -> dict:
    """{world rank: (collectives entered on the group, what it waits on)} from the ranks that answer."""
    MPI, comm = world.MPI, world.watchdog_comm()
    query_id = next(_query_ids)
    sends = [comm.isend((query_id, group_id), dest=rank, tag=_QUERY) for rank in others]
    replies, status = {}, MPI.Status()
    deadline = time.monotonic() + min(3.0, max(0.5, timeout))
    while len(replies) < len(others) and time.monotonic() < deadline:
        if comm.Iprobe(source=MPI.ANY_SOURCE, tag=_REPLY, status=status):
            answer = comm.recv(source=status.source, tag=_REPLY)
            if answer[0] == query_id:
                replies[status.source] = answer[1:]
        else:
            time.sleep(0.005)
    for request in sends:
        request.Test()
    return replies


def _respond(stop: threading.Event) -> None:
    MPI, comm = world.MPI, world.watchdog_comm()
    status, pending = MPI.Status(), []
    while not stop.is_set():
        while comm.Iprobe(source=MPI.ANY_SOURCE, tag=_QUERY, status=status):
            query_id, group_id = comm.recv(source=status.source, tag=_QUERY)
            answer = (query_id, _entered.get(group_id, 0), _waiting)
            pending.append(comm.isend(answer, dest=status.source, tag=_REPLY))
        pending = [request for request in pending if not request.Test()]
        stop.wait(_POLL_S)


def start_responder() -> None:
    global _responder
    if _responder is None:
        stop = threading.Event()
        thread = threading.Thread(target=_respond, args=(stop,), name="oarlock-watchdog", daemon=True)
        thread.start()
        _responder = (thread, stop)


def stop_responder() -> None:
    global _responder
    if _responder is not None:
        thread, stop = _responder
        stop.set()
        thread.join()
        _responder = None
