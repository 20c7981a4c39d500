"""Entry point of oarlock-cpu: registers the "cpu" device."""

from oarlock import hookimpl

from oarlock_cpu.backend import CPUBackend


@hookimpl
def oarlock_register_backends(backends):
    backends.register(CPUBackend())
