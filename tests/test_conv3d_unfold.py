"""conv3d / conv3d_transpose, unfold / fold, the Conv3D layers, compat.Unfold, and the Paddle 3.2 keyword
arguments of the conv layers (bias, dtype, device) and Embedding (the 3.2 signature, dtype, device, _weight).

Against torch (float32 values and gradients, second order), against paddle where Paddle's semantics are its
own ('same' ignoring dilation, unfold's [top, left, bottom, right] paddings, default initialisation), and
against the float64 numpy references of tests/op_specs/conv.py (always run). torch and paddle are optional.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.registry import default_registry
from op_specs.conv import conv3d_ref, conv3d_transpose_ref, fold_ref, unfold_ref
from errors import raises_naming
from oracles import close as _close
from oracles import run_ours, run_torch

RNG = np.random.default_rng(11)


def _data(*shape, scale=1.0, dtype=np.float32):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def _against_torch(torch, ours, theirs, arrays):
    """Values and the gradients of every non-None input, for one random upstream gradient."""
    out, grads, up = run_ours(ours, arrays)
    t_out, t_grads = run_torch(torch, theirs, arrays, up)
    _close(out, t_out)
    for g, tg in zip(grads, t_grads):
        if g is not None:
            _close(g, tg)


# -- conv3d and conv3d_transpose against torch ----------------------------------------------------------------

CONV3D_CASES = {
    # name: (x shape, weight shape, bias?, keywords both frameworks share)
    "plain": ((2, 3, 5, 6, 5), (4, 3, 3, 3, 3), True, {}),
    "stride_padding": ((2, 2, 7, 6, 8), (3, 2, 3, 2, 3), True, {"stride": (2, 1, 2), "padding": (1, 0, 2)}),
    "dilation_groups": ((1, 4, 7, 7, 6), (6, 2, 2, 3, 2), False, {"dilation": (2, 1, 2), "groups": 2, "padding": 1}),
    "depthwise": ((2, 3, 5, 5, 5), (6, 1, 3, 3, 3), True, {"groups": 3, "stride": 2}),
    "same": ((1, 2, 5, 6, 7), (3, 2, 2, 3, 4), True, {"padding": "same"}),
    "pointwise": ((2, 5, 3, 4, 3), (4, 5, 1, 1, 1), True, {}),
}


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # torch's note on its own zero-padded copy
@pytest.mark.parametrize("name", CONV3D_CASES)
def test_conv3d_matches_torch(torch, name):
    xs, ws, with_bias, kw = CONV3D_CASES[name]
    arrays = [_data(*xs), _data(*ws, scale=0.3), _data(ws[0]) if with_bias else None]
    _against_torch(torch, lambda x, w, b: F.conv3d(x, w, b, **kw),
                   lambda x, w, b: torch.nn.functional.conv3d(x, w, b, **kw), arrays)


TRANSPOSE3D_CASES = {
    "plain": ((2, 3, 3, 4, 3), (3, 2, 3, 3, 2), {}),
    "stride_padding_output_padding": ((1, 4, 3, 3, 4), (4, 3, 3, 2, 3),
                                      {"stride": (2, 3, 2), "padding": (1, 0, 1), "output_padding": (1, 2, 0)}),
    "groups_dilation": ((2, 6, 3, 3, 3), (6, 1, 2, 3, 2), {"groups": 3, "dilation": 2, "padding": 1}),
}


@pytest.mark.parametrize("name", TRANSPOSE3D_CASES)
def test_conv3d_transpose_matches_torch(torch, name):
    xs, ws, kw = TRANSPOSE3D_CASES[name]
    arrays = [_data(*xs), _data(*ws, scale=0.3), _data(ws[1] * kw.get("groups", 1))]
    _against_torch(torch, lambda x, w, b: F.conv3d_transpose(x, w, b, **kw),
                   lambda x, w, b: torch.nn.functional.conv_transpose3d(x, w, b, **kw), arrays)


def test_conv3d_transpose_output_size_matches_torch(torch):
    arrays = [_data(1, 3, 3, 3, 4), _data(3, 2, 3, 3, 3, scale=0.3)]
    _against_torch(torch, lambda x, w: F.conv3d_transpose(x, w, stride=2, output_size=[8, 7, 10]),
                   lambda x, w: torch.nn.functional.conv_transpose3d(x, w, stride=2, output_padding=(1, 0, 1)),
                   arrays)


@pytest.mark.parametrize("transpose", [False, True])
def test_conv3d_second_order_matches_torch(torch, transpose):
    """d/dx and d/dw of a function of the first derivatives: runs the rules of conv3d_transpose and
    conv3d_grad_weight (and their own derivatives)."""
    x, v = _data(2, 3, 5, 4, 5), _data(2, 3, 5, 4, 5)
    w = _data(3, 4, 3, 2, 3, scale=0.3) if transpose else _data(4, 3, 3, 2, 3, scale=0.3)
    if transpose:
        ours, theirs = F.conv3d_transpose, torch.nn.functional.conv_transpose3d
        kw = {"stride": 2, "padding": 1}
    else:
        ours, theirs = F.conv3d, torch.nn.functional.conv3d
        kw = {"stride": (2, 1, 2), "padding": 1, "dilation": (1, 2, 1)}
    xt, wt = oarlock.to_tensor(x, stop_gradient=False), oarlock.to_tensor(w, stop_gradient=False)
    y = ours(xt, wt, **kw)
    gx, gw = oarlock.grad((y * y).sum(), [xt, wt], create_graph=True)
    ((gx * oarlock.to_tensor(v)).sum() + (gw * gw).sum()).backward()
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    ty = theirs(tx, tw, **kw)
    tgx, tgw = torch.autograd.grad((ty * ty).sum(), [tx, tw], create_graph=True)
    ((tgx * torch.tensor(v)).sum() + (tgw * tgw).sum()).backward()
    _close(xt.grad.numpy(), tx.grad.numpy(), rtol=2e-5)
    _close(wt.grad.numpy(), tw.grad.numpy(), rtol=2e-5)


def test_conv3d_channel_last_matches_channel_first():
    x, w = _data(2, 4, 5, 6, 5, dtype=np.float64), _data(6, 2, 3, 2, 3, dtype=np.float64)
    fns = [lambda t, f: F.conv3d(t, oarlock.to_tensor(w), stride=2, padding=1, groups=2, data_format=f),
           lambda t, f: F.conv3d_transpose(t, oarlock.to_tensor(w[:4, :3]), stride=2, groups=2, data_format=f)]
    for fn in fns:
        results = []
        for f, perm, back in (("NCDHW", (0, 1, 2, 3, 4), (0, 1, 2, 3, 4)), ("NDHWC", (0, 2, 3, 4, 1), (0, 4, 1, 2, 3))):
            xt = oarlock.to_tensor(x.transpose(perm), stop_gradient=False)
            out = fn(xt, f)
            (out * out).sum().backward()
            results.append((out.numpy().transpose(back), xt.grad.numpy().transpose(back)))
        for a, b in zip(*results):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_conv3d_matches_numpy_references():
    x, w, b = _data(2, 4, 5, 4, 6, dtype=np.float64), _data(6, 2, 2, 3, 2, dtype=np.float64), _data(6, dtype=np.float64)
    t = [oarlock.to_tensor(a) for a in (x, w, b)]
    for kw in ({"stride": [2, 1, 1], "padding": [1, 0, 0, 1, 2, 1], "groups": 2},
               {"padding": "same", "dilation": 2, "groups": 2},
               {"padding": [[0, 0], [0, 0], [1, 1], [0, 2], [1, 0]], "groups": 2}):
        np.testing.assert_allclose(F.conv3d(*t, **kw).numpy(), conv3d_ref(x, w, b, **kw), rtol=1e-12, atol=1e-12)
    xt = _data(1, 6, 3, 2, 3, dtype=np.float64)
    out = F.conv3d_transpose(oarlock.to_tensor(xt), t[1], stride=[1, 2, 2], padding=1, output_padding=[0, 1, 0],
                             groups=3)
    ref = conv3d_transpose_ref(xt, w, stride=[1, 2, 2], padding=1, output_padding=[0, 1, 0], groups=3)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)


PADDLE_CONV3D = {
    "same_stride_dilation": ("conv3d", {"stride": 2, "padding": "same", "dilation": 2}),
    "pads6": ("conv3d", {"padding": [2, 0, 1, 3, 0, 1], "stride": [1, 2, 1]}),
    "pairs": ("conv3d", {"padding": [[0, 0], [0, 0], [1, 0], [0, 2], [1, 1]]}),
    "ndhwc": ("conv3d", {"padding": 1, "data_format": "NDHWC"}),
    "transpose_same": ("conv3d_transpose", {"stride": 2, "padding": "same"}),
    "transpose_output_size": ("conv3d_transpose", {"stride": 2, "output_size": [12, 15, 9]}),
}


@pytest.mark.parametrize("name", PADDLE_CONV3D)
def test_conv3d_matches_paddle(paddle, name):
    op, kw = PADDLE_CONV3D[name]
    x = _data(2, 5, 7, 4, 4) if kw.get("data_format") == "NDHWC" else _data(2, 4, 5, 7, 4)
    w = _data(4, 3, 3, 3, 2, scale=0.3) if op == "conv3d_transpose" else _data(3, 4, 3, 3, 2, scale=0.3)
    out = getattr(F, op)(oarlock.to_tensor(x), oarlock.to_tensor(w), **kw)
    expected = getattr(paddle.nn.functional, op)(paddle.to_tensor(x), paddle.to_tensor(w), **kw)
    assert out.shape == list(expected.shape)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_conv_ops_are_amp_white():
    ops = default_registry().ops
    for name in ("conv1d", "conv2d", "conv3d", "conv2d_transpose", "conv3d_transpose"):
        assert ops[name].amp == "white", name


# -- unfold / fold ----------------------------------------------------------------------------------------------

UNFOLD_CASES = {
    # name: (input shape, Paddle keywords, torch keywords)
    "k3": ((2, 3, 7, 6), {"kernel_sizes": 3}, {"kernel_size": 3}),
    "everything": ((2, 2, 9, 8), {"kernel_sizes": [2, 3], "strides": [2, 1], "paddings": [1, 2], "dilations": [2, 1]},
                   {"kernel_size": (2, 3), "stride": (2, 1), "padding": (1, 2), "dilation": (2, 1)}),
    "pointwise": ((1, 4, 3, 5), {"kernel_sizes": 1}, {"kernel_size": 1}),
    "whole_input": ((2, 2, 3, 4), {"kernel_sizes": [3, 4]}, {"kernel_size": (3, 4)}),
}


@pytest.mark.parametrize("name", UNFOLD_CASES)
def test_unfold_and_fold_match_torch(torch, name):
    shape, kw, tkw = UNFOLD_CASES[name]
    _against_torch(torch, lambda x: F.unfold(x, **kw), lambda x: torch.nn.functional.unfold(x, **tkw), [_data(*shape)])
    blocks = torch.nn.functional.unfold(torch.zeros(shape), **tkw).shape
    _against_torch(torch, lambda x: F.fold(x, list(shape[2:]), **kw),
                   lambda x: torch.nn.functional.fold(x, shape[2:], **tkw), [_data(*blocks)])


def test_unfold_second_order_matches_torch(torch):
    x = _data(2, 3, 6, 5)
    xt = oarlock.to_tensor(x, stop_gradient=False)
    y = F.unfold(xt, [2, 3], strides=2, paddings=1)
    (gx,) = oarlock.grad((y * y * y).sum(), [xt], create_graph=True)
    (gx * gx).sum().backward()
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.unfold(tx, (2, 3), stride=2, padding=1)
    (tgx,) = torch.autograd.grad((ty * ty * ty).sum(), [tx], create_graph=True)
    (tgx * tgx).sum().backward()
    _close(xt.grad.numpy(), tx.grad.numpy(), rtol=2e-5)


@pytest.mark.parametrize("paddings", [[1, 0, 2, 3], [2, 1], 1])
def test_unfold_and_fold_match_paddle(paddle, paddings):
    """Paddle's four paddings are [top, left, bottom, right] (not the convolutions' order). Paddle's F.fold
    counts the blocks as if bottom = top and right = left (ours is unfold's adjoint), so it is compared
    with symmetric paddings only."""
    x = _data(2, 3, 6, 7)
    kw = {"kernel_sizes": [3, 2], "strides": [1, 2], "paddings": paddings, "dilations": [2, 1]}
    out = F.unfold(oarlock.to_tensor(x), **kw)
    expected = paddle.nn.functional.unfold(paddle.to_tensor(x), **kw)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, atol=1e-6)
    if isinstance(paddings, list) and len(paddings) == 4:
        return
    folded = F.fold(out, [6, 7], **kw)
    np.testing.assert_allclose(folded.numpy(), paddle.nn.functional.fold(expected, [6, 7], **kw).numpy(),
                               rtol=1e-5, atol=1e-5)


def test_unfold_and_fold_match_numpy_references():
    x = RNG.standard_normal((2, 3, 7, 6))
    kw = {"kernel_sizes": [2, 3], "strides": [2, 1], "paddings": [0, 2, 1, 1], "dilations": [1, 2]}
    out = F.unfold(oarlock.to_tensor(x), **kw)
    np.testing.assert_allclose(out.numpy(), unfold_ref(x, **kw), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(F.fold(out, [7, 6], **kw).numpy(), fold_ref(out.numpy(), [7, 6], **kw),
                               rtol=1e-12, atol=1e-12)


def test_unfold_layers_match_torch(torch):
    x = _data(2, 3, 8, 7)
    layers = [(nn.Unfold([3, 2], dilations=2, paddings=1, strides=[1, 2]),
               torch.nn.Unfold((3, 2), dilation=2, padding=1, stride=(1, 2))),
              (oarlock.compat.Unfold([3, 2], 2, 1, [1, 2]), torch.nn.Unfold((3, 2), 2, 1, (1, 2))),
              (oarlock.compat.Unfold(kernel_size=2, padding=[1, 0], stride=oarlock.to_tensor([2, 1])),
               torch.nn.Unfold(2, padding=(1, 0), stride=(2, 1)))]
    for ours, theirs in layers:
        _against_torch(torch, ours, theirs, [x])
    cols = torch.nn.Unfold(3, padding=1)(torch.tensor(x))
    _against_torch(torch, nn.Fold([8, 7], 3, paddings=1), torch.nn.Fold((8, 7), 3, padding=1), [cols.numpy()])


def test_compat_unfold_is_nn_unfold_with_torch_names():
    layer = oarlock.compat.Unfold(3, dilation=1, padding=1, stride=2)
    assert isinstance(layer, nn.Unfold) and type(layer).__name__ == "Unfold"
    x = oarlock.randn([1, 2, 6, 6])
    np.testing.assert_array_equal(layer(x).numpy(), F.unfold(x, 3, strides=2, paddings=1).numpy())
    _raises(TypeError, lambda: oarlock.compat.Unfold(kernel_sizes=3), "compat.Unfold", "kernel_sizes", "nn.Unfold")
    _raises(TypeError, lambda: oarlock.compat.Unfold(), "compat.Unfold", "kernel_size")
    _raises(ValueError, lambda: oarlock.compat.Unfold(3, padding=[1, 0, 1, 0]), "compat.Unfold", "padding",
            "[1, 0, 1, 0]")


# -- layers: Conv3D, torch spellings, bias / dtype / device ---------------------------------------------------------

def _copy_params(ours, theirs):
    with oarlock.no_grad():
        ours.weight.set_value(theirs.weight.detach().numpy())
        if theirs.bias is not None:
            ours.bias.set_value(theirs.bias.detach().numpy())


LAYER_CASES = {
    "conv1d_no_bias": (lambda: nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2, bias=False),
                       lambda t: t.nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2, bias=False), (2, 4, 11)),
    "conv2d_no_bias": (lambda: nn.Conv2d(3, 5, (3, 2), padding=(1, 0), bias=False),
                       lambda t: t.nn.Conv2d(3, 5, (3, 2), padding=(1, 0), bias=False), (2, 3, 7, 6)),
    "conv3d": (lambda: nn.Conv3D(4, 6, 3, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), groups=2),
               lambda t: t.nn.Conv3d(4, 6, 3, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), groups=2),
               (2, 4, 7, 6, 5)),
    "conv3d_no_bias": (lambda: nn.Conv3d(3, 4, (2, 3, 2), bias=False),
                       lambda t: t.nn.Conv3d(3, 4, (2, 3, 2), bias=False), (1, 3, 4, 5, 4)),
    "conv3d_transpose": (lambda: nn.Conv3DTranspose(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                         lambda t: t.nn.ConvTranspose3d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
                         (2, 4, 3, 4, 3)),
}
for _mode in ("reflect", "replicate", "circular"):
    LAYER_CASES[f"conv3d_{_mode}"] = (
        lambda m=_mode: nn.Conv3d(2, 3, 3, padding=(2, 1, 1), padding_mode=m),
        lambda t, m=_mode: t.nn.Conv3d(2, 3, 3, padding=(2, 1, 1), padding_mode=m), (1, 2, 4, 5, 4))


@pytest.mark.parametrize("name", LAYER_CASES)
def test_conv_layers_match_torch(torch, name):
    """Output and the gradients of input, weight and bias (torch's Conv*d classes, with bias=False too)."""
    make_ours, make_theirs, shape = LAYER_CASES[name]
    ours, theirs = make_ours(), make_theirs(torch)
    assert (ours.bias is None) == (theirs.bias is None)
    _copy_params(ours, theirs)
    _against_torch(torch, ours, theirs, [_data(*shape)])
    theirs_params = list(theirs.parameters())
    assert len(ours.parameters()) == len(theirs_params)
    for p, tp in zip(ours.parameters(), theirs_params):
        _close(p.grad.numpy(), tp.grad.numpy())


def test_conv3d_transpose_layer_output_size_matches_torch(torch):
    ours, theirs = nn.Conv3DTranspose(3, 4, 3, stride=2), torch.nn.ConvTranspose3d(3, 4, 3, stride=2)
    _copy_params(ours, theirs)
    x = _data(1, 3, 3, 4, 3)
    out = ours(oarlock.to_tensor(x), output_size=[8, 9, 7])
    _close(out.numpy(), theirs(torch.tensor(x), output_size=[8, 9, 7]).detach().numpy())


def test_conv_layers_bias_dtype_device():
    cases = ((nn.Conv1D, 3, (1, 2, 6)), (nn.Conv2D, 3, (1, 2, 5, 5)), (nn.Conv3D, 2, (1, 2, 3, 3, 3)))
    for cls, kernel, shape in cases:
        layer = cls(2, 4, kernel, bias=False, dtype="float64", device="cpu")
        assert layer.bias is None and layer.weight.dtype == "float64" and layer.weight.place.type == "cpu"
        assert [name for name, _ in layer.named_parameters()] == ["weight"]
        out = layer(oarlock.to_tensor(RNG.standard_normal(shape)))
        assert out.dtype == "float64"
        # bias=False wins over a bias_attr; bias_attr=False alone also drops the bias
        assert cls(2, 4, kernel, bias_attr=nn.ParamAttr(), bias=False).bias is None
        assert cls(2, 4, kernel, bias_attr=False).bias is None
        assert cls(2, 4, kernel).bias.shape == [4]


def test_conv3d_layer_matches_numpy_reference():
    oarlock.seed(3)
    layer = nn.Conv3D(4, 6, (2, 3, 2), stride=[2, 1, 1], padding=[1, 0, 0, 1, 2, 1], groups=2, dtype="float64")
    x = RNG.standard_normal((2, 4, 5, 4, 6))
    out = layer(oarlock.to_tensor(x))
    ref = conv3d_ref(x, layer.weight.numpy(), layer.bias.numpy(), stride=[2, 1, 1], padding=[1, 0, 0, 1, 2, 1],
                     groups=2)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_conv3d_default_initialisation_matches_paddle(paddle):
    """Normal(0, sqrt(2 / (in_channels * prod(kernel)))) (groups not divided out), as for Conv2D."""
    oarlock.seed(0)
    paddle.seed(0)
    for ours, theirs in ((nn.Conv3D(16, 32, 3, groups=4), paddle.nn.Conv3D(16, 32, 3, groups=4)),
                         (nn.Conv3DTranspose(16, 8, 3, groups=2), paddle.nn.Conv3DTranspose(16, 8, 3, groups=2))):
        w, pw = ours.weight.numpy(), theirs.weight.numpy()
        assert w.shape == pw.shape
        np.testing.assert_allclose(w.std(), pw.std(), rtol=0.05)
        np.testing.assert_allclose(np.abs(w).max() / w.std(), np.abs(pw).max() / pw.std(), rtol=0.25)
        assert not ours.bias.numpy().any()


def test_public_names():
    assert nn.Conv1d is nn.Conv1D and nn.Conv2d is nn.Conv2D and nn.Conv3d is nn.Conv3D
    assert nn.ConvTranspose3d is nn.Conv3DTranspose and nn.ConvTranspose2d is nn.Conv2DTranspose
    assert issubclass(oarlock.compat.Unfold, nn.Unfold)
    x, w = oarlock.randn([1, 2, 3, 4, 3]), oarlock.randn([3, 2, 2, 2, 2])
    np.testing.assert_array_equal(F.conv3d(input=x, weight=w).numpy(), F.conv3d(x, w).numpy())
    # Paddle orders conv3d_transpose's arguments groups, dilation (conv2d_transpose's dilation, groups)
    wt = oarlock.randn([2, 2, 2, 2, 2])
    np.testing.assert_array_equal(F.conv3d_transpose(x, wt, None, 1, 0, 0, 2, 1).numpy(),
                                  F.conv3d_transpose(x, wt, groups=2).numpy())


# -- Embedding: Paddle 3.2's signature ---------------------------------------------------------------------------

def test_embedding_dtype_device_match_torch(torch):
    module = torch.nn.Embedding(10, 4, padding_idx=2, dtype=torch.float64, device="cpu")
    layer = nn.Embedding(10, 4, padding_idx=2, dtype="float64", device="cpu")
    assert layer.weight.dtype == "float64" and layer.weight.place.type == "cpu"
    assert not layer.weight.numpy()[2].any()
    with oarlock.no_grad():
        layer.weight.set_value(module.weight.detach().numpy())
    ids = np.array([[1, 2, 2, 9], [0, 2, 5, 1]], dtype=np.int64)
    out = layer(oarlock.to_tensor(ids))
    t_out = module(torch.tensor(ids))
    assert out.dtype == "float64"
    np.testing.assert_allclose(out.numpy(), t_out.detach().numpy(), rtol=1e-12)
    up = RNG.standard_normal(out.shape)
    out.backward(oarlock.to_tensor(up))
    t_out.backward(torch.tensor(up))
    np.testing.assert_allclose(layer.weight.grad.numpy(), module.weight.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_embedding_positional_max_norm_and_weight(torch):
    """3.2's positional order is (num_embeddings, embedding_dim, padding_idx, max_norm, norm_type)."""
    module = torch.nn.Embedding(6, 3, None, 1.0, 1.0)
    with torch.no_grad():
        module.weight.mul_(3.0)
    table = module.weight.detach().numpy().copy()
    layer = nn.Embedding(6, 3, None, 1.0, 1.0, _weight=oarlock.to_tensor(table))
    assert layer._max_norm == 1.0 and layer._norm_type == 1.0 and not layer.weight.stop_gradient
    ids = np.array([0, 3, 3, 5], dtype=np.int64)
    _close(layer(oarlock.to_tensor(ids)).numpy(), module(torch.tensor(ids)).detach().numpy())
    frozen = nn.Embedding(6, 3, _weight=oarlock.to_tensor(table), _freeze=True, padding_idx=1)
    assert frozen.weight.stop_gradient and isinstance(frozen.weight, nn.Parameter)
    assert not frozen.weight.numpy()[1].any()  # Paddle zeroes the padding row of a given table too
    np.testing.assert_array_equal(frozen.weight.numpy()[0], table[0])
    _raises(ValueError, lambda: nn.Embedding(6, 4, _weight=oarlock.to_tensor(table)), "Embedding", "_weight",
            "[6, 4]", "[6, 3]")


# -- errors ------------------------------------------------------------------------------------------------------

def _raises(kind, fn, *fragments):
    raises_naming(fn, kind, *fragments)


def test_errors_name_the_problem():
    x5, w = oarlock.randn([1, 4, 5, 5, 5]), oarlock.randn([6, 2, 3, 3, 3])
    _raises(ValueError, lambda: F.conv3d(oarlock.randn([1, 4, 5, 5]), w), "conv3d", "5-D", "[N, C, D, H, W]")
    _raises(ValueError, lambda: F.conv3d(x5, w), "conv3d", "4 channels", "expects 2")
    _raises(ValueError, lambda: F.conv3d(x5, w, groups=2, padding=[1, 2]), "padding", "[1, 2]")
    _raises(ValueError, lambda: F.conv3d(x5, w, groups=2, data_format="NCHW"), "data_format", "'NDHWC'")
    _raises(ValueError, lambda: F.conv3d(x5, oarlock.randn([6, 4, 3, 3])), "weight", "5-D", "kd, kh, kw")
    _raises(ValueError, lambda: F.conv3d_transpose(x5, oarlock.randn([4, 2, 3, 3, 3]), output_padding=1),
            "conv3d_transpose", "output_padding")
    _raises(ValueError, lambda: F.unfold(oarlock.randn([2, 3, 4]), 2), "unfold", "4-D", "[2, 3, 4]")
    _raises(ValueError, lambda: F.unfold(oarlock.randn([1, 1, 4, 4]), 2, paddings=[1, 2, 3]), "unfold", "paddings",
            "[1, 2, 3]")
    _raises(ValueError, lambda: F.unfold(oarlock.randn([1, 1, 4, 4]), 5), "unfold", "no blocks")
    _raises(ValueError, lambda: F.unfold(oarlock.randn([1, 1, 4, 4]), 2, strides=0), "strides", ">= 1")
    _raises(ValueError, lambda: F.fold(oarlock.randn([1, 8, 5]), [4, 4], 2), "fold", "[1, 8, 5]", "9")
    _raises(ValueError, lambda: nn.Unfold(2)(oarlock.randn([2, 8, 8])), "Unfold", "4-D")
    _raises(ValueError, lambda: nn.Conv3D(4, 6, 3)(oarlock.randn([1, 4, 5, 5])), "Conv3D", "5-D")
    _raises(ValueError, lambda: nn.Conv3D(4, 6, [3, 3]), "Conv3D", "kernel_size")
    _raises(ValueError, lambda: nn.Conv3D(4, 6, 3, data_format="NCHW"), "Conv3D", "data_format", "'NDHWC'")
