"""assert_same: two loaded objects have the same structure, types, keys, order and bit-equal arrays
(the comparison the safe-load and Paddle-file tests share)."""

from __future__ import annotations

import numpy as np


def assert_same(ours, theirs, where: str = "", leaf=None) -> None:
    """Equal structure and types, bit-equal arrays of equal dtype and shape, NaN equal to NaN.
    `leaf(ours, theirs, where)` may handle a pair itself (returning True), e.g. framework Tensors."""
    if leaf is not None and leaf(ours, theirs, where):
        return
    assert type(ours) is type(theirs), f"{where}: {type(ours).__name__} vs {type(theirs).__name__}"
    if isinstance(theirs, np.ndarray):
        assert (ours.dtype, ours.shape, ours.tobytes()) == (theirs.dtype, theirs.shape, theirs.tobytes()), where
    elif isinstance(theirs, dict):
        assert list(ours) == list(theirs), where
        for key in theirs:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]", leaf)
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{where}[{i}]", leaf)
    else:
        assert ours == theirs or (ours != ours and theirs != theirs), where  # NaN equals NaN here
