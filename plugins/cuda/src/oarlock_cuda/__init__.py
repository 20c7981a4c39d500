"""oarlock-cuda: the "gpu" device over CuPy, fused CUDA kernels, and CUDA-like vendor devices that
reuse every GPU kernel with one call (register_cuda_like_device)."""

from oarlock_cuda.derived import CudaLikeDevice, register_cuda_like_device  # noqa: F401
