"""Histograms as TensorBoard stores them (HistogramProto): statistics of all values, then buckets given
by their right edges (bucket_limit) and counts, cut to the span of the non-empty bins plus one empty
bucket on the left whose limit is the left edge of the first non-empty bin.

bins="tensorflow" are TensorFlow's default buckets, which PyTorch's SummaryWriter uses too: 0 and
+-1e-12 * 1.1**k up to 1e20, exponentially finer towards zero. Any other `bins` goes to numpy.histogram.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np


def _tensorflow_edges() -> np.ndarray:
    # grown by repeated multiplication, as TensorFlow and PyTorch do, so that the edges are bit-identical
    edges, v = [], 1e-12
    while v < 1e20:
        edges.append(v)
        v *= 1.1
    return np.array([-e for e in reversed(edges)] + [0.0] + edges)


TENSORFLOW_EDGES = _tensorflow_edges()


class Histogram(NamedTuple):
    min: float
    max: float
    num: int
    sum: float
    sum_squares: float
    bucket_limit: np.ndarray  # right edge of each bucket
    bucket: np.ndarray        # count in each bucket


def make_histogram(fn: str, values: np.ndarray, bins="tensorflow", max_bins=None) -> Histogram:
    """The histogram of `values` (float64, any shape); `fn` names the caller in errors."""
    values = values.reshape(-1)
    if values.size == 0:
        raise ValueError(f"{fn}: argument 'values' must hold at least one number, got an empty array")
    if not np.isfinite(values).all():
        bad = values.size - int(np.isfinite(values).sum())
        raise ValueError(f"{fn}: argument 'values' must be finite, got {bad} NaN or infinite among "
                         f"{values.size} values")
    if isinstance(bins, str) and bins == "tensorflow":
        bins = TENSORFLOW_EDGES
    try:
        counts, edges = np.histogram(values, bins=bins)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{fn}: argument 'bins' must be 'tensorflow', a number of bins, increasing bin "
                         f"edges or a numpy.histogram method name ('auto', 'fd', ...), got {bins!r}: {exc}") from None
    if max_bins is not None and len(counts) > max_bins:
        counts, edges = _merge_bins(counts, edges, max_bins)
    nonempty = np.flatnonzero(counts)
    if nonempty.size == 0:
        raise ValueError(f"{fn}: no value of argument 'values' (from {values.min()} to {values.max()}) falls "
                         f"within the bins, from {edges[0]} to {edges[-1]}")
    first, last = nonempty[0], nonempty[-1]
    bucket = np.concatenate([[0], counts[first:last + 1]]).astype(np.float64)
    return Histogram(min=float(values.min()), max=float(values.max()), num=values.size,
                     sum=float(values.sum()), sum_squares=float(values.dot(values)),
                     bucket_limit=edges[first:last + 2].astype(np.float64), bucket=bucket)


def _merge_bins(counts: np.ndarray, edges: np.ndarray, max_bins: int):
    """At most max_bins bins, each the sum of `group` adjacent ones (the last padded with empty bins)."""
    group = math.ceil(len(counts) / max_bins)
    padded = np.concatenate([counts, np.zeros(-len(counts) % group, counts.dtype)])
    return padded.reshape(-1, group).sum(axis=1), np.append(edges[:-1:group], edges[-1])
