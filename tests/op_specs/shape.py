"""Specs for the shape family."""

import numpy as np

from op_specs.base import ALL, Case, In, OpSpec

SPECS = [
    OpSpec("reshape", [
        Case([In((3, 4)), [2, 6]], name="2d"),
        Case([In((3, 4)), [-1]], name="flat"),
        Case([In(()), [1, 1]], name="0d"),
        Case([In((0, 4)), [4, 0]], name="empty"),
    ], ref=lambda x, shape: np.reshape(x, shape), dtypes=ALL),
    OpSpec("unsqueeze", [
        Case([In((3, 4)), 0], name="front"),
        Case([In((3, 4)), [-1, 1]], name="two"),
        Case([In(()), 0], name="0d"),
    ], ref=lambda x, axis: np.expand_dims(x, tuple(np.atleast_1d(axis))), dtypes=ALL),
    OpSpec("expand", [
        Case([In((3, 1)), [2, 3, 4]], name="bcast"),
        Case([In((4,)), [3, -1]], name="minus1"),
        Case([In(()), [2, 2]], name="0d"),
    ], ref=lambda x, shape: np.broadcast_to(x, [x.shape[i - (len(shape) - x.ndim)] if s == -1 else s
                                               for i, s in enumerate(shape)]), dtypes=ALL),
]
