"""(being written) the "gpu" backend over CuPy."""

from oarlock.device import Backend


class GPUBackend(Backend):
    type = "gpu"

    def device_count(self) -> int:
        return 0
