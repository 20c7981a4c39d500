"""Recording: the observer the profiler installs in the core (oarlock.plugin_api.set_observer), and
RecordEvent for user-defined ranges.

Each op call, backward node and RecordEvent becomes one Event: name, type, start and end (ns, from
time.perf_counter_ns), thread, and optionally input shapes and the change in allocated bytes. The
observer takes its start time last in begin() and its end time first in end(), so an op's duration
holds the op and not the profiler's own bookkeeping.
"""

from __future__ import annotations

import functools
import threading
import time
from contextlib import ContextDecorator
from warnings import warn

from oarlock import Tensor
from oarlock.plugin_api import Node

from oarlock_profiler.enums import TracerEventType

_clock = time.perf_counter_ns
_ident = threading.get_ident


class Event:
    """One recorded range. `type` is a TracerEventType name ("Operator", "ProfileStep", ...); `shapes`
    the input shapes (record_shapes=True); `memory` the allocated bytes after minus before
    (profile_memory=True); `backward` whether it is an autograd node."""

    __slots__ = ("name", "type", "start", "end", "tid", "shapes", "memory", "backward")

    def __init__(self, name, type, start, end, tid, shapes=None, memory=None, backward=False):
        self.name, self.type, self.start, self.end, self.tid = name, type, start, end, tid
        self.shapes, self.memory, self.backward = shapes, memory, backward

    @property
    def duration(self) -> int:
        return self.end - self.start

    def __repr__(self):
        return f"Event({self.name!r}, {self.type}, {self.duration / 1e3:.3f} us)"


def _shapes_of(inputs):
    shapes = []
    for a in inputs:
        if isinstance(a, (list, tuple)):
            inner = [list(x.shape) for x in a if isinstance(x, Tensor)]
            if inner:
                shapes.append(inner)
        elif isinstance(a, Tensor):
            shapes.append(list(a.shape))
    return shapes


class Recorder:
    """The core observer: appends one Event per op call and backward node to `events`."""

    def __init__(self, record_shapes=False, memory=None):
        self.events: list[Event] = []
        self.record_shapes = record_shapes
        self.memory = memory     # a function returning the bytes allocated now, or None
        self.peak_memory = 0

    def begin(self, event, inputs):
        backward = event.__class__ is Node
        name = event.name + "_grad" if backward else event.name
        shapes = _shapes_of(inputs) if self.record_shapes else None
        before = self.memory() if self.memory is not None else None
        return name, backward, shapes, before, _ident(), _clock()

    def end(self, token):
        end = _clock()
        name, backward, shapes, before, tid, start = token
        change = None
        if before is not None:
            after = self.memory()
            change = after - before
            if after > self.peak_memory:
                self.peak_memory = after
        self.events.append(Event(name, "Operator", start, end, tid, shapes, change, backward))

    def add(self, name, type_name, start, end, tid=None):
        self.events.append(Event(name, type_name, start, end, _ident() if tid is None else tid))


class _Active:
    """The recorder of the profiler that is recording now (RecordEvent writes into it), or None."""

    recorder: Recorder | None = None


ACTIVE = _Active()

_ALLOWED = (TracerEventType.Dataloader, TracerEventType.ProfileStep, TracerEventType.Forward,
            TracerEventType.Backward, TracerEventType.Optimization, TracerEventType.PythonOp,
            TracerEventType.PythonUserDefined)


class RecordEvent(ContextDecorator):
    """A user-defined time range, recorded while a Profiler is recording: `with RecordEvent("name"):`,
    `@RecordEvent("name")`, or begin() ... end()."""

    def __init__(self, name: str, event_type: TracerEventType = TracerEventType.PythonUserDefined):
        if not isinstance(name, str):
            raise TypeError(f"RecordEvent(): name must be a str, got {type(name).__name__} {name!r}")
        if not isinstance(event_type, TracerEventType):
            raise TypeError(f"RecordEvent(): event_type must be a paddle.profiler TracerEventType, got "
                            f"{type(event_type).__name__} {event_type!r}")
        self.name, self.event_type = name, event_type
        self._start = None

    def __enter__(self):
        self.begin()
        return self

    def __exit__(self, *exc):
        self.end()
        return False

    def __call__(self, fn):   # a fresh range per call, so recursive or threaded use does not share one
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with RecordEvent(self.name, self.event_type):
                return fn(*args, **kwargs)
        return wrapper

    def begin(self) -> None:
        """Start the range (nothing happens unless a Profiler is recording)."""
        if ACTIVE.recorder is None:
            return
        if self.event_type not in _ALLOWED:
            warn(f"RecordEvent(): only the event types {', '.join(t.name for t in _ALLOWED)} can be recorded, "
                 f"got {self.event_type.name}", stacklevel=2)
            return
        self._recorder, self._tid, self._start = ACTIVE.recorder, _ident(), _clock()

    def end(self) -> None:
        """End the range begun by begin()."""
        if self._start is not None:
            self._recorder.add(self.name, self.event_type.name, self._start, _clock(), self._tid)
            self._start = self._recorder = None
