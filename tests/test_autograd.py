"""The autograd engine: backward, accumulation, retain_graph, grad() with higher orders, hooks,
grad modes, PyLayer, and what the graph keeps alive."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import oarlock
from oarlock.autograd import PyLayer


def leaf(values, dtype="float64"):
    return oarlock.to_tensor(np.asarray(values, dtype=dtype), stop_gradient=False)


def test_plain_tensors_do_not_record_a_graph():
    x = oarlock.to_tensor([1.0, 2.0])
    assert x.stop_gradient and not x.requires_grad
    y = x * x
    assert y.stop_gradient and y.grad_fn is None


def test_requires_grad_is_the_negation_of_stop_gradient():
    x = oarlock.to_tensor([1.0])
    x.requires_grad = True
    assert x.stop_gradient is False
    x.requires_grad_(False)
    assert x.stop_gradient is True
    with pytest.raises(TypeError, match="requires_grad must be a bool"):
        x.requires_grad = 1


def test_backward_accumulates_into_leaves():
    x = leaf([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4, 6])
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [4, 8, 12])
    assert x.grad.stop_gradient
    x.clear_grad()
    assert x.grad is None


def test_a_leaf_used_twice_gets_the_summed_gradient():
    x = leaf([3.0])
    y = x * x + x
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [7.0])


def test_backward_twice_needs_retain_graph():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4, 8])
    with pytest.raises(RuntimeError, match="second time.*retain_graph=True"):
        y.backward()


def test_backward_of_a_non_scalar_needs_a_gradient():
    x = leaf([1.0, 2.0])
    y = x * x
    with pytest.raises(RuntimeError, match="shape \\[2\\]"):
        y.backward()
    y.backward(oarlock.to_tensor([1.0, 0.5], dtype="float64"))
    np.testing.assert_allclose(x.grad.numpy(), [2, 2])


def test_grad_returns_gradients_and_leaves_dot_grad_alone():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y = (x * w).sum()
    gx, gw = oarlock.grad(y, [x, w])
    np.testing.assert_allclose(gx.numpy(), [3, 4])
    np.testing.assert_allclose(gw.numpy(), [1, 2])
    assert x.grad is None and w.grad is None


def test_grad_of_a_non_leaf_input():
    x = leaf([1.0, 2.0])
    h = x * x
    y = (h * 3.0).sum()
    (gh,) = oarlock.grad(y, h)
    np.testing.assert_allclose(gh.numpy(), [3, 3])


def test_grad_allow_unused():
    x, unused = leaf([1.0]), leaf([5.0])
    y = (x * x).sum()
    with pytest.raises(RuntimeError, match="not used.*allow_unused=True"):
        oarlock.grad(y, [x, unused], retain_graph=True)
    gx, gu = oarlock.grad(y, [x, unused], allow_unused=True)
    assert gu is None and gx.item() == 2.0


def test_higher_order_gradients():
    x = leaf([0.5, -1.5, 2.0])
    y = (x * x * x).sum()
    (g1,) = oarlock.grad(y, x, create_graph=True)
    np.testing.assert_allclose(g1.numpy(), 3 * x.numpy() ** 2)
    assert not g1.stop_gradient
    (g2,) = oarlock.grad(g1.sum(), x, create_graph=True)
    np.testing.assert_allclose(g2.numpy(), 6 * x.numpy())
    (g3,) = oarlock.grad(g2.sum(), x)
    np.testing.assert_allclose(g3.numpy(), [6, 6, 6])


def test_hooks_on_leaves_and_intermediates():
    x = leaf([1.0, 2.0])
    seen = []
    handle = x.register_hook(lambda g: g * 10)
    h = x * x
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    h.sum().backward()
    np.testing.assert_allclose(seen[0], [1, 1])
    np.testing.assert_allclose(x.grad.numpy(), [20, 40])
    handle.remove()
    x.clear_grad()
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 4])
    with pytest.raises(RuntimeError, match="stop_gradient=True"):
        oarlock.to_tensor([1.0]).register_hook(print)


def test_grad_modes():
    x = leaf([1.0])
    with oarlock.no_grad():
        assert (x * x).stop_gradient
        with oarlock.enable_grad():
            assert not (x * x).stop_gradient
    assert oarlock.is_grad_enabled()

    @oarlock.no_grad()
    def f(t):
        return t * t
    assert f(x).stop_gradient
    oarlock.set_grad_enabled(False)
    try:
        assert not oarlock.is_grad_enabled()
    finally:
        oarlock.set_grad_enabled(True)
    with oarlock.set_grad_enabled(False):
        assert (x * x).stop_gradient
    assert oarlock.is_grad_enabled()


class Cube(PyLayer):
    @staticmethod
    def forward(ctx, x, scale=1.0):
        ctx.save_for_backward(x)
        ctx.scale = scale
        return x * x * x * scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensor()
        return g * x * x * 3.0 * ctx.scale


def test_pylayer_matches_finite_differences():
    x = leaf([0.5, -1.0, 2.0])
    y = Cube.apply(x, scale=2.0)
    assert not y.stop_gradient
    y.sum().backward()
    xs = x.numpy()
    eps = 1e-6
    numeric = ((2 * (xs + eps) ** 3) - (2 * (xs - eps) ** 3)) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-6)
    assert oarlock.autograd.Function is PyLayer


def test_pylayer_without_grad_records_nothing():
    x = oarlock.to_tensor([1.0])
    assert Cube.apply(x).stop_gradient


class TwoOutputs(PyLayer):
    @staticmethod
    def forward(ctx, x):
        return x * 2.0, x * 3.0

    @staticmethod
    def backward(ctx, g1, g2):   # materialize_grads: an unused output's gradient arrives as zeros
        return g1 * 2.0 + g2 * 3.0


def test_a_pylayer_output_frees_its_graph_without_the_cyclic_collector():
    """A PyLayer's backward rule must not hold its outputs: output -> node -> rule -> output was a cycle that
    kept every upstream activation alive until Python's cyclic GC ran (tensor-parallel training, whose
    collectives are PyLayers, held several steps of activations)."""
    gc.disable()
    try:
        x = leaf(np.ones(1 << 16))
        y, z = TwoOutputs.apply(x * x)
        refs = weakref.ref(y), weakref.ref(z)
        y.sum().backward()          # z's gradient is materialized as zeros of z's shape
        np.testing.assert_allclose(x.grad.numpy(), np.full(1 << 16, 4.0))
        del y, z
        assert refs[0]() is None and refs[1]() is None, "a PyLayer's outputs (and graph) outlived their names"
    finally:
        gc.enable()


def test_the_graph_does_not_keep_intermediate_tensors_alive():
    x = leaf(np.ones(4))
    h = x * 2.0
    ref = weakref.ref(h)
    y = (h + 3.0).sum()  # add saves nothing for backward, so nothing should hold h
    del h
    gc.collect()
    assert ref() is None, "an intermediate tensor is kept alive by the graph"
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(4, 2.0))


def test_integer_outputs_carry_no_gradient():
    x = leaf([1.0, 2.0])
    y = oarlock.cast(x, "int64")
    assert y.stop_gradient and y.grad_fn is None


def test_mixed_precision_gradient_comes_back_in_the_input_dtype():
    a = leaf([1.0, 2.0], dtype="float32")
    b = leaf([3.0, 4.0], dtype="float64")
    y = (a * b).sum()
    assert y.dtype == oarlock.float64
    y.backward()
    assert a.grad.dtype == oarlock.float32 and b.grad.dtype == oarlock.float64
    np.testing.assert_allclose(a.grad.numpy(), [3, 4])


def test_no_grad_vars_block_the_flow_through_them():
    x = leaf([2.0])
    h = x * x          # dh/dx = 2x
    y = h * x          # y = x^3; through h only: x * 2x = 8, directly: h = 4
    (g,) = oarlock.grad(y, x, no_grad_vars=[h])
    assert g.item() == 4.0


def test_record_fast_branch_and_general_loop_agree():
    """autograd.record unrolls its rule for one or two plain tensors and one output (the dispatcher's fast
    path); the general loop must give the same edges, meta and output state for every combination."""
    import itertools

    from oarlock.autograd import RecordSpec, record

    def make(kind):
        dtype = "int64" if kind.startswith("int") else "float32"
        t = oarlock.to_tensor(np.ones((2, 3)), dtype=dtype)
        if kind in ("leaf", "int_leaf"):   # an integer tensor may have stop_gradient=False; it takes no gradient
            t.stop_gradient = False
        elif kind == "node":
            leaf = oarlock.to_tensor(np.ones((2, 3)), dtype=dtype, stop_gradient=False)
            t = leaf * 2.0
        return t

    def outcome(node, out):
        if node is None:
            return None
        edges = [None if e is None else (type(e[0]).__name__, e[1]) for e in node.edges]
        return edges, node.meta, node.out_meta, out.stop_gradient, out._node is node

    spec = RecordSpec("probe", lambda ctx, g: (g, g))
    kinds = ("plain", "int", "int_leaf", "leaf", "node")
    for combo in [*itertools.product(kinds, repeat=2), *((k,) for k in kinds)]:
        for out_dtype in ("float32", "int64"):
            inputs = tuple(make(k) for k in combo)
            fast_out = oarlock.zeros([2, 3], dtype=out_dtype)
            general_out = oarlock.zeros([2, 3], dtype=out_dtype)
            fast = record(spec, inputs, fast_out, None, fast_out.place)             # unrolled branch
            general = record(spec, inputs, (general_out,), None, general_out.place)  # the loop
            assert outcome(fast, fast_out) == outcome(general, general_out), (combo, out_dtype)


def test_ops_with_optional_tensors_take_the_fast_path_with_and_without_them():
    """linear (bias: OptTensor) runs on the generated fast path both with a bias and without one, once
    the slow path has validated the kernel, and records the same graph the slow path would."""
    import oarlock.nn.functional as F

    rng = np.random.default_rng(3)
    x, w, b = (oarlock.to_tensor(rng.standard_normal(s).astype(np.float32)) for s in ((4, 3), (3, 5), (5,)))
    w.stop_gradient = b.stop_gradient = False
    F.linear(x, w, b), F.linear(x, w)   # seed the fast path
    namespace = F.linear.__globals__
    slow, original = [], namespace["_apply"]
    namespace["_apply"] = lambda *args: slow.append(args) or original(*args)
    try:
        with_bias, without = F.linear(x, w, b), F.linear(x, w)
    finally:
        namespace["_apply"] = original
    assert slow == []
    np.testing.assert_allclose(with_bias.numpy(), x.numpy() @ w.numpy() + b.numpy(), rtol=1e-6)
    np.testing.assert_allclose(without.numpy(), x.numpy() @ w.numpy(), rtol=1e-6)
    (with_bias.sum() + without.sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * x.numpy().sum(0)[:, None] * np.ones((1, 5)), rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), np.full(5, 4.0))
