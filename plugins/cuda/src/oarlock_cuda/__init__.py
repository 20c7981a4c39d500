"""oarlock-cuda: the "gpu" device over CuPy, fused CUDA kernels, and CUDA-like vendor devices that
reuse every GPU kernel with one call (register_cuda_like_device)."""
