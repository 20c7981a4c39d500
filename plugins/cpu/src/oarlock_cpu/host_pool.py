"""The cpu device's host pool: the "cpu" analogue of a GPU's pinned host memory.

On the cpu, device and host memory are the same RAM; a host pool is still useful as a separate account, so
that moving tensors "to host" (activation offload, optimizer states on host) shows in the device statistics
as it would on a GPU. `copy_to_host(array)` copies an array into a block that numpy does not allocate: a
bytearray, so the counting allocator of `_memstat` (memory_allocated / max_memory_allocated) never sees it.
A HostMemoryCounter counts those blocks instead (host_memory_allocated / max_host_memory_allocated, PyTorch's
"host memory" and Paddle's "memory_allocated" naming); a block is uncounted when its last view is collected.
"""

from __future__ import annotations

import numpy as np

from oarlock.device import HostMemoryCounter


class _Block(bytearray):
    """A host block; a bytearray subclass so that it can be watched by a weak reference."""

    __slots__ = ("__weakref__",)


def copy_to_host(array) -> np.ndarray:
    """A copy of `array` in a new host block (C order); the block is counted until it is collected."""
    array = np.asarray(array)
    block = _Block(array.nbytes)   # zero-filled by Python, outside numpy's allocator
    out = np.frombuffer(block, dtype=array.dtype, count=array.size).reshape(array.shape)
    np.copyto(out, array)
    COUNTER.track(block, array.nbytes)
    return out


COUNTER = HostMemoryCounter()
