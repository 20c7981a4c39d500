"""cross_entropy, softmax and the matrix products against torch and paddle (values and gradients,
including second order), plus their public names and the errors they give on bad input.

torch and paddle are optional: the comparisons skip cleanly without them. Paddle's cross_entropy
differs from torch's in documented places (the unreduced shape with label smoothing, the 'mean'
denominator with ignored labels and no weight, weighted soft labels); torch is used where the two
agree, paddle for the rest.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F

RNG = np.random.default_rng(0)
LOGITS = RNG.standard_normal((6, 4))
LABELS = np.array([0, 3, 1, 1, 2, 0])
WEIGHT = np.array([0.5, 2.0, 1.0, 1.5])
SOFT = RNG.dirichlet(np.ones(4), 6)


def _ours(x, label, *, weight=None, **kwargs):
    """(loss, d loss / d x) from oarlock."""
    x = oarlock.to_tensor(x, stop_gradient=False)
    w = None if weight is None else oarlock.to_tensor(weight)
    loss = F.cross_entropy(x, oarlock.to_tensor(label), weight=w, **kwargs)
    loss.backward(oarlock.ones_like(loss))
    return loss.numpy(), x.grad.numpy()


# -- torch: where Paddle and torch agree ---------------------------------------------------------------


TORCH_CASES = {
    # name: (logits, label, keywords); torch gets the same keywords less soft_label and axis (its class
    # axis is 1, which is -1 for the 2-D cases)
    "hard_mean": (LOGITS, LABELS, {}),
    "hard_sum": (LOGITS, LABELS, {"reduction": "sum"}),
    "hard_none": (LOGITS, LABELS, {"reduction": "none"}),
    "weight_mean": (LOGITS, LABELS, {"weight": WEIGHT}),
    "weight_none": (LOGITS, LABELS, {"weight": WEIGHT, "reduction": "none"}),
    # a non-negative ignore_index: both divide by the (weighted) count of the other labels
    "ignore_mean": (LOGITS, LABELS, {"ignore_index": 1}),
    "ignore_weight_mean": (LOGITS, LABELS, {"ignore_index": 0, "weight": WEIGHT}),
    "ignore_default_sum": (LOGITS, np.array([0, -100, 1, 1, -100, 3]), {"reduction": "sum"}),
    "smoothing_mean": (LOGITS, LABELS, {"label_smoothing": 0.2}),
    "smoothing_none": (LOGITS, LABELS, {"label_smoothing": 0.1, "reduction": "none"}),
    "soft_mean": (LOGITS, SOFT, {"soft_label": True}),
    "soft_none": (LOGITS, SOFT, {"soft_label": True, "reduction": "none"}),
    "class_axis_1": (RNG.standard_normal((2, 4, 3)), RNG.integers(0, 4, (2, 3)), {"axis": 1}),
    "large_logits": (LOGITS * 500, LABELS, {}),
}


@pytest.mark.parametrize("name", TORCH_CASES)
def test_cross_entropy_matches_torch(torch, name):
    x, label, kwargs = TORCH_CASES[name]
    loss, grad = _ours(x, label, **kwargs)
    tx = torch.tensor(x, requires_grad=True)
    torch_kw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()
                if k not in ("soft_label", "axis")}
    expected = torch.nn.functional.cross_entropy(tx, torch.tensor(label), **torch_kw)
    expected.backward(torch.ones_like(expected))
    # unreduced soft/smoothed losses keep the class axis in Paddle ([N, 1]); torch drops it
    np.testing.assert_allclose(loss.reshape(expected.shape), expected.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad, tx.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_cross_entropy_float32_and_bfloat16_close_to_torch(torch):
    for dtype, tol in (("float32", 1e-5), ("bfloat16", 3e-2)):
        x = oarlock.to_tensor(LOGITS).astype(dtype)
        loss = F.cross_entropy(x, oarlock.to_tensor(LABELS))
        assert loss.dtype == dtype
        expected = torch.nn.functional.cross_entropy(torch.tensor(x.astype("float64").numpy()), torch.tensor(LABELS))
        np.testing.assert_allclose(float(loss), expected.item(), rtol=tol)


def test_softmax_and_log_softmax_match_torch(torch):
    x = RNG.standard_normal((3, 4, 5)) * 30
    for axis in (0, 1, -1):
        for ours, theirs in ((F.softmax, torch.softmax), (F.log_softmax, torch.log_softmax)):
            t = oarlock.to_tensor(x, stop_gradient=False)
            out = ours(t, axis=axis)
            (out * out).sum().backward()
            tt = torch.tensor(x, requires_grad=True)
            expected = theirs(tt, dim=axis)
            (expected * expected).sum().backward()
            np.testing.assert_allclose(out.numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-9, atol=1e-12)


def _hessian_vector(fn, x, v):
    """d/dx <grad fn(x), v>, through oarlock.grad(create_graph=True)."""
    xt = oarlock.to_tensor(x, stop_gradient=False)
    (g,) = oarlock.grad(fn(xt), xt, create_graph=True)
    (hv,) = oarlock.grad((g * oarlock.to_tensor(v)).sum(), xt)
    return hv.numpy()


def test_second_order_gradients_match_torch(torch):
    x, v = RNG.standard_normal((3, 4)), RNG.standard_normal((3, 4))
    other = RNG.standard_normal((4, 4))
    label = np.array([0, 2, 3])
    pairs = [
        (lambda t: F.cross_entropy(t, oarlock.to_tensor(label), weight=oarlock.to_tensor(WEIGHT)),
         lambda t: torch.nn.functional.cross_entropy(t, torch.tensor(label), weight=torch.tensor(WEIGHT))),
        (lambda t: (F.softmax(t, axis=0) ** 3).sum(), lambda t: (torch.softmax(t, dim=0) ** 3).sum()),
        (lambda t: (F.log_softmax(t) ** 2).sum(), lambda t: (torch.log_softmax(t, dim=-1) ** 2).sum()),
        (lambda t: (oarlock.matmul(t, t, transpose_y=True) ** 2).sum(), lambda t: ((t @ t.T) ** 2).sum()),
        (lambda t: (F.linear(t, oarlock.to_tensor(other)) ** 2).sum(),
         lambda t: ((t @ torch.tensor(other)) ** 2).sum()),
    ]
    for ours, theirs in pairs:
        tx = torch.tensor(x, requires_grad=True)
        (g,) = torch.autograd.grad(theirs(tx), tx, create_graph=True)
        (hv,) = torch.autograd.grad((g * torch.tensor(v)).sum(), tx)
        np.testing.assert_allclose(_hessian_vector(ours, x, v), hv.numpy(), rtol=1e-8, atol=1e-10)


def test_matmul_gradients_match_torch(torch):
    shapes = [((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)), ((4,), (4,))]
    for xs, ys in shapes:
        x, y = RNG.standard_normal(xs), RNG.standard_normal(ys)
        a, b = oarlock.to_tensor(x, stop_gradient=False), oarlock.to_tensor(y, stop_gradient=False)
        out = oarlock.matmul(a, b)
        w = RNG.standard_normal(out.shape)
        (out * oarlock.to_tensor(w)).sum().backward()
        ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        (torch.matmul(ta, tb) * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-10, atol=1e-12)


# -- paddle: where Paddle's semantics are its own --------------------------------------------------------


PADDLE_CASES = {
    # 'mean' with ignored labels and no weight divides by every position, ignored ones included
    "ignored_default_mean": (LOGITS, np.array([0, -100, 1, 1, -100, 3]), {}),
    # a weight scales each soft-label position by sum_c label_c * weight_c
    "soft_weight_mean": (LOGITS, SOFT, {"soft_label": True, "weight": WEIGHT}),
    "smoothing_weight_mean": (LOGITS, LABELS, {"label_smoothing": 0.1, "weight": WEIGHT}),
    # label smoothing turns hard labels into soft ones: the unreduced loss keeps a [N, 1] shape
    "smoothing_none_shape": (LOGITS, LABELS, {"label_smoothing": 0.1, "reduction": "none"}),
    "label_n1_axis0_weight": (LOGITS.T.copy(), LABELS[None, :], {"axis": 0, "weight": WEIGHT, "reduction": "none"}),
}


@pytest.mark.parametrize("name", PADDLE_CASES)
def test_cross_entropy_matches_paddle(paddle, name):
    x, label, kwargs = PADDLE_CASES[name]
    loss, grad = _ours(x, label, **kwargs)
    px = paddle.to_tensor(x, stop_gradient=False)
    paddle_kw = {k: paddle.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    expected = paddle.nn.functional.cross_entropy(px, paddle.to_tensor(label), **paddle_kw)
    expected.backward(paddle.ones_like(expected))
    assert list(loss.shape) == list(expected.shape)
    # paddle builds smoothed targets in float32 (one_hot), hence the looser tolerance
    np.testing.assert_allclose(loss, expected.numpy(), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(grad, px.grad.numpy(), rtol=1e-6, atol=1e-9)


# -- public names and aliases ----------------------------------------------------------------------------

def test_public_names_and_aliases():
    x = oarlock.to_tensor(RNG.standard_normal((2, 3)))
    y = oarlock.to_tensor(RNG.standard_normal((3, 2)))
    expected = x.numpy() @ y.numpy()
    for out in (oarlock.mm(x, y), oarlock.mm(input=x, mat2=y), x.mm(y), x.matmul(y), x @ y, oarlock.matmul(x, y)):
        np.testing.assert_allclose(out.numpy(), expected)
    b = oarlock.to_tensor(RNG.standard_normal((2, 3, 3)))
    np.testing.assert_allclose(b.bmm(b).numpy(), oarlock.bmm(b, b).numpy())
    np.testing.assert_allclose(x.softmax(axis=0).numpy(), oarlock.softmax(x, 0).numpy())
    np.testing.assert_allclose(oarlock.softmax(input=x, dim=0).numpy(), F.softmax(x, axis=0).numpy())
    np.testing.assert_allclose(F.log_softmax(x).numpy(), np.log(F.softmax(x).numpy()))
    assert F.linear(x, y, name="fc").shape == [2, 2] and F.cross_entropy(x, oarlock.to_tensor([0, 2]), name="ce")


def test_softmax_dtype_argument_and_its_gradient():
    x = oarlock.to_tensor(RNG.standard_normal((2, 3)).astype(np.float32), stop_gradient=False)
    out = F.softmax(x, dtype="float64")
    assert out.dtype == oarlock.float64
    out[:, 0].sum().backward()
    assert x.grad.dtype == oarlock.float32 and x.grad.shape == [2, 3]


def test_clone_is_a_differentiable_copy():
    x = oarlock.to_tensor([1.0, 2.0], stop_gradient=False)
    for copy in (x.clone(), oarlock.clone(x)):
        assert copy._data is not x._data and not copy.stop_gradient
        (copy * 3).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), [3, 3])
        x.clear_grad()


def test_cross_entropy_weight_promotes_like_paddle():
    x = oarlock.to_tensor(LOGITS.astype(np.float32))
    loss = F.cross_entropy(x, oarlock.to_tensor(LABELS), weight=oarlock.to_tensor(WEIGHT))
    assert loss.dtype == oarlock.float64  # float32 logits, float64 weight


# -- errors that say what was wrong ----------------------------------------------------------------------

def _error(fn, *words, kind=(TypeError, ValueError, IndexError)):
    with pytest.raises(kind) as info:
        fn()
    for word in words:
        assert word in str(info.value), f"the error should mention {word!r}: {info.value}"


def test_matmul_errors_name_both_shapes():
    a, b = oarlock.ones([2, 3]), oarlock.ones([2, 3])
    _error(lambda: oarlock.matmul(a, b), "matmul", "[2, 3]", "inner dimensions")
    _error(lambda: oarlock.matmul(a, b.reshape([3, 2]), transpose_x=True), "matmul", "transpose_x=True", "[3, 2]")
    _error(lambda: oarlock.matmul(oarlock.ones([2, 2, 3]), oarlock.ones([3, 3, 2])), "matmul", "broadcast")
    _error(lambda: oarlock.matmul(oarlock.ones([]), a), "matmul", "at least one dimension")
    _error(lambda: oarlock.matmul(oarlock.ones([2, 2], dtype="bool"), oarlock.ones([2, 2], dtype="bool")),
           "matmul", "bool")
    _error(lambda: oarlock.bmm(a, b), "bmm", "3-D", "[2, 3]")
    _error(lambda: oarlock.bmm(oarlock.ones([2, 3, 4]), oarlock.ones([3, 4, 5])), "bmm", "batch")


def test_linear_errors_explain_the_weight_layout():
    x = oarlock.ones([2, 3])
    _error(lambda: F.linear(x, oarlock.ones([4, 3])), "linear", "[4, 3]", "[2, 3]", "in_features, out_features")
    _error(lambda: F.linear(x, oarlock.ones([3])), "linear", "2-D", "[3]")
    _error(lambda: F.linear(x, oarlock.ones([3, 4]), oarlock.ones([3])), "linear", "bias", "[3]", "[2, 4]")


def test_cross_entropy_errors():
    x = oarlock.ones([4, 3])
    ce = F.cross_entropy
    _error(lambda: ce(x, oarlock.to_tensor([0, 1])), "cross_entropy", "label shape [2]", "[4, 3]", "[4]", "[4, 1]")
    _error(lambda: ce(x, oarlock.to_tensor([[0.0], [1.0], [2.0], [1.0]])), "cross_entropy", "float", "soft_label")
    _error(lambda: ce(x, oarlock.to_tensor([0, 5, 1, 1])), "cross_entropy", "label value 5", "3 classes")
    _error(lambda: ce(x, oarlock.to_tensor([0, 1, 1, 1]), reduction="avg"), "cross_entropy", "reduction", "'avg'")
    _error(lambda: ce(x, oarlock.to_tensor([0, 1, 1, 1]), weight=oarlock.ones([4])), "cross_entropy", "weight",
           "[3]", "[4]")
    _error(lambda: ce(x, oarlock.ones([4, 2]), soft_label=True), "cross_entropy", "soft label", "[4, 3]", "[4, 2]")
    _error(lambda: ce(x, oarlock.ones([4, 3]), soft_label=True, ignore_index=2), "cross_entropy", "ignore_index")
    _error(lambda: ce(oarlock.ones([]), oarlock.to_tensor(0)), "cross_entropy", "0-D")
    _error(lambda: ce(x, oarlock.to_tensor([0, 1, 1, 1]), axis=2), "cross_entropy", "axis 2")
    _error(lambda: ce(x.astype("int64"), oarlock.to_tensor([0, 1, 1, 1])), "cross_entropy", "int64")
    _error(lambda: ce(x, oarlock.to_tensor([0, 1, 1, 1]), label_smoothing=1.5), "cross_entropy", "label_smoothing")
    _error(lambda: F.softmax(oarlock.ones([2, 3]), axis=2), "softmax", "axis 2")
    _error(lambda: F.softmax(oarlock.to_tensor([1, 2])), "softmax", "int64")
