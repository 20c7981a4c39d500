"""Activation swapping for the "1F1BOffload" pipeline schedule: one micro-batch's saved activations go to host
memory after its forward ("O") and come back before its backward ("L").

`ActivationSwap(keys)` is made per step with the (micro_batch, chunk) pairs the schedule offloads.
`recording(key)` wraps that micro-batch's forward in oarlock.autograd.saved_tensors_hooks: every tensor an op
saves for backward is kept in a handle of the micro-batch (one handle per storage, so a tensor saved by several
ops moves once); parameters and other leaves that want gradients are not wrapped (other references keep them on
the device anyway), nor tensors under `min_bytes`, whose copies would cost more Python time than they free.

The copies are asynchronous (Backend.copy_to_host_async / copy_to_device_async: a GPU's copy stream into and
out of pinned memory, the cpu's copy worker thread into its separately counted host pool), so they overlap the
actions computed meanwhile:
- `offload(key)` starts each handle's copy to the host pool; the handle keeps the device tensor until its copy
  has finished, and `settle()` (called by the executor before every action) then drops it, freeing the device
  memory once the graph holds no other reference. A copy gets one action to overlap: the next settle() but
  one waits for it, so the device holds no more than the schedule planned. `settle(wait=True)` waits for all.
- `load(key)` starts the copies back (the schedule places "L" one action before the backward that reads them);
  backward reads each handle through the unpack hook, which waits for its copy. A handle whose copy to host
  has not finished when it is loaded keeps its device tensor and drops the host copy; one never loaded is
  loaded by the unpack hook (correct, only slower).
"""

from __future__ import annotations

import contextlib

import oarlock
from oarlock.autograd import saved_tensors_hooks
from oarlock.plugin_api import array_of, wrap

__all__ = ["ActivationSwap"]


class _Handle:
    """One saved storage: on the device (`tensor`), on its way to the host (`tensor` and `down`, a transfer),
    in the host pool (`host`), or on its way back (`up`)."""

    __slots__ = ("tensor", "place", "stop_gradient", "down", "host", "up")

    def __init__(self, tensor):
        self.tensor, self.place, self.stop_gradient = tensor, tensor.place, tensor.stop_gradient
        self.down = self.host = self.up = None

    def offload(self) -> int:
        if self.tensor is None or self.down is not None:
            return 0
        self.down = self.place.backend.copy_to_host_async(array_of(self.tensor), self.place.index)
        return array_of(self.tensor).nbytes

    def settle(self, wait: bool) -> None:
        """Once the copy to host has finished, drop the device tensor."""
        if self.down is not None and (wait or self.down.done()):
            self.host, self.down, self.tensor = self.down.wait(), None, None

    def load(self) -> None:
        if self.down is not None:          # still on the device: keep it, drop the copy once it is written
            self.down.wait()
            self.down = None
        elif self.host is not None and self.up is None:
            self.up = self.place.backend.copy_to_device_async(self.host, self.place.index)
            self.host = None               # the transfer holds it until the copy has read it

    def get(self):
        self.load()
        if self.up is not None:
            self.tensor, self.up = wrap(self.up.wait(), self.place, self.stop_gradient), None
        return self.tensor


class ActivationSwap:
    """The swapped micro-batches of one pipeline step (see the module docstring)."""

    def __init__(self, keys=(), min_bytes: int = 1024):
        self.keys = frozenset(keys)
        self.min_bytes = min_bytes
        self._handles: dict = {}           # key -> {id(array): _Handle}
        self.offloaded_bytes = 0           # total moved to host over the step
        self._fresh: list = []             # handles whose copy to host started since the last settle()
        self._older: list = []             # those started before it and still running then

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
        self._fresh.extend(handles.values())

    def settle(self, wait: bool = False) -> None:
        """Called before every action: free the device memory of the handles whose copy to host has finished,
        waiting for those started before the previous call (a copy overlaps one action, so the device never
        holds more than the schedule planned); wait=True waits for every copy."""
        for handle in self._older:
            handle.settle(True)
        for handle in self._fresh:
            handle.settle(wait)
        self._older, self._fresh = [h for h in self._fresh if h.down is not None], []

    def load(self, key, wait: bool = False) -> None:
        """Start bringing micro-batch `key` back (wait=True: and wait for it); from now on only its graph holds
        the handles, so the activations are freed with the graph by its backward."""
        handles = self._handles.pop(key, None)
        if handles is None:
            raise RuntimeError(f"ActivationSwap.load(): micro-batch {key} is not offloaded (offloaded pairs: "
                               f"{sorted(self.keys)})")
        for handle in handles.values():
            handle.settle(False)
            handle.load()
        if wait:
            for handle in handles.values():
                handle.get()


def _unpack(value):
    return value.get() if value.__class__ is _Handle else value
