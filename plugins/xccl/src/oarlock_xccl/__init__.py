"""oarlock-xccl: collective communication for oarlock.

`oarlock.distributed` (Paddle's names) over pluggable communication backends
with NCCL's interface: "mpi" (mpi4py) for CPU tensors and "nccl" (CuPy's NCCL
bindings) for GPU tensors; `oarlock launch` starts ranks through mpiexec.
"""

from oarlock_xccl.backend import DONE, CommBackend, ReduceOp, Work

__all__ = ["CommBackend", "Work", "DONE", "ReduceOp"]
