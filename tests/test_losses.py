"""The losses of oarlock.nn.functional and their oarlock.nn layers: against PyTorch (float32 values and
gradients, every reduction, second order in float64), against Paddle where its semantics are its own,
and against float64 numpy references (always run), plus the errors they give on bad input.

Paddle's losses map onto torch's like this (the torch side of PAIRS spells it out):
- smooth_l1_loss(delta, is_huber=True) is torch's huber_loss(delta=delta); with is_huber=False it is
  torch's smooth_l1_loss(beta=delta). With the default delta=1 they are all the same;
- binary_cross_entropy(_with_logits), mse_loss, l1_loss and kl_div (including 'batchmean' and
  log_target) agree with torch; so does nll_loss, except that a 'mean' over nothing (every label ignored,
  or zero weights) is 0 in Paddle and nan in torch;
- CrossEntropyLoss agrees with torch except where tests/test_nn_oracles.py says it does not (the 'mean'
  denominator with ignored labels and no weight, weighted soft or smoothed labels).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oarlock
import oarlock.nn.functional as F
from op_specs.loss import bce_logits_ref, bce_ref, kl_div_ref, l1_ref, mse_ref, nll_ref, smooth_l1_ref

RNG = np.random.default_rng(7)
SHAPE = (3, 4)
X = RNG.uniform(-2, 2, SHAPE)
Y = RNG.uniform(-2, 2, SHAPE)
P = RNG.uniform(0.05, 0.95, SHAPE)           # probabilities
Q = RNG.uniform(0, 1, SHAPE)                 # binary labels, soft
LOGP = np.log(RNG.dirichlet(np.ones(4), 3))  # log-probabilities
TARGET = RNG.dirichlet(np.ones(4), 3)
W4 = RNG.uniform(0.5, 2.0, (4,))
LOGITS = RNG.standard_normal((5, 4))
LABELS = np.array([0, 3, 1, 1, 2])
EXTREME_P = np.array([[0.0, 1.0, 1e-30, 0.5], [1.0, 0.0, 0.999, 0.25], [0.3, 0.7, 1e-3, 0.9]])
LARGE_LOGITS = np.array([[1000.0, -1000.0, 40.0, -40.0], [80.0, -80.0, 0.0, 3.0], [-3.0, 17.0, -17.0, 0.5]])
HARD = np.array([[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
# labels that disagree with EXTREME_P where it is 0, 1 or tiny: clamped logs and huge gradients
HARD_EXTREME = np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
REDUCTIONS = ("none", "mean", "sum")

# name: (oarlock call, torch call, arrays, the positions to differentiate, reductions);
# the calls take (functional module, *tensors, reduction)
PAIRS = {
    "mse": (lambda f, x, y, r: f.mse_loss(x, y, reduction=r), lambda f, x, y, r: f.mse_loss(x, y, reduction=r),
            [X, Y], (0, 1), REDUCTIONS),
    "l1": (lambda f, x, y, r: f.l1_loss(x, y, reduction=r), lambda f, x, y, r: f.l1_loss(x, y, reduction=r),
           [X, Y], (0, 1), REDUCTIONS),
    "smooth_l1_default": (lambda f, x, y, r: f.smooth_l1_loss(x, y, reduction=r),
                          lambda f, x, y, r: f.smooth_l1_loss(x, y, reduction=r), [X, Y], (0, 1), REDUCTIONS),
    "smooth_l1_delta_is_huber": (lambda f, x, y, r: f.smooth_l1_loss(x, y, reduction=r, delta=0.5),
                                 lambda f, x, y, r: f.huber_loss(x, y, reduction=r, delta=0.5),
                                 [X, Y], (0, 1), REDUCTIONS),
    "smooth_l1_delta_not_huber": (lambda f, x, y, r: f.smooth_l1_loss(x, y, reduction=r, delta=2.0, is_huber=False),
                                  lambda f, x, y, r: f.smooth_l1_loss(x, y, reduction=r, beta=2.0),
                                  [X, Y], (0, 1), REDUCTIONS),
    "bce": (lambda f, x, y, r: f.binary_cross_entropy(x, y, reduction=r),
            lambda f, x, y, r: f.binary_cross_entropy(x, y, reduction=r), [P, Q], (0, 1), REDUCTIONS),
    "bce_weight": (lambda f, x, y, w, r: f.binary_cross_entropy(x, y, weight=w, reduction=r),
                   lambda f, x, y, w, r: f.binary_cross_entropy(x, y, weight=w, reduction=r),
                   [P, Q, W4], (0,), REDUCTIONS),
    "bce_extreme": (lambda f, x, y, r: f.binary_cross_entropy(x, y, reduction=r),
                    lambda f, x, y, r: f.binary_cross_entropy(x, y, reduction=r), [EXTREME_P, HARD_EXTREME], (0,),
                    REDUCTIONS),
    "bce_logits": (lambda f, x, y, r: f.binary_cross_entropy_with_logits(x, y, reduction=r),
                   lambda f, x, y, r: f.binary_cross_entropy_with_logits(x, y, reduction=r), [X, Q], (0, 1),
                   REDUCTIONS),
    "bce_logits_weights": (
        lambda f, x, y, w, pw, r: f.binary_cross_entropy_with_logits(x, y, weight=w, reduction=r, pos_weight=pw),
        lambda f, x, y, w, pw, r: f.binary_cross_entropy_with_logits(x, y, weight=w, reduction=r, pos_weight=pw),
        [X, Q, W4[::-1].copy(), W4], (0, 1), REDUCTIONS),
    "bce_logits_large": (lambda f, x, y, r: f.binary_cross_entropy_with_logits(x, y, reduction=r),
                         lambda f, x, y, r: f.binary_cross_entropy_with_logits(x, y, reduction=r),
                         [LARGE_LOGITS, HARD], (0,), REDUCTIONS),
    "kl_div": (lambda f, x, y, r: f.kl_div(x, y, reduction=r), lambda f, x, y, r: f.kl_div(x, y, reduction=r),
               [LOGP, TARGET], (0, 1), (*REDUCTIONS, "batchmean")),
    "kl_div_log_target": (lambda f, x, y, r: f.kl_div(x, y, reduction=r, log_target=True),
                          lambda f, x, y, r: f.kl_div(x, y, reduction=r, log_target=True),
                          [LOGP, np.log(TARGET)], (0, 1), (*REDUCTIONS, "batchmean")),
    "nll": (lambda f, x, t, r: f.nll_loss(x, t, reduction=r), lambda f, x, t, r: f.nll_loss(x, t, reduction=r),
            [LOGITS, LABELS], (0,), REDUCTIONS),
    "nll_weight": (lambda f, x, t, w, r: f.nll_loss(x, t, weight=w, reduction=r),
                   lambda f, x, t, w, r: f.nll_loss(x, t, weight=w, reduction=r), [LOGITS, LABELS, W4], (0,),
                   REDUCTIONS),
    "nll_ignore_index": (lambda f, x, t, w, r: f.nll_loss(x, t, weight=w, ignore_index=1, reduction=r),
                         lambda f, x, t, w, r: f.nll_loss(x, t, weight=w, ignore_index=1, reduction=r),
                         [LOGITS, LABELS, W4], (0,), REDUCTIONS),
    "nll_ignore_default": (lambda f, x, t, r: f.nll_loss(x, t, reduction=r),
                           lambda f, x, t, r: f.nll_loss(x, t, reduction=r),
                           [LOGITS, np.array([0, -100, 1, -100, 2])], (0,), REDUCTIONS),
    "nll_4d": (lambda f, x, t, w, r: f.nll_loss(x, t, weight=w, reduction=r),
               lambda f, x, t, w, r: f.nll_loss(x, t, weight=w, reduction=r),
               [RNG.standard_normal((2, 4, 3, 2)), RNG.integers(0, 4, (2, 3, 2)), W4], (0,), REDUCTIONS),
}
PAIR_PARAMS = [pytest.param(name, r, id=f"{name}-{r}") for name, pair in PAIRS.items() for r in pair[4]]


def _float32(a):
    return a.astype(np.float32) if a.dtype.kind == "f" else a


def _ours(call, arrays, grad, reduction, upstream=None):
    """(loss, gradients at `grad`) from oarlock."""
    tensors = [oarlock.to_tensor(a, stop_gradient=i not in grad) for i, a in enumerate(arrays)]
    loss = call(F, *tensors, reduction)
    loss.backward(oarlock.to_tensor(upstream) if upstream is not None else None)
    return loss.numpy(), [tensors[i].grad.numpy() for i in grad]


def _theirs(torch, call, arrays, grad, reduction, upstream=None):
    tensors = [torch.tensor(a, requires_grad=i in grad) for i, a in enumerate(arrays)]
    with warnings.catch_warnings():  # torch warns that kl_div's 'mean' is not the KL divergence's mean
        warnings.simplefilter("ignore")
        loss = call(torch.nn.functional, *tensors, reduction)
    loss.backward(torch.tensor(upstream) if upstream is not None else None)
    return loss.detach().numpy(), [tensors[i].grad.numpy() for i in grad]


@pytest.mark.parametrize("name,reduction", PAIR_PARAMS)
def test_float32_values_and_gradients_match_torch(torch, name, reduction):
    ours, theirs, arrays, grad, _ = PAIRS[name]
    arrays = [_float32(a) for a in arrays]
    upstream = None
    if reduction == "none":  # a random upstream gradient, so each element's gradient is checked on its own
        shape = theirs(torch.nn.functional, *[torch.tensor(a) for a in arrays], "none").shape
        upstream = RNG.standard_normal(tuple(shape)).astype(np.float32)
    loss, grads = _ours(ours, arrays, grad, reduction, upstream)
    expected, expected_grads = _theirs(torch, theirs, arrays, grad, reduction, upstream)
    assert loss.dtype == np.float32 and loss.shape == expected.shape
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} [{reduction}] value")
    for i, got, want in zip(grad, grads, expected_grads):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{name} [{reduction}] d/d(arg {i})")


# the losses whose gradient depends on the input (kl_div, l1 and nll_loss are linear in it)
SECOND_ORDER = ["mse", "smooth_l1_delta_is_huber", "bce_weight", "bce_logits_weights", "bce_logits_large"]


@pytest.mark.parametrize("name", SECOND_ORDER)
def test_second_order_gradients_match_torch(torch, name):
    """d/dx <d loss/dx, v>: the backward rules are made of differentiable ops."""
    ours, theirs, arrays, grad, _ = PAIRS[name]
    v = RNG.standard_normal(arrays[0].shape)
    x = oarlock.to_tensor(arrays[0], stop_gradient=False)
    (g,) = oarlock.grad(ours(F, x, *map(oarlock.to_tensor, arrays[1:]), "mean"), x, create_graph=True)
    (hv,) = oarlock.grad((g * oarlock.to_tensor(v)).sum(), x)
    tx = torch.tensor(arrays[0], requires_grad=True)
    (tg,) = torch.autograd.grad(theirs(torch.nn.functional, tx, *map(torch.tensor, arrays[1:]), "mean"), tx,
                                create_graph=True)
    (thv,) = torch.autograd.grad((tg * torch.tensor(v)).sum(), tx)
    np.testing.assert_allclose(hv.numpy(), thv.numpy(), rtol=1e-8, atol=1e-10)


# -- CrossEntropyLoss against torch.nn.CrossEntropyLoss -----------------------------------------------------

SOFT = RNG.dirichlet(np.ones(4), 5)
CE_CASES = {
    # name: (logits, label, our keywords, torch keywords); weights are given as arrays
    "plain": (LOGITS, LABELS, {}, {}),
    "weight": (LOGITS, LABELS, {"weight": W4}, {"weight": W4}),
    "ignore_index": (LOGITS, LABELS, {"ignore_index": 1}, {"ignore_index": 1}),
    "ignore_index_weight": (LOGITS, LABELS, {"ignore_index": 3, "weight": W4}, {"ignore_index": 3, "weight": W4}),
    "ignore_default_sum": (LOGITS, np.array([0, -100, 1, -100, 2]), {"reduction": "sum"}, {"reduction": "sum"}),
    "label_smoothing": (LOGITS, LABELS, {"label_smoothing": 0.2}, {"label_smoothing": 0.2}),
    "label_smoothing_none": (LOGITS, LABELS, {"label_smoothing": 0.1, "reduction": "none"},
                             {"label_smoothing": 0.1, "reduction": "none"}),
    "soft_label": (LOGITS, SOFT, {"soft_label": True}, {}),
    "soft_label_sum": (LOGITS, SOFT, {"soft_label": True, "reduction": "sum"}, {"reduction": "sum"}),
    "class_axis_1": (RNG.standard_normal((2, 4, 3)), RNG.integers(0, 4, (2, 3)), {"axis": 1}, {}),
}


@pytest.mark.parametrize("name", CE_CASES)
def test_cross_entropy_loss_layer_matches_torch(torch, name):
    x, label, ours_kw, torch_kw = CE_CASES[name]
    x = x.astype(np.float32)
    label = _float32(label)
    ours_kw = {k: oarlock.to_tensor(_float32(v)) if isinstance(v, np.ndarray) else v for k, v in ours_kw.items()}
    torch_kw = {k: torch.tensor(_float32(v)) if isinstance(v, np.ndarray) else v for k, v in torch_kw.items()}
    tx = oarlock.to_tensor(x, stop_gradient=False)
    loss = oarlock.nn.CrossEntropyLoss(**ours_kw)(tx, oarlock.to_tensor(label))
    loss.sum().backward()
    px = torch.tensor(x, requires_grad=True)
    expected = torch.nn.CrossEntropyLoss(**torch_kw)(px, torch.tensor(label))
    expected.sum().backward()
    # Paddle keeps the class axis ([N, 1]) in an unreduced smoothed loss; torch drops it
    np.testing.assert_allclose(loss.numpy().reshape(expected.shape), expected.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tx.grad.numpy(), px.grad.numpy(), rtol=1e-5, atol=1e-6)


# -- Paddle itself, where its semantics are its own --------------------------------------------------------


NONPOSITIVE_TARGET = np.where(TARGET > 0.3, TARGET, np.array([0.0, -0.2, 0.0, -1.0]))
PADDLE_CASES = {
    # name: (function name, arrays, keywords); arrays after the first two are keyword tensors
    "smooth_l1_delta": ("smooth_l1_loss", [X, Y], {"delta": 0.5, "reduction": "none"}),
    "smooth_l1_not_huber": ("smooth_l1_loss", [X, Y], {"delta": 2.0, "is_huber": False}),
    "kl_div_nonpositive_label": ("kl_div", [LOGP, NONPOSITIVE_TARGET], {"reduction": "none"}),
    "kl_div_batchmean": ("kl_div", [LOGP, TARGET], {"reduction": "batchmean"}),
    "kl_div_log_target": ("kl_div", [LOGP, np.log(TARGET)], {"log_target": True}),
    "bce_clamped": ("binary_cross_entropy", [EXTREME_P, HARD_EXTREME], {"reduction": "none"}),
    "bce_logits_pos_weight": ("binary_cross_entropy_with_logits", [LARGE_LOGITS, Q], {"pos_weight": W4}),
    "nll_weight_4d": ("nll_loss", [RNG.standard_normal((2, 4, 3, 2)), RNG.integers(0, 4, (2, 3, 2))],
                      {"weight": W4}),
    "nll_label_n1": ("nll_loss", [LOGITS, LABELS[:, None]], {"reduction": "none"}),
}


@pytest.mark.parametrize("name", PADDLE_CASES)
def test_matches_paddle(paddle, name):
    function, arrays, kwargs = PADDLE_CASES[name]
    results = []
    for lib, to_tensor in ((oarlock, oarlock.to_tensor), (paddle, paddle.to_tensor)):
        x = to_tensor(arrays[0], stop_gradient=False)
        kw = {k: to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        loss = getattr(lib.nn.functional, function)(x, to_tensor(arrays[1]), **kw)
        loss.backward(lib.ones_like(loss))
        results.append((loss.numpy(), x.grad.numpy()))
    (loss, grad), (expected, expected_grad) = results
    assert loss.shape == expected.shape
    np.testing.assert_allclose(loss, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-10, atol=1e-12)


def test_nll_mean_of_nothing_is_zero_like_paddle(paddle):
    """Zero weights: Paddle's 'mean' is 0 (torch: nan). Paddle's gradient is then nan (0/0); ours is 0, the
    gradient of the value it returns."""
    x = oarlock.to_tensor(LOGITS, stop_gradient=False)
    loss = F.nll_loss(x, oarlock.to_tensor(LABELS), weight=oarlock.zeros([4], dtype="float64"))
    loss.backward()
    expected = paddle.nn.functional.nll_loss(paddle.to_tensor(LOGITS), paddle.to_tensor(LABELS),
                                             weight=paddle.zeros([4], dtype="float64"))
    assert float(loss) == float(expected) == 0.0 and not np.any(x.grad.numpy())


@pytest.mark.parametrize("kwargs", [{}, {"reduction": "sum"}, {"label_smoothing": 0.1}])
def test_soft_labels_get_no_gradient_as_in_paddle(paddle, kwargs):
    """Paddle 3.2's soft-label cross_entropy does not differentiate the label (its fused op has no label
    gradient; torch's does, and the torch proxy keeps torch's). Ours matches Paddle: the label stays gradient-free
    while the logits' gradient matches Paddle's."""
    results = []
    for lib in (oarlock, paddle):
        x, label = lib.to_tensor(LOGITS, stop_gradient=False), lib.to_tensor(SOFT, stop_gradient=False)
        lib.nn.functional.cross_entropy(x, label, soft_label=True, **kwargs).backward()
        results.append((label.grad, x.grad.numpy()))
    (ours, grad), (theirs, expected_grad) = results
    assert ours is None and theirs is None
    # 1e-7: Paddle mixes its float64 smoothing with a float32 constant (a 2e-9 relative difference)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-7, atol=1e-12)


# -- float64 numpy references (always run) -----------------------------------------------------------------

def _value(fn, *arrays, **kwargs):
    tensors = [a if a is None else oarlock.to_tensor(a) for a in arrays]
    return fn(*tensors, **kwargs).numpy()


REFERENCES = {
    # name: (oarlock function, numpy reference, arrays, keywords, reductions)
    "mse_broadcast": (F.mse_loss, mse_ref, [RNG.standard_normal((2, 3, 4)), X[0]], {}, REDUCTIONS),
    "l1": (F.l1_loss, l1_ref, [X, Y], {}, REDUCTIONS),
    "smooth_l1": (F.smooth_l1_loss, smooth_l1_ref, [X, Y], {"delta": 0.7}, REDUCTIONS),
    "bce_weight": (F.binary_cross_entropy, bce_ref, [EXTREME_P, Q, W4], {}, REDUCTIONS),
    "bce_logits": (F.binary_cross_entropy_with_logits, bce_logits_ref, [X, Q, W4], {"pos_weight": W4[::-1].copy()},
                   REDUCTIONS),
    "kl_div": (F.kl_div, kl_div_ref, [LOGP, NONPOSITIVE_TARGET], {}, (*REDUCTIONS, "batchmean")),
    "nll": (F.nll_loss, nll_ref, [LOGITS, np.array([0, 3, -100, 1, 2]), W4], {}, REDUCTIONS),
    "nll_ignore": (F.nll_loss, nll_ref, [LOGITS, LABELS], {"ignore_index": 1}, REDUCTIONS),
}


@pytest.mark.parametrize("name,reduction", [pytest.param(n, r, id=f"{n}-{r}") for n, c in REFERENCES.items()
                                            for r in c[4]])
def test_float64_matches_numpy_reference(name, reduction):
    fn, ref, arrays, kwargs, _ = REFERENCES[name]
    tensors = {k: oarlock.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    got = _value(fn, *arrays, reduction=reduction, **tensors)
    expected = ref(*arrays, reduction=reduction, **kwargs)
    assert got.dtype == np.float64 and got.shape == np.shape(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)


def test_bce_with_logits_is_stable_for_large_logits():
    x = np.array([1e4, -1e4, 88.0, -88.0, 0.0])
    y = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    for dtype in ("float64", "float32"):
        t = oarlock.to_tensor(x.astype(dtype), stop_gradient=False)
        loss = F.binary_cross_entropy_with_logits(t, oarlock.to_tensor(y.astype(dtype)), reduction="none")
        loss.sum().backward()
        np.testing.assert_allclose(loss.numpy(), [1e4, 1e4, 88.0, 88.0, np.log(2)], rtol=1e-6)
        np.testing.assert_allclose(t.grad.numpy(), [1.0, -1.0, 1.0, -1.0, 0.0], atol=1e-7)


def test_bce_gradient_formula_at_the_clamp():
    """(x - y) / max(x (1 - x), 1e-12), as torch and Paddle compute it, also where the log is clamped."""
    x = oarlock.to_tensor(EXTREME_P, stop_gradient=False)
    F.binary_cross_entropy(x, oarlock.to_tensor(HARD_EXTREME), reduction="sum").backward()
    expected = (EXTREME_P - HARD_EXTREME) / np.maximum(EXTREME_P * (1 - EXTREME_P), 1e-12)
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)


def test_nll_gradient_and_all_ignored():
    x = oarlock.to_tensor(LOGITS, stop_gradient=False)
    labels = np.array([0, 3, -100, 1, 3])
    F.nll_loss(x, oarlock.to_tensor(labels), weight=oarlock.to_tensor(W4)).backward()
    expected = np.zeros_like(LOGITS)
    valid = labels != -100
    expected[np.nonzero(valid)[0], labels[valid]] = -W4[labels[valid]] / W4[labels[valid]].sum()
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
    x.clear_grad()
    loss = F.nll_loss(x, oarlock.to_tensor([-100] * 5))  # nothing counted: 0 (Paddle), not nan (torch)
    loss.backward()
    assert float(loss) == 0.0 and not np.any(x.grad.numpy())


def test_dtypes_and_promotion():
    for dtype in ("float32", "bfloat16"):
        x, y = oarlock.to_tensor(X).astype(dtype), oarlock.to_tensor(Y).astype(dtype)
        for fn in (F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.binary_cross_entropy_with_logits):
            assert fn(x, y).dtype == dtype
        np.testing.assert_allclose(float(F.mse_loss(x, y)), mse_ref(x.astype("float64").numpy(),
                                                                      y.astype("float64").numpy()), rtol=1e-2)
    # a float32 input with a float64 label computes in float64 (Paddle promotes mse_loss and kl_div too)
    assert F.mse_loss(oarlock.to_tensor(X.astype(np.float32)), oarlock.to_tensor(Y)).dtype == oarlock.float64


def test_aliases_and_keywords():
    x, y = oarlock.to_tensor(X), oarlock.to_tensor(Q)
    expected = F.binary_cross_entropy_with_logits(x, y).numpy()
    np.testing.assert_allclose(F.binary_cross_entropy_with_logits(input=x, target=y).numpy(), expected)
    np.testing.assert_allclose(F.binary_cross_entropy_with_logits(logit=x, label=y).numpy(), expected)
    np.testing.assert_allclose(F.mse_loss(x, target=y, name="mse").numpy(), F.mse_loss(x, y).numpy())


# -- layers ------------------------------------------------------------------------------------------------

LAYERS = [
    # (layer, the functional it calls, arrays, keywords shared by both)
    (oarlock.nn.CrossEntropyLoss, F.cross_entropy, [LOGITS, LABELS],
     {"ignore_index": 2, "label_smoothing": 0.1, "reduction": "sum"}),
    (oarlock.nn.NLLLoss, F.nll_loss, [LOGITS, LABELS], {"ignore_index": 1, "reduction": "none"}),
    (oarlock.nn.MSELoss, F.mse_loss, [X, Y], {"reduction": "sum"}),
    (oarlock.nn.L1Loss, F.l1_loss, [X, Y], {}),
    (oarlock.nn.SmoothL1Loss, F.smooth_l1_loss, [X, Y], {"delta": 0.5, "is_huber": False}),
    (oarlock.nn.BCELoss, F.binary_cross_entropy, [P, Q], {"reduction": "none"}),
    (oarlock.nn.BCEWithLogitsLoss, F.binary_cross_entropy_with_logits, [X, Q], {"reduction": "sum"}),
    (oarlock.nn.KLDivLoss, F.kl_div, [LOGP, TARGET], {"reduction": "batchmean"}),
]


@pytest.mark.parametrize("layer,fn,arrays,kwargs", LAYERS, ids=[c[0].__name__ for c in LAYERS])
def test_layer_calls_its_functional(layer, fn, arrays, kwargs):
    tensors = [oarlock.to_tensor(a) for a in arrays]
    module = layer(**kwargs)
    assert isinstance(module, oarlock.nn.Layer) and not module.parameters()
    np.testing.assert_allclose(module(*tensors).numpy(), fn(*tensors, **kwargs).numpy(), rtol=1e-15)
    assert repr(module).startswith(layer.__name__ + "(")


def test_layers_take_paddles_positional_arguments_and_weights():
    w = oarlock.to_tensor(W4)
    ce = oarlock.nn.CrossEntropyLoss(w, 1, "sum", False, -1, True, 0.0)
    expected = F.cross_entropy(oarlock.to_tensor(LOGITS), oarlock.to_tensor(LABELS), weight=w, ignore_index=1,
                               reduction="sum")
    np.testing.assert_allclose(ce(oarlock.to_tensor(LOGITS), oarlock.to_tensor(LABELS)).numpy(), expected.numpy())
    bce = oarlock.nn.BCEWithLogitsLoss(w, "none", w)
    got = bce(oarlock.to_tensor(X), oarlock.to_tensor(Q)).numpy()
    np.testing.assert_allclose(got, bce_logits_ref(X, Q, W4, "none", W4), rtol=1e-12)
    assert oarlock.nn.SmoothL1Loss("sum", 2.0).delta == 2.0 and oarlock.nn.KLDivLoss("sum", True).log_target
    nll = oarlock.nn.NLLLoss(w, 3, "mean")
    np.testing.assert_allclose(float(nll(oarlock.to_tensor(LOGITS), oarlock.to_tensor(LABELS))),
                               nll_ref(LOGITS, LABELS, W4, 3, "mean"), rtol=1e-12)


def test_layer_options_can_change_after_construction():
    layer = oarlock.nn.SmoothL1Loss(reduction="none")
    layer.delta = 0.5
    got = layer(oarlock.to_tensor(X), oarlock.to_tensor(Y)).numpy()
    np.testing.assert_allclose(got, smooth_l1_ref(X, Y, "none", 0.5), rtol=1e-12)


# -- errors that say what was wrong ---------------------------------------------------------------------------

def _error(fn, *words, kind=(TypeError, ValueError, IndexError, NotImplementedError)):
    with pytest.raises(kind) as info:
        fn()
    for word in words:
        assert word in str(info.value), f"the error should mention {word!r}: {info.value}"


def test_errors_name_the_function_and_what_it_got():
    x, y = oarlock.to_tensor(X), oarlock.to_tensor(Y)
    labels = oarlock.to_tensor(LABELS[:3])
    _error(lambda: F.mse_loss(x, y, reduction="avg"), "mse_loss", "reduction", "'avg'", "'mean'")
    _error(lambda: F.l1_loss(x, y, reduction="batchmean"), "l1_loss", "reduction", "'batchmean'")
    _error(lambda: F.kl_div(x, y, reduction="avg"), "kl_div", "'batchmean'", "'avg'")
    _error(lambda: F.mse_loss(x, oarlock.ones([3])), "mse_loss", "[3, 4]", "[3]", "broadcast")
    _error(lambda: F.smooth_l1_loss(x, y[0]), "smooth_l1_loss", "same shape", "[3, 4]", "[4]")
    _error(lambda: F.kl_div(x, y[:, :1]), "kl_div", "[3, 4]", "[3, 1]")
    _error(lambda: F.smooth_l1_loss(x, y, delta=0.0), "smooth_l1_loss", "delta", "positive")
    _error(lambda: F.binary_cross_entropy(x, y), "binary_cross_entropy", "[0, 1]", "with_logits")
    _error(lambda: F.binary_cross_entropy(oarlock.to_tensor(P), y, weight=oarlock.ones([5])),
           "binary_cross_entropy", "weight", "[5]", "[3, 4]")
    _error(lambda: F.binary_cross_entropy_with_logits(x, y, pos_weight=oarlock.ones([3])),
           "binary_cross_entropy_with_logits", "pos_weight", "[3]")
    _error(lambda: F.binary_cross_entropy_with_logits(x, y, weight=oarlock.ones([2, 3, 4])), "weight", "[2, 3, 4]")
    _error(lambda: F.mse_loss(oarlock.to_tensor([1, 2]), oarlock.to_tensor([1, 3])), "mse_loss", "int64")
    _error(lambda: F.nll_loss(x, y[:, 0]), "nll_loss", "label", "integer", "float64")
    _error(lambda: F.nll_loss(x, oarlock.to_tensor(LABELS)), "nll_loss", "label shape [5]", "[3]", "[3, 1]")
    _error(lambda: F.nll_loss(x, oarlock.to_tensor([0, 4, 1])), "nll_loss", "label value 4", "4 classes")
    _error(lambda: F.nll_loss(x[0], labels[0]), "nll_loss", "at least 2 dimensions", "[4]")
    _error(lambda: F.nll_loss(x, labels, weight=oarlock.ones([3])), "nll_loss", "weight", "[4]", "[3]")
    _error(lambda: F.nll_loss(x, labels, reduction="batchmean"), "nll_loss", "reduction")
    _error(lambda: oarlock.nn.BCELoss(reduction="avg"), "BCELoss", "reduction", "'avg'")
    _error(lambda: oarlock.nn.KLDivLoss("max"), "KLDivLoss", "'batchmean'", "'max'")
    _error(lambda: oarlock.nn.CrossEntropyLoss(reduction="avg"), "CrossEntropyLoss", "reduction")


def test_cross_entropy_first_order_backward_is_the_fused_op():
    """Class-index labels on the last axis: backward() runs the one fused op cross_entropy_hard_label_grad
    (not a dozen composite ops), and its gradient is softmax - onehot over the batch."""
    import oarlock.nn.functional as F
    from oarlock.plugin_api import set_observer

    rng = np.random.default_rng(0)
    logits = oarlock.to_tensor(rng.standard_normal((6, 5)).astype(np.float32), stop_gradient=False)
    label = oarlock.to_tensor(rng.integers(0, 5, 6))
    loss = F.cross_entropy(logits, label)
    seen = []

    class Names:
        def begin(self, event, inputs):
            seen.append(getattr(event, "name", None))

        def end(self, token):
            pass

    previous = set_observer(Names())
    try:
        loss.backward()
    finally:
        set_observer(previous)
    assert "cross_entropy_hard_label_grad" in seen and "softmax" not in seen, seen
    x = logits.numpy().astype(np.float64)
    p = np.exp(x - x.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(6), label.numpy()] -= 1
    np.testing.assert_allclose(logits.grad.numpy(), p / 6, rtol=1e-5, atol=1e-7)
