"""Specs for the reduction family."""

import numpy as np

from op_specs.base import ALL, Case, In, OpSpec

SPECS = [
    OpSpec("sum", [
        Case([In((3, 4))], name="all"),
        Case([In((3, 4))], {"axis": 1}, name="axis1"),
        Case([In((2, 3, 4))], {"axis": [0, 2], "keepdim": True}, name="keepdim"),
        Case([In(())], name="0d"),
        Case([In((0, 3))], {"axis": 0}, name="empty"),
    ], ref=lambda x, axis=None, keepdim=False: np.sum(x, axis=None if axis is None else tuple(np.atleast_1d(axis)),
                                                      keepdims=keepdim), dtypes=ALL),
]
