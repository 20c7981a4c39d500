"""Entry point of oarlock-cpu: registers the "cpu" device, its own C kernels (oarlock_cpu.kernels) and its
matrix-product kernels that choose the BLAS thread count per call (oarlock_cpu.blas)."""

from oarlock import hookimpl

from oarlock_cpu import blas, kernels
from oarlock_cpu.backend import CPUBackend


@hookimpl
def oarlock_register_backends(backends):
    backends.register(CPUBackend())


@hookimpl
def oarlock_register_ops(ops):
    kernels.register(ops)
    blas.register(ops)
