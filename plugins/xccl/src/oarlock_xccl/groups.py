"""Process groups with Paddle's API: init_parallel_env, new_group, get_group, ranks and sizes.

A Group is a list of global ranks. Its communicators are made lazily, one per
communication backend, the first time a tensor of that backend's device is
communicated: group rank 0 makes a unique id, the other members receive it
over MPI, and every member initializes the backend's communicator with it
(NCCL's bootstrap, used for every backend).
"""

from __future__ import annotations

import datetime
import os

from oarlock_xccl import failure, nodes, watchdog, world

_DEFAULT_TIMEOUT_S = 1800.0     # Paddle's default collective timeout (30 minutes)
_UID_TAG = 1
_groups: dict = {}              # group id -> Group; id 0 is the world


def _timeout_seconds(timeout, what: str) -> float:
    if timeout is None:
        raw = os.environ.get("OARLOCK_COLLECTIVE_TIMEOUT")
        if raw is None:
            return _DEFAULT_TIMEOUT_S
        try:
            timeout = float(raw)
        except ValueError:
            raise ValueError(f"{what}: environment variable OARLOCK_COLLECTIVE_TIMEOUT={raw!r} is not a number "
                             f"of seconds") from None
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"{what}: timeout must be a positive number of seconds or a datetime.timedelta, "
                         f"got {timeout!r}")
    return float(timeout)


class Group:
    """A process group: its global `ranks`, this process's `rank` in it (-1 if not a member)."""

    def __init__(self, group_id: int, ranks: list, backend: str | None, timeout: float, name: str):
        self.id, self.ranks, self.name = group_id, list(ranks), name
        me = world.MPI.COMM_WORLD.rank
        self.rank = self.ranks.index(me) if me in self.ranks else -1
        self.nranks = len(self.ranks)
        self.backend_name, self.timeout = backend, timeout
        self.broken: str | None = None
        self._comms: dict = {}      # backend name -> communicator
        self.routes: dict = {}      # device type -> (registry generation, (backend, communicator, staged))
        self.agreement = None       # agreement.Records: the collective check's communicator, made on first use

    world_size = property(lambda self: self.nranks)
    process_group = property(lambda self: self)

    @property
    def backend(self) -> str:
        return self.backend_name or "auto"

    def is_member(self) -> bool:
        return self.rank >= 0

    def get_group_rank(self, rank: int) -> int:
        """The rank in this group of global rank `rank`, -1 if it is not a member."""
        return self.ranks.index(rank) if rank in self.ranks else -1

    def get_global_rank(self, group_rank: int) -> int:
        return self.ranks[group_rank]

    def __repr__(self):
        return f"Group(id={self.id}, name={self.name!r}, rank={self.rank}, ranks={self.ranks}, backend={self.backend})"

    # -- communicators --------------------------------------------------------------------
    def communicator(self, backend):
        comm = self._comms.get(backend.name)
        if comm is None:
            comm = self._comms[backend.name] = self._init_comm(backend)
        return comm

    def _init_comm(self, backend):
        boot = world.bootstrap_comm()
        if self.rank == 0:
            unique_id = backend.get_unique_id()
            for member in self.ranks[1:]:
                boot.send(unique_id, dest=member, tag=_UID_TAG)
        else:
            unique_id = boot.recv(source=self.ranks[0], tag=_UID_TAG)
        return backend.comm_init_rank(self.nranks, unique_id, self.rank)

    def destroy(self):
        from oarlock.registry import default_registry
        comms = default_registry().comms
        if self.agreement is not None:
            self.agreement.free()       # a duplicate of the MPI communicator: freed before it
            self.agreement = None
        for name, comm in self._comms.items():
            comms[name].comm_destroy(comm)
        self._comms.clear()
        self.routes.clear()


# -- Paddle's functions -------------------------------------------------------------------------
def init_parallel_env(nccl_config=None) -> Group:
    """Start the world: every rank of an `oarlock launch` (or plain `mpiexec`) job calls this once.
    Returns the world group; calling it again returns the same group."""
    if 0 in _groups:
        return _groups[0]
    mpi = world.start()
    size = mpi.COMM_WORLD.size
    group = Group(0, list(range(size)), os.environ.get("OARLOCK_COMM_BACKEND") or None,
                  _timeout_seconds(None, "init_parallel_env()"), "_default_pg")
    _groups[0] = group
    watchdog.start_responder()
    return group


def is_initialized() -> bool:
    return 0 in _groups


def _world() -> Group:
    return _groups[0] if 0 in _groups else init_parallel_env()


def new_group(ranks=None, backend=None, timeout=None, nccl_comm_init_option=0, nccl_config=None) -> Group:
    """A group of the given global ranks (all ranks when None). Every rank calls it, members or not,
    in the same order, as in Paddle."""
    everyone = _world()
    size = everyone.nranks
    ranks = list(range(size)) if ranks is None else ranks
    if not isinstance(ranks, (list, tuple)) or not all(isinstance(r, int) and not isinstance(r, bool)
                                                        for r in ranks):
        raise TypeError(f"new_group(): ranks must be a list of int global ranks, got {ranks!r}")
    bad = [r for r in ranks if not 0 <= r < size]
    if bad or len(set(ranks)) != len(ranks) or not ranks:
        raise ValueError(f"new_group(): ranks {list(ranks)} must be distinct global ranks in [0, {size}) "
                         f"(the world has {size}); " + (f"out of range: {bad}" if bad else "duplicates or empty"))
    if backend is not None:
        _check_backend(backend, "new_group()")
    group_id = max(_groups) + 1
    group = Group(group_id, list(ranks), backend or everyone.backend_name,
                  _timeout_seconds(timeout, "new_group()") if timeout is not None else everyone.timeout,
                  f"_new_group_{group_id}")
    _groups[group_id] = group
    return group


def _check_backend(name, what):
    from oarlock.registry import default_registry
    comms = default_registry().comms
    if name not in comms:
        raise ValueError(f"{what}: unknown communication backend {name!r}; installed: {', '.join(sorted(comms))}")


def get_group(id: int = 0) -> Group:
    if id == 0:
        return _world()
    group = _groups.get(id)
    if group is None:
        raise ValueError(f"get_group(): no group with id {id!r}; existing ids: {sorted(_groups)}")
    return group


def resolve(group, what: str) -> Group:
    """The group a collective runs on: the world for None; errors name the collective."""
    if group is None:
        return _world()
    if not isinstance(group, Group):
        raise TypeError(f"{what}(): group must be a Group from new_group() or None, got {type(group).__name__}")
    if group.id not in _groups:
        raise ValueError(f"{what}(): group {group.id} was destroyed by destroy_process_group()")
    return group


def destroy_process_group(group=None) -> None:
    """Destroy one group, or with None every group and the world (Paddle's semantics)."""
    if group is not None:
        resolve(group, "destroy_process_group")
        if group.id == 0:
            raise ValueError("destroy_process_group(): the world group is destroyed with group=None")
        _groups.pop(group.id).destroy()
        return
    for group_id in sorted(_groups, reverse=True):
        _groups.pop(group_id).destroy()


def get_rank(group=None) -> int:
    """This process's rank in `group` (global rank for None; works before init_parallel_env, across the nodes of
    an `oarlock launch --nnodes` job too)."""
    if group is None and not is_initialized():
        return nodes.global_view(failure.launch_rank(), _launch_size())[0]
    return resolve(group, "get_rank").rank


def get_world_size(group=None) -> int:
    if group is None and not is_initialized():
        return nodes.global_view(failure.launch_rank(), _launch_size())[1]
    return resolve(group, "get_world_size").nranks


def _launch_size() -> int:
    """The world size the MPI launcher announces (MPICH: PMI_SIZE; Open MPI: OMPI_COMM_WORLD_SIZE)."""
    for name in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE"):
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return 1


def get_backend(group=None) -> str:
    """The group's backend name: "mpi", "nccl" or another registered one, "auto" when chosen per device."""
    return resolve(group, "get_backend").backend


def is_available() -> bool:
    from oarlock.registry import default_registry
    return any(comm.available()[0] for comm in default_registry().comms.values())


class ParallelEnv:
    """Paddle's ParallelEnv: the launch environment's rank, world size and device."""

    @property
    def rank(self) -> int:
        return get_rank()

    @property
    def world_size(self) -> int:
        return get_world_size()

    nranks = world_size
    local_rank = rank

    @property
    def device_id(self) -> int:
        return int(os.environ.get("MPI_LOCALRANKID", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", 0)))

    dev_id = device_id
