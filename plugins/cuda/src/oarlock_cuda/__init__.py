"""oarlock-cuda: the "gpu" device over CuPy, fused CUDA kernels, and CUDA-like vendor devices that
reuse every GPU kernel with one call (register_cuda_like_device).

kernel_dir() is the public way for other plugins' kernels to reach the CUDA headers shipped here."""

from pathlib import Path

from oarlock_cuda.derived import CudaLikeDevice, register_cuda_like_device  # noqa: F401

_KERNEL_DIR = Path(__file__).with_name("kernels")


def kernel_dir() -> Path:
    """The folder of oarlock-cuda's CUDA sources, whose headers other plugins' kernels may include:
    prelude.cuh (the 16-bit storage types bf16_t, half_t) and tensor_core.cuh (mma.sync m16n8k16,
    ldmatrix, cp.async, with host emulations for oarlock_cuda.emulation)."""
    return _KERNEL_DIR
