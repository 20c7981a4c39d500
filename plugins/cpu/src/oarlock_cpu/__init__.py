"""oarlock-cpu: the "cpu" device over numpy."""

from oarlock_cpu.backend import CPUBackend

__all__ = ["CPUBackend"]
