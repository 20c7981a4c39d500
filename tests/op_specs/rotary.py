"""Spec for the rotary family (oarlock_ops/rotary.py): fused_rotary_embedding, the rotation and (transpose=True)
its transpose, with cos and sin broadcasting against x the ways a model uses them."""

import numpy as np

import oarlock.nn.functional as F
from op_specs.base import Case, In, OpSpec


def _swap(a):
    half = a.shape[-1] // 2
    return np.concatenate([a[..., half:], a[..., :half]], axis=-1)


def rotary_ref(x, cos, sin, transpose=False):
    return x * cos + (_swap(x * sin) if transpose else _swap(x) * sin)


SPECS = [
    OpSpec("fused_rotary_embedding", [
        Case([In((2, 3, 2, 4)), In((1, 3, 1, 4)), In((1, 3, 1, 4))], name="bthd"),
        Case([In((2, 3, 2, 4)), In((1, 3, 1, 4)), In((1, 3, 1, 4))], {"transpose": True}, name="transpose"),
        Case([In((3, 6)), In((3, 6)), In((3, 6))], name="same_shape"),
        Case([In((2, 3, 4)), In((4,)), In((3, 1))], name="mixed_broadcast"),
        Case([In((2,)), In((2,)), In((2,))], name="one_pair"),
        Case([In((2, 3, 2, 8)), In((2, 3, 2, 8)), In((1, 3, 2, 8))], name="full_tables"),
        Case([In((2, 5, 3, 6)), In((5, 1, 6)), In((5, 1, 6))], {"transpose": True}, name="tables_without_batch"),
        Case([In((0, 4)), In((4,)), In((4,))], name="empty"),
    ], ref=rotary_ref, call=F.fused_rotary_embedding),
]
