"""Activation offload to the device's host pool (oarlock.distributed.fleet.utils.offload).

`to_host(tensor)` copies a tensor's array into the host pool of its device (`Backend.pin_memory`: a GPU's
pinned memory; the cpu's separate host pool, counted by oarlock.device.host_memory_allocated and not by
memory_allocated) and returns a `HostCopy`; `HostCopy.to_device()` brings it back as a new device tensor.

`ActivationOffload(min_bytes=...)` is a context manager over `oarlock.autograd.saved_tensors_hooks`: every
activation an op saves for backward while it is active, of at least `min_bytes`, is moved to the host pool and
reloaded when backward reads it. Parameters (leaves that take a gradient) stay: their memory is the model's,
and a copy would not free it. A tensor saved by several ops is copied once (the copies are shared while the
context is active), and one reload serves every op that reads it while the reloaded tensor is alive. The
object keeps totals (bytes and tensors moved, seconds spent copying each way) that the memory planner
(offload_planner.py) reads as its measured host bandwidth.

The copies here are synchronous (a reload happens when backward asks for the tensor, and nothing could
overlap it); on a GPU the copy to host goes through pageable memory, then pin_memory. The pipeline's swap
(pipeline_swap.py), which knows one action ahead what backward will read, uses the backends' asynchronous
copies instead (Backend.copy_to_host_async / copy_to_device_async: a GPU's copy stream, the cpu's copy worker).
"""

from __future__ import annotations

import time
import weakref

import oarlock
from oarlock.autograd import saved_tensors_hooks
from oarlock.plugin_api import array_of, wrap

__all__ = ["HostCopy", "to_host", "ActivationOffload"]


class HostCopy:
    """A tensor's values in its device's host pool, with what `to_device` needs to rebuild the tensor."""

    __slots__ = ("host", "place", "stop_gradient", "_reloaded", "__weakref__")

    def __init__(self, host, place, stop_gradient):
        self.host, self.place, self.stop_gradient = host, place, stop_gradient
        self._reloaded = None

    @property
    def nbytes(self) -> int:
        return self.host.nbytes

    def to_device(self) -> oarlock.Tensor:
        """A device tensor with the saved values (the same one again while an earlier reload is alive)."""
        cached = self._reloaded() if self._reloaded is not None else None
        if cached is not None:
            return cached
        backend = self.place.backend
        array = backend.asarray(self.host, None, self.place.index)
        if array is self.host:      # host and device memory are one (cpu): copy out of the host pool
            array = self.host.copy()
        t = wrap(array, self.place, self.stop_gradient)
        self._reloaded = weakref.ref(t)
        return t

    restore = to_device    # what recompute's stashed inputs answer (recompute.py)


def to_host(tensor) -> HostCopy:
    """Copy `tensor` into its device's host pool (see the module docstring)."""
    if not isinstance(tensor, oarlock.Tensor):
        raise TypeError(f"to_host(): argument 'tensor' must be a Tensor; got {type(tensor).__name__}")
    place = tensor.place
    backend = place.backend
    return HostCopy(backend.pin_memory(backend.to_host(array_of(tensor))), place, tensor.stop_gradient)


class ActivationOffload:
    """`with ActivationOffload(min_bytes=0):` moves the activations saved for backward inside the block, of at
    least `min_bytes` bytes, to the host pool (module docstring). Reusable; not reentrant (one
    saved_tensors_hooks pair is active at a time, as in Paddle)."""

    def __init__(self, min_bytes: int = 0):
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            raise ValueError(f"ActivationOffload(): min_bytes must be an int >= 0; got {min_bytes!r}")
        self.min_bytes = min_bytes
        self.bytes_offloaded = 0
        self.tensors_offloaded = 0
        self.seconds_to_host = 0.0
        self.seconds_to_device = 0.0
        self._shared = {}      # id(array) -> (weak reference to the array, its HostCopy), while active
        self._hooks = None

    def __enter__(self):
        self._hooks = saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._shared.clear()
        self._hooks.__exit__(*exc)
        return False

    def _pack(self, t):
        array = array_of(t)
        if array.nbytes < self.min_bytes or (t.is_leaf and not t.stop_gradient):
            return t
        entry = self._shared.get(id(array))
        if entry is not None and entry[0]() is array:
            return entry[1]
        start = time.perf_counter()
        copy = to_host(t)
        self.seconds_to_host += time.perf_counter() - start
        self.bytes_offloaded += copy.nbytes
        self.tensors_offloaded += 1
        try:
            self._shared[id(array)] = (weakref.ref(array), copy)
        except TypeError:       # an array type without weak references: no sharing
            pass
        return copy

    def _unpack(self, packed):
        if packed.__class__ is not HostCopy:
            return packed
        start = time.perf_counter()
        t = packed.to_device()
        self.seconds_to_device += time.perf_counter() - start
        return t
