"""What EarlyStopping and ReduceLROnPlateau share: reading the monitored value from an evaluation's logs, and
the direction of improvement ('auto' means larger is better for names containing 'acc')."""

from __future__ import annotations

import numbers
import warnings


def resolve_mode(owner: str, mode: str, monitor: str) -> str:
    """'min' or 'max'; an unknown mode warns and falls back to 'auto', as in Paddle."""
    if mode not in ("auto", "min", "max"):
        warnings.warn(f"{owner} mode {mode} is unknown, fallback to auto mode.", stacklevel=3)
        mode = "auto"
    if mode == "auto":
        return "max" if "acc" in monitor else "min"
    return mode


def monitored_value(owner: str, monitor: str, logs):
    """The monitored number from evaluation logs (the first element of a list), or None (with a warning when the
    name is absent)."""
    if logs is None or monitor not in logs:
        warnings.warn(f"Monitor of {owner} should be loss or metric name.", stacklevel=3)
        return None
    current = logs[monitor]
    if isinstance(current, (list, tuple)):
        return current[0]
    if isinstance(current, numbers.Number):
        return current
    return None
