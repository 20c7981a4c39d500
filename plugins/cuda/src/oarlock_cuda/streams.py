"""CUDA streams and events for oarlock.device.Stream/Event: thin adapters over cupy.cuda.Stream/Event.

oarlock.device.Stream holds one of these as `stream_base` and calls synchronize(), query(),
wait_event(event_base), wait_stream(stream_base); an Event's `event_base` has record(stream_base),
synchronize(), query(), elapsed_time(end). `.raw` is the CuPy object, for code that launches its own
kernels (cupy.RawKernel(..., stream=s.stream_base.raw)); `.ptr` the CUDA handle.

Every CuPy kernel, and so every oarlock op on a gpu tensor, is queued on CuPy's current stream of the
thread and device; set_stream makes a stream current with cupy.cuda.Stream.use() on its device.
New streams are non-blocking (they do not wait for the legacy default stream, as in Paddle and
torch): order them against other streams with wait_stream / wait_event.
"""

from __future__ import annotations

# CUDA clamps a priority outside cudaDeviceGetStreamPriorityRange to the range's end, and CuPy does not wrap
# that query: a very negative number is "the highest priority this GPU has", 0 the default (lowest).
_PRIORITY = {1: -1024, 2: 0}


class CudaStream:
    __slots__ = ("cupy", "raw", "index", "priority")

    def __init__(self, cupy, raw, index: int, priority: int = 2):
        self.cupy, self.raw, self.index, self.priority = cupy, raw, index, priority

    @classmethod
    def create(cls, cupy, index: int, priority: int = 2):
        with cupy.cuda.Device(index):
            return cls(cupy, cupy.cuda.Stream(non_blocking=True, priority=_PRIORITY[priority]), index, priority)

    @property
    def ptr(self) -> int:
        return self.raw.ptr

    def synchronize(self) -> None:
        self.raw.synchronize()

    def query(self) -> bool:
        return bool(self.raw.done)

    def wait_event(self, event_base: "CudaEvent") -> None:
        self.raw.wait_event(event_base.raw)

    def wait_stream(self, stream_base: "CudaStream") -> None:
        # An event recorded now on the other stream (on that stream's device) marks the work queued there so far.
        with self.cupy.cuda.Device(stream_base.index):
            marker = self.cupy.cuda.Event(disable_timing=True)
            marker.record(stream_base.raw)
        self.raw.wait_event(marker)

    def __repr__(self):
        return f"CudaStream(gpu:{self.index}, ptr={self.raw.ptr:#x})"


class CudaEvent:
    __slots__ = ("cupy", "raw", "index", "enable_timing", "recorded")

    def __init__(self, cupy, index: int, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False):
        if interprocess and enable_timing:
            raise ValueError("Event(): an interprocess event cannot measure time (CUDA requires "
                             "enable_timing=False with interprocess=True)")
        with cupy.cuda.Device(index):
            self.raw = cupy.cuda.Event(block=blocking, disable_timing=not enable_timing, interprocess=interprocess)
        self.cupy, self.index, self.enable_timing, self.recorded = cupy, index, enable_timing, False

    def record(self, stream_base: CudaStream) -> None:
        with self.cupy.cuda.Device(self.index):
            self.raw.record(stream_base.raw)
        self.recorded = True

    def synchronize(self) -> None:
        self.raw.synchronize()

    def query(self) -> bool:
        return bool(self.raw.done)

    def elapsed_time(self, end: "CudaEvent") -> float:
        if not (self.enable_timing and end.enable_timing):
            raise ValueError("Event.elapsed_time(): both events must be created with enable_timing=True")
        if not (self.recorded and end.recorded):
            raise ValueError("Event.elapsed_time(): both events must be recorded first (Event.record())")
        end.raw.synchronize()  # CUDA answers 'not ready' until the end event has completed
        return float(self.cupy.cuda.get_elapsed_time(self.raw, end.raw))

    def __repr__(self):
        return f"CudaEvent(gpu:{self.index}, enable_timing={self.enable_timing})"
