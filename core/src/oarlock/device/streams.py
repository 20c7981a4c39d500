"""Streams and events (Paddle's paddle.device.Stream/Event, current_stream, set_stream, stream_guard) and
synchronize. They are generic: they delegate to the place's backend. A backend without asynchronous queues
(cpu) inherits HostStream/HostEvent, which are trivially synchronous, so code written for a GPU runs
unchanged on the CPU.
"""

from __future__ import annotations

from oarlock.device.places import _place_of, default_place, set_device


def synchronize(device=None) -> None:
    """Wait until all work queued on `device` (default: the current device) is done."""
    place = _place_of(device, "synchronize(): device")
    place.backend.synchronize(place.index)


class Stream:
    """A queue of work on one device (Paddle's paddle.device.Stream).

    Stream(device=None, priority=2): a new stream on `device` (default: the current device); priority 1 is
    high, 2 low. Work is queued on the current stream: make this one current with `with stream:`,
    `with oarlock.device.stream_guard(stream):` or set_stream(stream). On a device without asynchronous
    queues (cpu) every stream is already complete, so the same code runs there.
    """

    def __init__(self, device=None, priority: int = 2, stream_base=None):
        self.device = _place_of(device, "Stream(): device")
        if stream_base is None:
            if priority not in (1, 2) or isinstance(priority, bool):
                raise ValueError(f"Stream(): priority must be 1 (high) or 2 (low), got {priority!r}")
            stream_base = self.device.backend.stream(self.device.index, priority)
        self.stream_base = stream_base
        self._guards = []

    def synchronize(self) -> None:
        """Wait until all work queued on this stream is done."""
        self.stream_base.synchronize()

    def query(self) -> bool:
        """Whether all work queued on this stream is done."""
        return bool(self.stream_base.query())

    def wait_event(self, event: "Event") -> None:
        """Make work queued on this stream from now on wait until `event` completes."""
        if not isinstance(event, Event):
            raise TypeError(f"Stream.wait_event(): expected an Event, got {type(event).__name__}")
        if event.device.backend is self.device.backend:
            self.stream_base.wait_event(event.event_base)
        else:  # another backend's event: wait on the host, before anything more is queued here
            event.synchronize()

    def wait_stream(self, stream: "Stream") -> None:
        """Make work queued on this stream from now on wait until the work queued on `stream` so far is done."""
        if not isinstance(stream, Stream):
            raise TypeError(f"Stream.wait_stream(): expected a Stream, got {type(stream).__name__}")
        if stream.device.backend is self.device.backend:
            self.stream_base.wait_stream(stream.stream_base)
        else:
            stream.synchronize()

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record `event` (a new one if None) on this stream and return it."""
        if event is None:
            event = Event(self.device)
        event.record(self)
        return event

    @property
    def _as_parameter_(self):
        # ctypes: the raw stream handle (0, the null stream, for a synchronous device)
        import ctypes
        return ctypes.c_void_p(getattr(self.stream_base, "ptr", 0))

    def __enter__(self):
        guard = stream_guard(self)
        guard.__enter__()
        self._guards.append(guard)
        return self

    def __exit__(self, *exc):
        self._guards.pop().__exit__(*exc)

    def __eq__(self, other):
        if not isinstance(other, Stream):
            return NotImplemented
        return self.device is other.device and _same_base(self.stream_base, other.stream_base)

    def __hash__(self):
        return hash((self.device, getattr(self.stream_base, "ptr", id(self.stream_base))))

    def __repr__(self):
        return f"Stream(device={self.device}, {self.stream_base!r})"


def _same_base(a, b) -> bool:
    if a is b:
        return True
    ptr_a, ptr_b = getattr(a, "ptr", None), getattr(b, "ptr", None)
    return ptr_a is not None and ptr_a == ptr_b


class Event:
    """A point in a stream's work (Paddle's paddle.device.Event): record() it on a stream, then query(),
    synchronize(), make another stream wait_event() for it, or time two events with elapsed_time() (both
    created with enable_timing=True). On the cpu an event is complete when recorded."""

    def __init__(self, device=None, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.device = _place_of(device, "Event(): device")
        self.enable_timing = bool(enable_timing)
        self.event_base = self.device.backend.event(self.device.index, bool(enable_timing), bool(blocking),
                                                    bool(interprocess))

    def record(self, stream: Stream | None = None) -> None:
        """Record this event on `stream` (default: the current stream of the event's device)."""
        if stream is None:
            stream = current_stream(self.device)
        elif not isinstance(stream, Stream):
            raise TypeError(f"Event.record(): expected a Stream or None, got {type(stream).__name__}")
        if stream.device is not self.device:
            raise ValueError(f"Event.record(): the event belongs to {self.device} but the stream to "
                             f"{stream.device}; create the event on the stream's device")
        self.event_base.record(stream.stream_base)

    def query(self) -> bool:
        """Whether the work recorded before this event is done (True for an event never recorded)."""
        return bool(self.event_base.query())

    def synchronize(self) -> None:
        """Wait until the work recorded before this event is done."""
        self.event_base.synchronize()

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between this event and `end_event` (both recorded, both with enable_timing=True)."""
        if not isinstance(end_event, Event):
            raise TypeError(f"Event.elapsed_time(): expected an Event, got {type(end_event).__name__}")
        if end_event.device.backend is not self.device.backend:
            raise ValueError(f"Event.elapsed_time(): the events belong to different device types "
                             f"({self.device} and {end_event.device})")
        return float(self.event_base.elapsed_time(end_event.event_base))

    def __repr__(self):
        return f"Event(device={self.device}, {self.event_base!r})"


def current_stream(device=None) -> Stream:
    """The stream work on `device` (default: the current device) is queued on now."""
    place = _place_of(device, "current_stream(): device")
    return Stream(place, stream_base=place.backend.current_stream(place.index))


def set_stream(stream: Stream) -> Stream:
    """Make `stream` the current stream of its device; returns the stream that was current."""
    if not isinstance(stream, Stream):
        raise TypeError(f"set_stream(): expected a Stream, got {type(stream).__name__}")
    place = stream.device
    previous = current_stream(place)
    place.backend.set_stream(stream.stream_base, place.index)
    return previous


class stream_guard:  # noqa: N801 - Paddle's name
    """`with stream_guard(stream):` queues the work in the block on `stream` (None: changes nothing). When
    the stream's device is not the current device, the block also runs with it as the current device."""

    def __init__(self, stream: Stream | None = None):
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"stream_guard(): expected a Stream or None, got {type(stream).__name__}")
        self.stream = stream
        self._previous_place = self._previous_stream = None

    def __enter__(self):
        if self.stream is None:
            return None
        place = self.stream.device
        if default_place() is not place:
            self._previous_place = default_place()
            set_device(place)
        self._previous_stream = set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return
        set_stream(self._previous_stream)
        if self._previous_place is not None:
            set_device(self._previous_place)
            self._previous_place = None
