"""Adaptive pooling (average and max, 1-D, 2-D and 3-D) against PyTorch for every relation of input and
output size along an axis: smaller, equal, larger (torch and Paddle allow an output larger than the input:
windows then overlap and repeat elements), divisible or not. Values, masks (the argmax's index in its
input plane) and the input gradient under a random upstream gradient, in float64 so the comparison is
tight; then Paddle's own CPU results for the masks and the 1-D / 3-D functions, and the layers.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F

RNG = np.random.default_rng(11)

# (input spatial size, output size): one of each relation per axis, mixed across axes
SIZES = {
    1: {"larger": ((3,), (7,)), "equal": ((5,), (5,)), "divisible": ((8,), (4,)), "not_divisible": ((10,), (4,)),
        "to_one": ((6,), (1,))},
    2: {"larger_7x7_from_2x2": ((2, 2), (7, 7)), "equal": ((5, 6), (5, 6)), "divisible": ((8, 6), (4, 3)),
        "not_divisible": ((7, 10), (3, 4)), "larger_not_divisible": ((3, 5), (4, 7)), "mixed": ((9, 2), (4, 5)),
        "to_one": ((5, 7), (1, 1))},
    3: {"larger": ((2, 3, 2), (3, 5, 4)), "equal": ((3, 4, 2), (3, 4, 2)), "divisible": ((4, 6, 2), (2, 3, 1)),
        "mixed": ((5, 2, 4), (3, 3, 4))},
}
CASES = [(nd, case) for nd in SIZES for case in SIZES[nd]]


def _ours(fn, x, up):
    xo = oarlock.to_tensor(x, stop_gradient=False)
    out = fn(xo)
    y, mask = out if isinstance(out, tuple) else (out, None)
    (y * oarlock.to_tensor(up)).sum().backward()
    return y.numpy(), None if mask is None else mask.numpy(), xo.grad.numpy()


def _torch(torch, fn, x, up):
    xt = torch.tensor(x, requires_grad=True)
    out = fn(xt)
    y, mask = out if isinstance(out, tuple) else (out, None)
    y.backward(torch.tensor(up))
    return y.detach().numpy(), None if mask is None else mask.numpy(), xt.grad.numpy()


def _compare(torch, ours, theirs, x, out_shape):
    up = RNG.standard_normal(out_shape)
    (y, mask, dx), (ty, tmask, tdx) = _ours(ours, x, up), _torch(torch, theirs, x, up)
    np.testing.assert_allclose(y, ty, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dx, tdx, rtol=1e-12, atol=1e-12)
    if tmask is not None:
        assert mask.dtype == np.int32
        np.testing.assert_array_equal(mask, tmask)


@pytest.mark.parametrize("nd,case", CASES, ids=[f"{nd}d-{c}" for nd, c in CASES])
def test_adaptive_avg_pool_every_size_relation(torch, nd, case):
    size, out = SIZES[nd][case]
    x = RNG.standard_normal((2, 3, *size))
    ours = getattr(F, f"adaptive_avg_pool{nd}d")
    theirs = getattr(torch.nn.functional, f"adaptive_avg_pool{nd}d")
    _compare(torch, lambda t: ours(t, out[0] if nd == 1 else list(out)), lambda t: theirs(t, out), x,
             (2, 3, *out))


@pytest.mark.parametrize("nd,case", CASES, ids=[f"{nd}d-{c}" for nd, c in CASES])
def test_adaptive_max_pool_every_size_relation(torch, nd, case):
    size, out = SIZES[nd][case]
    x = RNG.standard_normal((2, 3, *size))
    ours = getattr(F, f"adaptive_max_pool{nd}d")
    theirs = getattr(torch.nn.functional, f"adaptive_max_pool{nd}d")
    _compare(torch, lambda t: ours(t, out[0] if nd == 1 else list(out), return_mask=True),
             lambda t: theirs(t, out, return_indices=True), x, (2, 3, *out))


@pytest.mark.parametrize("nd", [2, 3])
def test_adaptive_avg_pool_channel_last(torch, nd):
    size, out = SIZES[nd]["mixed"]
    x = RNG.standard_normal((2, *size, 3))
    fmt = "NHWC" if nd == 2 else "NDHWC"
    perm = (0, nd + 1) + tuple(range(1, nd + 1))
    back = (0,) + tuple(range(2, nd + 2)) + (1,)
    theirs = getattr(torch.nn.functional, f"adaptive_avg_pool{nd}d")
    _compare(torch, lambda t: getattr(F, f"adaptive_avg_pool{nd}d")(t, list(out), data_format=fmt),
             lambda t: theirs(t.permute(perm), out).permute(back), x, (2, *out, 3))


def test_second_order_through_adaptive_pools(torch):
    """The gradient ops are differentiable (their own gradient is the pool again / a gather)."""
    x = RNG.standard_normal((1, 2, 3, 5))
    for ours, theirs in ((lambda t: F.adaptive_avg_pool2d(t, [4, 7]), lambda t: torch.nn.functional
                          .adaptive_avg_pool2d(t, (4, 7))),
                         (lambda t: F.adaptive_max_pool2d(t, [4, 2]), lambda t: torch.nn.functional
                          .adaptive_max_pool2d(t, (4, 2)))):
        xo = oarlock.to_tensor(x, stop_gradient=False)
        (g,) = oarlock.grad((ours(xo) ** 2).sum(), [xo], create_graph=True)
        (g * g).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        (tg,) = torch.autograd.grad((theirs(xt) ** 2).sum(), [xt], create_graph=True)
        (tg * tg).sum().backward()
        np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


PADDLE_CALLS = {
    # name: (input shape, keywords) -- the functions whose values and masks are Paddle's own convention
    "adaptive_max_pool1d": ((2, 3, 9), {"output_size": 12, "return_mask": True}),
    "adaptive_max_pool2d": ((2, 3, 5, 7), {"output_size": [3, 9], "return_mask": True}),
    "adaptive_max_pool3d": ((1, 2, 5, 6, 7), {"output_size": [2, 4, 9], "return_mask": True}),
    "adaptive_avg_pool1d": ((2, 3, 9), {"output_size": 4}),
    "adaptive_avg_pool3d": ((1, 2, 5, 6, 7), {"output_size": [2, 8, None]}),
}


@pytest.mark.parametrize("name", PADDLE_CALLS)
def test_matches_paddle(paddle, name):
    shape, kw = PADDLE_CALLS[name]
    x = RNG.standard_normal(shape).astype(np.float32)
    ours, theirs = getattr(F, name)(oarlock.to_tensor(x), **kw), getattr(paddle.nn.functional, name)(
        paddle.to_tensor(x), **kw)
    ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
    for a, b in zip(ours, theirs):
        assert a.numpy().dtype == b.numpy().dtype and a.shape == list(b.shape)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-6)


def test_layers_match_the_functions():
    x1, x2, x3 = (oarlock.to_tensor(RNG.standard_normal(s)) for s in ((2, 3, 7), (2, 3, 5, 4), (1, 2, 3, 4, 5)))
    pairs = [(nn.AdaptiveAvgPool1D(3)(x1), F.adaptive_avg_pool1d(x1, 3)),
             (nn.AdaptiveAvgPool3D([2, None, 7])(x3), F.adaptive_avg_pool3d(x3, [2, None, 7])),
             (nn.AdaptiveMaxPool1D(9)(x1), F.adaptive_max_pool1d(x1, 9)),
             (nn.AdaptiveMaxPool2D([3, 5])(x2), F.adaptive_max_pool2d(x2, [3, 5])),
             (nn.AdaptiveMaxPool3D(2, return_mask=True)(x3)[1], F.adaptive_max_pool3d(x3, 2, True)[1])]
    for a, b in pairs:
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bad_arguments_name_the_function():
    x = oarlock.to_tensor(RNG.standard_normal((2, 3, 4)))
    with pytest.raises(ValueError, match=r"adaptive_max_pool2d\(\): x must be 4-D .*got shape \[2, 3, 4\]"):
        F.adaptive_max_pool2d(x, 2)
    with pytest.raises(ValueError, match=r"adaptive_avg_pool1d\(\): output_size must be a positive int, got 0"):
        F.adaptive_avg_pool1d(x, 0)
    with pytest.raises(TypeError, match=r"adaptive_max_pool1d\(\): return_mask must be a bool, got str"):
        F.adaptive_max_pool1d(x, 2, return_mask="yes")
    with pytest.raises(ValueError, match=r"output_size must be a positive int or a list of 3"):
        F.adaptive_avg_pool3d(oarlock.to_tensor(RNG.standard_normal((1, 1, 2, 2, 2))), [2, 2])
