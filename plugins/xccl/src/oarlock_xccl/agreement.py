"""Collective agreement: before a collective moves any data, the members of its group check that
they all called the same one, with the same dtype and element count (and root and reduce op
where it has them).

MPI and NCCL match collectives by their order alone, so ranks that disagree would otherwise
exchange mismatched buffers and carry on: a rank that all_reduces 3 elements against a peer's 2
ends with [2, 2, 1] and exit status 0; float32 against float64, all_reduce against barrier,
different broadcast roots or reduce ops are as silent. Here every member raises
CollectiveMismatchError, which lists each rank's call, and no payload is posted on any rank.

The check is one small all_gather, before the payload, of a fixed 48-byte record per rank: the
collective's number on the group (so a rank that skipped one is caught too), which collective,
dtype, element count, root and op. It goes over a private duplicate of the group's MPI
communicator (for every backend: MPI is every job's host transport), so its messages never meet
the payload's, and a rank that checks while another does not waits for records that never come,
which the watchdog reports, instead of matching them with the payload. alltoall's per-peer counts
differ legitimately, so a second all_gather compares the count matrices once the records agree.

On by default, sampled: every one of a group's first FIRST_CALLS collectives is checked, then one
in EVERY (by the collective's number on the group, the same on every rank in step, so the ranks
check the same calls; a rank out of step checks a different call and the numbers disagree). The
check costs about 2 us per call, but as a sync point before the payload it cost 3-14% of a 1 MB
all_reduce on 2 ranks (bench/allreduce.py), over the 3% budget; sampled, a training loop's calls
are all checked on its first steps, which is where a program's collectives go out of step, and
then spot-checked. OARLOCK_COLLECTIVE_CHECK=all checks every call, =0 (or
set_collective_check(False)) none, alike on every rank. `oarlock launch --debug`
(OARLOCK_DISTRIBUTED_DEBUG=1) adds `check_debug`: shapes, compared through a digest of every
rank's call.

Point-to-point receives are checked by the backend where it can carry a fingerprint with the
message (the "mpi" backend puts dtype and count in the MPI tag); it raises MessageMismatch, which
the frontend turns into a CollectiveMismatchError naming global ranks.
"""

from __future__ import annotations

import hashlib
import os
import struct

import numpy as np

from oarlock.dtypes import all_dtypes
from oarlock_xccl import watchdog
from oarlock_xccl.backend import ReduceOp, Work

ENV = "OARLOCK_COLLECTIVE_CHECK"

# codes travel between ranks: append only
KINDS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "alltoall", "alltoall_single",
         "scatter", "gather", "barrier")
_KIND_CODES = {name: code for code, name in enumerate(KINDS)}
_DTYPES = (None, *all_dtypes)       # code 0: no dtype
_DTYPE_CODES = {dtype.name: code for code, dtype in enumerate(_DTYPES) if dtype is not None}
_ROOT_ARGUMENT = {"broadcast": "src", "scatter": "src", "reduce": "dst", "gather": "dst"}
NONE = -1                       # a field the collective does not have (root, op, element count)
_RECORD = struct.Struct("<6q")  # sequence, kind, dtype, element count, root (group rank), op

_enabled: bool | None = None    # read from the environment at the first collective
_every_call: bool | None = None  # OARLOCK_COLLECTIVE_CHECK=all: no sampling
FIRST_CALLS = 64                # a group's collectives #1 .. #64 (watchdog.enter counts from 1) are all checked
EVERY = 64                      # then collectives #128, #192, ...


class CollectiveMismatchError(RuntimeError):
    """The ranks of a group disagree on a collective: which one, or its dtype, size, root or op.

    Every member of the group raises it, before any data was exchanged. A receive whose message
    has another dtype or size raises it on the receiving rank."""


class MessageMismatch(CollectiveMismatchError):
    """Raised by a backend when a received message is not what the receive expected. `peer` is
    the sender's rank in the communicator; `sent` and `expected` describe the two sides
    ("float32[3]"). The frontend re-raises it as CollectiveMismatchError with global ranks."""

    def __init__(self, peer: int, sent: str, expected: str):
        super().__init__(f"the message from rank {peer} of the communicator is {sent}; the receive expected "
                         f"{expected}")
        self.peer, self.sent, self.expected = peer, sent, expected


def dtype_code(dtype) -> int:
    """A small number for an oarlock DType, the same on every rank (0 for None)."""
    return _DTYPE_CODES[dtype.name] if dtype is not None else 0


def root_argument(name: str) -> str:
    """What collective `name` calls its root: "src" (broadcast, scatter) or "dst" (reduce, gather)."""
    return _ROOT_ARGUMENT.get(name, "root")


def dtype_of(code: int):
    """The DType of a code from `dtype_code`, None for 0 or a code this oarlock does not know."""
    return _DTYPES[code] if 0 <= code < len(_DTYPES) else None


def dtype_name(code: int) -> str:
    dtype = dtype_of(code)
    return dtype.name if dtype is not None else f"dtype #{code}"


# -- the switch --------------------------------------------------------------------------------------
def _from_environment() -> tuple:
    """(enabled, every call) from OARLOCK_COLLECTIVE_CHECK."""
    raw = os.environ.get(ENV, "1").strip().lower()
    if raw not in ("0", "1", "", "all"):
        raise ValueError(f"oarlock.distributed: environment variable {ENV}={raw!r} must be 1 (check that the ranks "
                         f"agree on a group's first {FIRST_CALLS} collectives and then one in {EVERY}, the "
                         f"default), all (every collective) or 0 (no check)")
    return raw != "0", raw == "all"


def is_enabled() -> bool:
    global _enabled, _every_call
    if _enabled is None:
        _enabled, every = _from_environment()
        if _every_call is None:
            _every_call = every
    return _enabled


def is_due(sequence: int) -> bool:
    """Whether collective number `sequence` of a group is one the sampled check looks at."""
    return sequence <= FIRST_CALLS or sequence % EVERY == 0 or bool(_every_call)


def applies(group, sequence: int) -> bool:
    """Whether collective number `sequence` on `group` is checked: the check is on, the group has
    peers, and the call is due (every call under OARLOCK_COLLECTIVE_CHECK=all)."""
    return is_enabled() and group.nranks > 1 and is_due(sequence)


def set_collective_check(enabled: bool, every_call: bool | None = None) -> bool:
    """Turn the collective agreement check on or off; returns the previous on/off setting.

    The check (on by default; OARLOCK_COLLECTIVE_CHECK=0 turns it off) makes every rank of a
    group raise CollectiveMismatchError when they do not all call the same collective with the
    same dtype, element count, root and op. It looks at a group's first 64 collectives and then
    one in 64; every_call=True (or OARLOCK_COLLECTIVE_CHECK=all) checks every collective,
    every_call=False goes back to sampling, None leaves that as it is. Every rank must switch it
    at the same point."""
    global _enabled, _every_call
    if not isinstance(enabled, bool):
        raise TypeError(f"set_collective_check(): enabled must be True or False, got {enabled!r}")
    if every_call is not None and not isinstance(every_call, bool):
        raise TypeError(f"set_collective_check(): every_call must be True, False or None, got {every_call!r}")
    previous = is_enabled()
    _enabled = enabled
    if every_call is not None:
        _every_call = every_call
    return previous


# -- the exchange --------------------------------------------------------------------------------------
class Records(Work):
    """A group's private communicator for agreement checks, its record buffers and a persistent
    all_gather of them (MPI_Allgather_init: started per check, cheaper than a fresh MPI_Iallgather);
    made at the group's first checked collective, which every member reaches at the same point.
    As a Work it is that all_gather in flight."""

    __slots__ = ("comm", "mine", "everyone", "exchange")

    def __init__(self, group):
        from oarlock.registry import default_registry
        self.comm = group.communicator(default_registry().comms["mpi"]).Dup()
        self.mine = bytearray(_RECORD.size)
        self.everyone = bytearray(_RECORD.size * group.nranks)
        self.exchange = self.comm.Allgather_init(self.mine, self.everyone)

    def test(self) -> bool:
        return self.exchange.Test()

    def free(self) -> None:
        self.exchange.Free()
        self.comm.Free()


class _Pending(Work):
    __slots__ = ("request",)

    def __init__(self, request):
        self.request = request

    def test(self) -> bool:
        return self.request.Test()


def _records(group) -> Records:
    records = group.agreement
    if records is None:
        records = group.agreement = Records(group)
    return records


def _all_gather(call, records, send, recv) -> None:
    """All_gather `send` into `recv` over the group's check communicator, under the watchdog."""
    work = _Pending(records.comm.Iallgather(send, recv))
    watchdog.wait(work, call.group, call.sequence, call.name)


def check(call, dtype, numel: int, root: int, op: int) -> None:
    """Raise CollectiveMismatchError on every member unless all of them called `call.name` as
    the same collective of the group with the same dtype, element count, root (group rank) and
    op; NONE stands for a field the collective lacks. Only where `applies(call.group, call.sequence)`."""
    group = call.group
    records = group.agreement or _records(group)
    _RECORD.pack_into(records.mine, 0, call.sequence, _KIND_CODES[call.name], _DTYPE_CODES[dtype.name], numel, root,
                      op)
    records.exchange.Start()
    watchdog.wait(records, group, call.sequence, call.name)
    if records.everyone != records.mine * group.nranks:
        raise CollectiveMismatchError(_disagreement(call, records.everyone))


def _disagreement(call, everyone) -> str:
    group = call.group
    records = [_RECORD.unpack_from(everyone, index * _RECORD.size) for index in range(group.nranks)]
    show_sequence = len({record[0] for record in records}) > 1
    callers: dict = {}                    # a call's description -> the global ranks that made it
    for rank, record in zip(group.ranks, records):
        callers.setdefault(_describe(record, group, show_sequence), []).append(rank)
    listing = "; ".join(f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} passed {text}"
                        for text, ranks in callers.items())
    return (f"{call.name}(): the ranks of group {group.id} disagree on collective #{call.sequence}: {listing}. "
            f"No data was exchanged; every rank of the group raises this error")


def _describe(record, group, show_sequence: bool) -> str:
    """'all_reduce float32[2] op=SUM', 'broadcast float32[2] src=1', 'barrier'."""
    sequence, kind, dtype, numel, root, op = record
    name = KINDS[kind] if 0 <= kind < len(KINDS) else f"collective #{kind}"
    text = name
    if name != "barrier":
        text += f" {dtype_name(dtype)}" + (f"[{numel}]" if numel != NONE else "")
        if root != NONE:
            global_root = group.ranks[root] if 0 <= root < group.nranks else root
            text += f" {root_argument(name)}={global_root}"
        if op != NONE:
            text += f" op={ReduceOp(op).name if op in ReduceOp._value2member_map_ else op}"
    if show_sequence:
        text += f" as its collective #{sequence} on the group"
    return text


def check_counts(call, send_counts: list, recv_counts: list) -> None:
    """alltoall: every rank i's count for peer j must be what j expects from i; on a mismatch
    every member raises CollectiveMismatchError naming the pairs. Called after `check`."""
    group = call.group
    n = group.nranks
    if not applies(group, call.sequence):   # with `check`, which ran for the same calls
        return
    mine = np.array([*send_counts, *recv_counts], dtype=np.int64)
    everyone = np.empty((n, 2 * n), dtype=np.int64)
    _all_gather(call, _records(group), mine, everyone)
    sends, recvs = everyone[:, :n], everyone[:, n:]
    if (sends != recvs.T).any():
        ranks = group.ranks
        pairs = [f"rank {ranks[i]} sends {sends[i, j]} element(s) to rank {ranks[j]}, which expects {recvs[j, i]}"
                 for i in range(n) for j in range(n) if sends[i, j] != recvs[j, i]]
        raise CollectiveMismatchError(
            f"{call.name}(): the ranks of group {group.id} disagree on the element counts of collective "
            f"#{call.sequence}: {'; '.join(pairs)}. No data was exchanged; every rank of the group raises this error")


def check_debug(call, fingerprint: tuple) -> None:
    """OARLOCK_DISTRIBUTED_DEBUG: compare a digest of each rank's full call (shapes included);
    on a mismatch every member raises with each rank's call listed."""
    group = call.group
    records = _records(group)
    digest = np.frombuffer(hashlib.blake2b(repr(fingerprint).encode(), digest_size=16).digest(), dtype=np.uint8)
    digests = np.empty((group.nranks, 16), dtype=np.uint8)
    _all_gather(call, records, digest, digests)
    if (digests != digest).any():
        calls = records.comm.allgather(fingerprint)
        listing = "; ".join(f"rank {rank}: {', '.join(map(str, f))}" for rank, f in zip(group.ranks, calls))
        raise CollectiveMismatchError(f"{call.name}(): the ranks of group {group.id} disagree on collective "
                                      f"#{call.sequence} (OARLOCK_DISTRIBUTED_DEBUG check): {listing}")


def received_mismatch(exc: MessageMismatch, call) -> CollectiveMismatchError:
    """The frontend's error for a backend's MessageMismatch: ranks are global."""
    group = call.group
    sender = group.ranks[exc.peer] if 0 <= exc.peer < group.nranks else exc.peer
    return CollectiveMismatchError(
        f"{call.name}(): rank {sender} sent {exc.sent} but rank {group.ranks[group.rank]} received it with a "
        f"receive of {exc.expected}; the receiving tensor's contents are undefined")


__all__ = ["CollectiveMismatchError", "set_collective_check"]
