"""Convolution and pooling: the functional ops and layers against torch (float32, values and gradients
of input, weight and bias, second order), against paddle where Paddle's semantics are its own ('same'
ignoring dilation, the inclusive average's divisor, divisor_override, default initialisation), against
the float64 numpy references of tests/op_specs/conv.py (always run), and the errors bad input gives.

torch and paddle are optional: those comparisons skip cleanly without them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from errors import raises_naming
from oracles import close as _close
from oracles import run_ours as _run_ours
from oracles import run_torch as _run_torch
from op_specs.conv import (adaptive_ref, avg_pool_ref, conv1d_ref, conv2d_ref, conv2d_transpose_ref,
                           max_pool_ref)

RNG = np.random.default_rng(7)


def _data(*shape, scale=1.0, dtype=np.float32):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def _compare_with_torch(torch, ours, theirs, arrays):
    out, grads, up = _run_ours(ours, arrays)
    t_out, t_grads = _run_torch(torch, theirs, arrays, up)
    _close(out, t_out)
    for g, tg in zip(grads, t_grads):
        if tg is not None:
            _close(g, tg)


# -- torch: functional ops ----------------------------------------------------------------------------------

CONV2D_CASES = {
    # name: (x shape, weight shape, bias?, keywords shared by both frameworks)
    "plain": ((2, 3, 8, 9), (4, 3, 3, 3), True, {}),
    "stride_padding": ((2, 4, 9, 8), (6, 4, 3, 2), True, {"stride": 2, "padding": 1}),
    "rect_stride_padding": ((1, 3, 10, 7), (5, 3, 2, 3), True, {"stride": (2, 1), "padding": (2, 1)}),
    "dilation": ((2, 3, 11, 10), (4, 3, 3, 3), False, {"dilation": 2, "padding": 2}),
    "groups": ((2, 6, 8, 8), (9, 2, 3, 3), True, {"groups": 3, "padding": 1}),
    "depthwise": ((2, 4, 7, 7), (8, 1, 3, 3), True, {"groups": 4, "stride": 2}),
    "same": ((2, 3, 7, 8), (4, 3, 4, 3), True, {"padding": "same"}),
    "valid": ((2, 3, 7, 8), (4, 3, 3, 3), True, {"padding": "valid"}),
    "pointwise": ((3, 5, 6, 6), (7, 5, 1, 1), True, {}),
    "everything": ((2, 4, 12, 11), (6, 2, 3, 2), True, {"stride": (2, 3), "padding": (1, 2), "dilation": (2, 1),
                                                         "groups": 2}),
}


@pytest.mark.parametrize("name", CONV2D_CASES)
def test_conv2d_matches_torch(torch, name):
    xs, ws, with_bias, kw = CONV2D_CASES[name]
    fan_in = math.prod(ws[1:])
    arrays = [_data(*xs), _data(*ws, scale=fan_in ** -0.5), _data(ws[0]) if with_bias else None]
    _compare_with_torch(torch, lambda x, w, b: F.conv2d(x, w, b, **kw),
                        lambda x, w, b: torch.nn.functional.conv2d(x, w, b, **kw), arrays)


CONV1D_CASES = {
    "plain": ((2, 3, 11), (4, 3, 3), {}),
    "stride_padding_dilation": ((2, 4, 17), (6, 4, 3), {"stride": 2, "padding": 2, "dilation": 2}),
    "groups_same": ((2, 6, 10), (4, 3, 4), {"groups": 2, "padding": "same"}),
}


@pytest.mark.parametrize("name", CONV1D_CASES)
def test_conv1d_matches_torch(torch, name):
    xs, ws, kw = CONV1D_CASES[name]
    arrays = [_data(*xs), _data(*ws, scale=0.3), _data(ws[0])]
    _compare_with_torch(torch, lambda x, w, b: F.conv1d(x, w, b, **kw),
                        lambda x, w, b: torch.nn.functional.conv1d(x, w, b, **kw), arrays)


TRANSPOSE_CASES = {
    "plain": ((2, 3, 5, 6), (3, 4, 3, 3), {}),
    "stride_padding": ((2, 4, 5, 5), (4, 3, 3, 3), {"stride": 2, "padding": 1}),
    "output_padding": ((1, 4, 4, 5), (4, 2, 3, 2), {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2)}),
    "dilation_groups": ((2, 6, 4, 4), (6, 2, 3, 3), {"dilation": 2, "groups": 3, "padding": 1}),
    "dilation_beyond_stride": ((1, 2, 4, 4), (2, 3, 3, 3), {"stride": 2, "dilation": 3, "output_padding": 2}),
}


@pytest.mark.parametrize("name", TRANSPOSE_CASES)
def test_conv2d_transpose_matches_torch(torch, name):
    xs, ws, kw = TRANSPOSE_CASES[name]
    arrays = [_data(*xs), _data(*ws, scale=0.3), _data(ws[1] * kw.get("groups", 1))]
    _compare_with_torch(torch, lambda x, w, b: F.conv2d_transpose(x, w, b, **kw),
                        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, **kw), arrays)


def test_conv2d_transpose_output_size_matches_torch(torch):
    arrays = [_data(2, 3, 5, 5), _data(3, 2, 3, 3, scale=0.3), None]
    _compare_with_torch(torch, lambda x, w, b: F.conv2d_transpose(x, w, stride=2, padding=1, output_size=[10, 9]),
                        lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1,
                                                                             output_padding=(1, 0)), arrays)


POOL_CASES = {
    # name: (x shape, paddle keywords, torch keywords)
    "k2": ((2, 3, 8, 8), {"kernel_size": 2}, {"kernel_size": 2}),
    "k3s2p1": ((2, 3, 9, 8), {"kernel_size": 3, "stride": 2, "padding": 1},
               {"kernel_size": 3, "stride": 2, "padding": 1}),
    "rect": ((1, 2, 9, 10), {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)},
             {"kernel_size": (3, 2), "stride": (2, 1), "padding": (1, 0)}),
    "ceil": ((1, 3, 8, 9), {"kernel_size": 3, "stride": 2, "ceil_mode": True},
             {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
}


@pytest.mark.parametrize("name", POOL_CASES)
def test_max_pool2d_matches_torch(torch, name):
    xs, kw, tkw = POOL_CASES[name]
    x = _data(*xs)
    _compare_with_torch(torch, lambda t: F.max_pool2d(t, **kw), lambda t: torch.nn.functional.max_pool2d(t, **tkw),
                        [x])
    _, mask = F.max_pool2d(oarlock.to_tensor(x), return_mask=True, **kw)
    _, indices = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **tkw)
    assert mask.dtype == "int32"
    np.testing.assert_array_equal(mask.numpy(), indices.numpy())


@pytest.mark.parametrize("name,exclusive", [(n, e) for n in POOL_CASES for e in (True, False)])
def test_avg_pool2d_matches_torch(torch, name, exclusive):
    xs, kw, tkw = POOL_CASES[name]
    _compare_with_torch(torch, lambda t: F.avg_pool2d(t, exclusive=exclusive, **kw),
                        lambda t: torch.nn.functional.avg_pool2d(t, count_include_pad=not exclusive, **tkw),
                        [_data(*xs)])


def test_avg_pool2d_divisor_override_matches_torch_without_padding(torch):
    # without padding every window is full, so Paddle's avg * kh*kw / divisor is torch's sum / divisor
    _compare_with_torch(torch, lambda t: F.avg_pool2d(t, 3, 2, divisor_override=4),
                        lambda t: torch.nn.functional.avg_pool2d(t, 3, 2, divisor_override=4), [_data(2, 3, 9, 8)])


@pytest.mark.parametrize("size", [1, 2, 3, (4, 3), (5, 7)])
def test_adaptive_avg_pool2d_matches_torch(torch, size):
    _compare_with_torch(torch, lambda t: F.adaptive_avg_pool2d(t, size),
                        lambda t: torch.nn.functional.adaptive_avg_pool2d(t, size), [_data(2, 3, 10, 7)])


def test_conv2d_second_order_matches_torch(torch):
    """d/dw of <d loss/dx, v>: runs conv2d_transpose's and conv2d_grad_weight's own rules."""
    x, w, v = _data(2, 3, 7, 7), _data(4, 3, 3, 3, scale=0.3), _data(2, 3, 7, 7)
    kw = {"stride": 2, "padding": 1, "dilation": 1}
    xt, wt = oarlock.to_tensor(x, stop_gradient=False), oarlock.to_tensor(w, stop_gradient=False)
    y = F.conv2d(xt, wt, **kw)
    gx, gw = oarlock.grad((y * y).sum(), [xt, wt], create_graph=True)
    ((gx * oarlock.to_tensor(v)).sum() + (gw * gw).sum()).backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = torch.nn.functional.conv2d(tx, tw, **kw)
    tgx, tgw = torch.autograd.grad((ty * ty).sum(), [tx, tw], create_graph=True)
    ((tgx * torch.tensor(v)).sum() + (tgw * tgw).sum()).backward()
    _close(xt.grad.numpy(), tx.grad.numpy(), rtol=2e-5)
    _close(wt.grad.numpy(), tw.grad.numpy(), rtol=2e-5)


def test_pooling_second_order_matches_torch(torch):
    x = _data(2, 2, 7, 7)
    for ours, theirs in ((lambda t: F.max_pool2d(t, 3, 2, 1), lambda t: torch.nn.functional.max_pool2d(t, 3, 2, 1)),
                         (lambda t: F.avg_pool2d(t, 3, 2, 1), lambda t: torch.nn.functional.avg_pool2d(
                             t, 3, 2, 1, count_include_pad=False)),
                         (lambda t: F.adaptive_avg_pool2d(t, 3),
                          lambda t: torch.nn.functional.adaptive_avg_pool2d(t, 3))):
        xt = oarlock.to_tensor(x, stop_gradient=False)
        (g,) = oarlock.grad((ours(xt) ** 3).sum(), xt, create_graph=True)
        (g * g).sum().backward()
        tx = torch.tensor(x, requires_grad=True)
        (tg,) = torch.autograd.grad((theirs(tx) ** 3).sum(), tx, create_graph=True)
        (tg * tg).sum().backward()
        _close(xt.grad.numpy(), tx.grad.numpy())


# -- torch: layers ---------------------------------------------------------------------------------------------

def _copy_params(ours, theirs):
    with oarlock.no_grad():
        ours.weight.set_value(theirs.weight.detach().numpy())
        if theirs.bias is not None:
            ours.bias.set_value(theirs.bias.detach().numpy())


LAYER_CASES = {
    "conv1d": (lambda: nn.Conv1D(4, 6, 3, stride=2, padding=1, groups=2),
               lambda t: t.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 13)),
    "conv2d": (lambda: nn.Conv2D(3, 8, (3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)),
               lambda t: t.nn.Conv2d(3, 8, (3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1)), (2, 3, 9, 10)),
    "conv2d_alias_no_bias": (lambda: nn.Conv2d(4, 4, 3, padding="same", groups=4, bias_attr=False),
                             lambda t: t.nn.Conv2d(4, 4, 3, padding="same", groups=4, bias=False), (2, 4, 6, 7)),
    "conv2d_transpose": (lambda: nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                         lambda t: t.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                         (2, 4, 5, 6)),
    "conv_transpose2d_alias": (lambda: nn.ConvTranspose2d(3, 2, (2, 3), stride=(2, 1), dilation=2),
                               lambda t: t.nn.ConvTranspose2d(3, 2, (2, 3), stride=(2, 1), dilation=2), (1, 3, 4, 4)),
}
for _mode in ("reflect", "replicate", "circular"):
    LAYER_CASES[f"conv2d_{_mode}"] = (
        lambda m=_mode: nn.Conv2D(3, 5, 3, padding=(2, 1), padding_mode=m),
        lambda t, m=_mode: t.nn.Conv2d(3, 5, 3, padding=(2, 1), padding_mode=m), (2, 3, 6, 7))
    LAYER_CASES[f"conv1d_{_mode}"] = (
        lambda m=_mode: nn.Conv1d(2, 3, 3, padding=2, padding_mode=m),
        lambda t, m=_mode: t.nn.Conv1d(2, 3, 3, padding=2, padding_mode=m), (2, 2, 5))


@pytest.mark.parametrize("name", LAYER_CASES)
def test_conv_layers_match_torch(torch, name):
    make_ours, make_theirs, shape = LAYER_CASES[name]
    ours, theirs = make_ours(), make_theirs(torch)
    _copy_params(ours, theirs)
    x = _data(*shape)
    out, (gx,), up = _run_ours(ours, [x])
    tx = torch.tensor(x, requires_grad=True)
    t_out = theirs(tx)
    t_out.backward(torch.tensor(up))
    _close(out, t_out.detach().numpy())
    _close(gx, tx.grad.numpy())
    _close(ours.weight.grad.numpy(), theirs.weight.grad.numpy())
    if theirs.bias is not None:
        _close(ours.bias.grad.numpy(), theirs.bias.grad.numpy())
    else:
        assert ours.bias is None


def test_conv2d_transpose_layer_output_size_matches_torch(torch):
    ours, theirs = nn.Conv2DTranspose(3, 4, 3, stride=2), torch.nn.ConvTranspose2d(3, 4, 3, stride=2)
    _copy_params(ours, theirs)
    x = _data(2, 3, 4, 4)
    out = ours(oarlock.to_tensor(x), output_size=[10, 9])
    expected = theirs(torch.tensor(x), output_size=[10, 9])
    _close(out.numpy(), expected.detach().numpy())


def test_pool_layers_match_torch(torch):
    x = _data(2, 3, 9, 8)
    pairs = [(nn.MaxPool2D(3, 2, 1), torch.nn.MaxPool2d(3, 2, 1)),
             (nn.AvgPool2D(2, ceil_mode=True), torch.nn.AvgPool2d(2, ceil_mode=True)),
             (nn.AvgPool2D(3, 2, 1, exclusive=False), torch.nn.AvgPool2d(3, 2, 1)),
             (nn.AdaptiveAvgPool2D((2, 3)), torch.nn.AdaptiveAvgPool2d((2, 3))),
             (nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1))]
    for ours, theirs in pairs:
        out, (gx,), up = _run_ours(ours, [x])
        t_out, (tgx,) = _run_torch(torch, theirs, [x], up)
        _close(out, t_out)
        _close(gx, tgx)
    out, mask = nn.MaxPool2D(2, return_mask=True)(oarlock.to_tensor(x))
    _, indices = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x))
    np.testing.assert_array_equal(mask.numpy(), indices.numpy())


def test_channel_last_matches_channel_first():
    """NHWC / NLC give the channel-first results with the axes moved (values and gradients)."""
    x = _data(2, 4, 7, 6, dtype=np.float64)
    w = _data(6, 2, 3, 3, dtype=np.float64)
    first = [lambda t: F.conv2d(t, oarlock.to_tensor(w), stride=2, padding=1, groups=2, data_format=f),
             lambda t: F.conv2d_transpose(t, oarlock.to_tensor(w[:4, :2]), stride=2, groups=2, data_format=f),
             lambda t: F.max_pool2d(t, 3, 2, 1, data_format=f),
             lambda t: F.avg_pool2d(t, 2, ceil_mode=True, data_format=f),
             lambda t: F.adaptive_avg_pool2d(t, [3, 4], data_format=f)]
    for fn in first:
        results = {}
        for f, perm in (("NCHW", (0, 1, 2, 3)), ("NHWC", (0, 2, 3, 1))):
            xt = oarlock.to_tensor(x.transpose(perm), stop_gradient=False)
            out = fn(xt)  # the lambdas read the loop's `f`
            (out * out).sum().backward()
            back = (0, 3, 1, 2) if f == "NHWC" else perm
            results[f] = (out.numpy().transpose(back), xt.grad.numpy().transpose(back))
        for a, b in zip(results["NCHW"], results["NHWC"]):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# -- paddle: Paddle's own semantics ------------------------------------------------------------------------------

def _paddle_compare(paddle, ours, theirs, x, *extra):
    out = ours(oarlock.to_tensor(x), *[oarlock.to_tensor(e) for e in extra])
    expected = theirs(paddle.to_tensor(x), *[paddle.to_tensor(e) for e in extra])
    outs = out if isinstance(out, tuple) else (out,)
    expecteds = expected if isinstance(expected, tuple) else (expected,)
    for o, e in zip(outs, expecteds):
        assert o.shape == list(e.shape)
        np.testing.assert_allclose(o.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)


PADDLE_FUNCTIONAL = {
    "conv2d_same_stride_dilation": ("conv2d", {"stride": 2, "padding": "same", "dilation": 2}, True),
    "conv2d_pairs": ("conv2d", {"padding": [[0, 0], [0, 0], [1, 2], [0, 1]]}, True),
    "conv2d_pads4": ("conv2d", {"padding": [2, 0, 1, 3], "stride": 2}, True),
    "conv2d_nhwc": ("conv2d", {"padding": 1, "data_format": "NHWC"}, True),
    "conv2d_transpose_same": ("conv2d_transpose", {"stride": 2, "padding": "same"}, True),
    "conv2d_transpose_output_size": ("conv2d_transpose", {"stride": 3, "output_size": [22, 26]}, True),
    # ceil_mode where Paddle's windows are torch's (none would start in the padding: where one would,
    # Paddle keeps it and fills it with -FLT_MAX or nan, oarlock drops it as torch does; test_pool_windows.py)
    "max_pool_ceil": ("max_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                     "return_mask": True}, False),
    # (not with return_mask: paddle's max_pool2d_with_index pools 'same' into a different, smaller output)
    "max_pool_same": ("max_pool2d", {"kernel_size": 3, "padding": "same"}, False),
    "avg_pool_ceil_exclusive": ("avg_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, False),
    # the last window runs past the padding: Paddle (and torch) divide by the cells inside input + padding
    "avg_pool_ceil_inclusive": ("avg_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                               "exclusive": False}, False),
    "avg_pool_divisor_exclusive": ("avg_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1,
                                                  "divisor_override": 2}, False),
    "avg_pool_nhwc": ("avg_pool2d", {"kernel_size": 2, "padding": [1, 0], "data_format": "NHWC"}, False),
    "adaptive_keep_height": ("adaptive_avg_pool2d", {"output_size": [None, 3]}, False),
}


@pytest.mark.parametrize("name", PADDLE_FUNCTIONAL)
def test_functional_matches_paddle(paddle, name):
    op, kw, with_weight = PADDLE_FUNCTIONAL[name]
    channel_last = kw.get("data_format") == "NHWC"
    x = _data(2, 7, 8, 4) if channel_last else _data(2, 4, 7, 8)
    weight = _data(4, 3, 3, 3, scale=0.3) if op == "conv2d_transpose" else _data(3, 4, 3, 3, scale=0.3)
    extra = (weight,) if with_weight else ()
    _paddle_compare(paddle, lambda *t: getattr(F, op)(*t, **kw),
                    lambda *t: getattr(paddle.nn.functional, op)(*t, **kw), x, *extra)


def test_default_initialisation_matches_paddle(paddle):
    """Conv weights ~ Normal(0, sqrt(2 / (in_channels * k*k))) (groups not divided out); transposed conv
    weights Xavier-uniform over their own fans; biases zero. Compared by statistics with paddle's."""
    oarlock.seed(0)
    paddle.seed(0)
    for ours, theirs in ((nn.Conv2D(32, 64, 3, groups=4), paddle.nn.Conv2D(32, 64, 3, groups=4)),
                         (nn.Conv1D(16, 64, 5), paddle.nn.Conv1D(16, 64, 5)),
                         (nn.Conv2DTranspose(32, 16, 3, groups=2), paddle.nn.Conv2DTranspose(32, 16, 3, groups=2))):
        w, pw = ours.weight.numpy(), theirs.weight.numpy()
        assert w.shape == pw.shape and ours.weight.dtype == "float32"
        np.testing.assert_allclose(w.std(), pw.std(), rtol=0.05)
        np.testing.assert_allclose(np.abs(w).max() / w.std(), np.abs(pw).max() / pw.std(), rtol=0.25)
        assert abs(w.mean()) < 0.1 * w.std()
        assert not ours.bias.numpy().any() and not theirs.bias.numpy().any()


# -- float64 numpy references (always run) ------------------------------------------------------------------------

def _layer64(make):
    oarlock.seed(1)
    return make()


def _params64(layer):
    with oarlock.no_grad():
        layer.to(dtype="float64")
    return layer.weight.numpy(), None if layer.bias is None else layer.bias.numpy()


def test_conv_layers_match_numpy_references():
    cases = [
        (lambda: nn.Conv2D(4, 6, 3, stride=2, padding=[1, 0, 2, 1], groups=2), (2, 4, 8, 7),
         lambda x, w, b: conv2d_ref(x, w, b, stride=2, padding=[1, 0, 2, 1], groups=2)),
        (lambda: nn.Conv2D(3, 2, (2, 3), padding="same", dilation=2, bias_attr=False), (1, 3, 6, 5),
         lambda x, w, b: conv2d_ref(x, w, None, padding="same")),
        (lambda: nn.Conv1D(2, 4, 3, stride=2, padding=1, data_format="NLC"), (2, 9, 2),
         lambda x, w, b: conv1d_ref(x, w, b, stride=2, padding=1, data_format="NLC")),
        (lambda: nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2), (1, 4, 3, 4),
         lambda x, w, b: conv2d_transpose_ref(x, w, b, stride=2, padding=1, output_padding=1, groups=2)),
    ]
    for make, shape, ref in cases:
        layer = _layer64(make)
        w, b = _params64(layer)
        x = RNG.standard_normal(shape)
        out = layer(oarlock.to_tensor(x))
        assert out.dtype == "float64"
        np.testing.assert_allclose(out.numpy(), ref(x, w, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_padding_modes_match_numpy(mode):
    layer = _layer64(lambda: nn.Conv2D(2, 3, 3, padding=[2, 1], padding_mode=mode))
    w, b = _params64(layer)
    x = RNG.standard_normal((2, 2, 5, 4))
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (1, 1)), mode={"replicate": "edge", "circular": "wrap"}.get(mode, mode))
    np.testing.assert_allclose(layer(oarlock.to_tensor(x)).numpy(), conv2d_ref(padded, w, b), rtol=1e-12, atol=1e-12)


def test_pool_layers_match_numpy_references():
    x = RNG.standard_normal((2, 3, 9, 8))
    t = oarlock.to_tensor(x)
    out, mask = nn.MaxPool2D(3, 2, 1, return_mask=True, ceil_mode=True)(t)
    ref_out, ref_mask = max_pool_ref(x, 3, 2, 1, ceil_mode=True)
    np.testing.assert_array_equal(out.numpy(), ref_out)
    np.testing.assert_array_equal(mask.numpy(), ref_mask)
    np.testing.assert_allclose(nn.AvgPool2D(3, 2, 1, exclusive=False, divisor_override=5)(t).numpy(),
                               avg_pool_ref(x, 3, 2, 1, exclusive=False, divisor_override=5), rtol=1e-12)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2D([4, 3])(t).numpy(), adaptive_ref(x, [4, 3]), rtol=1e-12)


def test_max_pool_nan_and_minus_inf():
    """nan wins its window (like torch); a window whose input is all -inf points at its first input element."""
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 1, 1] = np.nan
    x[0, 0, 0, 0] = x[0, 0, 2:, 3] = -np.inf
    out, mask = F.max_pool2d(oarlock.to_tensor(x), 2, 2, 1, return_mask=True)  # windows start at -1, 1, 3
    out, mask = out.numpy()[0, 0], mask.numpy()[0, 0]
    assert np.isnan(out[1, 1]) and mask[1, 1] == 5
    assert out[0, 0] == -np.inf and mask[0, 0] == 0  # padding came first in that window, but isn't chosen
    assert out[2, 2] == -np.inf and mask[2, 2] == 15
    assert out[1, 2] == 0 and mask[1, 2] == 7  # window rows 1-2, col 3: the zero beats the -inf below it


def test_bfloat16_computes_in_float32():
    x, w = _data(2, 3, 6, 6), _data(4, 3, 3, 3, scale=0.2)
    out = F.conv2d(oarlock.to_tensor(x).astype("bfloat16"), oarlock.to_tensor(w).astype("bfloat16"), padding=1)
    assert out.dtype == "bfloat16"
    xb = oarlock.to_tensor(x).astype("bfloat16").astype("float64").numpy()
    wb = oarlock.to_tensor(w).astype("bfloat16").astype("float64").numpy()
    np.testing.assert_allclose(out.astype("float64").numpy(), conv2d_ref(xb, wb, padding=1), rtol=1e-2, atol=1e-2)


# -- errors ---------------------------------------------------------------------------------------------------------

def _raises(error, fn, *fragments):
    raises_naming(fn, error, *fragments)


def test_functional_errors_name_the_problem():
    x4, w = oarlock.randn([2, 4, 8, 8]), oarlock.randn([6, 2, 3, 3])
    _raises(ValueError, lambda: F.conv2d(oarlock.randn([4, 8, 8]), w), "conv2d", "4-D", "[4, 8, 8]")
    _raises(ValueError, lambda: F.conv2d(x4, w), "conv2d", "4 channels", "expects 2")
    _raises(ValueError, lambda: F.conv2d(x4, oarlock.randn([6, 4, 3, 3]), groups=3), "not divisible by groups=3")
    _raises(ValueError, lambda: F.conv2d(x4, w, groups=2, padding="full"), "padding", "'full'")
    _raises(ValueError, lambda: F.conv2d(x4, w, groups=2, padding=[1, 2, 3]), "padding", "[1, 2, 3]")
    _raises(ValueError, lambda: F.conv2d(x4, w, groups=2, stride=0), "stride", ">= 1")
    _raises(ValueError, lambda: F.conv2d(x4, w, oarlock.randn([5]), groups=2), "bias", "[6]")
    _raises(ValueError, lambda: F.conv2d(x4, w, groups=2, data_format="NCWH"), "data_format", "'NHWC'")
    _raises(ValueError, lambda: F.conv2d(oarlock.randn([1, 4, 2, 2]), w, groups=2), "smaller than the kernel")
    _raises(ValueError, lambda: F.conv1d(x4, oarlock.randn([2, 4, 3])), "conv1d", "3-D", "[N, C, L]")
    _raises(ValueError, lambda: F.conv2d_transpose(x4, oarlock.randn([4, 2, 3, 3]), stride=2, output_size=[30, 17]),
            "output_size", "[17, 17]")
    _raises(ValueError, lambda: F.conv2d_transpose(x4, oarlock.randn([4, 2, 3, 3]), output_padding=1),
            "output_padding", "max(stride, dilation)")
    _raises(ValueError, lambda: F.conv2d_transpose(x4, oarlock.randn([3, 2, 3, 3])), "4 channels", "expects 3")
    _raises(ValueError, lambda: F.max_pool2d(x4, 2, return_mask=True, data_format="NHWC"), "return_mask")
    _raises(ValueError, lambda: F.max_pool2d(x4, 9), "kernel_size", "larger")
    _raises(ValueError, lambda: F.avg_pool2d(x4, 2, padding="valid", ceil_mode=True), "ceil_mode")
    _raises(ValueError, lambda: F.avg_pool2d(x4, 2, divisor_override=0), "divisor_override")
    _raises(ValueError, lambda: F.adaptive_avg_pool2d(x4, [2, 0]), "output_size", "[2, 0]")
    _raises(ValueError, lambda: F.adaptive_avg_pool2d(oarlock.randn([4, 8]), 2), "adaptive_avg_pool2d", "4-D")
    _raises(ValueError, lambda: F.conv2d(x4.astype("int32"), w.astype("int32"), groups=2), "conv2d", "int32")


def test_layer_errors_name_the_layer():
    _raises(ValueError, lambda: nn.Conv2D(6, 4, 3, groups=4), "Conv2D", "in_channels=6", "groups=4")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3, groups=4), "Conv2D", "out_channels=6", "groups=4")
    _raises(ValueError, lambda: nn.Conv2D(0, 6, 3), "Conv2D", "in_channels")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, [3, 3, 3]), "Conv2D", "kernel_size")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3, stride=0), "Conv2D", "stride", "got 0")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3, padding="full"), "Conv2D", "padding", "'full'")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3, padding_mode="mirror"), "Conv2D", "padding_mode", "'reflect'")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3, padding="same", padding_mode="reflect"), "Conv2D", "numeric")
    _raises(ValueError, lambda: nn.Conv1D(4, 6, 3, data_format="NCHW"), "Conv1D", "data_format", "'NLC'")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3)(oarlock.randn([4, 8, 8])), "Conv2D", "4-D", "[4, 8, 8]")
    _raises(ValueError, lambda: nn.Conv2D(4, 6, 3)(oarlock.randn([1, 3, 8, 8])), "Conv2D", "4 channels",
            "[1, 3, 8, 8]")
    _raises(ValueError, lambda: nn.Conv1D(4, 6, 3)(oarlock.randn([2, 4, 8, 8])), "Conv1D", "3-D", "[N, C, L]")
    _raises(ValueError, lambda: nn.Conv2DTranspose(4, 6, 3)(oarlock.randn([1, 6, 8, 8])), "Conv2DTranspose",
            "4 channels")
    _raises(ValueError, lambda: nn.Conv2D(2, 2, 3, padding=4, padding_mode="reflect")(oarlock.randn([1, 2, 4, 4])),
            "Conv2D", "too large")
    _raises(ValueError, lambda: nn.MaxPool2D(2)(oarlock.randn([2, 8, 8])), "MaxPool2D", "4-D", "[2, 8, 8]")
    _raises(ValueError, lambda: nn.AvgPool2D(2, data_format="NCL"), "AvgPool2D", "data_format")
    _raises(TypeError, lambda: nn.AdaptiveAvgPool2D(2)(np.zeros((1, 1, 4, 4))), "AdaptiveAvgPool2D", "Tensor")


def test_public_names():
    assert nn.Conv2d is nn.Conv2D and nn.Conv1d is nn.Conv1D and nn.ConvTranspose2d is nn.Conv2DTranspose
    assert nn.AdaptiveAvgPool2d is nn.AdaptiveAvgPool2D
    x, w = oarlock.randn([1, 2, 5, 5]), oarlock.randn([3, 2, 3, 3])
    np.testing.assert_array_equal(F.conv2d(input=x, weight=w).numpy(), F.conv2d(x, w).numpy())
