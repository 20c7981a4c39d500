"""The common, activation and normalisation layers (Linear, Embedding, Dropout*, Flatten, Identity, the
activations, LayerNorm, RMSNorm, BatchNorm*, GroupNorm) and their functional ops.

- torch (optional): same weights and inputs, float32 outputs and gradients (first and second order)
  within 1e-5 relative;
- paddle (optional): where Paddle's semantics differ from torch's (the biased running variance,
  zero rows at padding_idx, flat LayerNorm weights);
- float64 numpy references and finite differences, defaults, state dicts, errors: always run.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
from oarlock import nn
from op_specs.norm import batch_norm_ref, group_norm_ref, layer_norm_ref, rms_norm_ref
from finite_differences import numeric_grad

RNG = np.random.default_rng(0)


def close(a, b, rtol=1e-5, atol=1e-6, what=""):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol,
                               atol=atol, err_msg=what)


def randn(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def upstream(shape, dtype=np.float32):
    """The output gradient both frameworks get: a fixed function of the output shape."""
    return np.random.default_rng(1).standard_normal(tuple(shape)).astype(dtype)


def run(layer, x, gout=None, **kwargs):
    """(output, input gradient or None, {parameter name: gradient}) of an oarlock layer; gout: the
    output gradient (default: upstream(output shape))."""
    xt = oarlock.to_tensor(x)
    if xt.dtype.is_floating_point:
        xt.stop_gradient = False
    y = layer(xt, **kwargs)
    y.backward(oarlock.to_tensor(upstream(y.shape, y.numpy().dtype) if gout is None else gout))
    grads = {name: p.grad.numpy() for name, p in layer.named_parameters() if p.grad is not None}
    return y.numpy(), (xt.grad.numpy() if xt.grad is not None else None), grads


def run_torch(torch, module, x):
    xt = torch.tensor(x)
    if xt.is_floating_point():
        xt.requires_grad_(True)
    y = module(xt)
    y.backward(torch.tensor(upstream(y.shape)))
    grads = {name: p.grad.numpy() for name, p in module.named_parameters() if p.grad is not None}
    return y.detach().numpy(), (xt.grad.numpy() if xt.grad is not None else None), grads


def copy_params(torch, module, layer, transpose=()):
    """Give the oarlock layer the torch module's parameters (`transpose`: names stored transposed)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            value = p.detach().numpy()
            target = getattr(layer, name)
            target.set_value((value.T if name in transpose else value).reshape(target.shape))


def compare(torch, layer, module, x, transpose=()):
    ours, theirs = run(layer, x), run_torch(torch, module, x)
    close(ours[0], theirs[0], what="output")
    if theirs[1] is not None:
        close(ours[1], theirs[1], what="input gradient")
    assert set(ours[2]) == set(theirs[2]), (set(ours[2]), set(theirs[2]))
    for name, g in theirs[2].items():
        close(ours[2][name], (g.T if name in transpose else g).reshape(ours[2][name].shape), what=f"d {name}")
    return ours, theirs


# -- torch: first-order ---------------------------------------------------------------------------------------

def test_linear_matches_torch(torch):
    module, layer = torch.nn.Linear(5, 4), nn.Linear(5, 4)
    copy_params(torch, module, layer, transpose=("weight",))
    compare(torch, layer, module, randn(3, 2, 5), transpose=("weight",))
    module, layer = torch.nn.Linear(5, 4, bias=False), nn.Linear(5, 4, bias_attr=False)
    copy_params(torch, module, layer, transpose=("weight",))
    compare(torch, layer, module, randn(7, 5), transpose=("weight",))


@pytest.mark.parametrize("options", [{}, {"padding_idx": 2}, {"padding_idx": -1}, {"scale_grad_by_freq": True},
                                     {"padding_idx": 0, "scale_grad_by_freq": True}])
def test_embedding_matches_torch(torch, options):
    module, layer = torch.nn.Embedding(10, 4, **options), nn.Embedding(10, 4, **options)
    copy_params(torch, module, layer)
    compare(torch, layer, module, np.array([[1, 2, 2, 9], [0, 2, 5, 1]], dtype=np.int64))


def test_embedding_max_norm_matches_torch(torch):
    module, layer = torch.nn.Embedding(6, 3, max_norm=1.0), nn.Embedding(6, 3, max_norm=1.0)
    with torch.no_grad():
        module.weight.mul_(3.0)
    copy_params(torch, module, layer)
    compare(torch, layer, module, np.array([0, 3, 3, 5], dtype=np.int64))
    close(layer.weight.numpy(), module.weight.detach().numpy(), what="renormalised weight")


def test_layer_norm_matches_torch(torch):
    module, layer = torch.nn.LayerNorm([3, 4]), nn.LayerNorm([3, 4])
    with torch.no_grad():
        module.weight.copy_(torch.tensor(randn(3, 4)))
        module.bias.copy_(torch.tensor(randn(3, 4)))
    copy_params(torch, module, layer)
    compare(torch, layer, module, randn(2, 5, 3, 4) * 3 + 1)
    module, layer = torch.nn.LayerNorm(6, elementwise_affine=False, eps=1e-3), nn.LayerNorm(6, 1e-3,
                                                                                              elementwise_affine=False)
    compare(torch, layer, module, randn(4, 6))


def test_rms_norm_matches_torch(torch):
    module, layer = torch.nn.RMSNorm(8, eps=1e-5), nn.RMSNorm(8, epsilon=1e-5)
    with torch.no_grad():
        module.weight.copy_(torch.tensor(randn(8)))
    copy_params(torch, module, layer)
    compare(torch, layer, module, randn(3, 5, 8))
    x = randn(4, 8)  # eps=None: the machine epsilon in both
    close(F.rms_norm(oarlock.to_tensor(x), [8]).numpy(), torch.nn.functional.rms_norm(torch.tensor(x), [8]).numpy())


@pytest.mark.parametrize("cls,torch_cls,shape", [("BatchNorm1D", "BatchNorm1d", (6, 3)),
                                                 ("BatchNorm1D", "BatchNorm1d", (4, 3, 5)),
                                                 ("BatchNorm2D", "BatchNorm2d", (2, 3, 4, 4)),
                                                 ("BatchNorm3D", "BatchNorm3d", (2, 3, 2, 2, 3))])
def test_batch_norm_matches_torch(torch, cls, torch_cls, shape):
    module, layer = getattr(torch.nn, torch_cls)(3, momentum=0.2), getattr(nn, cls)(3, momentum=0.8)
    with torch.no_grad():
        module.weight.copy_(torch.tensor(randn(3)))
        module.bias.copy_(torch.tensor(randn(3)))
    copy_params(torch, module, layer)
    x = randn(*shape) * 2 + 0.5
    compare(torch, layer, module, x)  # training: batch statistics
    close(layer._mean.numpy(), module.running_mean.numpy(), what="running mean")
    # Paddle's running variance uses the biased batch variance, torch's the unbiased one
    axes = tuple(i for i in range(x.ndim) if i != 1)
    close(layer._variance.numpy(), 0.8 + 0.2 * x.astype(np.float64).var(axis=axes), what="running variance")
    with torch.no_grad():
        module.running_var.copy_(torch.tensor(layer._variance.numpy()))
    layer.eval(), module.eval()
    compare(torch, layer, module, randn(*shape))  # eval: running statistics


def test_group_norm_matches_torch(torch):
    module, layer = torch.nn.GroupNorm(2, 6), nn.GroupNorm(2, 6)
    with torch.no_grad():
        module.weight.copy_(torch.tensor(randn(6)))
        module.bias.copy_(torch.tensor(randn(6)))
    copy_params(torch, module, layer)
    compare(torch, layer, module, randn(2, 6, 3, 3) * 2)
    module, layer = torch.nn.GroupNorm(3, 3, affine=False), nn.GroupNorm(3, 3, weight_attr=False, bias_attr=False)
    compare(torch, layer, module, randn(4, 3, 5))


def test_channel_last_formats_match_torch(torch):
    x, w, b = randn(2, 3, 3, 6), randn(6), randn(6)
    xt = torch.tensor(x).permute(0, 3, 1, 2)
    expected = torch.nn.functional.group_norm(xt, 3, torch.tensor(w), torch.tensor(b)).permute(0, 2, 3, 1)
    got = F.group_norm(oarlock.to_tensor(x), 3, 1e-5, oarlock.to_tensor(w), oarlock.to_tensor(b), "NHWC")
    close(got.numpy(), expected.numpy())
    rm, rv = oarlock.zeros([6]), oarlock.ones([6])
    expected = torch.nn.functional.batch_norm(xt, torch.zeros(6), torch.ones(6), torch.tensor(w), torch.tensor(b),
                                              training=True).permute(0, 2, 3, 1)
    got = F.batch_norm(oarlock.to_tensor(x), rm, rv, oarlock.to_tensor(w), oarlock.to_tensor(b), training=True,
                       data_format="NHWC")
    close(got.numpy(), expected.numpy())


ACTIVATIONS = [
    (lambda: nn.ReLU(), lambda t: t.nn.ReLU()),
    (lambda: nn.GELU(), lambda t: t.nn.GELU()),
    (lambda: nn.GELU(approximate=True), lambda t: t.nn.GELU(approximate="tanh")),
    (lambda: nn.SiLU(), lambda t: t.nn.SiLU()),
    (lambda: nn.Sigmoid(), lambda t: t.nn.Sigmoid()),
    (lambda: nn.Tanh(), lambda t: t.nn.Tanh()),
    (lambda: nn.Softmax(axis=1), lambda t: t.nn.Softmax(dim=1)),
    (lambda: nn.Softmax(), lambda t: t.nn.Softmax(dim=-1)),
    (lambda: nn.LeakyReLU(), lambda t: t.nn.LeakyReLU()),
    (lambda: nn.LeakyReLU(0.2), lambda t: t.nn.LeakyReLU(0.2)),
    (lambda: nn.ELU(), lambda t: t.nn.ELU()),
    (lambda: nn.ELU(0.5), lambda t: t.nn.ELU(0.5)),
    (lambda: nn.Flatten(), lambda t: t.nn.Flatten()),
    (lambda: nn.Flatten(0, 1), lambda t: t.nn.Flatten(0, 1)),
    (lambda: nn.Identity(), lambda t: t.nn.Identity()),
]


@pytest.mark.parametrize("index", range(len(ACTIVATIONS)))
def test_activation_layers_match_torch(torch, index):
    ours, theirs = ACTIVATIONS[index]
    compare(torch, ours(), theirs(torch), randn(3, 4, 5) * 3)


# -- torch: second order (the rules switch to composite formulas under create_graph) ------------------------

SECOND_ORDER = {  # name: (input shape, channels, has a bias)
    "layer_norm": ((5, 4), 4, True),
    "rms_norm": ((5, 4), 4, False),
    "group_norm": ((2, 4, 3), 4, True),
    "batch_norm_train": ((5, 3, 2), 3, True),
    "batch_norm_eval": ((5, 3, 2), 3, True),
}


def _norm_call(name, lib, x, w, b):
    if name == "layer_norm":
        return lib.layer_norm(x, [4], w, b)
    if name == "rms_norm":
        return lib.rms_norm(x, [4], w, eps=1e-5)
    if name == "group_norm":
        return lib.group_norm(x, 2, weight=w, bias=b) if lib is not F else lib.group_norm(x, 2, 1e-5, w, b)
    training = name == "batch_norm_train"
    mean, var = np.full(3, 0.2, np.float32), np.full(3, 1.5, np.float32)
    if lib is F:
        return F.batch_norm(x, oarlock.to_tensor(mean), oarlock.to_tensor(var), w, b, training=training)
    import torch
    return lib.batch_norm(x, torch.tensor(mean), torch.tensor(var), w, b, training=training)


@pytest.mark.parametrize("name", list(SECOND_ORDER))
def test_second_order_gradients_match_torch(torch, name):
    shape, c, has_bias = SECOND_ORDER[name]
    x, w, b = randn(*shape), randn(c), randn(c)
    probe = randn(*shape)

    def ours():
        xt, wt = oarlock.to_tensor(x, stop_gradient=False), oarlock.to_tensor(w, stop_gradient=False)
        bt = oarlock.to_tensor(b, stop_gradient=False) if has_bias else None
        y = _norm_call(name, F, xt, wt, bt)
        (gx,) = oarlock.grad([(y * oarlock.to_tensor(probe)).sum()], [xt], create_graph=True)
        (gx * gx).sum().backward()
        # with running statistics the gradient does not depend on x: no path back to it
        return gx.numpy(), np.zeros(shape) if xt.grad is None else xt.grad.numpy(), wt.grad.numpy()

    def theirs():
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        bt = torch.tensor(b, requires_grad=True) if has_bias else None
        y = _norm_call(name, torch.nn.functional, xt, wt, bt)
        (gx,) = torch.autograd.grad((y * torch.tensor(probe)).sum(), [xt], create_graph=True)
        (gx * gx).sum().backward()
        return gx.detach().numpy(), np.zeros(shape) if xt.grad is None else xt.grad.numpy(), wt.grad.numpy()

    for what, a, t in zip(("first order", "d/dx", "d/dweight"), ours(), theirs()):
        close(a, t, rtol=2e-5, atol=2e-6, what=f"{name} {what}")


def test_activation_second_order_matches_torch(torch):
    x = randn(4, 5) * 2
    for ours, theirs in ((lambda t: F.leaky_relu(t, 0.2), lambda t: torch.nn.functional.leaky_relu(t, 0.2)),
                         (lambda t: F.elu(t, 0.7), lambda t: torch.nn.functional.elu(t, 0.7))):
        xo = oarlock.to_tensor(x, stop_gradient=False)
        (g,) = oarlock.grad([ours(xo).sum()], [xo], create_graph=True)
        (g * g * xo).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        (gt,) = torch.autograd.grad(theirs(xt).sum(), [xt], create_graph=True)
        (gt * gt * xt).sum().backward()
        close(xo.grad.numpy(), xt.grad.numpy())


def _embedding_weight_grad(w, ids, probe, create_graph=False, **options):
    wo = oarlock.to_tensor(w, stop_gradient=False)
    y = F.embedding(oarlock.to_tensor(ids), wo, **options)
    (g,) = oarlock.grad([(y * y * oarlock.to_tensor(probe)).sum()], [wo], create_graph=create_graph)
    return wo, g


def test_embedding_second_order(torch):
    """The weight gradient of sum(embedding(ids, w)^2 * probe) depends on w: differentiating it runs the
    rule of _embedding_grad (the lookup, divided by the id counts with scale_grad_by_freq)."""
    ids, w, probe = np.array([[0, 3, 3], [1, 0, 2]]), randn(4, 3), randn(2, 3, 3)
    wo, g = _embedding_weight_grad(w, ids, probe, create_graph=True, padding_idx=1)
    (g * g).sum().backward()
    wt = torch.tensor(w, requires_grad=True)
    yt = torch.nn.functional.embedding(torch.tensor(ids), wt, padding_idx=1)
    (gt,) = torch.autograd.grad((yt * yt * torch.tensor(probe)).sum(), [wt], create_graph=True)
    (gt * gt).sum().backward()
    close(g.numpy(), gt.detach().numpy(), what="first order")
    close(wo.grad.numpy(), wt.grad.numpy(), what="second order")
    # torch's double backward ignores scale_grad_by_freq; check that case against finite differences
    w64, probe64 = w.astype(np.float64), probe.astype(np.float64)
    wo, g = _embedding_weight_grad(w64, ids, probe64, create_graph=True, scale_grad_by_freq=True)
    (g * g).sum().backward()

    def first_order_squared(w):
        return np.sum(_embedding_weight_grad(w, ids, probe64, scale_grad_by_freq=True)[1].numpy() ** 2)

    close(wo.grad.numpy(), numeric_grad(first_order_squared, [w64.copy()], 1.0)[0], rtol=1e-6, atol=1e-8)


# -- paddle: where its semantics are its own -----------------------------------------------------------------


def test_batch_norm_running_statistics_match_paddle(paddle):
    layer, reference = nn.BatchNorm1D(3, momentum=0.7), paddle.nn.BatchNorm1D(3, momentum=0.7)
    for _ in range(2):
        x = randn(4, 3, 5) * 2 + 1
        close(layer(oarlock.to_tensor(x)).numpy(), reference(paddle.to_tensor(x)).numpy())
    close(layer._mean.numpy(), reference._mean.numpy(), what="_mean")
    close(layer._variance.numpy(), reference._variance.numpy(), what="_variance")
    layer.eval(), reference.eval()
    x = randn(2, 3, 5)
    close(layer(oarlock.to_tensor(x)).numpy(), reference(paddle.to_tensor(x)).numpy())
    assert list(layer.state_dict()) == list(reference.state_dict())


def test_embedding_padding_rows_match_paddle(paddle):
    w = randn(5, 3)  # the padding row is not zero: Paddle still looks up zeros there
    ids = np.array([[0, 2, 4], [2, 2, 1]])
    ours = oarlock.to_tensor(w, stop_gradient=False)
    theirs = paddle.to_tensor(w, stop_gradient=False)
    out = F.embedding(oarlock.to_tensor(ids), ours, padding_idx=2)
    ref = paddle.nn.functional.embedding(paddle.to_tensor(ids), theirs, padding_idx=2)
    close(out.numpy(), ref.numpy())
    out.sum().backward(), ref.sum().backward()
    close(ours.grad.numpy(), theirs.grad.numpy())


def test_layer_norm_and_group_norm_match_paddle(paddle):
    layer, reference = nn.LayerNorm([3, 4]), paddle.nn.LayerNorm([3, 4])
    assert layer.weight.shape == list(reference.weight.shape) == [12]
    x = randn(2, 3, 4)
    close(layer(oarlock.to_tensor(x)).numpy(), reference(paddle.to_tensor(x)).numpy())
    x, w, b = randn(2, 2, 3, 4), randn(4), randn(4)
    close(F.group_norm(oarlock.to_tensor(x), 2, 1e-5, oarlock.to_tensor(w), oarlock.to_tensor(b), "NHWC").numpy(),
          paddle.nn.functional.group_norm(paddle.to_tensor(x), 2, 1e-5, paddle.to_tensor(w), paddle.to_tensor(b),
                                          "NHWC").numpy())


# -- float64 numpy references (always run) -------------------------------------------------------------------

def check_layer64(layer, x, ref, params):
    """The float64 layer against ref(x, *params) (numpy): output, and gradients against central differences."""
    layer.to(dtype="float64")
    for name, value in params.items():
        getattr(layer, name).set_value(value)
    arrays = [x] + [params[n].copy() for n in params]
    out = ref(*arrays)
    weights = RNG.standard_normal(out.shape)
    got, gx, gp = run(layer, x, weights)
    assert got.dtype == np.float64
    close(got, out, rtol=1e-10, atol=1e-12, what="output")
    expected = numeric_grad(ref, arrays, weights)
    close(gx, expected[0], rtol=1e-6, atol=1e-8, what="d input")
    for (name, _), g in zip(params.items(), expected[1:]):
        close(gp[name], g, rtol=1e-6, atol=1e-8, what=f"d {name}")


def test_layer_norm_float64():
    check_layer64(nn.LayerNorm([2, 3]), RNG.standard_normal((3, 2, 3)),
                  lambda x, w, b: layer_norm_ref(x, [2, 3], w, b), {"weight": randn(6, dtype=np.float64),
                                                                   "bias": randn(6, dtype=np.float64)})


def test_rms_norm_float64():
    check_layer64(nn.RMSNorm(5, epsilon=1e-5), RNG.standard_normal((3, 5)),
                  lambda x, w: rms_norm_ref(x, 5, w, eps=1e-5), {"weight": randn(5, dtype=np.float64)})


def test_group_norm_float64():
    check_layer64(nn.GroupNorm(2, 4, data_format="NHWC"), RNG.standard_normal((2, 3, 4)),
                  lambda x, w, b: group_norm_ref(x, 2, 1e-5, w, b, "NHWC"),
                  {"weight": randn(4, dtype=np.float64), "bias": randn(4, dtype=np.float64)})


def test_batch_norm_float64_training_and_running_statistics():
    layer = nn.BatchNorm2D(2, momentum=0.6)
    x = RNG.standard_normal((3, 2, 2, 2)) * 2 + 1
    check_layer64(layer, x, lambda x, w, b: batch_norm_ref(x, None, None, w, b, training=True),
                  {"weight": randn(2, dtype=np.float64), "bias": randn(2, dtype=np.float64)})
    # check_layer64 ran one training forward: one update, with the biased batch variance
    mean = 0.4 * x.mean(axis=(0, 2, 3))
    var = 0.6 + 0.4 * x.var(axis=(0, 2, 3))
    close(layer._mean.numpy(), mean, rtol=1e-12)
    close(layer._variance.numpy(), var, rtol=1e-12)
    assert layer._mean.dtype == "float64"
    layer.eval()
    y = RNG.standard_normal((2, 2, 2, 2))
    w, b = layer.weight.numpy(), layer.bias.numpy()
    close(layer(oarlock.to_tensor(y)).numpy(), batch_norm_ref(y, mean, var, w, b), rtol=1e-12)
    close(layer._mean.numpy(), mean, rtol=1e-12)  # eval leaves them alone


def test_linear_and_embedding_float64():
    w, b = RNG.standard_normal((4, 3)), RNG.standard_normal(3)
    check_layer64(nn.Linear(4, 3), RNG.standard_normal((2, 4)), lambda x, w, b: x @ w + b, {"weight": w, "bias": b})
    layer = nn.Embedding(5, 2, padding_idx=1).to(dtype="float64")
    ids = np.array([[1, 0, 4], [4, 4, 2]])
    weights = RNG.standard_normal((2, 3, 2))
    out, _, grads = run(layer, ids, weights)
    table = layer.weight.numpy()
    expected = table[ids] * (ids != 1)[..., None]
    close(out, expected, rtol=1e-12)
    dw = np.zeros((5, 2))
    np.add.at(dw, ids.reshape(-1), weights.reshape(-1, 2))
    dw[1] = 0
    close(grads["weight"], dw, rtol=1e-12, atol=1e-12)


def test_activation_layers_float64():
    x = RNG.standard_normal((3, 4)) * 2
    cases = [(nn.LeakyReLU(0.3), lambda x: np.where(x >= 0, x, 0.3 * x)),
             (nn.ELU(0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0)))),
             (nn.ReLU(), lambda x: np.maximum(x, 0)), (nn.Tanh(), np.tanh),
             (nn.Sigmoid(), lambda x: 1 / (1 + np.exp(-x))), (nn.SiLU(), lambda x: x / (1 + np.exp(-x))),
             (nn.Softmax(axis=0), lambda x: np.exp(x) / np.exp(x).sum(axis=0)),
             (nn.Flatten(0), lambda x: x.reshape(-1)), (nn.Identity(), lambda x: x)]
    for layer, ref in cases:
        weights = RNG.standard_normal(ref(x).shape)
        out, gx, _ = run(layer, x, weights)
        close(out, ref(x), rtol=1e-12, atol=1e-14, what=type(layer).__name__)
        close(gx, numeric_grad(ref, [x.copy()], weights)[0], rtol=1e-6, atol=1e-8, what=type(layer).__name__)


# -- dropout layers --------------------------------------------------------------------------------------------

def test_dropout_layers_train_eval_and_seed():
    x = oarlock.ones([40, 30])
    layer = nn.Dropout(0.25)
    oarlock.seed(3)
    first = layer(x).numpy()
    oarlock.seed(3)
    assert np.array_equal(first, layer(x).numpy())
    assert set(np.unique(first)) == {0.0, np.float32(1 / 0.75)}
    layer.eval()
    assert np.array_equal(layer(x).numpy(), x.numpy())
    down = nn.Dropout(0.25, mode="downscale_in_infer").eval()
    close(down(x).numpy(), 0.75 * x.numpy())
    channels = nn.Dropout(0.5, axis=1)(oarlock.ones([6, 8, 5])).numpy()
    assert (channels == channels[:1, :, :1]).all()
    d2 = nn.Dropout2D(0.5)(oarlock.ones([3, 8, 2, 2])).numpy()
    assert (d2 == d2[:, :, :1, :1]).all()
    d1 = nn.Dropout1D(0.5, data_format="NLC")(oarlock.ones([3, 4, 8])).numpy()
    assert (d1 == d1[:, :1, :]).all()
    d3 = nn.Dropout3D(0.5)
    assert np.array_equal(d3.eval()(oarlock.ones([1, 2, 2, 2, 2])).numpy(), np.ones([1, 2, 2, 2, 2]))


def test_dropout_in_a_model_is_deterministic_under_seed():
    data = randn(4, 6)

    def step():
        oarlock.seed(5)
        model = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Dropout(0.3), nn.LayerNorm(8), nn.Linear(8, 2))
        x = oarlock.to_tensor(data)
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss.numpy(), [p.grad.numpy() for p in model.parameters()]
    (l1, g1), (l2, g2) = step(), step()
    assert l1 == l2 and all(np.array_equal(a, b) for a, b in zip(g1, g2))


# -- defaults, parameters, state dicts ------------------------------------------------------------------------

def test_default_initialisation_and_state_dicts():
    oarlock.seed(0)
    linear = nn.Linear(100, 50)
    assert linear.weight.shape == [100, 50] and not linear.weight.stop_gradient
    limit = np.sqrt(6 / 150)
    assert np.abs(linear.weight.numpy()).max() <= limit and np.abs(linear.weight.numpy()).max() > 0.9 * limit
    assert (linear.bias.numpy() == 0).all() and list(linear.state_dict()) == ["weight", "bias"]
    assert nn.Linear(3, 4, bias_attr=False).bias is None
    emb = nn.Embedding(1000, 64, padding_idx=2)
    assert np.abs(emb.weight.numpy()).max() <= np.sqrt(6 / 1064) and (emb.weight.numpy()[2] == 0).all()
    ln = nn.LayerNorm([3, 4])
    assert ln.weight.shape == [12] and (ln.weight.numpy() == 1).all() and (ln.bias.numpy() == 0).all()
    assert list(nn.LayerNorm(4, weight_attr=False, bias_attr=False).state_dict()) == []
    assert list(nn.LayerNorm(4, bias=False).state_dict()) == ["weight"]
    bn = nn.BatchNorm2D(5)
    assert list(bn.state_dict()) == ["weight", "bias", "_mean", "_variance"]
    assert (bn._mean.numpy() == 0).all() and (bn._variance.numpy() == 1).all() and bn._mean.stop_gradient
    # Paddle lists the running statistics as parameters that take no gradient (trainable=False)
    assert [(p.shape, p.stop_gradient) for p in bn.parameters()] == [([5], False)] * 2 + [([5], True)] * 2
    assert list(nn.BatchNorm1D(3, weight_attr=False, bias_attr=False).state_dict()) == ["_mean", "_variance"]
    assert nn.BatchNorm1d is nn.BatchNorm1D and nn.BatchNorm2d is nn.BatchNorm2D and nn.BatchNorm3d is nn.BatchNorm3D
    gn = nn.GroupNorm(2, 6)
    assert list(gn.state_dict()) == ["weight", "bias"] and gn.weight.shape == [6]
    assert list(nn.RMSNorm(8).state_dict()) == ["weight"] and nn.RMSNorm(8)._epsilon == 1e-6
    assert nn.RMSNorm(8, eps=None)._epsilon is None
    restored = nn.BatchNorm2D(5)
    bn._mean.set_value(np.arange(5, dtype=np.float32))
    restored.set_state_dict(bn.state_dict())
    assert (restored._mean.numpy() == np.arange(5)).all()


def test_reprs():
    assert repr(nn.Linear(3, 4)) == "Linear(in_features=3, out_features=4, dtype=float32)"
    assert repr(nn.Embedding(10, 3, padding_idx=-1)) == \
        "Embedding(10, 3, padding_idx=-1, sparse=False, scale_grad_by_freq=False)"
    assert repr(nn.BatchNorm1D(3, data_format="NLC")) == \
        "BatchNorm1D(num_features=3, momentum=0.9, epsilon=1e-05, data_format=NLC)"
    assert repr(nn.Dropout(0.3)) == "Dropout(p=0.3, axis=None, mode=upscale_in_train)"
    assert repr(nn.Dropout2D(0.2)) == "Dropout2D(p=0.2, data_format=NCHW)"
    assert repr(nn.LayerNorm(4)) == "LayerNorm(normalized_shape=[4], epsilon=1e-05)"
    assert repr(nn.GELU()) == "GELU(approximate=False)" and repr(nn.ReLU()) == "ReLU()"


# -- errors ---------------------------------------------------------------------------------------------------

def raises(fn, *words, kind=(ValueError, TypeError)):
    with pytest.raises(kind) as info:
        fn()
    for word in words:
        assert word in str(info.value), f"the error should mention {word!r}: {info.value}"


def test_layers_name_themselves_on_bad_input():
    raises(lambda: nn.Linear(3, 4)(oarlock.ones([2, 5])), "Linear", "[*, 3]", "[2, 5]")
    raises(lambda: nn.Linear(3, 4)(oarlock.ones([])), "Linear", "[*, 3]", "0-D")
    raises(lambda: nn.Linear(3, 4)(np.ones((2, 3))), "Linear", "Tensor", "ndarray")
    raises(lambda: nn.Embedding(5, 2)(oarlock.ones([3])), "Embedding", "int64", "float32")
    raises(lambda: nn.Embedding(5, 2)(oarlock.to_tensor([1, 7])), "embedding", "7", "5 embeddings", kind=IndexError)
    raises(lambda: nn.LayerNorm([2, 3])(oarlock.ones([3, 2])), "LayerNorm", "[*, 2, 3]", "[3, 2]")
    raises(lambda: nn.RMSNorm(4)(oarlock.ones([4, 3])), "RMSNorm", "[*, 4]", "[4, 3]")
    raises(lambda: nn.BatchNorm1D(3)(oarlock.ones([3])), "BatchNorm1D", "2-D or 3-D", "1-D")
    raises(lambda: nn.BatchNorm2D(3)(oarlock.ones([2, 3, 4])), "BatchNorm2D", "4-D", "3-D input of shape [2, 3, 4]")
    raises(lambda: nn.BatchNorm2D(3)(oarlock.ones([2, 4, 2, 2])), "BatchNorm2D", "3 channels", "[2, 4, 2, 2]")
    raises(lambda: nn.BatchNorm3D(3)(oarlock.ones([2, 3, 2, 2])), "BatchNorm3D", "5-D", "4-D")
    raises(lambda: nn.GroupNorm(2, 4)(oarlock.ones([2, 6, 3])), "GroupNorm", "4 channels", "[2, 6, 3]")
    raises(lambda: nn.Dropout2D()(oarlock.ones([2, 3, 4])), "Dropout2D", "4-D", "3-D")
    raises(lambda: nn.Dropout1D()(oarlock.ones([2, 3, 4, 5])), "Dropout1D", "2-D or 3-D", "4-D")
    raises(lambda: nn.Softmax(axis=2)(oarlock.ones([2, 2])), "Softmax", "3 dimensions", "2-D")
    raises(lambda: nn.Flatten()(oarlock.ones([3])), "Flatten", "2 dimensions", "1-D")
    raises(lambda: nn.ReLU()([1.0]), "relu", "Tensor")


def test_constructors_validate_their_arguments():
    raises(lambda: nn.GroupNorm(4, 6), "GroupNorm", "6", "4")
    raises(lambda: nn.Dropout(1.5), "Dropout", "1.5")
    raises(lambda: nn.Dropout(0.5, mode="scale"), "Dropout", "mode", "scale")
    raises(lambda: nn.Dropout2D(0.5, data_format="NCL"), "Dropout2D", "data_format", "NCL")
    raises(lambda: nn.BatchNorm2D(3, data_format="NCL"), "BatchNorm2D", "data_format", "NCL")
    raises(lambda: nn.Embedding(5, 2, padding_idx=5), "Embedding", "padding_idx", "5")
    raises(lambda: nn.Linear(0, 3), "Linear", "in_features", "0")
    raises(lambda: nn.LayerNorm([]), "LayerNorm", "normalized_shape")


def test_functional_errors_name_the_op_and_argument():
    x = oarlock.ones([2, 3])
    raises(lambda: F.layer_norm(x, [4]), "layer_norm", "normalized_shape", "[2, 3]")
    raises(lambda: F.layer_norm(x, 3, oarlock.ones([4])), "layer_norm", "weight", "[3]", "[4]")
    raises(lambda: F.batch_norm(x, oarlock.zeros([2]), oarlock.ones([3]), training=True), "batch_norm",
           "running_mean", "[3]", "[2]")
    raises(lambda: F.batch_norm(x, oarlock.zeros([3]), oarlock.ones([3]), data_format="NCWH"), "batch_norm",
           "data_format", "NCWH")
    raises(lambda: F.group_norm(oarlock.ones([2, 6]), 4), "group_norm", "num_groups", "6 channels")
    raises(lambda: F.embedding(oarlock.to_tensor([0, 1]), oarlock.ones([3, 2]), padding_idx=3), "embedding",
           "padding_idx", "3")
    raises(lambda: F.embedding(oarlock.ones([2]), oarlock.ones([3, 2])), "embedding", "integer", "float32")
    raises(lambda: F.leaky_relu(oarlock.to_tensor([1, 2]), 0.1), "leaky_relu", "int64")
    raises(lambda: F.layer_norm(oarlock.to_tensor([[1, 2]]), 2), "layer_norm", "int64")
