"""Adaptive pooling against PyTorch for every relation of input and output size along an axis: smaller,
equal, larger (torch and Paddle allow an output larger than the input: windows then overlap and repeat
elements), divisible or not. Values and the input gradient under a random upstream gradient, float64 so
the comparison is tight.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F

RNG = np.random.default_rng(11)

# (input spatial size, output size): one of each relation per axis, mixed across axes
SIZES_2D = {
    "larger_7x7_from_2x2": ((2, 2), (7, 7)),
    "equal": ((5, 6), (5, 6)),
    "divisible": ((8, 6), (4, 3)),
    "not_divisible": ((7, 10), (3, 4)),
    "larger_not_divisible": ((3, 5), (4, 7)),
    "mixed": ((9, 2), (4, 5)),
    "to_one": ((5, 7), (1, 1)),
}


def _ours_and_torch(torch, ours, theirs, x):
    xo = oarlock.to_tensor(x, stop_gradient=False)
    y = ours(xo)
    up = RNG.standard_normal(y.shape)
    (y * oarlock.to_tensor(up)).sum().backward()
    xt = torch.tensor(x, requires_grad=True)
    yt = theirs(xt)
    yt.backward(torch.tensor(up))
    np.testing.assert_allclose(y.numpy(), yt.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", SIZES_2D)
def test_adaptive_avg_pool2d_every_size_relation(torch, case):
    size, out = SIZES_2D[case]
    x = RNG.standard_normal((2, 3, *size))
    _ours_and_torch(torch, lambda t: F.adaptive_avg_pool2d(t, list(out)),
                    lambda t: torch.nn.functional.adaptive_avg_pool2d(t, out), x)
