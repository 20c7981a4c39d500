"""Pooling windows follow PyTorch's rules (issue 16, finding 6): with ceil_mode a last window that would
start in the right padding is dropped (torch's pooling_output_shape), padding above half the kernel is
refused, and so no window is padding alone -- Paddle 3.2 keeps such windows and fills them with -FLT_MAX
(max) or nan (exclusive average). Values, max-pooling indices and gradients are compared with torch on
a grid of kernel, stride, padding and ceil_mode (pooling here has no dilation: Paddle's has none).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
from errors import raises_naming
from oracles import close, run_ours, run_torch

SIZES = ((7, 6), (4, 9))   # odd and even extents, so ceil_mode both adds a window and drops one
GRID = [(k, s, p, ceil) for k, s, p, ceil in itertools.product((2, 3, 4), (1, 2, 3), (0, 1, 2), (False, True))
        if p <= k // 2]


def _x(h, w, seed=0):
    return np.random.default_rng(seed).standard_normal((2, 3, h, w)).astype(np.float32)


@pytest.mark.parametrize("k,s,p,ceil", GRID)
def test_max_pool2d_matches_torch(torch, k, s, p, ceil):
    for h, w in SIZES:
        if k > min(h, w) + 2 * p:
            continue
        x = _x(h, w)
        out, grads, up = run_ours(lambda t: F.max_pool2d(t, k, s, p, ceil_mode=ceil), [x])
        t_out, t_grads = run_torch(torch, lambda t: torch.nn.functional.max_pool2d(t, k, s, p, ceil_mode=ceil), [x], up)
        assert out.shape == t_out.shape, (h, w)
        np.testing.assert_array_equal(out, t_out)
        np.testing.assert_allclose(grads[0], t_grads[0], rtol=1e-6, atol=1e-6)
        _, mask = F.max_pool2d(oarlock.to_tensor(x), k, s, p, return_mask=True, ceil_mode=ceil)
        _, index = torch.nn.functional.max_pool2d(torch.tensor(x), k, s, p, ceil_mode=ceil, return_indices=True)
        np.testing.assert_array_equal(mask.numpy(), index.numpy())


@pytest.mark.parametrize("k,s,p,ceil", GRID)
def test_avg_pool2d_matches_torch(torch, k, s, p, ceil):
    """exclusive=True is torch's count_include_pad=False; the inclusive divisor is clipped to input +
    padding for a ceil_mode window running past it, in Paddle and torch alike."""
    for (h, w), exclusive in itertools.product(SIZES, (True, False)):
        if k > min(h, w) + 2 * p:
            continue
        x = _x(h, w, seed=1)
        out, grads, up = run_ours(lambda t, e=exclusive: F.avg_pool2d(t, k, s, p, ceil_mode=ceil, exclusive=e), [x])
        t_out, t_grads = run_torch(torch, lambda t, e=exclusive: torch.nn.functional.avg_pool2d(
            t, k, s, p, ceil_mode=ceil, count_include_pad=not e), [x], up)
        assert out.shape == t_out.shape, (h, w, exclusive)
        close(out, t_out)
        close(grads[0], t_grads[0])


def test_ceil_mode_drops_the_window_that_starts_in_the_padding(torch):
    """The tester's case: 5x5, kernel 2, stride 2, padding 1, ceil_mode. Paddle 3.2 returns 4x4 with
    -3.4e38 (max) and nan (exclusive average) in the last row and column; torch and oarlock 3x3."""
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    expected_max = torch.nn.functional.max_pool2d(torch.tensor(x), 2, 2, 1, ceil_mode=True).numpy()
    expected_avg = torch.nn.functional.avg_pool2d(torch.tensor(x), 2, 2, 1, ceil_mode=True,
                                                  count_include_pad=False).numpy()
    got_max = F.max_pool2d(oarlock.to_tensor(x), 2, 2, 1, ceil_mode=True).numpy()
    got_avg = F.avg_pool2d(oarlock.to_tensor(x), 2, 2, 1, ceil_mode=True, exclusive=True).numpy()
    assert got_max.shape == got_avg.shape == (1, 1, 3, 3)
    np.testing.assert_array_equal(got_max, expected_max)
    np.testing.assert_allclose(got_avg, expected_avg)
    assert np.isfinite(got_max).all() and np.isfinite(got_avg).all()


@pytest.mark.parametrize("pool", ["max", "avg"])
@pytest.mark.parametrize("kernel,padding", [(2, 2), (3, 2), ((3, 4), (1, 3)), (2, [0, 0, 2, 1])])
def test_padding_above_half_the_kernel_is_refused(torch, pool, kernel, padding):
    x = oarlock.ones([1, 1, 8, 8])
    fn = F.max_pool2d if pool == "max" else F.avg_pool2d
    raises_naming(lambda: fn(x, kernel, 1, padding), ValueError, f"{pool}_pool2d", "padding",
                  "at most half of kernel_size")
    if not isinstance(padding, list):  # torch: "pad should be at most half of effective kernel size"
        tfn = torch.nn.functional.max_pool2d if pool == "max" else torch.nn.functional.avg_pool2d
        with pytest.raises(RuntimeError, match="at most half"):
            tfn(torch.ones(1, 1, 8, 8), kernel, 1, padding)


def test_layers_refuse_it_too():
    raises_naming(lambda: oarlock.nn.MaxPool2D(2, 2, padding=2)(oarlock.ones([1, 1, 5, 5])), ValueError,
                  "max_pool2d", "padding")


def test_max_pool2d_grad_refuses_indices_outside_the_plane():
    grad, mask = oarlock.ones([1, 1, 2, 2]), oarlock.to_tensor([[[[0, 1], [2, -1]]]], dtype="int32")
    raises_naming(lambda: oarlock.max_pool2d_grad(grad, mask, input_size=[4, 4]), ValueError, "max_pool2d_grad",
                  "mask", "[0, 16)")
