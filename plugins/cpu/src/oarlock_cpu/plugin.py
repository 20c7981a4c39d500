"""Entry point of oarlock-cpu: registers the "cpu" device and its own kernels (oarlock_cpu.kernels)."""

from oarlock import hookimpl

from oarlock_cpu import kernels
from oarlock_cpu.backend import CPUBackend


@hookimpl
def oarlock_register_backends(backends):
    backends.register(CPUBackend())


@hookimpl
def oarlock_register_ops(ops):
    kernels.register(ops)
