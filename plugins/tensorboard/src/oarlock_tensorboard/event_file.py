"""One TensorBoard event file, named as TensorFlow names them:

    events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n><suffix>

where n counts the files this process opened, so two writers never share a name. Records are buffered
in memory and written when max_queue of them wait, by a background thread every flush_secs, on flush()
and on close(); close() also runs when the writer is garbage-collected and at interpreter exit. One lock
guards the buffer and the file, so threads may share a writer.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
import weakref

from oarlock_tensorboard import messages
from oarlock_tensorboard.tfrecord import frame

_file_numbers = itertools.count()
_file_numbers_lock = threading.Lock()


def _next_file_number() -> int:
    with _file_numbers_lock:
        return next(_file_numbers)


class _Buffer:
    """The file and its pending records. The flush thread and the finalizer hold this object, not the
    EventFileWriter, so that an abandoned writer can still be collected (and its finalizer then closes)."""

    def __init__(self, path: str, max_queue: int):
        self.path, self.max_queue = path, max_queue
        self.file = open(path, "wb")
        self.pending: list[bytes] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.error: OSError | None = None  # a failure of the flush thread, raised by the next call

    def add(self, record: bytes) -> None:
        with self.lock:
            self._check_open()
            self.pending.append(record)
            if len(self.pending) >= self.max_queue:
                self._write()

    def flush(self) -> None:
        with self.lock:
            if self.file is not None:
                self._check_open()
                self._write()

    def flush_every(self, seconds: float) -> None:
        """The flush thread's loop, until close()."""
        while not self.closed.wait(seconds):
            try:
                self.flush()
            except OSError as exc:
                self.error = exc
                return

    def close(self) -> None:
        self.closed.set()
        with self.lock:
            if self.file is None:
                return
            try:
                self._write()
            finally:
                self.file.close()
                self.file = None

    def _check_open(self) -> None:
        if self.file is None:
            raise ValueError(f"event file {self.path} is closed")
        if self.error is not None:
            raise OSError(f"writing events to {self.path} failed in the background: {self.error}") from self.error

    def _write(self) -> None:
        if self.pending:
            data = b"".join(self.pending)
            self.pending.clear()
            self.file.write(data)
        self.file.flush()


class EventFileWriter:
    """Appends encoded Event messages to a new event file in log_dir (created if missing)."""

    def __init__(self, log_dir: str, max_queue: int = 10, flush_secs: float = 120, filename_suffix: str = ""):
        os.makedirs(log_dir, exist_ok=True)
        name = (f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}."
                f"{_next_file_number()}{filename_suffix}")
        self.log_dir = log_dir
        self._buffer = _Buffer(os.path.join(log_dir, name), max_queue)
        self._buffer.add(frame(messages.event(time.time(), file_version=messages.FILE_VERSION)))
        self._buffer.flush()  # the file is a valid, readable event file from the start
        self._close = weakref.finalize(self, self._buffer.close)
        threading.Thread(target=self._buffer.flush_every, args=(flush_secs,), daemon=True,
                         name=f"oarlock-tensorboard-flush-{name}").start()

    @property
    def path(self) -> str:
        return self._buffer.path

    @property
    def closed(self) -> bool:
        return not self._close.alive

    def add_event(self, event: bytes) -> None:
        self._buffer.add(frame(event))

    def flush(self) -> None:
        self._buffer.flush()

    def close(self) -> None:
        self._close()  # runs _buffer.close once; later calls do nothing
