"""nn.Transformer, TransformerEncoder(Layer), TransformerDecoder(Layer) and MultiHeadAttention against real
Paddle 3.2 with the same weights (Paddle's state_dict copied in): state_dict keys and shapes, outputs and
every parameter gradient, pre- and post-norm, bool and float masks, and incremental decoding through
gen_cache compared with Paddle's own caches step by step."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn

D_MODEL, NHEAD, FFN = 8, 2, 16


def _copy_weights(paddle_layer, ours):
    """Paddle's state_dict into ours: the same keys and shapes, then the same values."""
    theirs = {k: v.numpy() for k, v in paddle_layer.state_dict().items()}
    mine = ours.state_dict()
    assert list(theirs) == list(mine)
    assert all(list(theirs[k].shape) == list(mine[k].shape) for k in theirs)
    ours.set_state_dict({k: oarlock.to_tensor(v) for k, v in theirs.items()})


def _grads(layer):
    return {name: p.grad.numpy() for name, p in layer.named_parameters() if p.grad is not None}


def _compare(paddle, pl, ol, p_inputs, o_inputs, up_seed=0, rtol=1e-4):
    """Run both, backward with the same upstream gradient, compare the output and every parameter grad."""
    p_out = pl(*p_inputs)
    o_out = ol(*o_inputs)
    np.testing.assert_allclose(o_out.numpy(), p_out.numpy(), rtol=rtol, atol=1e-5)
    up = np.random.default_rng(up_seed).standard_normal(p_out.shape).astype(np.float32)
    (p_out * paddle.to_tensor(up)).sum().backward()
    (o_out * oarlock.to_tensor(up)).sum().backward()
    theirs = {name: p.grad.numpy() for name, p in pl.named_parameters() if p.grad is not None}
    mine = _grads(ol)
    assert sorted(theirs) == sorted(mine)
    for name in theirs:
        np.testing.assert_allclose(mine[name], theirs[name], rtol=1e-3, atol=1e-5, err_msg=name)


def _data(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("normalize_before", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_matches_paddle(paddle, normalize_before, activation):
    paddle.seed(1)
    pl = paddle.nn.Transformer(D_MODEL, NHEAD, 2, 2, FFN, dropout=0.0, activation=activation,
                               normalize_before=normalize_before)
    ol = nn.Transformer(D_MODEL, NHEAD, 2, 2, FFN, dropout=0.0, activation=activation,
                        normalize_before=normalize_before)
    _copy_weights(pl, ol)
    src, tgt = _data((2, 5, D_MODEL), (2, 4, D_MODEL))
    causal = pl.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(ol.generate_square_subsequent_mask(4).numpy(), causal.numpy())
    src_mask = np.ones((2, 1, 1, 5), dtype=bool)
    src_mask[1, :, :, 3:] = False   # padding in the second sequence
    _compare(paddle, pl, ol,
             [paddle.to_tensor(src), paddle.to_tensor(tgt), paddle.to_tensor(src_mask), causal,
              paddle.to_tensor(src_mask)],
             [oarlock.to_tensor(src), oarlock.to_tensor(tgt), oarlock.to_tensor(src_mask),
              ol.generate_square_subsequent_mask(4), oarlock.to_tensor(src_mask)])


@pytest.mark.parametrize("normalize_before", [False, True])
def test_encoder_matches_paddle(paddle, normalize_before):
    paddle.seed(2)
    pl = paddle.nn.TransformerEncoder(
        paddle.nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, dropout=0.0, normalize_before=normalize_before),
        3, paddle.nn.LayerNorm(D_MODEL))
    ol = nn.TransformerEncoder(nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, dropout=0.0,
                                                          normalize_before=normalize_before), 3, nn.LayerNorm(D_MODEL))
    _copy_weights(pl, ol)
    (src,) = _data((3, 6, D_MODEL), seed=3)
    mask = np.random.default_rng(4).standard_normal((3, NHEAD, 6, 6)).astype(np.float32)   # an additive mask
    _compare(paddle, pl, ol, [paddle.to_tensor(src), paddle.to_tensor(mask)],
             [oarlock.to_tensor(src), oarlock.to_tensor(mask)], up_seed=5)


def test_layers_with_list_param_attrs_and_no_bias(paddle):
    """bias_attr=[False, True]: the attention has no biases, the feed-forward keeps them (state_dict keys)."""
    pl = paddle.nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, bias_attr=[False, True])
    ol = nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, bias_attr=[False, True])
    assert list(ol.state_dict()) == list(pl.state_dict())
    pl = paddle.nn.Transformer(D_MODEL, NHEAD, 1, 1, FFN, bias_attr=[True, False, True])
    ol = nn.Transformer(D_MODEL, NHEAD, 1, 1, FFN, bias_attr=[True, False, True])
    assert list(ol.state_dict()) == list(pl.state_dict())
    with pytest.raises(ValueError, match="TransformerEncoderLayer: bias_attr .* 2 entries, got 3"):
        nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, bias_attr=[True, True, True])
    with pytest.raises(ValueError, match="TransformerEncoderLayer: activation .* got 'nope'"):
        nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, activation="nope")
    with pytest.raises(ValueError, match="Transformer: dim_feedforward must be a positive int, got 0"):
        nn.Transformer(D_MODEL, NHEAD, 1, 1, 0)


def test_decoder_incremental_decoding_matches_paddle(paddle):
    """Greedy-style decoding one position at a time through gen_cache / cache=: each step's output and the
    grown caches equal Paddle's, and the last step equals the full sequence under a causal mask."""
    paddle.seed(3)
    pl = paddle.nn.TransformerDecoder(paddle.nn.TransformerDecoderLayer(D_MODEL, NHEAD, FFN, dropout=0.0), 2)
    ol = nn.TransformerDecoder(nn.TransformerDecoderLayer(D_MODEL, NHEAD, FFN, dropout=0.0), 2)
    _copy_weights(pl, ol)
    pl.eval(), ol.eval()
    memory, tgt = _data((2, 5, D_MODEL), (2, 4, D_MODEL), seed=6)
    p_cache = pl.gen_cache(paddle.to_tensor(memory))
    o_cache = ol.gen_cache(oarlock.to_tensor(memory))
    assert len(o_cache) == 2 and isinstance(o_cache[0][0], nn.MultiHeadAttention.Cache)
    assert isinstance(o_cache[0][1], nn.MultiHeadAttention.StaticCache)
    for step in range(4):
        p_out, p_cache = pl(paddle.to_tensor(tgt[:, step:step + 1]), paddle.to_tensor(memory), cache=p_cache)
        o_out, o_cache = ol(oarlock.to_tensor(tgt[:, step:step + 1]), oarlock.to_tensor(memory), cache=o_cache)
        np.testing.assert_allclose(o_out.numpy(), p_out.numpy(), rtol=1e-4, atol=1e-5)
        for (p_inc, p_static), (o_inc, o_static) in zip(p_cache, o_cache):
            assert o_inc.k.shape == p_inc.k.shape == [2, NHEAD, step + 1, D_MODEL // NHEAD]
            np.testing.assert_allclose(o_inc.v.numpy(), p_inc.v.numpy(), rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(o_static.k.numpy(), p_static.k.numpy(), rtol=1e-4, atol=1e-5)
    causal = nn.Transformer().generate_square_subsequent_mask(4)
    full = ol(oarlock.to_tensor(tgt), oarlock.to_tensor(memory), tgt_mask=causal)
    np.testing.assert_allclose(full.numpy()[:, -1:], o_out.numpy(), rtol=1e-4, atol=1e-5)
    zipped = ol.gen_cache(oarlock.to_tensor(memory), do_zip=True)
    assert len(zipped) == 2 and len(zipped[0]) == 2 and isinstance(zipped[1][0], nn.MultiHeadAttention.StaticCache)


def test_encoder_cache_matches_paddle(paddle):
    paddle.seed(4)
    pl = paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, dropout=0.0), 2)
    ol = nn.TransformerEncoder(nn.TransformerEncoderLayer(D_MODEL, NHEAD, FFN, dropout=0.0), 2)
    _copy_weights(pl, ol)
    (src,) = _data((2, 3, D_MODEL), seed=7)
    p_cache, o_cache = pl.gen_cache(paddle.to_tensor(src)), ol.gen_cache(oarlock.to_tensor(src))
    for step in range(3):
        p_out, p_cache = pl(paddle.to_tensor(src[:, step:step + 1]), cache=p_cache)
        o_out, o_cache = ol(oarlock.to_tensor(src[:, step:step + 1]), cache=o_cache)
        np.testing.assert_allclose(o_out.numpy(), p_out.numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(o_cache[1].k.numpy(), p_cache[1].k.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_multi_head_attention_matches_paddle(paddle, need_weights):
    """kdim/vdim, need_weights (the weights too), an int mask and a StaticCache, outputs and gradients."""
    paddle.seed(5)
    pl = paddle.nn.MultiHeadAttention(D_MODEL, NHEAD, kdim=6, vdim=5, need_weights=need_weights)
    ol = nn.MultiHeadAttention(D_MODEL, NHEAD, kdim=6, vdim=5, need_weights=need_weights)
    _copy_weights(pl, ol)
    q, k, v = _data((2, 4, D_MODEL), (2, 3, 6), (2, 3, 5), seed=8)
    mask = (np.random.default_rng(9).uniform(size=(2, 1, 4, 3)) > 0.3).astype("int64")
    p_out = pl(paddle.to_tensor(q), paddle.to_tensor(k), paddle.to_tensor(v), paddle.to_tensor(mask))
    o_out = ol(oarlock.to_tensor(q), oarlock.to_tensor(k), oarlock.to_tensor(v), oarlock.to_tensor(mask))
    if need_weights:
        np.testing.assert_allclose(o_out[1].numpy(), p_out[1].numpy(), rtol=1e-4, atol=1e-6)
        p_out, o_out = p_out[0], o_out[0]
    np.testing.assert_allclose(o_out.numpy(), p_out.numpy(), rtol=1e-4, atol=1e-5)
    p_out.sum().backward()
    o_out.sum().backward()
    for name, p in pl.named_parameters():
        np.testing.assert_allclose(dict(ol.named_parameters())[name].grad.numpy(), p.grad.numpy(),
                                   rtol=1e-3, atol=1e-5, err_msg=name)
    p_static = pl.gen_cache(paddle.to_tensor(k), paddle.to_tensor(v), type=pl.StaticCache)
    o_static = ol.gen_cache(oarlock.to_tensor(k), oarlock.to_tensor(v), type=ol.StaticCache)
    p_res = pl(paddle.to_tensor(q), None, None, None, p_static)
    o_res = ol(oarlock.to_tensor(q), None, None, None, o_static)
    np.testing.assert_allclose(o_res[0].numpy(), p_res[0].numpy(), rtol=1e-4, atol=1e-5)
    assert type(o_res[-1]) is ol.StaticCache
