"""3-D and 1-D pooling and conv1d_transpose (functional and layers) against PyTorch -- values, masks and the
gradients of every input in float64 -- and against Paddle's own CPU results where Paddle's semantics are its
own (1-D argument order, 'same' padding, output_size, channel-last layouts, divisor_override)."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F

RNG = np.random.default_rng(5)


def _ours(fn, arrays, up_seed=0):
    tensors = [None if a is None else oarlock.to_tensor(a, stop_gradient=False) for a in arrays]
    out = fn(*tensors)
    y, mask = out if isinstance(out, tuple) else (out, None)
    up = np.random.default_rng(up_seed).standard_normal(y.shape)
    (y * oarlock.to_tensor(up)).sum().backward()
    return y.numpy(), mask, [None if t is None else t.grad.numpy() for t in tensors], up


def _compare(torch, ours, theirs, arrays):
    y, mask, grads, up = _ours(ours, arrays)
    tensors = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    out = theirs(*tensors)
    ty, tmask = out if isinstance(out, tuple) else (out, None)
    ty.backward(torch.tensor(up))
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    for g, t in zip(grads, tensors):
        if t is not None:
            np.testing.assert_allclose(g, t.grad.numpy(), rtol=1e-11, atol=1e-11)
    if tmask is not None:
        np.testing.assert_array_equal(mask.numpy(), tmask.numpy())


POOL3D = {
    # name: (input shape, keywords both frameworks take)
    "k2": ((2, 3, 4, 6, 4), {"kernel_size": 2}),
    "k3s2p1": ((1, 2, 7, 5, 6), {"kernel_size": 3, "stride": 2, "padding": 1}),
    "rect_ceil": ((1, 2, 6, 7, 5), {"kernel_size": (2, 3, 2), "stride": (2, 2, 1), "ceil_mode": True}),
    "rect_padding": ((1, 1, 5, 6, 7), {"kernel_size": (3, 2, 3), "stride": 1, "padding": (1, 0, 1)}),
}


@pytest.mark.parametrize("name", POOL3D)
def test_max_pool3d_matches_torch(torch, name):
    shape, kw = POOL3D[name]
    _compare(torch, lambda t: F.max_pool3d(t, return_mask=True, **kw),
             lambda t: torch.nn.functional.max_pool3d(t, return_indices=True, **kw), [RNG.standard_normal(shape)])


@pytest.mark.parametrize("exclusive", [True, False])
@pytest.mark.parametrize("name", POOL3D)
def test_avg_pool3d_matches_torch(torch, name, exclusive):
    shape, kw = POOL3D[name]
    _compare(torch, lambda t: F.avg_pool3d(t, exclusive=exclusive, **kw),
             lambda t: torch.nn.functional.avg_pool3d(t, count_include_pad=not exclusive, **kw),
             [RNG.standard_normal(shape)])


def test_pool3d_channel_last_matches_torch(torch):
    x = RNG.standard_normal((2, 5, 4, 6, 3))
    to_first, to_last = (0, 4, 1, 2, 3), (0, 2, 3, 4, 1)
    _compare(torch, lambda t: F.max_pool3d(t, 3, 2, 1, data_format="NDHWC"),
             lambda t: torch.nn.functional.max_pool3d(t.permute(to_first), 3, 2, 1).permute(to_last), [x])
    _compare(torch, lambda t: F.avg_pool3d(t, 2, 1, data_format="NDHWC"),
             lambda t: torch.nn.functional.avg_pool3d(t.permute(to_first), 2, 1).permute(to_last), [x])


POOL1D = {
    "k2": ((2, 3, 8), {"kernel_size": 2}),
    "k3s2p1": ((2, 3, 9), {"kernel_size": 3, "stride": 2, "padding": 1}),
    "ceil": ((1, 2, 10), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
}


@pytest.mark.parametrize("name", POOL1D)
def test_pool1d_matches_torch(torch, name):
    shape, kw = POOL1D[name]
    x = RNG.standard_normal(shape)
    _compare(torch, lambda t: F.max_pool1d(t, return_mask=True, **kw),
             lambda t: torch.nn.functional.max_pool1d(t, return_indices=True, **kw), [x])
    for exclusive in (True, False):
        _compare(torch, lambda t, e=exclusive: F.avg_pool1d(t, exclusive=e, **kw),
                 lambda t, e=exclusive: torch.nn.functional.avg_pool1d(t, count_include_pad=not e, **kw), [x])


CONV1D_T = {
    # name: (x shape, weight shape, bias?, keywords both frameworks take)
    "plain": ((2, 4, 7), (4, 3, 3), True, {}),
    "stride_padding_output_padding": ((2, 4, 6), (4, 2, 3), True, {"stride": 2, "padding": 1, "output_padding": 1}),
    "groups_dilation": ((1, 6, 5), (6, 2, 3), True, {"groups": 3, "dilation": 2, "padding": 2}),
    "no_bias_stride3": ((2, 2, 4), (2, 5, 4), False, {"stride": 3}),
}


@pytest.mark.parametrize("name", CONV1D_T)
def test_conv1d_transpose_matches_torch(torch, name):
    xs, ws, bias, kw = CONV1D_T[name]
    arrays = [RNG.standard_normal(xs), RNG.standard_normal(ws), RNG.standard_normal(ws[1] * kw.get("groups", 1))
              if bias else None]
    _compare(torch, lambda x, w, b: F.conv1d_transpose(x, w, b, **kw),
             lambda x, w, b: torch.nn.functional.conv_transpose1d(x, w, b, **kw), arrays)


PADDLE_CALLS = {
    # name: (functional name, positional arrays' shapes, keywords): Paddle's own conventions
    "conv1d_transpose_output_size": ("conv1d_transpose", [(2, 3, 9), (3, 2, 3)],
                                     {"stride": 2, "padding": [1, 0], "output_size": [18]}),
    "conv1d_transpose_same_nlc": ("conv1d_transpose", [(2, 9, 3), (3, 4, 3)],
                                  {"stride": 2, "padding": "same", "data_format": "NLC"}),
    "conv1d_transpose_pairs": ("conv1d_transpose", [(1, 4, 5), (4, 1, 2)],
                               {"groups": 2, "dilation": 3, "padding": [[0, 0], [0, 0], [1, 2]]}),
    "avg_pool1d_positional_order": ("avg_pool1d", [(2, 3, 9)], {}),
    # (Paddle's return_mask=True path ignores 'same' -- its max_pool2d_with_index gets zero padding and
    # gives 4 windows here, not ceil(9 / 2) = 5; oarlock gives the 'same' windows either way)
    "max_pool1d_same": ("max_pool1d", [(2, 3, 9)], {"kernel_size": 3, "stride": 2, "padding": "same"}),
    "max_pool1d_mask": ("max_pool1d", [(2, 3, 9)], {"kernel_size": 3, "stride": 2, "padding": [1],
                                                     "return_mask": True}),
    "avg_pool3d_divisor_ndhwc": ("avg_pool3d", [(1, 4, 5, 6, 2)],
                                 {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 5.0,
                                  "exclusive": False, "data_format": "NDHWC"}),
    "max_pool3d_pads6": ("max_pool3d", [(1, 2, 5, 6, 5)],
                         {"kernel_size": 3, "stride": 2, "padding": [1, 0, 0, 1, 1, 1]}),
    "max_pool3d_mask": ("max_pool3d", [(1, 2, 5, 6, 5)],
                        {"kernel_size": [3, 2, 3], "stride": [2, 1, 2], "padding": [1, 0, 1], "return_mask": True}),
}
POSITIONAL = {"avg_pool1d_positional_order": (3, 2, 1, False, True)}  # kernel, stride, padding, exclusive, ceil


@pytest.mark.parametrize("name", PADDLE_CALLS)
def test_matches_paddle(paddle, name):
    fn, shapes, kw = PADDLE_CALLS[name]
    arrays = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    extra = POSITIONAL.get(name, ())
    ours = getattr(F, fn)(*[oarlock.to_tensor(a) for a in arrays], *extra, **kw)
    theirs = getattr(paddle.nn.functional, fn)(*[paddle.to_tensor(a) for a in arrays], *extra, **kw)
    ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
    for a, b in zip(ours, theirs):
        assert a.numpy().dtype == b.numpy().dtype and a.shape == list(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_layers_match_torch(torch):
    oarlock.seed(0)
    layer = nn.Conv1DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, dilation=1)
    assert layer.weight.shape == [4, 3, 3] and layer.bias.shape == [6]
    ref = torch.nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2).double()
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(layer.weight.numpy()))
        ref.bias.copy_(torch.tensor(layer.bias.numpy()))
    x = RNG.standard_normal((2, 4, 5)).astype(np.float32)
    np.testing.assert_allclose(layer(oarlock.to_tensor(x)).numpy(), ref(torch.tensor(x).double()).detach().numpy(),
                               rtol=1e-5, atol=1e-5)
    x3 = RNG.standard_normal((2, 3, 6, 5, 4))
    x1 = RNG.standard_normal((2, 3, 9))
    pairs = [(nn.MaxPool3D(2, 2, return_mask=True)(oarlock.to_tensor(x3))[0], torch.nn.MaxPool3d(2, 2), x3),
             (nn.AvgPool3D(3, 2, 1, exclusive=False)(oarlock.to_tensor(x3)),
              torch.nn.AvgPool3d(3, 2, 1, count_include_pad=True), x3),
             (nn.MaxPool1D(3, 2)(oarlock.to_tensor(x1)), torch.nn.MaxPool1d(3, 2), x1),
             (nn.AvgPool1D(3, 2, 1, exclusive=True)(oarlock.to_tensor(x1)),
              torch.nn.AvgPool1d(3, 2, 1, count_include_pad=False), x1)]
    for ours, theirs, x in pairs:
        np.testing.assert_allclose(ours.numpy(), theirs(torch.tensor(x)).numpy(), rtol=1e-12, atol=1e-12)


def test_bad_arguments_name_the_function():
    x = oarlock.to_tensor(RNG.standard_normal((2, 3, 4, 4)))
    with pytest.raises(ValueError, match=r"max_pool3d_with_index\(\): x must be 5-D \[N, C, D, H, W\]"):
        F.max_pool3d(x, 2)
    with pytest.raises(ValueError, match=r"max_pool3d\(\): return_mask=True needs data_format='NCDHW'"):
        F.max_pool3d(oarlock.to_tensor(RNG.standard_normal((1, 2, 2, 2, 1))), 2, return_mask=True,
                     data_format="NDHWC")
    with pytest.raises(ValueError, match=r"max_pool1d\(\): x must be 3-D \[N, C, L\], got shape \[2, 3, 4, 4\]"):
        F.max_pool1d(x, 2)
    with pytest.raises(ValueError, match=r"max_pool1d\(\) \(as 2-D on a unit height\): .*must be at most half"):
        F.max_pool1d(oarlock.to_tensor(RNG.standard_normal((2, 3, 9))), 3, padding=[1, 2])
    with pytest.raises(ValueError, match=r"conv1d_transpose\(\): weight must be 3-D \[in_channels"):
        F.conv1d_transpose(oarlock.to_tensor(RNG.standard_normal((1, 2, 5))), x)
    with pytest.raises(ValueError, match=r"conv1d_transpose\(\): output_size \[30\] is not reachable"):
        F.conv1d_transpose(oarlock.to_tensor(RNG.standard_normal((1, 2, 5))),
                           oarlock.to_tensor(RNG.standard_normal((2, 2, 3))), stride=2, output_size=30)
    with pytest.raises(ValueError, match=r"data_format must be 'NCDHW' or 'NDHWC', got 'NCHW'"):
        F.avg_pool3d(oarlock.to_tensor(RNG.standard_normal((1, 2, 2, 2, 2))), 2, data_format="NCHW")
