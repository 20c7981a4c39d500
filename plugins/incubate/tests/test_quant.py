"""oarlock.nn.quant: weight_quantize's "llm.int8" bit for bit against real Paddle 3.2's CPU kernel (weights and
scales); the weight-only int8 / int4 round trip within half a quantization step; weight_only_linear against
float64 numpy over the dequantized weight (and x's gradient); llm_int8_linear against the float matmul within the
quantization error, and exactly the dequantized matmul when every feature is an outlier."""

import numpy as np
import pytest

import oarlock
from oarlock.nn.quant import llm_int8_linear, weight_dequantize, weight_only_linear, weight_quantize


def test_llm_int8_matches_paddle_bit_for_bit(paddle):
    from paddle.nn.quant import weight_quantize as paddle_quantize
    w = np.random.default_rng(0).standard_normal([64, 48]).astype("float16")
    q, s = paddle_quantize(paddle.to_tensor(w), algo="llm.int8", arch=80)    # arch: Paddle's CPU kernel asks
    oq, os_ = weight_quantize(oarlock.to_tensor(w), algo="llm.int8")
    assert oq.dtype == oarlock.int8 and list(oq.shape) == [48, 64]
    np.testing.assert_array_equal(oq.numpy(), q.numpy())
    np.testing.assert_array_equal(os_.numpy(), s.numpy())


@pytest.mark.parametrize("algo, rows", [("weight_only_int8", 33), ("weight_only_int4", 17)])
def test_weight_only_round_trip_within_half_a_step(algo, rows):
    w = np.random.default_rng(1).standard_normal([40, 33]).astype("float32")
    q, s = weight_quantize(oarlock.to_tensor(w), algo=algo)
    assert list(q.shape) == [rows, 40] and list(s.shape) == [33]
    back = weight_dequantize(q, s, algo=algo, out_dtype="float32").numpy()
    assert back.shape == w.shape
    assert np.all(np.abs(back - w) <= s.numpy()[None, :] / 2 + 1e-6)
    assert np.abs(back - w).max() > 0


def test_weight_only_linear_is_the_dequantized_matmul():
    rng = np.random.default_rng(2)
    w, x, b = rng.standard_normal([16, 8]), rng.standard_normal([3, 16]), rng.standard_normal([8])
    q, s = weight_quantize(oarlock.to_tensor(w.astype("float32")), algo="weight_only_int8")
    deq = weight_dequantize(q, s, out_dtype="float32").numpy().astype(np.float64)
    ox = oarlock.to_tensor(x.astype("float32"))
    ox.stop_gradient = False
    out = weight_only_linear(ox, q, oarlock.to_tensor(b.astype("float32")), weight_scale=s)
    np.testing.assert_allclose(out.numpy(), x @ deq + b, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    np.testing.assert_allclose(ox.grad.numpy(), np.ones([3, 8]) @ deq.T, rtol=1e-5, atol=1e-5)


def test_llm_int8_linear_decomposes_outliers():
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal([32, 12]), rng.standard_normal([4, 32])
    x[:, 5] *= 20                                                  # one outlier feature
    q, s = weight_quantize(oarlock.to_tensor(w.astype("float16")), algo="llm.int8")
    deq = q.numpy().astype(np.float64).T * s.numpy()[None, :]
    ox = oarlock.to_tensor(x.astype("float32"))
    all_float = llm_int8_linear(ox, q, weight_scale=s, threshold=0.0).numpy()
    np.testing.assert_allclose(all_float, x @ deq, rtol=1e-5, atol=1e-5)
    mixed = llm_int8_linear(ox, q, weight_scale=s, threshold=6.0).numpy()
    exact = x @ w
    assert np.abs(mixed - exact).max() <= 0.03 * np.abs(exact).max()
    assert not np.allclose(mixed, all_float, rtol=0, atol=1e-7)     # the int8 part really is quantized


def test_quant_bad_input_names_the_argument():
    w = oarlock.ones([4, 4])
    with pytest.raises(NotImplementedError, match=r"weight_quantize\(\): argument 'arch' = 80"):
        weight_quantize(w, arch=80)
    with pytest.raises(ValueError, match=r"weight_quantize\(\): argument 'algo' = 'int3'"):
        weight_quantize(w, algo="int3")
    with pytest.raises(ValueError, match=r"weight_quantize\(\): argument 'group_size' = 32; accepted: -1"):
        weight_quantize(w, group_size=32)
    with pytest.raises(ValueError, match=r"weight_only_linear\(\): argument 'weight_scale' is None"):
        weight_only_linear(w, w)
