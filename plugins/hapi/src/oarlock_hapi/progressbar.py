"""The progress bar ProgBarLogger draws, in Paddle 3.2's format (paddle/hapi/progressbar.py).

verbose=1 redraws one line per epoch: `step  3/10 [======>.......] - loss: 0.6931 - acc: 0.5000 - ETA: 2s
- 12ms/step`; verbose=2 (and 3) prints one such line (without the bar) per update. Values above 1e-3 print with
4 decimals, smaller ones in scientific notation, lists as their elements in turn."""

from __future__ import annotations

import os
import shutil
import sys
import time

import numpy as np


def format_value(value) -> str:
    """One logged value as Paddle prints it."""
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype in (np.float32, np.float64):
        value = value.item()
    if isinstance(value, (float, np.float32, np.float64)):
        return f"{value:.4f}" if abs(value) > 1e-3 else f"{value:.4e}"
    return f"{value}"


def format_values(values) -> str:
    text = ""
    for key, value in values:
        text += f" - {key}:"
        for item in (value if isinstance(value, list) else [value]):
            text += " " + format_value(item)
    return text


def format_eta(seconds: float) -> str:
    if seconds > 3600:
        return f"{seconds // 3600}:{(seconds % 3600) // 60:02}:{seconds % 60:02}"
    if seconds > 60:
        return f"{seconds // 60}:{seconds % 60:02}"
    return f"{seconds}s"


def format_rate(seconds_per_unit: float, unit: str) -> str:
    if seconds_per_unit >= 1 or seconds_per_unit == 0:
        return f" - {seconds_per_unit:.0f}s/{unit}"
    if seconds_per_unit >= 1e-3:
        return f" - {seconds_per_unit * 1e3:.0f}ms/{unit}"
    return f" - {seconds_per_unit * 1e6:.0f}us/{unit}"


class ProgressBar:
    """A bar over `num` steps (None: unknown length) written to `file`."""

    def __init__(self, num=None, width=30, verbose=1, start=True, file=None, name="step"):
        if num is not None and (not isinstance(num, int) or num <= 0):
            raise TypeError(f"ProgressBar(): argument 'num' must be None or an int > 0, got {num!r}")
        terminal_width = shutil.get_terminal_size().columns or 80
        self._width = min(width, min(int(terminal_width * 0.6), terminal_width - 50))
        self._num = num
        self._verbose = verbose
        self.file = file if file is not None else sys.stdout
        self.name = name
        self._total_width = 0
        self._start = time.time() if start else 0.0
        # redraw in place on terminals and notebooks; Paddle's test ('posix' in sys.modules) is true on
        # every POSIX system, so it redraws with '\r' there too, and so do we
        self._dynamic_display = ((hasattr(self.file, "isatty") and self.file.isatty()) or "ipykernel" in sys.modules
                                 or os.name == "posix" or "PYCHARM_HOSTED" in os.environ)

    def start(self):
        self.file.flush()
        self._start = time.time()

    def update(self, current_num, values=()):
        """Show step `current_num` with `values` ([(name, value or list of values)])."""
        per_unit = (time.time() - self._start) / current_num if current_num else 0.0
        rate = format_rate(per_unit, self.name)
        if self._verbose == 1:
            self._draw_bar(current_num, values, per_unit, rate)
        elif self._verbose in (2, 3):
            if self._num:
                digits = int(np.log10(self._num)) + 1
                count = f"{self.name} {current_num:{digits}d}/{self._num}"
            else:
                count = f"{self.name} {current_num:3}"
            self.file.write(count + format_values(values) + rate + "\n")
            self.file.flush()

    def _draw_bar(self, current_num, values, per_unit, rate):
        previous_width = self._total_width
        self.file.write("\b" * previous_width + "\r" if self._dynamic_display else "\n")
        if self._num is not None:
            digits = int(np.log10(self._num)) + 1
            bar = f"{self.name} {current_num:{digits}d}/{self._num} ["
            filled = int(self._width * float(current_num) / self._num)
            if filled > 0:
                bar += "=" * (filled - 1) + (">" if current_num < self._num else "=")
            bar += "." * (self._width - filled) + "]"
        else:
            bar = f"{self.name} {current_num:3}"
        info = format_values(values)
        if self._num is not None and current_num < self._num:
            info += " - ETA: " + format_eta(per_unit * (self._num - current_num))
        info += rate
        self._total_width = len(bar) + len(info)
        if previous_width > self._total_width:
            info += " " * (previous_width - self._total_width)
        if self._num is None or current_num >= self._num:
            info += "\n"
        self.file.write(bar + info)
        self.file.flush()
