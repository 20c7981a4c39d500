"""Specs for the paddle_math family: the elementary functions it adds, atan2, flip, roll and einsum."""

from __future__ import annotations

import numpy as np

from op_specs.base import ALL, ALL_REAL, Case, In, OpSpec
from op_specs.elementwise import FLOAT_RESULT, UNARY_CASES, unary_cases

UNIT = unary_cases(domain=(-0.9, 0.9), int_range=(0, 1))           # asin, acos, atanh: |x| < 1
POSITIVE = unary_cases(domain=(0.1, 3.0), int_range=(1, 6))        # log2, log10
ABOVE_ONE = unary_cases(domain=(1.1, 3.0), int_range=(2, 6))       # acosh: x > 1
FLOAT_FUNCTIONS = [
    ("tan", unary_cases(domain=(-1.2, 1.2), int_range=(-1, 2)), np.tan), ("asin", UNIT, np.arcsin),
    ("acos", UNIT, np.arccos), ("atan", UNARY_CASES, np.arctan), ("sinh", UNARY_CASES, np.sinh),
    ("cosh", UNARY_CASES, np.cosh), ("asinh", UNARY_CASES, np.arcsinh), ("acosh", ABOVE_ONE, np.arccosh),
    ("atanh", UNIT, np.arctanh), ("expm1", UNARY_CASES, np.expm1), ("log2", POSITIVE, np.log2),
    ("log10", POSITIVE, np.log10),
]


def _einsum(*operands, equation):
    import oarlock
    return oarlock.einsum(equation, *operands)


EINSUM_CASES = [
    Case([In((2, 3)), In((4, 3))], {"equation": "ij,kj->ik"}, name="matmul_t"),
    Case([In((2, 3)), In((3, 4))], {"equation": "ij,jk"}, name="implicit"),
    Case([In((2, 2, 3)), In((2, 3, 4))], {"equation": "...ij,...jk->...ik"}, name="ellipsis"),
    Case([In((2, 3, 4))], {"equation": "bij->j"}, name="sum_only_letters"),
    Case([In((2, 3)), In((3, 4)), In((4, 2))], {"equation": "ij,jk,kl->il"}, name="three"),
    Case([In((3,)), In((2,))], {"equation": "i,j->ji"}, name="outer"),
    Case([In((2, 3))], {"equation": "ij->ji"}, name="transpose"),
    Case([In((0, 3)), In((3, 2))], {"equation": "ij,jk->ik"}, name="empty"),
    Case([In((2, 3, 4, 5)), In(())], {"equation": "abcd,->dbca"}, name="0d_operand"),
    Case([In((3,)), In((3,)), In((3,))], {"equation": "i,i,i->i"}, name="hadamard_three"),
    Case([In((2, 3, 4)), In((4, 5)), In((3, 5))], {"equation": "abc,cd,bd->a"}, name="batched_chain"),
    Case([In((2, 3, 2, 4)), In((2, 3, 5, 4))], {"equation": "bhid,bhjd->bhij"}, name="attention_scores"),
]

SPECS = [
    *(OpSpec(name, cases, ref=ref, dtypes=ALL_REAL, **FLOAT_RESULT) for name, cases, ref in FLOAT_FUNCTIONS),
    OpSpec("atan2", [Case([In((3, 4)), In((3, 4), requires_nonzero=True)], name="same"),
                     Case([In((3, 4)), In((4,), requires_nonzero=True)], name="broadcast"),
                     Case([In(()), In((), requires_nonzero=True)], name="0d"),
                     Case([In((0, 3)), In((0, 3))], name="empty")],
           ref=np.arctan2, dtypes=ALL_REAL, **FLOAT_RESULT),
    OpSpec("flip", [Case([In((3, 4))], {"axis": [1]}, name="one"), Case([In((2, 3, 4))], {"axis": [0, 2]}, name="two"),
                    Case([In((3, 4))], {"axis": -1}, name="int"), Case([In((0, 3))], {"axis": [0]}, name="empty")],
           ref=lambda x, axis: np.flip(x, axis), dtypes=ALL),
    OpSpec("roll", [Case([In((3, 4))], {"shifts": 1, "axis": 1}, name="one"),
                    Case([In((3, 4))], {"shifts": [1, -2], "axis": [0, 1]}, name="two"),
                    Case([In((3, 4))], {"shifts": 5}, name="flat"), Case([In((0, 3))], {"shifts": 1, "axis": 1},
                                                                          name="empty")],
           ref=lambda x, shifts, axis=None: np.roll(x, shifts, axis if axis is None or isinstance(axis, int)
                                                    else tuple(axis)), dtypes=ALL),
    OpSpec("einsum", EINSUM_CASES, ref=lambda *operands, equation: np.einsum(equation, *operands),
           dtypes=ALL_REAL, call=_einsum),
]
