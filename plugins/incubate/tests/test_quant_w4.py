"""oarlock.nn.quant's group-wise scales and the w4a8 / w4afp8 algos: scales and codes against a float64 reference
of Paddle's group_wise_scale / round-half-away rule; the pure permutation of pre-quantized int4 weights undone
exactly by weight_dequantize; weight_only_linear (int4, group 128), w4a8_linear and w4afp8_linear within the error
bounds of their formats; bad algo, group_size and weights refused with the argument named."""

import os
import sys

import numpy as np
import pytest

import oarlock
from oarlock.nn.quant import (w4a8_linear, w4afp8_linear, weight_dequantize, weight_only_linear,
                              weight_quantize)

sys.path.insert(0, os.path.dirname(__file__))   # fp8_reference, next to this file
import fp8_reference as ref  # noqa: E402


def _reference_groups(w, qmax, group):
    """float64: scale [groups, n] = group absmax / qmax, q = round half away from zero of w / scale."""
    k, n = w.shape
    groups = -(-k // group)
    scale = np.stack([np.abs(w[g * group:(g + 1) * group]).max(axis=0) for g in range(groups)]) / qmax
    per_row = np.repeat(scale, group, axis=0)[:k]
    scaled = w / np.where(per_row == 0, 1, per_row)
    q = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -qmax, qmax)
    return scale.astype(np.float32), q


@pytest.mark.parametrize("algo, qmax, group", [("weight_only_int8", 127, 64), ("weight_only_int4", 7, 128),
                                               ("w4afp8", 7, 128), ("w4a8", 7, 64)])
def test_group_wise_scales_and_codes(algo, qmax, group):
    w = np.random.default_rng(0).standard_normal([300, 70]).astype(np.float32)    # k not a multiple of the group
    q, s = weight_quantize(oarlock.to_tensor(w), algo=algo, group_size=group)
    want_scale, want_q = _reference_groups(w.astype(np.float32), np.float32(qmax), group)
    np.testing.assert_allclose(s.numpy(), want_scale, rtol=1e-7)
    back = weight_dequantize(q, s, algo=algo, out_dtype="float32", group_size=group).numpy()
    np.testing.assert_allclose(back, want_q * np.repeat(s.numpy(), group, axis=0)[:300], rtol=1e-6, atol=1e-7)
    assert list(q.shape) == ([70, 300] if qmax == 127 else [35, 300])


def test_w4afp8_pure_permutation_round_trips_exactly():
    codes = np.random.default_rng(1).integers(-8, 8, [256, 33]).astype(np.int8)
    q, s = weight_quantize(oarlock.to_tensor(codes), algo="w4afp8")
    assert q.dtype == oarlock.int8 and list(q.shape) == [17, 256] and np.all(s.numpy() == 1)
    back = weight_dequantize(q, s, algo="w4afp8", out_dtype="float32").numpy()
    np.testing.assert_array_equal(back, codes)
    q2, s2 = weight_quantize(oarlock.to_tensor(codes), algo="w4a8", group_size=128)
    assert list(s2.shape) == [2, 33]
    np.testing.assert_array_equal(weight_dequantize(q2, s2, algo="w4a8", out_dtype="float32", group_size=128)
                                  .numpy(), codes)


def test_quantized_linears_within_format_bounds():
    rng = np.random.default_rng(2)
    w, x, b = rng.standard_normal([256, 96]), rng.standard_normal([4, 5, 256]), rng.standard_normal([96])
    ox = oarlock.to_tensor(x.astype(np.float32))
    ob = oarlock.to_tensor(b.astype(np.float32))
    q, s = weight_quantize(oarlock.to_tensor(w.astype(np.float32)), algo="weight_only_int4", group_size=128)
    wd = weight_dequantize(q, s, algo="weight_only_int4", out_dtype="float32", group_size=128).numpy()
    assert np.all(np.abs(wd - w) <= np.repeat(s.numpy(), 128, axis=0) / 2 + 1e-6)    # half an int4 step
    out = weight_only_linear(ox, q, ob, weight_scale=s, weight_dtype="int4", group_size=128).numpy()
    np.testing.assert_allclose(out, x @ wd + b, rtol=1e-5, atol=1e-4)
    flat = x.reshape(-1, 256)
    for fn, algo in ((w4afp8_linear, "w4afp8"), (w4a8_linear, "w4a8")):
        q, s = weight_quantize(oarlock.to_tensor(w.astype(np.float32)), algo=algo, group_size=128)
        wd = weight_dequantize(q, s, algo=algo, out_dtype="float32", group_size=128).numpy().astype(np.float64)
        got = fn(ox, q, s, ob, group_size=128).numpy().reshape(-1, 96)
        if algo == "w4afp8":     # e4m3 per 1 x 128 block, scale amax / 448 (not a power of two)
            d = np.repeat(np.abs(flat).reshape(20, 2, 128).max(axis=2), 128, axis=1) / 448
            ex = d * ref.cast_error_bound(flat / d) + np.abs(flat) * 2.0 ** -22
        else:                    # int8 per token: half a step of absmax / 127
            ex = np.repeat(np.abs(flat).max(axis=1, keepdims=True) / 254, 256, axis=1) * (1 + 2.0 ** -20)
        err = np.abs(got - (flat @ wd + b))
        assert np.all(err <= ex @ np.abs(wd) + 1e-4) and err.max() > 1e-4


def test_bad_algo_group_size_and_weights():
    w = oarlock.ones([128, 8])
    with pytest.raises(ValueError, match=r"weight_quantize\(\): argument 'algo' = 'w4a16'; accepted: "):
        weight_quantize(w, algo="w4a16")
    with pytest.raises(ValueError, match=r"weight_quantize\(\): argument 'group_size' = 32; accepted: -1"):
        weight_quantize(w, algo="w4afp8", group_size=32)
    with pytest.raises(ValueError, match=r"group_size' = 128 with algo 'llm.int8'"):
        weight_quantize(w, algo="llm.int8", group_size=128)
    with pytest.raises(ValueError, match=r"holds values in \[-9, 7\]; accepted .* int4 values in \[-8, 7\]"):
        weight_quantize(oarlock.to_tensor(np.array([[-9, 7]], np.int8)), algo="w4afp8")
    with pytest.raises(TypeError, match=r"argument 'x' is int8 with algo 'weight_only_int8'"):
        weight_quantize(oarlock.to_tensor(np.array([[1, 2]], np.int8)))
    q, s = weight_quantize(w, algo="w4afp8", group_size=64)
    with pytest.raises(ValueError, match=r"w4afp8_linear\(\): the scale has shape \[2, 8\]; accepted with "
                                         r"group_size=128: \[1, n\]"):
        w4afp8_linear(oarlock.ones([2, 128]), q, s, group_size=128)
    with pytest.raises(ValueError, match=r"w4afp8_linear\(\): argument 'x' has shape \[2, 64\]"):
        w4afp8_linear(oarlock.ones([2, 64]), q, s, group_size=64)
