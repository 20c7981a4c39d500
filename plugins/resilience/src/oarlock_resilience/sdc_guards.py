"""Numeric guards of SDCMonitor: the first tensor holding inf/nan, and loss spikes beyond a robust threshold
(median + k * MAD of a sliding window of recent losses, MAD scaled to a standard deviation)."""

from __future__ import annotations

import math
from collections import deque
from statistics import NormalDist

import numpy as np

from oarlock.plugin_api import array_of

_MAD_TO_SIGMA = 1 / NormalDist().inv_cdf(0.75)   # 1.4826...: MAD * this estimates a normal sample's sigma


def first_nonfinite(tensors) -> int:
    """Index of the first tensor (None entries skipped) holding an inf or nan, or -1."""
    for i, t in enumerate(tensors):
        if t is None:
            continue
        array = array_of(t)
        if _can_be_nonfinite(array.dtype) and not bool(np.isfinite(array).all() if isinstance(array, np.ndarray)
                                                         else _module_of(array).isfinite(array).all()):
            return i
    return -1


def _can_be_nonfinite(dtype) -> bool:
    """Floating and complex dtypes, ml_dtypes' bfloat16 and float8 included (numpy gives those kind "V")."""
    return dtype.kind in "fcV"


def _module_of(array):
    import cupy   # the only other array module oarlock's backends use
    return cupy


class LossSpikeGuard:
    """Flags a loss above median + threshold * MAD * 1.4826 (the MAD scaled to a sigma) of the last `window`
    accepted losses, once at least `warmup` of them are in; a loss that is not finite is always flagged. A
    flagged loss does not enter the window, so one spike does not raise the bar for the next. The MAD has a
    floor (1e-3 of the median's magnitude, or 1e-12) so that a run of nearly equal losses does not make every
    wobble a spike."""

    def __init__(self, window: int = 50, threshold: float = 10.0, warmup: int = 10):
        self.window, self.threshold, self.warmup = window, threshold, warmup
        self.recent: deque = deque(maxlen=window)

    def verdict(self, loss: float) -> tuple[str | None, str]:
        """(None, "") for an ordinary loss, else ("nonfinite_loss" or "loss_spike", the evidence in words)."""
        if not math.isfinite(loss):
            return "nonfinite_loss", f"loss {loss}"
        limit = self.limit()
        if limit is not None and loss > limit:
            return "loss_spike", f"loss {loss:.6g} > limit {limit:.6g} (median + {self.threshold:g} * MAD over " \
                                 f"the last {len(self.recent)} losses)"
        return None, ""

    def limit(self) -> float | None:
        """The current spike threshold, or None during warm-up."""
        if len(self.recent) < self.warmup:
            return None
        values = np.fromiter(self.recent, dtype=np.float64)
        median = float(np.median(values))
        mad = float(np.median(np.abs(values - median))) * _MAD_TO_SIGMA
        return median + self.threshold * max(mad, 1e-3 * abs(median), 1e-12)

    def accept(self, loss: float) -> None:
        self.recent.append(float(loss))
