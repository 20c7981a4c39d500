"""One collective call: the group, the backend chosen from the tensors' device, its communicator,
the raw arrays handed to the backend, and what to finish once the backend is done.

Tensors whose arrays the backend can use as they are (C-contiguous, writable,
on a device it serves) are passed without copies. Anything else is staged:
copied into a contiguous array (on the host when the backend does not serve the
device, e.g. GPU tensors over MPI) and written back on completion.
"""

from __future__ import annotations

import os

import numpy as np

from oarlock import Tensor
from oarlock.plugin_api import array_of, wrap
from oarlock_xccl import agreement, groups, watchdog
from oarlock_xccl.agreement import NONE, MessageMismatch
from oarlock_xccl.backend import ReduceOp

# read once: the ranks of a job get it from their environment (`oarlock launch --debug`)
_DEBUG = os.environ.get("OARLOCK_DISTRIBUTED_DEBUG", "0") not in ("", "0")
# collectives whose first tensor is one rank's block of what moves
_PER_RANK_BLOCKS = frozenset({"all_gather", "gather", "scatter", "reduce_scatter", "alltoall"})


class Task:
    """What a collective returns: `wait()` blocks (under the watchdog) until it completes and its
    results are in place; `is_completed()` polls. sync_op=True calls return completed tasks."""

    def __init__(self, work, call):
        self._work, self._call = work, call

    def wait(self, timeout=None) -> bool:
        if self._call is not None:
            call = self._call
            try:
                watchdog.wait(self._work, call.group, call.sequence, call.name, call.peers, call.nbytes)
            except MessageMismatch as exc:
                self._call = None
                raise agreement.received_mismatch(exc, call) from None
            self._finish()
        return True

    def is_completed(self) -> bool:
        if self._call is not None:
            try:
                done = self._work.test()
            except MessageMismatch as exc:
                call, self._call = self._call, None
                raise agreement.received_mismatch(exc, call) from None
            if done:
                self._finish()
        return self._call is None

    def _finish(self):
        call, self._call = self._call, None
        steps = call.afterwards + call.writebacks
        # the steps close over the call (a reference cycle): dropped now, the buffers they hold (an
        # all_gather's receive array) are freed at once instead of at the next cyclic collection
        call.afterwards, call.writebacks = [], []
        for step in steps:
            step()

    def __repr__(self):
        return f"Task({'completed' if self._call is None else 'in flight'})"


class Call:
    """The state of one collective on one group (see `begin`)."""

    __slots__ = ("name", "group", "place", "backend", "comm", "staged", "xp", "sequence", "peers", "root",
                 "nbytes", "afterwards", "writebacks")

    def __init__(self, name, group, place, route, sequence, peers):
        self.name, self.group, self.place, self.sequence, self.peers = name, group, place, sequence, peers
        self.backend, self.comm, self.staged = route
        self.root = NONE                # the root's group rank, for collectives that have one
        self.nbytes = 0                 # about what the call moves: how long its wait polls without pause
        self.xp = np if self.staged else place.backend.xp
        self.afterwards: list = []      # steps once the backend is done (fill lists, unpack buffers)
        self.writebacks: list = []      # then: copy staged arrays back into their tensors

    # -- arrays for the backend ----------------------------------------------------------------
    def input(self, tensor) -> object:
        """A C-contiguous array with `tensor`'s values, without a copy where possible."""
        array = tensor.numpy() if self.staged else array_of(tensor)
        return array if array.flags.c_contiguous else array.copy(order="C")

    def inout(self, tensor) -> object:
        """The array the backend reads and overwrites; staged arrays are written back afterwards."""
        array = tensor.numpy() if self.staged else array_of(tensor)
        if array.flags.c_contiguous and getattr(array.flags, "writeable", True) and not self.staged:
            return array
        array = array.copy(order="C")
        self.writebacks.append(lambda: tensor.set_value(self.tensor(array)))
        return array

    def empty(self, shape, dtype):
        return self.xp.empty(tuple(shape), dtype=dtype.np)

    def tensor(self, array) -> Tensor:
        """A Tensor over a result array, on the call's device."""
        if self.staged:
            array = self.place.backend.asarray(array, None, self.place.index)
        return wrap(array, self.place)

    def then(self, step) -> None:
        self.afterwards.append(step)

    def finish(self, work, sync_op: bool) -> Task:
        task = Task(work, self)
        if sync_op:
            task.wait()
        return task


def _served_types(backend) -> set:
    from oarlock.registry import default_registry
    registry = default_registry()
    return {device for device in registry.backends if backend in registry.comms_for_device(device)}


def check_tensor(value, what: str, argument: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise TypeError(f"{what}(): {argument} must be a Tensor, got {type(value).__name__}")
    return value


def check_op(op, what: str) -> ReduceOp:
    try:
        return ReduceOp(op)
    except ValueError:
        raise ValueError(f"{what}(): op must be a ReduceOp (SUM, MAX, MIN, PROD, AVG), got {op!r}") from None


def group_rank(group, rank, what: str, argument: str) -> int:
    """The group rank of global rank `rank`; an error names the argument when it is not a member."""
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)):
        raise TypeError(f"{what}(): {argument} must be an int global rank, got {rank!r}")
    index = group.get_group_rank(int(rank))
    if index < 0:
        raise ValueError(f"{what}(): {argument}={rank} is not a member of group {group.id} (ranks {group.ranks})")
    return index


def begin(name: str, group, tensors: list, *, op=None, root=None, counted=True, same_shape=False,
          peers=None) -> Call | None:
    """Start collective `name` on `group` for `tensors` (all on one device); None if this rank is
    not a member of the group (Paddle returns at once there). Point-to-point calls pass their
    `peers` (global ranks) instead of being counted as collectives of the group.

    Before any data moves, the members check that they all call `name` with the first tensor's
    dtype and element count (unless `counted` is False: alltoall checks its per-peer counts with
    `agreement.check_counts`), the same `op` and the same `root`, a global rank passed as the
    collective's "src" or "dst", validated here and kept as a group rank in `call.root`. With
    OARLOCK_DISTRIBUTED_DEBUG=1 the shapes must match too where `same_shape` says so."""
    group = groups.resolve(group, name)
    if group.broken:
        raise RuntimeError(f"{name}(): group {group.id} cannot be used after an earlier collective timed out: "
                           f"{group.broken}")
    if not group.is_member():
        return None
    place = tensors[0].place
    for tensor in tensors[1:]:
        if tensor.place is not place:
            raise ValueError(f"{name}(): all tensors must be on one device; got {place} and {tensor.place}")
    root_index = NONE if root is None else group_rank(group, root, name, agreement.root_argument(name))
    call = Call(name, group, place, _route(group, place, name), watchdog.enter(group.id) if peers is None else None,
                peers)
    call.root = root_index
    first = tensors[0]
    numel = first.size
    call.nbytes = numel * first.dtype.itemsize * (group.nranks if name in _PER_RANK_BLOCKS else 1)
    if peers is None:
        if agreement.applies(group, call.sequence):
            agreement.check(call, first.dtype, numel if counted else NONE, root_index, NONE if op is None else op)
        if _DEBUG:
            agreement.check_debug(call, (name, tensors[0].dtype.name, *([f"{agreement.root_argument(name)}={root}"]
                                                             if root is not None else []),
                                         *([op.name] if op is not None else []),
                                         *([tensors[0].shape] if same_shape else [])))
    return call


def _route(group, place, what: str) -> tuple:
    """(backend, communicator, staged) for `place`'s tensors on `group`, remembered per device
    type until a plugin registers something new."""
    from oarlock.registry import default_registry
    generation = default_registry().generation
    cached = group.routes.get(place.type)
    if cached is not None and cached[0] == generation:
        return cached[1]
    backend = choose_backend(group, place, what)
    route = (backend, group.communicator(backend), place.type not in _served_types(backend))
    group.routes[place.type] = (generation, route)
    return route


def choose_backend(group, place, what: str):
    """The group's backend if it names one, else the first available backend serving the device."""
    from oarlock.registry import default_registry
    registry = default_registry()
    if group.backend_name:
        backend = registry.comms[group.backend_name]
        if place.type not in _served_types(backend) and "cpu" not in backend.device_types:
            raise ValueError(f"{what}(): group {group.id} uses backend {backend.name!r}, which cannot move "
                             f"{place.type} tensors (it serves {', '.join(backend.device_types)})")
        candidates = [backend]
    else:
        candidates = registry.comms_for_device(place.type)
        if not candidates:
            raise ValueError(f"{what}(): no installed communication backend moves {place.type} tensors; installed: "
                             + ", ".join(f"{c.name} ({'/'.join(c.device_types)})" for c in registry.comms.values()))
    reasons = []
    for backend in candidates:
        usable, reason = backend.available()
        if usable:
            return backend
        reasons.append(f"{backend.name}: {reason}")
    raise RuntimeError(f"{what}(): no usable communication backend for {place.type} tensors: " + "; ".join(reasons))


def same_dtype(tensors, dtype, what: str, argument: str):
    for index, tensor in enumerate(tensors):
        if tensor.dtype is not dtype:
            raise ValueError(f"{what}(): {argument}[{index}] has dtype {tensor.dtype.name}, expected {dtype.name} "
                             f"like the other tensors")
