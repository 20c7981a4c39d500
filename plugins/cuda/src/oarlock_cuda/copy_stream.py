"""Asynchronous copies between a GPU and pinned host memory on a copy stream per device
(Backend.copy_to_host_async / copy_to_device_async, what activation swapping uses).

To host: the source is made contiguous on the current (compute) stream, an event recorded there, and the copy
stream waits for it before copying into a pinned buffer from CuPy's pinned pool (counted in host_pool); the
transfer keeps the device source alive until `wait()` has seen the copy's event complete, since CuPy's memory
pool would otherwise hand that memory to the compute stream while the copy still reads it.

To device: the destination is allocated from the current stream's pool (so it is that stream's memory from
the start), the copy stream waits for an event on the current stream (the memory's previous use is over), and
copies from the pinned host array. `wait()` makes the stream current at that time wait for the copy's event
(no host synchronisation) and returns the array; the transfer keeps the pinned source alive until then.

Both copies overlap the compute queued meanwhile: pinned memory lets the DMA engines run them without the host.
Not yet run on a GPU here (no device was lent); the cpu counterpart is oarlock_cpu.copy_worker.
"""

from __future__ import annotations

import numpy as np


class CopyStreams:
    """One non-blocking copy stream per device, made on first use."""

    def __init__(self, cupy):
        self.cupy, self._streams = cupy, {}

    def get(self, index: int):
        stream = self._streams.get(index)
        if stream is None:
            with self.cupy.cuda.Device(index):
                stream = self._streams[index] = self.cupy.cuda.Stream(non_blocking=True)
        return stream

    def after_current(self, index: int):
        """The copy stream of `index`, made to wait for the work queued so far on the current stream."""
        ready = self.cupy.cuda.Event(disable_timing=True)
        ready.record(self.cupy.cuda.get_current_stream())
        stream = self.get(index)
        stream.wait_event(ready)
        return stream


class CudaTransfer:
    """A copy queued on a copy stream: done() queries its event; wait() returns the result (see the module
    docstring for what each direction waits for)."""

    __slots__ = ("cupy", "event", "result", "keep", "to_device")

    def __init__(self, cupy, stream, result, keep, to_device: bool):
        self.cupy, self.result, self.keep, self.to_device = cupy, result, keep, to_device
        self.event = cupy.cuda.Event(disable_timing=True)
        self.event.record(stream)

    def done(self) -> bool:
        return bool(self.event.done)

    def wait(self):
        if self.to_device:
            self.cupy.cuda.get_current_stream().wait_event(self.event)
        else:
            self.event.synchronize()
        self.keep = None
        return self.result


def to_host_async(streams: CopyStreams, array, index: int, host_pool) -> CudaTransfer:
    import cupyx
    cupy = streams.cupy
    with cupy.cuda.Device(index):
        source = cupy.ascontiguousarray(array)
        out = cupyx.empty_pinned(source.shape, source.dtype)
        host_pool.track(out, out.nbytes)
        stream = streams.after_current(index)
        source.get(stream=stream, out=out, blocking=False)
        return CudaTransfer(cupy, stream, out, source, to_device=False)


def to_device_async(streams: CopyStreams, host, index: int) -> CudaTransfer:
    cupy = streams.cupy
    host = np.ascontiguousarray(host)
    with cupy.cuda.Device(index):
        out = cupy.empty(host.shape, host.dtype)
        stream = streams.after_current(index)
        out.set(host, stream=stream)
        return CudaTransfer(cupy, stream, out, host, to_device=True)
