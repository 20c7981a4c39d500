"""The MPI world every rank starts with: mpi4py's start-up, the private communicators the
plugin uses for its own traffic, and a clean exit.

MPI is the bootstrap transport for every backend (NCCL's unique ids travel over
it too), so it starts with the first process group. Two duplicates of
COMM_WORLD keep the plugin's messages apart from the user's: one for
bootstrapping communicators, one for the collective watchdog.

The rank and world are MPI's: whatever started the ranks (`oarlock launch`, `mpiexec -hostfile`, srun
with an MPI built for Slurm's PMI) told MPI. A multi-node `oarlock launch --nnodes` joins the nodes'
jobs first (oarlock_xccl.nodes). A process MPI started alone while PADDLE_TRAINER_ID /
PADDLE_TRAINERS_NUM or srun's SLURM_PROCID / SLURM_STEP_NUM_TASKS announce a larger world re-runs
itself under mpiexec and joins the others (oarlock_xccl.nodes.rewire_alone), given a rendezvous
address; without one it is an error.
"""

from __future__ import annotations

import atexit
import os
import sys

MPI = None            # mpi4py.MPI once started
_bootstrap = None
_watchdog = None
_oversubscribed = False
_broken: list[str] = []   # why this process may not finalize MPI (a collective that never completed)


def start():
    """Start MPI (collective over COMM_WORLD: every rank calls it at the same point); idempotent."""
    global MPI, _bootstrap, _watchdog
    if MPI is not None:
        return MPI
    from oarlock_xccl import nodes
    nodes.rewire_alone()       # a process started alone in an announced world re-runs under mpiexec (exec)
    from mpi4py import MPI as mpi
    nodes.join(mpi)            # `oarlock launch --nnodes`: the nodes' jobs become one MPI.COMM_WORLD
    _check_announced(mpi.COMM_WORLD)
    MPI = mpi
    _bootstrap = mpi.COMM_WORLD.Dup()
    _watchdog = mpi.COMM_WORLD.Dup()
    _count_local_ranks(mpi)
    # registered after mpi4py's own exit hook, so it runs before MPI_Finalize
    atexit.register(_exit_hook)
    _install_excepthook()
    return mpi


# (rank, world size) variables of launchers that start ranks without telling MPI: Paddle's, and Slurm's
# srun (SLURM_STEP_NUM_TASKS belongs to an srun step; SLURM_NTASKS is also set in a batch script's own shell,
# where a single process is no mistake)
ANNOUNCED = (("PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM"), ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"))


def announced() -> tuple[int, int, str] | None:
    """(rank, world size, "NAME=value, NAME=value") that Paddle's or Slurm's launcher put in the
    environment (the first pair set), or None."""
    for rank_name, size_name in ANNOUNCED:
        rank, size = os.environ.get(rank_name, "").strip(), os.environ.get(size_name, "").strip()
        if rank.isdigit() and size.isdigit():
            return int(rank), int(size), f"{rank_name}={rank}, {size_name}={size}"
    return None


def _check_announced(comm) -> None:
    """A process that MPI started alone while Paddle's or Slurm's variables announce a world of several
    ranks fails here instead of training by itself without a word. When MPI's own launcher started
    several ranks it is the authority (under `mpiexec` in a Slurm allocation, SLURM_PROCID names the
    node's proxy, not the rank)."""
    found = announced()
    if found is None or comm.size > 1 or found[1] <= 1:
        return
    rank, size, names = found
    raise RuntimeError(f"init_parallel_env(): the environment says this process is rank {rank} of {size} "
                       f"({names}), but MPI started it alone (a world of 1) and no rendezvous address is set. Give "
                       f"every process one (OARLOCK_MASTER, PADDLE_MASTER, or MASTER_ADDR and MASTER_PORT: "
                       f"HOST:PORT of rank 0) so that they join, or start the ranks with an MPI launcher: "
                       f"`oarlock launch -n N` (one per node with --nnodes/--node-rank/--master), "
                       f"`mpiexec -hostfile FILE -n N`, or srun with an MPI built for Slurm's PMI")


def _count_local_ranks(mpi) -> None:
    """Note whether this node runs more ranks than this process may use cores."""
    global _oversubscribed
    node = mpi.COMM_WORLD.Split_type(mpi.COMM_TYPE_SHARED)
    try:
        _oversubscribed = node.size > len(os.sched_getaffinity(0))
    finally:
        node.Free()


def oversubscribed() -> bool:
    return _oversubscribed


def started() -> bool:
    return MPI is not None


def bootstrap_comm():
    start()
    return _bootstrap


def watchdog_comm():
    start()
    return _watchdog


def mark_broken(reason: str) -> None:
    """A collective was abandoned; MPI_Finalize would wait for it forever, so exit without it."""
    _broken.append(reason)


def _exit_hook():
    from oarlock_xccl import watchdog
    watchdog.stop_responder()
    if _broken:
        from oarlock_xccl import failure
        failure.record_failure(1, _broken[0])
        print(f"oarlock.distributed: exiting without MPI_Finalize: {_broken[0]}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def _install_excepthook():
    """An uncaught exception on one rank of several aborts the job (like `python -m mpi4py`)
    instead of leaving the other ranks blocked in their next collective."""
    previous = sys.excepthook

    def abort_on_uncaught(exc_type, exc, tb):
        if MPI.COMM_WORLD.size > 1 and not MPI.Is_finalized():
            from oarlock_xccl import failure
            failure.fail(exc)
        previous(exc_type, exc, tb)

    sys.excepthook = abort_on_uncaught
