"""linear's first-order backward runs as one fused op (_linear_grad); a backward that is itself recorded
(create_graph) keeps the composite of public ops, so higher orders stay differentiable. Both against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
from oarlock_ops import linalg

torch = pytest.importorskip("torch")


@pytest.fixture
def fused_calls(monkeypatch):
    calls = []
    real = linalg._linear_grad_op

    def counting(*args):
        calls.append(args[3:])
        return real(*args)
    monkeypatch.setattr(linalg, "_linear_grad_op", counting)
    return calls


@pytest.mark.parametrize("bias", [True, False])
def test_first_order_is_one_fused_op_with_torchs_gradients(fused_calls, bias):
    rng = np.random.default_rng(0)
    x, w, b, g = (rng.standard_normal(s).astype(np.float32) for s in ((4, 6, 5), (5, 3), (3,), (4, 6, 3)))
    xo, wo = oarlock.to_tensor(x, stop_gradient=False), oarlock.to_tensor(w, stop_gradient=False)
    bo = oarlock.to_tensor(b, stop_gradient=False) if bias else None
    F.linear(xo, wo, bo).backward(oarlock.to_tensor(g))
    assert fused_calls == [(True, True, bias)]
    xt, wt, bt = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    (xt @ wt + (bt if bias else 0)).backward(torch.tensor(g))
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(wo.grad.numpy(), wt.grad.numpy(), rtol=1e-6, atol=1e-6)
    if bias:
        np.testing.assert_allclose(bo.grad.numpy(), bt.grad.numpy(), rtol=1e-6, atol=1e-6)


def test_only_the_wanted_gradients_and_the_second_order(fused_calls):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 5)), rng.standard_normal((5, 3))
    # x needs no gradient: the fused op skips dx
    wo = oarlock.to_tensor(w, stop_gradient=False)
    F.linear(oarlock.to_tensor(x), wo).sum().backward()
    assert fused_calls == [(False, True, False)]
    # create_graph: the composite, differentiable again: d/dx sum((d sum(tanh(xW)) / dW)^2)
    xo, wo = oarlock.to_tensor(x, stop_gradient=False), oarlock.to_tensor(w, stop_gradient=False)
    (gw,) = oarlock.grad(oarlock.tanh(F.linear(xo, wo)).sum(), [wo], create_graph=True)
    assert len(fused_calls) == 1   # the recorded backward took the composite
    (gw * gw).sum().backward()     # a first-order backward through it (and through linear again): fused
    assert fused_calls[1:] == [(True, True, False)]
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    (gwt,) = torch.autograd.grad(torch.tanh(xt @ wt).sum(), [wt], create_graph=True)
    (gwt * gwt).sum().backward()
    np.testing.assert_allclose(xo.grad.numpy(), xt.grad.numpy(), rtol=1e-10)
