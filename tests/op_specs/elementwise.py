"""Specs for the elementwise family."""

import numpy as np

from op_specs.base import ALL, ALL_REAL, Case, In, OpSpec

BROADCAST_CASES = [
    Case([In((3, 4)), In((3, 4))], name="same"),
    Case([In((2, 3, 4)), In((4,))], name="broadcast"),
    Case([In((3, 1)), In((1, 4))], name="outer"),
    Case([In(()), In((2, 3))], name="0d"),
    Case([In((0, 3)), In((3,))], name="empty"),
]

SPECS = [
    OpSpec("add", BROADCAST_CASES, ref=np.add, dtypes=ALL_REAL),
    OpSpec("multiply", BROADCAST_CASES, ref=np.multiply, dtypes=ALL_REAL),
    OpSpec("cast", [Case([In((3, 4)), "float64"], name="to64"), Case([In((2,)), "float32"], name="to32", grad=False)],
           ref=lambda x, dtype: x.astype(dtype), dtypes=ALL, out_dtype=lambda dt, x, dtype: dtype),
]
