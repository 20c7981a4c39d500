"""Everything oarlock.distributed exports (Paddle's names), gathered from the modules that
implement it; plugin.py exports each name in `__all__`."""

from oarlock_xccl.agreement import CollectiveMismatchError, set_collective_check
from oarlock_xccl.backend import ReduceOp
from oarlock_xccl.calls import Task
from oarlock_xccl.collectives import (all_gather, all_reduce, alltoall, alltoall_single, barrier, broadcast, gather,
                                      reduce, reduce_scatter, scatter, wait)
from oarlock_xccl.groups import (Group, ParallelEnv, destroy_process_group, get_backend, get_group, get_rank,
                                 get_world_size, init_parallel_env, is_available, is_initialized, new_group)
from oarlock_xccl.objects import all_gather_object, broadcast_object_list, scatter_object_list
from oarlock_xccl.p2p import P2POp, batch_isend_irecv, irecv, isend, recv, send
from oarlock_xccl.watchdog import CollectiveTimeoutError

__all__ = ["ReduceOp", "Task", "Group", "ParallelEnv", "CollectiveTimeoutError", "CollectiveMismatchError",
           "set_collective_check",
           "init_parallel_env", "is_initialized", "is_available", "get_rank", "get_world_size", "get_backend",
           "new_group", "get_group", "destroy_process_group",
           "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "alltoall", "alltoall_single",
           "scatter", "gather", "barrier", "wait",
           "send", "recv", "isend", "irecv", "P2POp", "batch_isend_irecv",
           "all_gather_object", "broadcast_object_list", "scatter_object_list"]
