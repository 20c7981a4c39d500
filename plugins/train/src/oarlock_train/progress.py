"""A small progress bar on stderr: step, loss, tokens per second and time left.

On a terminal it redraws one line (at most ten times a second, so drawing never
costs a measurable share of a step); when stderr is a file or a pipe it prints a
plain line every `log_every` steps instead, so logs stay readable.
"""

from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class ProgressBar:
    def __init__(self, total: int, start: int = 0, stream=None, width: int = 24, log_every: int = 50,
                 min_interval: float = 0.1):
        self.total, self.start, self.step = total, start, start
        self.stream = stream if stream is not None else sys.stderr
        self.width, self.log_every, self.min_interval = width, log_every, min_interval
        self.interactive = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.perf_counter()
        self._last_draw = float("-inf")  # the first update always draws
        self.tokens = 0
        self.text = ""

    def update(self, step: int, loss: float, tokens: int, extra: str = "") -> None:
        """Record that `step` finished with `loss` after processing `tokens` more tokens."""
        self.step, self.tokens = step, self.tokens + tokens
        now = time.perf_counter()
        elapsed = now - self.t0
        rate = self.tokens / elapsed if elapsed > 0 else 0.0
        done = step - self.start
        left = (self.total - step) * elapsed / done if done else 0.0
        filled = int(self.width * step / self.total) if self.total else self.width
        bar = "#" * filled + "." * (self.width - filled)
        self.text = (f"step {step}/{self.total} [{bar}] loss {loss:.4f} | {rate:,.0f} tok/s | "
                     f"{_clock(elapsed)} elapsed, {_clock(left)} left{extra}")
        if self.interactive:
            if now - self._last_draw >= self.min_interval or step == self.total:
                self._last_draw = now
                self.stream.write("\r" + self.text + "\033[K")
                self.stream.flush()
        elif step % self.log_every == 0 or step == self.total or step == self.start + 1:
            self.stream.write(self.text + "\n")
            self.stream.flush()

    def message(self, text: str) -> None:
        """Print a line without garbling the bar (the bar is redrawn on the next update)."""
        if self.interactive:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.interactive and self.text:
            self.stream.write("\n")
            self.stream.flush()
