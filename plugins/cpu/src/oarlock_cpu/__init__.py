"""oarlock-cpu: the "cpu" device over numpy.

Also ships `oarlock_cpu._memstat`, a small C extension that plugs a counting
allocator into numpy (NEP 49) so that `oarlock.device.memory_allocated("cpu")`
and `max_memory_allocated("cpu")` report real bytes of array memory.
"""

from oarlock_cpu.backend import CPUBackend

__all__ = ["CPUBackend"]
