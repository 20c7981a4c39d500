"""(being written) fused CUDA kernels for device "gpu"."""


def register(ops):
    """Register the fused kernels."""
