"""Activation swapping for the "1F1BOffload" pipeline schedule: one micro-batch's saved activations go to host
memory after its forward ("O") and come back before its backward ("L").

`ActivationSwap(keys)` is made per step with the (micro_batch, chunk) pairs the schedule offloads.
`recording(key)` wraps that micro-batch's forward in oarlock.autograd.saved_tensors_hooks: every tensor an op
saves for backward is kept in a handle of the micro-batch (one handle per storage, so a tensor saved by several
ops moves once); parameters and other leaves that want gradients are not wrapped (other references keep them on
the device anyway), nor tensors under `min_bytes`, whose copies would cost more Python time than they free.
`offload(key)` copies each handle's array to the device's host pool (offload.to_host: the cpu's separately
counted host pool, a GPU's pinned memory) and drops the device array; once the graph holds no other
reference, the device memory is free. `load(key)` copies them back. Backward reads each through the unpack
hook; a handle still on host at that point is loaded then (correct, only slower).

On the cpu both copies are memcpys run inline; on a GPU the load would be issued on a copy stream one action
early (the schedule places "L" before the action that precedes the backward for that reason); this file runs
the copies synchronously on every device.
"""

from __future__ import annotations

import contextlib

import oarlock
from oarlock.autograd import saved_tensors_hooks
from oarlock.plugin_api import array_of
from oarlock_parallel.offload import to_host

__all__ = ["ActivationSwap"]


class _Handle:
    """One saved storage: on the device (`tensor`) or in the host pool (`host`, an offload.HostCopy)."""

    __slots__ = ("tensor", "host")

    def __init__(self, tensor):
        self.tensor, self.host = tensor, None

    def offload(self) -> int:
        if self.tensor is None:
            return 0
        self.host, self.tensor = to_host(self.tensor), None
        return self.host.nbytes

    def load(self) -> None:
        if self.tensor is None:
            self.tensor, self.host = self.host.to_device(), None

    def get(self):
        self.load()
        return self.tensor


class ActivationSwap:
    """The swapped micro-batches of one pipeline step (see the module docstring)."""

    def __init__(self, keys=(), min_bytes: int = 1024):
        self.keys = frozenset(keys)
        self.min_bytes = min_bytes
        self._handles: dict = {}           # key -> {id(array): _Handle}
        self.offloaded_bytes = 0           # total moved to host over the step

    def recording(self, key):
        """The context for micro-batch `key`'s forward: its saved tensors get handles (no-op for other keys)."""
        if key not in self.keys:
            return contextlib.nullcontext()
        handles = self._handles.setdefault(key, {})
        min_bytes = self.min_bytes

        def pack(t):
            if not isinstance(t, oarlock.Tensor) or (t.is_leaf and not t.stop_gradient):
                return t        # parameters and the stage's received inputs: other references keep them
            array = array_of(t)
            if array.nbytes < min_bytes:
                return t
            handle = handles.get(id(array))      # the handle keeps the array alive: ids are not reused
            if handle is None:
                handle = handles[id(array)] = _Handle(t)
            return handle

        return saved_tensors_hooks(pack, _unpack)

    def offload(self, key) -> None:
        handles = self._handles.get(key)
        if handles is None:
            raise RuntimeError(f"ActivationSwap.offload(): micro-batch {key} has no recorded forward to offload "
                               f"(offloaded pairs: {sorted(self.keys)})")
        self.offloaded_bytes += sum(h.offload() for h in handles.values())

    def load(self, key) -> None:
        """Bring micro-batch `key` back; from now on only its graph holds the handles, so the activations are
        freed with the graph by its backward."""
        handles = self._handles.pop(key, None)
        if handles is None:
            raise RuntimeError(f"ActivationSwap.load(): micro-batch {key} is not offloaded (offloaded pairs: "
                               f"{sorted(self.keys)})")
        for handle in handles.values():
            handle.load()


def _unpack(value):
    return value.get() if value.__class__ is _Handle else value
