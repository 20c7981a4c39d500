"""Entry point of oarlock-cpu: registers the "cpu" device, its own C kernels (oarlock_cpu.kernels; the fused
RMSNorm / LayerNorm rows of oarlock_cpu.rows; the softmax rows of oarlock_cpu.softmax_kernels; the rotary rows of
oarlock_cpu.rotary_kernels; the embedding backward of oarlock_cpu.embedding_kernels), its matrix-product kernels
that choose the BLAS thread count per call (oarlock_cpu.blas), its fused Adam update (oarlock_cpu.optim_kernels),
and its fused attention over MKL (oarlock_cpu.attention_kernels)."""

from oarlock import hookimpl

from oarlock_cpu import (attention_kernels, blas, embedding_kernels, kernels, optim_kernels, rotary_kernels, rows,
                         softmax_kernels)
from oarlock_cpu.backend import CPUBackend


@hookimpl
def oarlock_register_backends(backends):
    backends.register(CPUBackend())


@hookimpl
def oarlock_register_ops(ops):
    kernels.register(ops)
    rows.register(ops)
    softmax_kernels.register(ops)
    rotary_kernels.register(ops)
    embedding_kernels.register(ops)
    blas.register(ops)
    optim_kernels.register(ops)
    attention_kernels.register(ops)
