"""Paddle's paddle.nn.layer module paths (what PaddleFormers imports): the objects of oarlock.nn, and
_convert_attention_mask / in_declarative_mode against real Paddle 3.2's own."""

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
from oarlock.nn.layer.layers import Layer, in_declarative_mode
from oarlock.nn.layer.transformer import MultiHeadAttention, Transformer, _convert_attention_mask


def test_paths_hold_the_oarlock_nn_objects():
    assert Layer is nn.Layer and Transformer is nn.Transformer and MultiHeadAttention is nn.MultiHeadAttention


@pytest.mark.parametrize("mask", [np.array([[True, False, True]]), np.array([[1, 0, 1]], dtype="int64"),
                                  np.array([[0.0, -np.inf, 0.5]], dtype="float64")])
def test_convert_attention_mask_matches_paddle(paddle, mask):
    from paddle.nn.layer.layers import in_declarative_mode as paddle_mode
    from paddle.nn.layer.transformer import _convert_attention_mask as paddle_convert
    want = paddle_convert(paddle.to_tensor(mask), paddle.float32)
    got = _convert_attention_mask(oarlock.to_tensor(mask), oarlock.float32)
    assert got.dtype == oarlock.float32
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert _convert_attention_mask(None, oarlock.float32) is None
    assert in_declarative_mode() is paddle_mode() is False
