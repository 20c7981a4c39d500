"""Rank-prefixed output for `oarlock launch`: two FIFOs per rank in the launch directory and one
thread per FIFO printing each line as "[rank R] line" on the launcher's stdout or stderr.

The ranks connect their fds 1 and 2 to the FIFOs (oarlock_xccl.rank), so C-level
output, child processes and output written just before os._exit all arrive.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from oarlock_xccl import failure

PUMP_CLOSE_S = 5.0      # how long the output threads may take to drain once the job has ended
_LINE_LIMIT = 1 << 16   # a longer line without newline is printed in pieces


class FifoError(Exception):
    """mkfifo failed in the launch directory (the cause is the OSError)."""

class OutputPump:
    """Two FIFOs per rank in the launch directory and one thread per FIFO printing its lines with the rank prefix."""

    _write_lock = threading.Lock()  # one line at a time, whichever stream

    def __init__(self, directory: str, nproc: int):
        self.fifos = [(rank, stream, failure.launch_file(directory, rank, kind))
                      for rank in range(nproc) for kind, stream in ((failure.OUT, "stdout"), (failure.ERR, "stderr"))]
        self.threads: list[tuple[threading.Thread, str]] = []

    def start(self) -> None:
        for rank, stream, path in self.fifos:
            try:
                os.mkfifo(path, 0o600)
            except OSError as exc:
                self.close()  # the threads already waiting for their FIFOs
                raise FifoError() from exc
            thread = threading.Thread(target=self._pump, args=(rank, stream, path), daemon=True,
                                      name=f"oarlock-launch-rank{rank}-{stream}")
            thread.start()
            self.threads.append((thread, path))

    def close(self, timeout: float = PUMP_CLOSE_S) -> None:
        """Wait for the threads to print what is left; release those still waiting for a rank that never started."""
        deadline = time.monotonic() + timeout
        for thread, path in self.threads:
            while thread.is_alive() and time.monotonic() < deadline:
                _release_reader(path)
                thread.join(0.05)

    def _pump(self, rank: int, stream: str, path: str) -> None:
        prefix = f"[rank {rank}] "
        fd = os.open(path, os.O_RDONLY)  # waits for the rank (or _release_reader) to open the write end
        pending = b""
        with open(fd, "rb", buffering=0) as fifo:
            while chunk := fifo.read(_LINE_LIMIT):
                *lines, pending = (pending + chunk).split(b"\n")
                if len(pending) >= _LINE_LIMIT:
                    lines.append(pending)
                    pending = b""
                self._print(stream, prefix, lines)
        if pending:  # the last line had no newline
            self._print(stream, prefix, [pending])

    @classmethod
    def _print(cls, stream: str, prefix: str, lines: list[bytes]) -> None:
        if not lines:
            return
        text = "".join(f"{prefix}{line.decode('utf-8', errors='replace')}\n" for line in lines)
        with cls._write_lock:
            out = getattr(sys, stream)
            if out is None:
                return
            try:
                out.write(text)
                out.flush()
            except UnicodeEncodeError:
                out.write(text.encode(out.encoding or "ascii", errors="replace").decode(out.encoding or "ascii"))
                out.flush()
            except (OSError, ValueError):
                pass  # our stdout is gone (closed pipe); keep draining so the rank never blocks on a full FIFO


def launcher_line(text: str) -> None:
    """One line of the launcher's own on stderr, whole: one write, under the lock the rank pumps write with
    (print() writes the newline apart, so a rank's relayed line could land between the two)."""
    with OutputPump._write_lock:
        try:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # stderr is gone: nothing to tell


def _release_reader(path: str) -> None:
    """Open and close the FIFO's write end, which ends a reader waiting in open() (it then reads EOF).

    ENXIO means no reader has the FIFO open right now: nothing to release (yet)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass

