"""GPU memory statistics: a counting allocator over CuPy's memory pool.

CuPy's MemoryPool knows the bytes in use now (used_bytes) and held (total_bytes) on the current
device, but keeps no peak. Every allocation goes through the pool's malloc, and the bytes in use can
only rise there, so `CountingAllocator.malloc` (installed with cupy.cuda.set_allocator) reads both
counters right after each malloc and keeps their maxima per device: max_memory_allocated is exact,
not sampled. Sizes are the pool's (rounded up to 512 bytes), as in Paddle's and torch's statistics.

Arrays made while another allocator is current (cupy.cuda.using_allocator, or an allocator a program
set before oarlock loaded CuPy, which oarlock leaves in place) are not counted.
"""

from __future__ import annotations


class CountingAllocator:
    """`malloc(size)` over `pool.malloc`, recording per-device peaks of the pool's counters."""

    def __init__(self, pool):
        self.pool = pool
        self.peak_used: dict[int, int] = {}
        self.peak_total: dict[int, int] = {}

    def malloc(self, size: int):
        memory = self.pool.malloc(size)
        device = memory.device_id
        used, total = self.pool.used_bytes(), self.pool.total_bytes()
        if used > self.peak_used.get(device, 0):
            self.peak_used[device] = used
        if total > self.peak_total.get(device, 0):
            self.peak_total[device] = total
        return memory

    # the reads below run with `device` current (the caller enters cupy.cuda.Device(device))
    def used(self, device: int) -> int:
        return self.pool.used_bytes()

    def total(self, device: int) -> int:
        return self.pool.total_bytes()

    def max_used(self, device: int) -> int:
        return max(self.peak_used.get(device, 0), self.used(device))

    def max_total(self, device: int) -> int:
        return max(self.peak_total.get(device, 0), self.total(device))

    def reset_max_used(self, device: int) -> None:
        self.peak_used[device] = self.used(device)

    def reset_max_total(self, device: int) -> None:
        self.peak_total[device] = self.total(device)
