"""incubate's fused_rotary_position_embedding against PyTorch formulations written by others: rotate_half
(Hugging Face's apply_rotary_pos_emb, use_neox_rotary_style=False) and the interleaved pairs as complex
multiplication (Meta's Llama reference, use_neox_rotary_style=True); values and gradients of q, k, v."""

import numpy as np
import pytest

import oarlock
from oarlock.incubate.nn.functional import fused_rotary_position_embedding as rope

B, S, H, HK, D = 2, 5, 3, 1, 8


def _torch_rotate_half(torch, x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def _torch_interleaved(torch, x, angles):
    # Meta's reference: view the pairs as complex numbers and multiply by e^{i theta}
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * torch.polar(torch.ones_like(angles), angles)).flatten(-2)


def _tensors(rng, *shapes):
    return [rng.standard_normal(s).astype("float64") for s in shapes]


def _pair(torch, array):
    t = torch.tensor(array, requires_grad=True)
    o = oarlock.to_tensor(array)
    o.stop_gradient = False
    return t, o


def test_rotate_half_with_position_ids_matches_torch(torch):
    rng = np.random.default_rng(0)
    q, k, v, go_q, go_k, go_v = _tensors(rng, [B, S, H, D], [B, S, HK, D], [B, S, HK, D], [B, S, H, D],
                                         [B, S, HK, D], [B, S, HK, D])
    table = rng.uniform(0, 6, size=[16, D // 2])
    table = np.concatenate([table, table], axis=-1)       # rotate_half's cos/sin repeat over the halves
    sin, cos = np.sin(table), np.cos(table)
    pos = rng.integers(0, 16, size=[B, S])
    tq, oq = _pair(torch, q)
    tk, ok = _pair(torch, k)
    tv, ov = _pair(torch, v)
    tsin, tcos = torch.tensor(sin)[torch.tensor(pos)][:, :, None], torch.tensor(cos)[torch.tensor(pos)][:, :, None]
    want = [_torch_rotate_half(torch, t, tcos, tsin) for t in (tq, tk, tv)]
    got = rope(oq, ok, ov, sin=oarlock.to_tensor(sin).reshape([1, 16, 1, D]),
               cos=oarlock.to_tensor(cos).reshape([1, 16, 1, D]), position_ids=oarlock.to_tensor(pos),
               use_neox_rotary_style=False)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-12, atol=1e-12)
    sum(((w * torch.tensor(go)).sum() for w, go in zip(want, (go_q, go_k, go_v)))).backward()
    oarlock.autograd.backward(list(got), [oarlock.to_tensor(go) for go in (go_q, go_k, go_v)])
    for o, t in ((oq, tq), (ok, tk), (ov, tv)):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("time_major", [False, True])
def test_neox_style_default_angles_match_complex_rotation(torch, time_major):
    """Without sin/cos the angles are position * 10000^(-2j/D) for pair j (Paddle's kernel)."""
    rng = np.random.default_rng(1)
    (q, go) = _tensors(rng, [B, S, H, D], [B, S, H, D])
    angles = np.arange(S)[:, None] * 10000.0 ** (-np.arange(0, D, 2) / D)[None, :]     # [S, D/2]
    tq, _ = _pair(torch, q)
    want = _torch_interleaved(torch, tq, torch.tensor(angles)[None, :, None, :])
    (want * torch.tensor(go)).sum().backward()
    layout = (lambda a: np.ascontiguousarray(a.transpose(1, 0, 2, 3))) if time_major else (lambda a: a)
    oq = oarlock.to_tensor(layout(q).astype("float32"))
    oq.stop_gradient = False
    out, none_k, none_v = rope(oq, time_major=time_major)
    assert none_k is None and none_v is None
    np.testing.assert_allclose(layout(out.numpy()) if time_major else out.numpy(), want.detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    (out * oarlock.to_tensor(layout(go).astype("float32"))).sum().backward()
    grad = oq.grad.numpy()
    np.testing.assert_allclose(layout(grad) if time_major else grad, tq.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_given_tables_neox_style_and_sin_cos_take_no_gradient(torch):
    rng = np.random.default_rng(2)
    (q,) = _tensors(rng, [B, S, H, D])
    angles = rng.uniform(0, 6, size=[S, D // 2])
    per_number = np.repeat(angles, 2, axis=-1)             # both numbers of a pair share the angle
    sin = oarlock.to_tensor(np.sin(per_number))
    cos = oarlock.to_tensor(np.cos(per_number))
    sin.stop_gradient = cos.stop_gradient = False
    tq, oq = _pair(torch, q)
    want = _torch_interleaved(torch, tq, torch.tensor(angles)[None, :, None, :])
    out = rope(oq, sin=sin, cos=cos)[0]
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    assert sin.grad is None and cos.grad is None          # as Paddle's fused kernel: q, k, v only
    assert oq.grad is not None


def test_half_precision_keeps_dtype_and_is_close(torch):
    rng = np.random.default_rng(3)
    (q,) = _tensors(rng, [B, S, H, D])
    out = rope(oarlock.to_tensor(q.astype("float32")).astype("bfloat16"))[0]
    assert out.dtype == oarlock.bfloat16
    want = rope(oarlock.to_tensor(q.astype("float32")))[0].numpy()
    np.testing.assert_allclose(out.astype("float32").numpy(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("call, message", [
    (lambda q: rope(q.reshape([B, S, H * D])), "argument 'q' has shape"),
    (lambda q: rope(q, sin=oarlock.ones([S, D])), "only one of 'sin' and 'cos'"),
    (lambda q: rope(q, use_neox_rotary_style=False), "use_neox_rotary_style=False needs sin and cos"),
    (lambda q: rope(q, sin=oarlock.ones([S + 1, D]), cos=oarlock.ones([S + 1, D])), "argument 'sin' has shape"),
    (lambda q: rope(q, oarlock.ones([B, S + 1, H, D])), "argument 'k' has shape"),
    (lambda q: rope(q, position_ids=oarlock.zeros([B, S], dtype="int64")), "position_ids' was given without"),
])
def test_bad_input_names_the_argument(call, message):
    q = oarlock.ones([B, S, H, D])
    with pytest.raises(ValueError, match=message) as info:
        call(q)
    assert "fused_rotary_position_embedding()" in str(info.value)
