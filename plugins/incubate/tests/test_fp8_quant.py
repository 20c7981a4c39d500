"""FP8 functions of oarlock.incubate.nn.functional against fp8_reference (a float64 reference of the documented
semantics, independent of the implementation): fp8_quant_blockwise bit for bit (both methods, every layout flag,
power-of-two or not, epsilon, zeros, all-zero blocks, inf and NaN, a subnormal block maximum, sizes that are not
multiples of 128); the saturating casts against the e4m3 / e5m2 grids; fp8_gemm_blockwise within the error bounds
derived from the formats; the fused MoE helpers against float64 (PyTorch's autograd for the SwiGLU backward); bad
arguments name the function and the argument."""

import os
import sys

import ml_dtypes
import numpy as np
import pytest

import oarlock
import oarlock.incubate.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))   # fp8_reference, next to this file
import fp8_reference as ref  # noqa: E402

from oarlock_incubate import fp8_numerics  # noqa: E402


def _bf16_input(m, k, seed=0):
    """bf16 values of several magnitudes with the edge cases planted in known blocks."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal([m, k]) * np.exp(rng.uniform(-6, 6, [m, 1]))).astype(np.float32)
    x[0, :128] = 0.0                     # an all-zero 1x128 block (amax 0 -> scale 1)
    x[1, 5] = np.inf                      # an inf: scale 0, decode inf, finite values 0, the inf NaN
    x[2, 7] = np.nan                      # a NaN: ignored by the maximum, quantizes to NaN
    x[3, :128] = 1e-37                    # block maximum so small that 448 / amax overflows: scale 2^127
    x[4, 9] = -3e38                       # saturation path and a huge block maximum
    return x.astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_saturating_cast_matches_the_format_grid(fmt):
    g = ref.grid(fmt)
    mids = (g[1:] + g[:-1]) / 2                      # exact ties: even code wins
    rng = np.random.default_rng(1)
    values = np.concatenate([g, mids, -mids, g * (1 + 2.0 ** -20), rng.standard_normal(4000) * 100,
                             [1e9, -1e9, np.inf, -np.inf, np.nan, 0.0, -0.0, 2.0 ** -30]]).astype(np.float32)
    ref.assert_codes_equal(fp8_numerics.cast(values, fmt), ref.encode(values.astype(np.float64), fmt))


@pytest.mark.parametrize("shape", [(256, 384), (200, 320)])
@pytest.mark.parametrize("method", ["1x128", "128x128"])
@pytest.mark.parametrize("pow2, eps", [(True, 0.0), (False, 0.0), (True, 1e-4)])
def test_quant_blockwise_bit_exact(shape, method, pow2, eps):
    x = _bf16_input(*shape)
    x32 = x.astype(np.float32)
    out, scale, out_t, scale_t = F.fp8_quant_blockwise(oarlock.to_tensor(x), epsilon=eps, input_transpose=True,
                                                       using_pow2_scale=pow2, quant_method=method)
    quantize = ref.quantize_rows if method == "1x128" else ref.quantize_tiles
    codes, scales = quantize(x32, eps, pow2)
    assert out.dtype == oarlock.float8_e4m3fn and scale.dtype == oarlock.float32
    ref.assert_codes_equal(out.numpy(), codes)
    np.testing.assert_array_equal(scale.numpy(), scales.T)            # output_scale_transpose=True
    if method == "1x128":
        codes_t, scales_t = ref.quantize_rows(np.ascontiguousarray(x32.T), eps, pow2)
    else:
        codes_t, scales_t = codes.T, scales.T
    ref.assert_codes_equal(out_t.numpy(), codes_t)
    np.testing.assert_array_equal(scale_t.numpy(), scales_t.T)
    plain = F.fp8_quant_blockwise(oarlock.to_tensor(x), epsilon=eps, output_scale_transpose=False,
                                  using_pow2_scale=pow2, quant_method=method)
    assert len(plain) == 2
    np.testing.assert_array_equal(plain[1].numpy(), scales)
    only = F.fp8_quant_blockwise(oarlock.to_tensor(x), epsilon=eps, input_transpose=True, using_pow2_scale=pow2,
                                 return_transpose_only=True, quant_method=method)
    assert len(only) == 2
    ref.assert_codes_equal(only[0].numpy(), codes_t)


def test_quant_edge_cases_as_paddle():
    x = _bf16_input(128, 256)
    out, scale = F.fp8_quant_blockwise(oarlock.to_tensor(x), output_scale_transpose=False)
    q, s = out.numpy().astype(np.float32), scale.numpy()
    assert s[0, 0] == 1.0 and np.all(q[0, :128] == 0)                   # zeros: scale 1
    assert np.isinf(s[1, 0]) and np.isnan(q[1, 5]) and np.all(q[1, np.r_[0:5, 6:128]] == 0)
    assert np.isnan(q[2, 7]) and np.isfinite(s[2, 0]) and np.all(np.isfinite(np.delete(q[2, :128], 7)))
    assert s[3, 0] == np.float32(2.0 ** -127)                           # 1 / 2^127
    assert 224.0 <= np.abs(q[4, :128]).max() <= 448.0                   # a power-of-two scale: within a binade
    exact, _ = F.fp8_quant_blockwise(oarlock.to_tensor(x), using_pow2_scale=False)
    assert np.abs(exact.numpy().astype(np.float32)[4, :128]).max() == 448.0
    # epsilon floors the maximum: an all-zero block gets 448 / eps (power of two)
    zero, zscale = F.fp8_quant_blockwise(oarlock.zeros([128, 128], dtype="bfloat16"), epsilon=1e-4)
    assert zscale.numpy()[0, 0] == np.float32(1 / ref.scale(0.0, 1e-4)) and not zero.numpy().astype(float).any()


def _quantized_operand(rows, k, one_d, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([rows, k]).astype(ml_dtypes.bfloat16)
    q, s = F.fp8_quant_blockwise(oarlock.to_tensor(x), quant_method="1x128" if one_d else "128x128")
    per_element = (np.repeat(s.numpy().T, 128, axis=1)[:, :k] if one_d
                   else np.repeat(np.repeat(s.numpy().T, 128, axis=0), 128, axis=1)[:rows, :k])
    return x.astype(np.float64), q, s, per_element.astype(np.float64)


@pytest.mark.parametrize("a_1d, b_1d", [(True, True), (True, False), (False, False)])
def test_gemm_blockwise_within_format_bounds(a_1d, b_1d):
    m, n, k = 130, 200, 300
    a, qa, sa, da = _quantized_operand(m, k, a_1d, 2)
    b, qb, sb, db = _quantized_operand(n, k, b_1d, 3)
    out = F.fp8_gemm_blockwise(qa, sa, qb, sb, "float32", is_a_1d_scaled=a_1d, is_b_1d_scaled=b_1d)
    assert list(out.shape) == [m, n] and out.dtype == oarlock.float32
    aq = ref.decode(qa.numpy().view(np.uint8), "e4m3") * da                  # the dequantized operands, float64
    bq = ref.decode(qb.numpy().view(np.uint8), "e4m3") * db
    got = out.numpy().astype(np.float64)
    # 1. against the float64 product of the dequantized operands: float32 accumulation only
    gamma = (128 + -(-k // 128)) * 2.0 ** -24
    assert np.all(np.abs(got - aq @ bq.T) <= gamma * (np.abs(aq) @ np.abs(bq).T) + 1e-30)
    # 2. against the unquantized float64 product: the per-element cast bounds (e4m3: half an ulp, 2^-4
    #    relative, or half the subnormal step) carried through the product, plus the accumulation
    ea = da * ref.cast_error_bound(a / da)
    eb = db * ref.cast_error_bound(b / db)
    bound = ea @ np.abs(b).T + np.abs(a) @ eb.T + ea @ eb.T + gamma * (np.abs(aq) @ np.abs(bq).T)
    err = np.abs(got - a @ b.T)
    assert np.all(err <= bound) and err.max() > 0
    # bf16 output: one more rounding (2^-8 relative); accumulate adds into out
    out_bf16 = F.fp8_gemm_blockwise(qa, sa, qb, sb, "bfloat16", is_a_1d_scaled=a_1d, is_b_1d_scaled=b_1d)
    assert np.all(np.abs(out_bf16.numpy().astype(np.float64) - got) <= 2.0 ** -8 * np.abs(got))
    acc = oarlock.ones([m, n], dtype="float32")
    F.fp8_gemm_blockwise(qa, sa, qb, sb, "float32", out=acc, accumulate=True, is_a_1d_scaled=a_1d,
                         is_b_1d_scaled=b_1d)
    np.testing.assert_allclose(acc.numpy(), got + 1, rtol=1e-6, atol=1e-6)


def test_fused_act_dequant_and_stack_transpose_quant():
    x = np.random.default_rng(4).standard_normal([256, 300]).astype(ml_dtypes.bfloat16)
    q, s = F.fp8_quant_blockwise(oarlock.to_tensor(x), output_scale_transpose=False)
    deq = F.fused_act_dequant(q, s)
    assert deq.dtype == oarlock.bfloat16 and list(deq.shape) == [256, 300]
    want = ref.decode(q.numpy().view(np.uint8), "e4m3") * np.repeat(s.numpy(), 128, axis=1)[:, :300]
    np.testing.assert_array_equal(deq.numpy().astype(np.float64), want)      # power-of-two scales: exact
    parts = [np.random.default_rng(i).standard_normal([2048, 128]).astype(ml_dtypes.bfloat16) for i in (5, 6)]
    out, scale = F.fused_stack_transpose_quant([oarlock.to_tensor(p) for p in parts], transpose=True)
    assert list(out.shape) == [256, 2048] and list(scale.shape) == [2, 16]   # Paddle's example, two experts
    codes, scales = ref.quantize_tiles(np.concatenate([p.astype(np.float32).T for p in parts]))
    ref.assert_codes_equal(out.numpy(), codes)
    np.testing.assert_array_equal(scale.numpy(), scales)
    out, scale = F.fused_stack_transpose_quant([oarlock.to_tensor(p) for p in parts], transpose=False)
    assert list(out.shape) == [4096, 128] and list(scale.shape) == [32, 1]


def test_fused_weighted_swiglu_act_quant_and_its_backward(torch):
    rng = np.random.default_rng(7)
    x = rng.standard_normal([3, 50, 512]).astype(ml_dtypes.bfloat16)
    prob = rng.uniform(0.1, 1, [3, 50]).astype(np.float32)
    q, s = F.fused_weighted_swiglu_act_quant(oarlock.to_tensor(x), oarlock.to_tensor(prob))
    assert list(q.shape) == [150, 256] and list(s.shape) == [150, 2] and q.dtype == oarlock.float8_e4m3fn
    x64 = x.astype(np.float64)
    act = (x64[..., :256] / (1 + np.exp(-x64[..., :256])) * x64[..., 256:] * prob[..., None]).reshape(150, 256)
    d = np.repeat(s.numpy(), 128, axis=1).astype(np.float64)
    err = np.abs(ref.decode(q.numpy().view(np.uint8), "e4m3") * d - act)
    assert np.all(err <= d * ref.cast_error_bound(act / d) + 1e-6 * np.abs(act))

    o1 = torch.tensor(x64.reshape(150, 512), requires_grad=True)
    p = torch.tensor(prob.reshape(150, 1).astype(np.float64), requires_grad=True)
    do2_s = rng.standard_normal([150, 256]).astype(ml_dtypes.bfloat16)
    o2_s = torch.nn.functional.silu(o1[:, :256]) * o1[:, 256:] * p
    o2_s.backward(torch.tensor(do2_s.astype(np.float64)))
    do1, probs_grad, got_o2_s = F.fused_swiglu_weighted_bwd(oarlock.to_tensor(x.reshape(150, 512)),
                                                            oarlock.to_tensor(do2_s),
                                                            oarlock.to_tensor(prob.reshape(150, 1)))
    assert do1.dtype == oarlock.bfloat16 and probs_grad.dtype == oarlock.float32 and list(probs_grad.shape) == [150, 1]
    for got, want in ((do1, o1.grad), (got_o2_s, o2_s.detach())):
        want = want.numpy()
        assert np.all(np.abs(got.numpy().astype(np.float64) - want) <= 2.0 ** -8 * np.abs(want) + 1e-5)
    np.testing.assert_allclose(probs_grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_bad_arguments_name_the_function_and_argument():
    x = oarlock.ones([128, 128], dtype="bfloat16")
    with pytest.raises(ValueError, match=r"fp8_quant_blockwise\(\): argument 'quant_method' = '2x128'"):
        F.fp8_quant_blockwise(x, quant_method="2x128")
    with pytest.raises(ValueError, match=r"fp8_quant_blockwise\(\): float8 format 'int8'"):
        F.fp8_quant_blockwise(x, output_type="int8")
    with pytest.raises(ValueError, match=r"argument 'epsilon' = -1"):
        F.fp8_quant_blockwise(x, epsilon=-1)
    with pytest.raises(ValueError, match=r"argument 'x' has shape \[2, 64, 2\]; accepted: a 2-D tensor"):
        F.fp8_quant_blockwise(oarlock.ones([2, 64, 2], dtype="bfloat16"))
    with pytest.raises(TypeError, match=r"argument 'x' has dtype paddle.int32"):
        F.fp8_quant_blockwise(oarlock.ones([128, 128], dtype="int32"))
    q, s = F.fp8_quant_blockwise(x)
    with pytest.raises(ValueError, match=r"fp8_gemm_blockwise\(\): argument 'bias'"):
        F.fp8_gemm_blockwise(q, s, q, s, "bfloat16", bias=x)
    with pytest.raises(ValueError, match=r"argument 'b_decode_scale' has shape \[1, 128\]; accepted for a 2-D"):
        F.fp8_gemm_blockwise(q, s, q, s, "bfloat16", is_b_1d_scaled=False)
    with pytest.raises(TypeError, match=r"argument 'a' has dtype paddle.bfloat16; accepted: float8_e4m3fn"):
        F.fp8_gemm_blockwise(x, s, q, s, "bfloat16")
    with pytest.raises(ValueError, match=r"argument 'out_dtype' = 'int8'"):
        F.fp8_gemm_blockwise(q, s, q, s, "int8")


def test_column_blocks_are_the_row_blocks_of_the_transpose():
    x = _bf16_input(200, 320).astype(np.float32)          # edge cases included; what FP8 training's dW uses
    q, decode = fp8_numerics.quantize_cols(x)
    codes, scales = ref.quantize_rows(np.ascontiguousarray(x.T))
    ref.assert_codes_equal(np.ascontiguousarray(q.T), codes)
    np.testing.assert_array_equal(decode.T, scales)


def test_fused_transpose_split_quant():
    x = _bf16_input(384, 512)
    outs, scales = F.fused_transpose_split_quant(oarlock.to_tensor(x), None, [128, 0, 256], pow_2_scales=True)
    assert [list(o.shape) for o in outs] == [[512, 128], [512, 0], [512, 256]]        # Paddle's layouts
    assert [list(s.shape) for s in scales] == [[1, 512], [0, 512], [2, 512]]
    x32 = x.astype(np.float32)
    for out, scale, part in zip(outs, scales, (x32[:128], x32[128:128], x32[128:])):
        if part.shape[0]:
            codes, want = ref.quantize_rows(np.ascontiguousarray(part.T))
            ref.assert_codes_equal(out.numpy(), codes)
            np.testing.assert_array_equal(scale.numpy(), want.T)
    with pytest.raises(ValueError, match=r"fused_transpose_split_quant\(\): argument 'tokens_per_expert' = \[1, 2\]"):
        F.fused_transpose_split_quant(oarlock.to_tensor(x), None, [1, 2])
