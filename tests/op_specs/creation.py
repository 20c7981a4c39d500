"""Specs for the creation family."""

import numpy as np

from op_specs.base import ALL, Case, In, OpSpec


def _check_to_tensor(paddle):
    assert paddle.to_tensor([1.0, 2.0]).dtype == paddle.float32
    assert paddle.to_tensor([1, 2]).dtype == paddle.int64
    assert paddle.to_tensor(np.zeros(2)).dtype == paddle.float64
    assert paddle.to_tensor(True).dtype == paddle.bool
    src = np.arange(3.0)
    t = paddle.to_tensor(src)
    src[0] = 9
    assert t.numpy()[0] == 0, "to_tensor must copy its data"


def _check_fill(paddle):
    for fn, value in ((paddle.zeros, 0), (paddle.ones, 1)):
        a, b, c = fn(2, 3), fn([2, 3]), fn(size=[2, 3], dtype="int32")
        assert a.shape == b.shape == c.shape == [2, 3] and c.dtype == paddle.int32
        assert (a.numpy() == value).all() and a.dtype == paddle.float32
    x = paddle.to_tensor(np.ones((2, 2), np.float64))
    assert paddle.zeros_like(x).dtype == paddle.float64 and (paddle.ones_like(x, dtype="int64").numpy() == 1).all()


SPECS = [
    OpSpec("to_tensor", [], check=_check_to_tensor, grad=False),
    OpSpec("zeros", [], check=_check_fill, grad=False),
    OpSpec("ones", [], check=lambda p: None, grad=False),
    OpSpec("zeros_like", [Case([In((2, 3))])], ref=np.zeros_like, grad=False, dtypes=ALL),
    OpSpec("ones_like", [Case([In((2, 3))])], ref=np.ones_like, grad=False, dtypes=ALL),
]
