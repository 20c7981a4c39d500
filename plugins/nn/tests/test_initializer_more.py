"""nn.initializer.Bilinear (the same weights as Paddle 3.2's, its float-index quirk included) and
set_global_initializer (it replaces the layers' defaults, a ParamAttr initializer still wins, None
restores), against real Paddle."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn


@pytest.mark.parametrize("shape", [[2, 3, 4, 4], [1, 1, 3, 3], [3, 2, 5, 5], [1, 2, 1, 1]])
def test_bilinear_matches_paddle(paddle, shape):
    theirs = paddle.create_parameter(shape, "float32",
                                     attr=paddle.ParamAttr(initializer=paddle.nn.initializer.Bilinear()))
    ours = nn.initializer.Bilinear()(oarlock.zeros(shape))
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(ValueError, match="Bilinear: the kernel must be square"):
        nn.initializer.Bilinear()(oarlock.zeros([1, 1, 2, 3]))


def test_set_global_initializer_matches_paddle(paddle):
    try:
        paddle.nn.initializer.set_global_initializer(paddle.nn.initializer.Constant(0.5),
                                                     paddle.nn.initializer.Constant(-1.0))
        nn.initializer.set_global_initializer(nn.initializer.Constant(0.5), nn.initializer.Constant(-1.0))
        for make in (lambda m: m.Linear(2, 3), lambda m: m.Conv2D(2, 3, 3), lambda m: m.LayerNorm(4),
                     lambda m: m.Linear(2, 3, weight_attr=m.initializer.Constant(2.0) if m is nn else
                                        paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(2.0)))):
            theirs, ours = make(paddle.nn), make(nn)
            for (name, a), (_, b) in zip(theirs.state_dict().items(), ours.state_dict().items()):
                np.testing.assert_array_equal(b.numpy(), a.numpy(), err_msg=name)
    finally:
        paddle.nn.initializer.set_global_initializer(None)
        nn.initializer.set_global_initializer(None)
    assert not np.all(nn.Linear(4, 4).weight.numpy() == 0.5)   # the default (Xavier) again
    with pytest.raises(TypeError, match="set_global_initializer: weight_init must be an Initializer or None"):
        nn.initializer.set_global_initializer("xavier")
