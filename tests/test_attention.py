"""scaled_dot_product_attention and nn.MultiHeadAttention: against torch (values, gradients, second order) and
paddle (MultiHeadAttention's parameters, masks and caches) when they are installed, and against float64 numpy
references, dropout, bfloat16 and the error messages always.

oarlock follows Paddle's [batch, seq_len, num_heads, head_dim] layout; torch's is [batch, num_heads, seq_len,
head_dim], so torch gets transposed copies.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
from op_specs.attention import sdpa_probs_ref, sdpa_ref
from finite_differences import numeric_grad

RNG = np.random.default_rng(0)


def _randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def _ours(q, k, v, g, mask=None, **kwargs):
    """(out, dq, dk, dv) as numpy arrays from oarlock."""
    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=None if mask is None else oarlock.to_tensor(mask),
                                         **kwargs)
    out.backward(oarlock.to_tensor(g))
    return [out.numpy()] + [t.grad.numpy() for t in ts]


def _close(got, want, rtol=1e-5):
    """Within rtol relative; entries near zero are compared against rtol times the array's scale."""
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(float(np.abs(want).max()), 1e-30))


# -- torch ----------------------------------------------------------------------------------------------


def _torch_sdpa(torch, q, k, v, g, mask=None, is_causal=False, scale=None, enable_gqa=False):
    """(out, dq, dk, dv) from torch, in oarlock's layout; leaves are made in oarlock's layout and transposed."""
    ts = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    heads_first = [t.transpose(-3, -2) for t in ts]
    out = torch.nn.functional.scaled_dot_product_attention(
        *heads_first, attn_mask=None if mask is None else torch.tensor(mask), is_causal=is_causal, scale=scale,
        enable_gqa=enable_gqa).transpose(-3, -2)
    out.backward(torch.tensor(g))
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts]


def _mask_with_full_row(shape):
    mask = RNG.random(shape) < 0.7
    mask[..., 1, :] = False  # a query that may attend to nothing
    return mask


def _float_mask(shape):
    mask = RNG.standard_normal(shape).astype(np.float32)
    mask[RNG.random(shape) < 0.2] = -np.inf
    return mask


# name: (batch, seq_q, seq_k, heads_q, heads_k, head_dim, head_dim_v, our keywords, mask)
TORCH_CASES = {
    "no_mask": (2, 5, 7, 3, 3, 8, 6, {}, None),
    "causal": (2, 6, 6, 2, 2, 8, 8, {"is_causal": True}, None),
    "causal_short_query": (2, 4, 7, 2, 2, 8, 8, {"is_causal": True}, None),
    "causal_long_query": (2, 7, 4, 2, 2, 8, 8, {"is_causal": True}, None),
    "bool_mask_full_row": (2, 5, 6, 2, 2, 8, 8, {}, _mask_with_full_row((2, 1, 5, 6))),
    "bool_mask_2d": (2, 5, 6, 2, 2, 8, 8, {}, RNG.random((5, 6)) < 0.6),
    "float_mask": (2, 5, 6, 3, 3, 8, 8, {}, _float_mask((2, 3, 5, 6))),
    "float_mask_2d": (2, 5, 6, 3, 3, 8, 8, {}, _float_mask((5, 6))),
    "grouped_query": (2, 6, 6, 6, 2, 8, 8, {"is_causal": True}, None),
    "grouped_query_mask": (2, 5, 6, 4, 2, 8, 8, {}, _mask_with_full_row((2, 4, 5, 6))),
    "scale": (2, 5, 6, 2, 2, 8, 8, {"scale": 0.3}, None),
    "gpt_sized": (4, 32, 32, 4, 4, 16, 16, {"is_causal": True}, None),
    # several query blocks (the kernels walk 32 causal / 64 dense rows at a time), sizes not multiples of them
    "causal_blocks_odd": (2, 75, 75, 2, 2, 8, 6, {"is_causal": True}, None),
    "causal_blocks_short_query": (1, 40, 97, 2, 2, 8, 8, {"is_causal": True}, None),
    "causal_blocks_long_query": (1, 97, 40, 2, 2, 8, 8, {"is_causal": True}, None),
    "grouped_query_blocks": (1, 70, 70, 6, 2, 8, 8, {"is_causal": True}, None),
    "dense_blocks_mask": (1, 130, 67, 2, 2, 8, 8, {}, _mask_with_full_row((1, 2, 130, 67))),
    "dense_blocks_float_mask": (2, 100, 70, 4, 2, 8, 8, {}, _float_mask((2, 4, 100, 70))),
}


@pytest.mark.parametrize("name", list(TORCH_CASES))
def test_sdpa_matches_torch(torch, name):
    b, sq, sk, hq, hk, d, dv, kwargs, mask = TORCH_CASES[name]
    q, k, v, g = _randn(b, sq, hq, d), _randn(b, sk, hk, d), _randn(b, sk, hk, dv), _randn(b, sq, hq, dv)
    ours = _ours(q, k, v, g, mask, **kwargs)
    theirs = _torch_sdpa(torch, q, k, v, g, mask, enable_gqa=hq != hk, **kwargs)
    for got, want in zip(ours, theirs):
        assert got.dtype == np.float32
        _close(got, want)


def test_sdpa_unbatched_matches_torch(torch):
    q, k, v, g = _randn(5, 2, 8), _randn(6, 2, 8), _randn(6, 2, 4), _randn(5, 2, 4)
    for got, want in zip(_ours(q, k, v, g, is_causal=True), _torch_sdpa(torch, q, k, v, g, is_causal=True)):
        _close(got, want)


def test_sdpa_mask_and_causal_combine(torch):
    """Both apply (torch refuses the pair, so it gets the combined bool mask)."""
    mask = RNG.random((2, 1, 6, 6)) < 0.7
    q, k, v, g = _randn(2, 6, 2, 8), _randn(2, 6, 2, 8), _randn(2, 6, 2, 8), _randn(2, 6, 2, 8)
    combined = mask & np.tril(np.ones((6, 6), dtype=bool))
    for got, want in zip(_ours(q, k, v, g, mask, is_causal=True), _torch_sdpa(torch, q, k, v, g, combined)):
        _close(got, want)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_mask_and_causal_combine_over_blocks(torch, kind):
    """Causal blocks with an extra mask: a fully masked row inside a block, -inf and large values in a float
    mask (whose row maxima enter the softmax's shift)."""
    q, k, v, g = _randn(2, 70, 2, 8), _randn(2, 70, 2, 8), _randn(2, 70, 2, 8), _randn(2, 70, 2, 8)
    causal = np.tril(np.ones((70, 70), dtype=bool))
    if kind == "bool":
        mask = _mask_with_full_row((2, 1, 70, 70))
        mask[..., 40, :] = False
        combined = mask & causal
    else:
        mask = _float_mask((1, 2, 70, 70))
        mask[..., 50, 3] = 60.0
        combined = np.where(causal, mask, -np.inf)
    for got, want in zip(_ours(q, k, v, g, mask, is_causal=True), _torch_sdpa(torch, q, k, v, g, combined)):
        assert np.isfinite(got).all()
        _close(got, want)


def test_sdpa_second_order_matches_torch(torch):
    """create_graph=True records the backward with public ops; its gradients match torch's in float64."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = _randn(2, 4, 4, 3, dtype=np.float64), _randn(2, 5, 2, 3, dtype=np.float64), \
        _randn(2, 5, 2, 3, dtype=np.float64)
    g, w = _randn(2, 4, 4, 3, dtype=np.float64), [_randn(*x.shape, dtype=np.float64) for x in (q, k, v)]
    mask = _mask_with_full_row((1, 4, 4, 5))

    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=oarlock.to_tensor(mask))
    first = oarlock.grad([out], ts, [oarlock.to_tensor(g)], create_graph=True)
    total = sum(oarlock.sum(d * oarlock.to_tensor(x)) for d, x in zip(first, w))
    second = oarlock.grad([total], ts)

    tt = [torch.tensor(x, requires_grad=True) for x in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        t_out = torch.nn.functional.scaled_dot_product_attention(
            *[t.transpose(1, 2) for t in tt], attn_mask=torch.tensor(mask), enable_gqa=True).transpose(1, 2)
        t_first = torch.autograd.grad(t_out, tt, torch.tensor(g), create_graph=True)
        t_total = sum((d * torch.tensor(x)).sum() for d, x in zip(t_first, w))
        t_second = torch.autograd.grad(t_total, tt)
    for got, want in zip(list(first) + list(second), list(t_first) + list(t_second)):
        _close(got.numpy(), want.detach().numpy(), rtol=1e-9)


# -- numpy float64 references (always run) --------------------------------------------------------------

def test_fully_masked_row_gives_zeros_not_nan():
    q, k, v, g = (_randn(1, 3, 2, 4, dtype=np.float64) for _ in range(4))
    mask = np.ones((3, 3), dtype=bool)
    mask[1] = False
    for m in (mask, np.where(mask, 0.0, -np.inf)):  # bool and additive -inf masks
        out, dq, dk, dv = _ours(q, k, v, g, m)
        assert np.isfinite(out).all() and np.isfinite(dq).all() and np.isfinite(dk).all() and np.isfinite(dv).all()
        np.testing.assert_array_equal(out[:, 1], 0.0)
        np.testing.assert_array_equal(dq[:, 1], 0.0)
        _close(out, sdpa_ref(q, k, v, m), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("is_causal", [False, True])
def test_loose_score_bound_falls_back_to_the_exact_max(dtype, is_causal):
    """Queries orthogonal to long keys: every score is small but the row bound |q| max |k| is 300, so exp of
    the shifted scores underflows in float32 and the kernel redoes those blocks with the exact row max."""
    q, k, v, g = (_randn(1, 40, 2, 4, dtype=dtype) for _ in range(4))
    q[..., 0] = 0.0
    q[:, 5:, 0, 1] = 30.0  # large query norms on head 0 from row 5 on
    k[..., 1] = 0.0
    k[:, 2, :, 0] = 20.0  # one long key
    out, dq, dk, dv = _ours(q, k, v, g, is_causal=is_causal, scale=0.5)
    assert np.isfinite(out).all() and np.isfinite(dq).all()
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    _close(out, sdpa_ref(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), is_causal=is_causal,
                         scale=0.5), rtol=rtol)


def test_create_graph_first_order_equals_fused():
    """The two backward paths (fused op, composition of public ops) agree, with grouped heads and a mask."""
    q, k, v, g = (_randn(2, 3, 4, 5, dtype=np.float64), _randn(2, 4, 2, 5, dtype=np.float64),
                  _randn(2, 4, 2, 3, dtype=np.float64), _randn(2, 3, 4, 3, dtype=np.float64))
    mask = oarlock.to_tensor(_mask_with_full_row((2, 4, 3, 4)))
    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, attn_mask=mask, is_causal=True)
    fused = oarlock.grad([out], ts, [oarlock.to_tensor(g)], retain_graph=True)
    composed = oarlock.grad([out], ts, [oarlock.to_tensor(g)], create_graph=True)
    for a, b in zip(fused, composed):
        _close(a.numpy(), b.numpy(), rtol=1e-12)


@pytest.mark.parametrize("is_causal", [False, True])
def test_fused_backward_over_blocks_equals_composed_with_dropout(is_causal):
    """Several query blocks, grouped heads, a padding mask and dropout: the fused backward (block by block, dK and
    dV summed over the blocks) against the composition of public ops on the saved probabilities and mask."""
    q, k, v, g = (_randn(2, 70, 4, 5, dtype=np.float64), _randn(2, 70, 2, 5, dtype=np.float64),
                  _randn(2, 70, 2, 3, dtype=np.float64), _randn(2, 70, 4, 3, dtype=np.float64))
    mask = oarlock.to_tensor(RNG.random((2, 1, 70, 70)) < 0.8)
    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v)]
    oarlock.seed(5)
    out = F.scaled_dot_product_attention(*ts, attn_mask=mask, dropout_p=0.2, is_causal=is_causal)
    fused = oarlock.grad([out], ts, [oarlock.to_tensor(g)], retain_graph=True)
    composed = oarlock.grad([out], ts, [oarlock.to_tensor(g)], create_graph=True)
    for a, b in zip(fused, composed):
        _close(a.numpy(), b.numpy(), rtol=1e-12)


def test_second_order_matches_finite_differences():
    """d/dx of sum(w * dL/dv) by central differences of the (fused) first-order gradient."""
    q, k, v = _randn(1, 3, 2, 3, dtype=np.float64), _randn(1, 4, 2, 3, dtype=np.float64), \
        _randn(1, 4, 2, 2, dtype=np.float64)
    g, w = _randn(1, 3, 2, 2, dtype=np.float64), _randn(1, 4, 2, 2, dtype=np.float64)

    def dv_of(q, k, v):
        return _ours(q, k, v, g, is_causal=True)[3]

    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, is_causal=True)
    (dv,) = oarlock.grad([out], [ts[2]], [oarlock.to_tensor(g)], create_graph=True)
    second = oarlock.grad([oarlock.sum(dv * oarlock.to_tensor(w))], ts[:2])
    for got, want in zip(second, numeric_grad(dv_of, [q, k, v], w)[:2]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-7)


def _dropout_reference(q, k, v, p, seed, **kwargs):
    """The dropout the CPU backend draws: its generator is numpy's PCG64 seeded by oarlock.seed, and the op
    keeps a probability where a float32 uniform sample is >= p, scaling the kept ones by 1 / (1 - p)."""
    oarlock.seed(seed)
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = oarlock.get_rng_state()[0]
    hq, hk = q.shape[2], k.shape[2]
    probs = sdpa_probs_ref(q, k, **kwargs)  # [B, Hq, Sq, Sk]
    b, _, sq, sk = probs.shape
    keep = rng.random((b, hk, hq // hk, sq, sk), dtype=np.float32) >= p
    weights = probs * keep.reshape(probs.shape) / (1 - p)
    return np.einsum("bhqk,bkhd->bqhd", weights, np.repeat(v, hq // hk, axis=2))


def test_dropout_matches_reference_and_is_seeded():
    q, k, v = _randn(2, 5, 4, 3, dtype=np.float64), _randn(2, 6, 2, 3, dtype=np.float64), \
        _randn(2, 6, 2, 3, dtype=np.float64)
    ts = [oarlock.to_tensor(x) for x in (q, k, v)]

    def run(seed, **kwargs):
        oarlock.seed(seed)
        return F.scaled_dot_product_attention(*ts, dropout_p=0.4, is_causal=True, **kwargs).numpy()

    _close(run(3), _dropout_reference(q, k, v, 0.4, 3, is_causal=True), rtol=1e-12)
    np.testing.assert_array_equal(run(3), run(3))
    assert not np.allclose(run(3), run(4))
    np.testing.assert_array_equal(run(3, training=False), F.scaled_dot_product_attention(*ts, is_causal=True).numpy())
    oarlock.seed(0)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(*ts, dropout_p=1.0).numpy(), 0.0)


def test_dropout_over_blocks_matches_reference():
    """The dropout mask is drawn over the whole [B, Hk, G, Sq, Sk] shape in one call whatever the blocking, so
    the seeded reference holds over several causal blocks with grouped heads too."""
    q, k, v = _randn(2, 70, 4, 3, dtype=np.float64), _randn(2, 70, 2, 3, dtype=np.float64), \
        _randn(2, 70, 2, 3, dtype=np.float64)
    oarlock.seed(8)
    got = F.scaled_dot_product_attention(*(oarlock.to_tensor(x) for x in (q, k, v)), dropout_p=0.3,
                                         is_causal=True).numpy()
    _close(got, _dropout_reference(q, k, v, 0.3, 8, is_causal=True), rtol=1e-12)


def test_dropout_gradient_matches_finite_differences():
    """Reseeding before every call fixes the dropout mask, so the output is a function of q, k, v."""
    q, k, v = _randn(1, 3, 2, 3, dtype=np.float64), _randn(1, 4, 1, 3, dtype=np.float64), \
        _randn(1, 4, 1, 2, dtype=np.float64)
    g = _randn(1, 3, 2, 2, dtype=np.float64)

    def out_of(q, k, v):
        oarlock.seed(11)
        return F.scaled_dot_product_attention(*(oarlock.to_tensor(x) for x in (q, k, v)), dropout_p=0.3).numpy()

    oarlock.seed(11)
    analytic = _ours(q, k, v, g, dropout_p=0.3)[1:]
    for got, want in zip(analytic, numeric_grad(out_of, [q, k, v], g)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8)
    # the composed backward (create_graph) sees the same mask
    oarlock.seed(11)
    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (q, k, v)]
    out = F.scaled_dot_product_attention(*ts, dropout_p=0.3)
    for a, b in zip(oarlock.grad([out], ts, [oarlock.to_tensor(g)], create_graph=True), analytic):
        _close(a.numpy(), b, rtol=1e-12)


def test_bfloat16_computes_in_float32():
    q, k, v, g = (_randn(2, 6, 2, 8) for _ in range(4))
    bf = [oarlock.to_tensor(x).astype("bfloat16") for x in (q, k, v)]
    for t in bf:
        t.stop_gradient = False
    out = F.scaled_dot_product_attention(*bf, is_causal=True)
    out.backward(oarlock.to_tensor(g).astype("bfloat16"))
    assert out.dtype == oarlock.bfloat16 and all(t.grad.dtype == oarlock.bfloat16 for t in bf)
    rounded = [t.astype("float32").numpy() for t in bf]
    want = _ours(*rounded, oarlock.to_tensor(g).astype("bfloat16").astype("float32").numpy(), is_causal=True)
    for got, ref in zip([out] + [t.grad for t in bf], want):
        np.testing.assert_allclose(got.astype("float32").numpy(), ref, rtol=2e-2, atol=2e-2 * np.abs(ref).max())


# -- errors ---------------------------------------------------------------------------------------------

def _t(*shape, dtype="float32"):
    return oarlock.zeros(list(shape), dtype=dtype)


@pytest.mark.parametrize("args,kwargs,match", [
    ((_t(4, 2, 8), _t(4, 2, 8), _t(4, 2, 8)[0]), {}, "same rank"),
    ((_t(4, 8), _t(4, 8), _t(4, 8)), {}, "query must be 4-D"),
    ((_t(2, 4, 2, 8), _t(3, 4, 2, 8), _t(3, 4, 2, 8)), {}, "same batch size"),
    ((_t(2, 4, 2, 8), _t(2, 4, 2, 6), _t(2, 4, 2, 8)), {}, "same head_dim"),
    ((_t(2, 4, 2, 8), _t(2, 4, 2, 8), _t(2, 5, 2, 8)), {}, "same seq_len"),
    ((_t(2, 4, 3, 8), _t(2, 4, 2, 8), _t(2, 4, 2, 8)), {}, "multiple"),
    ((_t(2, 4, 2, 8), _t(2, 5, 2, 8), _t(2, 5, 2, 8)), {"attn_mask": _t(4, 4, dtype="bool")}, "does not broadcast"),
    ((_t(2, 4, 2, 8), _t(2, 5, 2, 8), _t(2, 5, 2, 8)), {"attn_mask": _t(4, 5, dtype="int64")},
     "attn_mask must be bool"),
    ((_t(2, 4, 2, 8), _t(2, 4, 2, 8), _t(2, 4, 2, 8)), {"dropout_p": 1.5}, r"dropout_p must be in \[0, 1\]"),
    ((_t(2, 4, 2, 8, dtype="int64"),) * 3, {}, "int64"),
])
def test_sdpa_errors_name_the_argument(args, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match) as info:
        F.scaled_dot_product_attention(*args, **kwargs)
    assert "scaled_dot_product_attention" in str(info.value)


def test_mha_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        oarlock.nn.MultiHeadAttention(10, 3)
    mha = oarlock.nn.MultiHeadAttention(8, 2, kdim=6)
    with pytest.raises(ValueError, match=r"MultiHeadAttention: expected query of shape \[batch, seq_len, 8\] "
                                         r"\(embed_dim=8\)"):
        mha(_t(2, 3, 6))
    with pytest.raises(ValueError, match=r"expected key of shape \[batch, seq_len, 6\] \(kdim=6\)"):
        mha(_t(2, 3, 8), _t(2, 3, 8), _t(2, 3, 8))
    with pytest.raises(TypeError, match="cache must be"):
        mha(_t(2, 3, 8), _t(2, 3, 6), _t(2, 3, 8), cache=(1, 2))


# -- MultiHeadAttention ---------------------------------------------------------------------------------

def _weights(mha):
    return {name: p.numpy().astype(np.float64) for name, p in mha.state_dict().items()}


def _mha_ref(w, query, key, value, mask, heads):
    """MultiHeadAttention in float64 numpy, with Paddle's mask conversion."""
    def project(x, name):
        y = x @ w[f"{name}.weight"] + w[f"{name}.bias"]
        return y.reshape(y.shape[0], y.shape[1], heads, -1)
    q, k, v = project(query, "q_proj"), project(key, "k_proj"), project(value, "v_proj")
    if mask is not None and mask.dtype == bool:
        mask = (mask.astype(np.float64) - 1.0) * 1e9
    out = sdpa_ref(q, k, v, mask)
    return out.reshape(out.shape[0], out.shape[1], -1) @ w["out_proj.weight"] + w["out_proj.bias"]


def test_mha_state_dict_and_numpy_reference():
    oarlock.seed(0)
    mha = oarlock.nn.MultiHeadAttention(8, 2, kdim=6, vdim=5)
    shapes = {name: p.shape for name, p in mha.state_dict().items()}
    assert shapes == {"q_proj.weight": [8, 8], "q_proj.bias": [8], "k_proj.weight": [6, 8], "k_proj.bias": [8],
                      "v_proj.weight": [5, 8], "v_proj.bias": [8], "out_proj.weight": [8, 8], "out_proj.bias": [8]}
    assert len(mha.parameters()) == 8
    mha.set_state_dict({n: oarlock.to_tensor(RNG.standard_normal(s)) for n, s in shapes.items()})  # nonzero biases
    query, key, value = _randn(2, 3, 8), _randn(2, 4, 6), _randn(2, 4, 5)
    mask = RNG.random((2, 1, 3, 4)) < 0.7
    out = mha(*(oarlock.to_tensor(x) for x in (query, key, value)), attn_mask=oarlock.to_tensor(mask))
    want = _mha_ref(_weights(mha), query.astype(np.float64), key.astype(np.float64), value.astype(np.float64),
                    mask, 2)
    _close(out.numpy(), want, rtol=1e-4)
    assert [k for k in oarlock.nn.MultiHeadAttention(4, 2, bias_attr=False).state_dict()] == \
        ["q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"]


def _to_torch_mha(torch, mha, kdim=None, vdim=None):
    e = mha.embed_dim
    tm = torch.nn.MultiheadAttention(e, mha.num_heads, kdim=kdim, vdim=vdim, batch_first=True)
    w = {name: torch.tensor(p.numpy().T.copy()) for name, p in mha.state_dict().items()}
    with torch.no_grad():
        if tm._qkv_same_embed_dim:
            tm.in_proj_weight.copy_(torch.cat([w["q_proj.weight"], w["k_proj.weight"], w["v_proj.weight"]]))
        else:
            for name in ("q", "k", "v"):
                getattr(tm, f"{name}_proj_weight").copy_(w[f"{name}_proj.weight"])
        tm.in_proj_bias.copy_(torch.cat([w["q_proj.bias"], w["k_proj.bias"], w["v_proj.bias"]]))
        tm.out_proj.weight.copy_(w["out_proj.weight"])
        tm.out_proj.bias.copy_(w["out_proj.bias"])
    return tm


@pytest.mark.parametrize("need_weights", [False, True])
def test_mha_matches_torch(torch, need_weights):
    oarlock.seed(1)
    mha = oarlock.nn.MultiHeadAttention(16, 4, kdim=12, vdim=10, need_weights=need_weights)
    tm = _to_torch_mha(torch, mha, kdim=12, vdim=10)
    query, key, value, g = _randn(3, 5, 16), _randn(3, 7, 12), _randn(3, 7, 10), _randn(3, 5, 16)
    keep = RNG.random((5, 7)) < 0.7
    keep[:, 0] = True  # no fully masked rows: there Paddle's and torch's conventions differ

    ts = [oarlock.to_tensor(x, stop_gradient=False) for x in (query, key, value)]
    result = mha(*ts, attn_mask=oarlock.to_tensor(keep))
    out = result[0] if need_weights else result
    out.backward(oarlock.to_tensor(g))
    tt = [torch.tensor(x, requires_grad=True) for x in (query, key, value)]
    t_out, t_weights = tm(*tt, attn_mask=torch.tensor(~keep), need_weights=need_weights,
                          average_attn_weights=False)  # torch's bool mask marks the positions to drop
    t_out.backward(torch.tensor(g))

    _close(out.numpy(), t_out.detach().numpy())
    if need_weights:
        _close(result[1].numpy(), t_weights.detach().numpy())
    for ours, theirs in zip(ts, tt):
        _close(ours.grad.numpy(), theirs.grad.numpy())
    grads = {name: p.grad.numpy() for name, p in mha.named_parameters()}
    e = 16
    _close(grads["q_proj.weight"], tm.q_proj_weight.grad.numpy().T)
    _close(grads["k_proj.weight"], tm.k_proj_weight.grad.numpy().T)
    _close(grads["v_proj.weight"], tm.v_proj_weight.grad.numpy().T)
    _close(np.concatenate([grads[f"{n}_proj.bias"] for n in "qkv"]), tm.in_proj_bias.grad.numpy())
    _close(grads["out_proj.weight"], tm.out_proj.weight.grad.numpy().T)
    _close(grads["out_proj.bias"], tm.out_proj.bias.grad.numpy()[:e])


def test_mha_self_attention_float_mask_matches_torch(torch):
    oarlock.seed(2)
    mha = oarlock.nn.MultiHeadAttention(8, 2)
    tm = _to_torch_mha(torch, mha)
    x = _randn(2, 6, 8)
    mask = np.triu(np.full((6, 6), -np.inf, dtype=np.float32), 1)
    out = mha(oarlock.to_tensor(x), attn_mask=oarlock.to_tensor(mask))
    t_out, _ = tm(*[torch.tensor(x)] * 3, attn_mask=torch.tensor(mask), need_weights=False)
    _close(out.numpy(), t_out.detach().numpy())


# -- paddle: parameters, masks and caches ---------------------------------------------------------------


def _paddle_twin(paddle, mha, **kwargs):
    """paddle.nn.MultiHeadAttention with mha's weights (the same layout: no transposes)."""
    pm = paddle.nn.MultiHeadAttention(mha.embed_dim, mha.num_heads, **kwargs)
    state = mha.state_dict()
    assert sorted(pm.state_dict()) == sorted(state)
    assert all(list(pm.state_dict()[n].shape) == state[n].shape for n in state)
    pm.set_state_dict({n: p.numpy() for n, p in state.items()})
    return pm


def test_mha_parameters_match_paddle(paddle):
    for kwargs in ({}, {"kdim": 6, "vdim": 10}, {"bias_attr": False}):
        _paddle_twin(paddle, oarlock.nn.MultiHeadAttention(8, 2, **kwargs), **kwargs)


@pytest.mark.parametrize("mask_kind", ["bool", "int", "float"])
def test_mha_masks_match_paddle(paddle, mask_kind):
    """Paddle turns bool/int masks into (mask - 1) * 1e9; a fully masked row gets its near-uniform weights."""
    oarlock.seed(3)
    mha = oarlock.nn.MultiHeadAttention(8, 2, need_weights=True)
    pm = _paddle_twin(paddle, mha, need_weights=True)
    x = _randn(2, 4, 8)
    keep = RNG.random((2, 1, 4, 4)) < 0.6
    keep[0, 0, 2] = False
    mask = {"bool": keep, "int": keep.astype(np.int64), "float": np.where(keep, 0.0, -1e4).astype(np.float32)}
    out, weights = mha(oarlock.to_tensor(x), attn_mask=oarlock.to_tensor(mask[mask_kind]))
    p_out, p_weights = pm(paddle.to_tensor(x), attn_mask=paddle.to_tensor(mask[mask_kind]))
    _close(out.numpy(), p_out.numpy(), rtol=1e-4)
    _close(weights.numpy(), p_weights.numpy(), rtol=1e-4)
    mha.need_weights = False
    _close(mha(oarlock.to_tensor(x), attn_mask=oarlock.to_tensor(mask[mask_kind])).numpy(), p_out.numpy(), rtol=1e-4)


def test_mha_caches_match_paddle(paddle):
    oarlock.seed(4)
    mha = oarlock.nn.MultiHeadAttention(8, 2, kdim=6, vdim=6)
    pm = _paddle_twin(paddle, mha, kdim=6, vdim=6)
    memory = _randn(2, 5, 6)
    # encoder-decoder attention: StaticCache replaces key and value
    static, p_static = mha.gen_cache(oarlock.to_tensor(memory), oarlock.to_tensor(memory), type=mha.StaticCache), \
        pm.gen_cache(paddle.to_tensor(memory), paddle.to_tensor(memory), type=pm.StaticCache)
    assert static.k.shape == [2, 2, 5, 4]
    _close(static.k.numpy(), p_static.k.numpy(), rtol=1e-5)
    q = _randn(2, 3, 8)
    out, cache = mha(oarlock.to_tensor(q), None, None, cache=static)
    p_out, _ = pm(paddle.to_tensor(q), None, None, cache=p_static)
    assert isinstance(cache, mha.StaticCache)
    _close(out.numpy(), p_out.numpy(), rtol=1e-5)
    # decoder self-attention: Cache grows by one step per call
    self_attn = oarlock.nn.MultiHeadAttention(6, 2)
    p_self = _paddle_twin(paddle, self_attn)
    cache, p_cache = self_attn.gen_cache(oarlock.to_tensor(memory)), p_self.gen_cache(paddle.to_tensor(memory))
    assert cache.k.shape == [2, 2, 0, 3]
    for step in range(3):
        x = _randn(2, 1, 6)
        out, cache = self_attn(oarlock.to_tensor(x), cache=cache)
        p_out, p_cache = p_self(paddle.to_tensor(x), cache=p_cache)
        assert cache.k.shape == [2, 2, step + 1, 3]
        _close(out.numpy(), p_out.numpy(), rtol=1e-5)
        _close(cache.v.numpy(), p_cache.v.numpy(), rtol=1e-5)


def test_mha_dropout_follows_training_mode():
    oarlock.seed(5)
    mha = oarlock.nn.MultiHeadAttention(8, 2, dropout=0.5)
    x = oarlock.to_tensor(_randn(2, 4, 8))
    mha.eval()
    np.testing.assert_array_equal(mha(x).numpy(), mha(x).numpy())
    mha.train()
    oarlock.seed(6)
    first = mha(x).numpy()
    oarlock.seed(6)
    np.testing.assert_array_equal(mha(x).numpy(), first)
    assert not np.allclose(first, mha(x).numpy())


def test_mha_need_weights_with_dropout():
    """need_weights takes the composed path: the weights returned are the dropped-out ones, as in Paddle."""
    oarlock.seed(7)
    mha = oarlock.nn.MultiHeadAttention(8, 2, dropout=0.5, need_weights=True)
    x = oarlock.to_tensor(_randn(2, 4, 8), stop_gradient=False)
    out, weights = mha(x)
    assert weights.shape == [2, 2, 4, 4]
    kept = weights.numpy() != 0
    assert 0 < kept.mean() < 1
    out.sum().backward()
    assert x.grad.shape == [2, 4, 8]
    mha.eval()
    np.testing.assert_allclose(mha(x)[1].numpy().sum(axis=-1), 1.0, rtol=1e-6)
