"""Entry point of oarlock-vendor-example (see pyproject.toml): registers the device "acme_npu".

register_cuda_like_device builds the whole device in one call: a backend that takes from AcmeRuntime
what differs from its parent and everything else from the parent's backend, and three kernels of its
own; the other ops reuse the parent's kernels. Its two halves are registered from the two hooks below,
because oarlock hands each hook the registrar of one table (devices first, then ops).

A CUDA-compatible chip would write parent="gpu" (the default) and reuse the GPU kernels instead.
"""

from __future__ import annotations

from oarlock import hookimpl
from oarlock_cuda import register_cuda_like_device

from oarlock_acme import kernels


class AcmeRuntime:
    """What the acme_npu runtime does differently from the CPU backend: it has two chips, a current
    chip, and a synchronize that waits for the chip (counted here; the simulated chip is synchronous).
    The method names and signatures are those of oarlock.device.Backend, without self. Memory
    statistics, random generators, host copies and the array module (numpy) are the CPU's."""

    def __init__(self, count: int = 2):
        self.count, self.current, self.synchronized = count, 0, 0

    def device_count(self) -> int:
        return self.count

    def synchronize(self, index: int = 0) -> None:
        self.synchronized += 1

    def set_current_device(self, index: int) -> None:  # called by oarlock.set_device("acme_npu:N")
        self.current = index


runtime = AcmeRuntime()

device = register_cuda_like_device(
    "acme_npu",
    runtime=runtime,
    overrides={"matmul": kernels.matmul, "relu": kernels.relu, "softmax": kernels.softmax},
    parent="cpu",
)


@hookimpl
def oarlock_register_backends(backends):
    device.register_backend(backends)


@hookimpl
def oarlock_register_ops(ops):
    device.register_kernels(ops)
