"""paddle.incubate.tensor.manipulation's offload helpers: create_async_load, async_offload, async_reload.

Paddle copies a device tensor to pinned host memory (offload) and back (reload) on a side CUDA stream and
hands back a task to wait on. Here the copy is made at once (oarlock's host and device copies are
synchronous), so the task is already complete; the destination is a new tensor with the source's values and
stop_gradient."""

from __future__ import annotations

import oarlock

FUNCTIONS = ("create_async_load", "async_offload", "async_reload")


class CompletedTask:
    """The task of a copy that has finished: every wait returns at once."""

    def is_completed(self):
        return True

    def cpu_wait(self):
        pass

    def cuda_wait(self):
        pass

    def xpu_wait(self):
        pass

    def wait(self):
        pass


class AsyncLoad:
    """What create_async_load returns: offload(src) copies to the host, reload(src) to the current device;
    each returns (destination, task)."""

    def _copy(self, src, place, fn):
        if not isinstance(src, oarlock.Tensor):
            raise TypeError(f"{fn}(): argument 'src_tensor' must be a Tensor; got {type(src).__name__}")
        out = src.detach().clone().to(place)   # new storage even when already on `place`
        out.stop_gradient = src.stop_gradient
        return out, CompletedTask()

    def offload(self, src):
        return self._copy(src, "cpu", "async_offload")

    def reload(self, src):
        return self._copy(src, oarlock.get_device(), "async_reload")


def create_async_load():
    """A new AsyncLoad (Paddle's core.AsyncLoad)."""
    return AsyncLoad()


def _loader(fn, async_load):
    if not isinstance(async_load, AsyncLoad):
        raise TypeError(f"{fn}(): argument 'async_load' must be what create_async_load() returns; got "
                        f"{type(async_load).__name__}")
    return async_load


def async_offload(src_tensor, async_load):
    """(host copy of src_tensor, completed task)."""
    return _loader("async_offload", async_load).offload(src_tensor)


def async_reload(src_tensor, async_load):
    """(copy of src_tensor on the current device, completed task)."""
    return _loader("async_reload", async_load).reload(src_tensor)
