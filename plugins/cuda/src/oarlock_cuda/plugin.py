"""Entry point of oarlock-cuda: registers the "gpu" device and the fused GPU kernels.

Nothing here imports cupy: the backend loads it when a GPU tensor is first
made, and reports itself unavailable (with the reason) when it cannot.
"""

from oarlock import hookimpl


@hookimpl
def oarlock_register_backends(backends):
    from oarlock_cuda.backend import GPUBackend
    backends.register(GPUBackend())


@hookimpl
def oarlock_register_ops(ops):
    from oarlock_cuda import fused
    fused.register(ops)
