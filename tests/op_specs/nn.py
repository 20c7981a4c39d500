"""Specs for the nn family: softmax (and Paddle 3.2's paddle.softmax, softmax_compat), log_softmax and
cross_entropy (Paddle's semantics; the comparisons with torch and paddle themselves live in
tests/test_nn_oracles.py)."""

import numpy as np

import pytest

import oarlock.nn.functional as F
from finite_differences import numeric_grad
from op_specs.base import FLOATS, Case, In, OpSpec, library_op


def log_softmax_ref(x, axis=-1, dtype=None):
    if x.ndim == 0:
        return np.zeros_like(x)
    if x.size == 0:
        return x.copy()
    z = x - np.max(x, axis=axis, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))


def softmax_ref(x, axis=-1, dtype=None):
    return np.exp(log_softmax_ref(x, axis))


def softmax_compat_ref(x, axis=None, dtype=None):
    """dim=None: torch's legacy implicit dim (0 for 0-D, 1-D and 3-D input, else 1)."""
    if axis is None:
        axis = 0 if x.ndim in (0, 1, 3) else 1
    return softmax_ref(x, axis)


SOFTMAX_TOL = {"float64": (1e-9, 1e-12), "float32": (2e-5, 2e-6), "bfloat16": (3e-2, 3e-2)}


def _check_softmax_compat(paddle):
    """softmax_compat is oarlock.softmax (and Tensor.softmax, special.softmax); its messages name those,
    not the op, so it is checked here instead of by the table: each implicit dim, explicit dims in every
    spelling, dtype=, the gradient against finite differences, and the dtype error."""
    rng = np.random.default_rng(0)
    for shape in [(), (4,), (3, 5), (2, 3, 4), (2, 3, 2, 2), (0, 3)]:
        for dt in FLOATS:
            x = paddle.to_tensor(rng.uniform(-2.0, 2.0, shape)).astype(dt)
            host = x.astype("float64").numpy()
            rtol, atol = SOFTMAX_TOL[dt]
            for out, axis in ((paddle.softmax(x), None), (x.softmax(), None), (paddle.special.softmax(x), None),
                              (paddle.softmax(x, -1), -1), (paddle.softmax(input=x, dim=0), 0),
                              (x.softmax(axis=-1), -1)):
                assert out.dtype == dt and out.shape == list(shape), (out.dtype, out.shape, dt, shape)
                np.testing.assert_allclose(out.astype("float64").numpy(), softmax_compat_ref(host, axis),
                                           rtol=rtol, atol=atol, err_msg=f"{shape} {dt} axis={axis}")
    x = paddle.to_tensor(rng.uniform(-2.0, 2.0, (2, 3)).astype("float32"))
    out = paddle.softmax(x, dtype="float64")
    assert out.dtype == "float64"
    np.testing.assert_allclose(out.numpy(), softmax_ref(x.numpy().astype(np.float64), 1), rtol=1e-12)
    for shape in [(2, 3, 4), (3, 4), (2, 3, 2, 2)]:
        host = rng.uniform(-2.0, 2.0, shape)
        weights = rng.standard_normal(shape)
        x = paddle.to_tensor(host, stop_gradient=False)
        (paddle.softmax(x) * paddle.to_tensor(weights)).sum().backward()
        (numeric,) = numeric_grad(softmax_compat_ref, [host.copy()], weights)
        np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-5, atol=1e-7, err_msg=str(shape))
    with pytest.raises((TypeError, ValueError), match="oarlock.softmax.*int64"):
        paddle.softmax(paddle.to_tensor([1, 2]))


def _out_dtype(dt, *args, dtype=None, **kwargs):
    return dtype or dt


def _along_axis_cases():
    return [
        Case([In((3, 5))], name="rows"),
        Case([In((2, 3, 4))], {"axis": 1}, name="axis1"),
        Case([In((2, 3, 4))], {"dim": 0}, name="dim_alias", ref=lambda x, dim: softmax_ref(x, dim)),
        Case([In((4, 6), domain=(80.0, 120.0))], name="large_logits"),  # exp would overflow float32
        Case([In(())], name="0d"),
        Case([In((0, 3))], name="empty"),
        Case([In((2, 3))], {"dtype": "float64"}, name="dtype", dtypes=("float32",)),
    ]


def cross_entropy_ref(x, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                      use_softmax=True, label_smoothing=0.0):
    """Paddle's cross_entropy, written with the class axis moved last."""
    axis %= x.ndim
    xs = np.moveaxis(x, axis, -1)
    classes = xs.shape[-1]
    if soft_label:
        t = np.moveaxis(label, axis, -1).astype(np.float64)
        valid = np.ones(xs.shape[:-1])
    else:
        keep = label.ndim == x.ndim
        lab = np.moveaxis(label, axis, -1)[..., 0] if keep else label
        valid = (lab != ignore_index).astype(np.float64)
        t = np.eye(classes)[np.where(lab != ignore_index, lab, 0)] * valid[..., None]
    if label_smoothing:
        t = (1 - label_smoothing) * t + label_smoothing / classes * valid[..., None]
    if use_softmax:
        log_p = log_softmax_ref(xs) if xs.size else xs
    else:
        log_p = np.log(np.where(t == 0, 1.0, xs))
    loss = -np.sum(t * log_p, axis=-1)
    scale = np.sum(t * weight, axis=-1) if weight is not None else valid
    loss = loss * scale
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        if x.size == 0:
            return np.array(np.nan)
        if weight is not None or (not soft_label and ignore_index >= 0):
            total = scale.sum()
            return loss.sum() / (total if total != 0 else 1.0)
        return loss.mean()
    if soft_label or label_smoothing or label.ndim == x.ndim:
        return np.expand_dims(loss, axis)
    return loss


def label(shape, classes):
    return In(shape, dtype="int64", int_range=(0, classes), grad=False)


def fixed_label(values):
    return In(np.shape(values), dtype="int64", values=values, grad=False)


def soft(shape):
    return In(shape, domain=(0.0, 1.0), grad=False)


def weight(classes):
    return In((classes,), domain=(0.5, 2.0), grad=False)


def probabilities(shape):
    return In(shape, domain=(0.05, 1.0))


def _hard_label_grad_ref(x, label, g, ignore_index=-100, reduction="mean"):
    """(softmax(x) - onehot(label)) * g / divisor along the last axis, 0 on rows whose label is ignored."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    index = label.reshape(p.shape[:-1])
    valid = index != ignore_index
    p = p - (np.arange(p.shape[-1]) == np.where(valid, index, 0)[..., None])
    if reduction == "none":
        coef = g.reshape(p.shape[:-1])
    else:
        coef = g / (max(valid.sum(), 1) if reduction == "mean" and ignore_index >= 0 else
                    (valid.size if reduction == "mean" else 1))
    return p * (coef * valid)[..., None]


CROSS_ENTROPY_CASES = [
    Case([In((4, 5)), label((4,), 5)], name="mean"),
    Case([In((4, 5)), label((4, 1), 5)], {"reduction": "none"}, name="label_n1_none"),
    Case([In((4, 5)), label((4,), 5)], {"reduction": "none"}, name="label_n_none"),
    Case([In((4, 5)), label((4,), 5)], {"reduction": "sum"}, name="sum"),
    Case([In((4, 5)), label((4,), 5), weight(5)], name="weight_mean"),
    Case([In((4, 5)), label((4,), 5), weight(5)], {"reduction": "none"}, name="weight_none"),
    Case([In((5, 3)), fixed_label([0, -100, 2, 1, -100])], name="ignored_mean_counts_all"),
    Case([In((5, 3)), fixed_label([0, 1, 2, 1, 1]), weight(3)], {"ignore_index": 1}, name="ignore_weight_mean"),
    Case([In((5, 3)), fixed_label([[0], [1], [2], [1], [1]])], {"ignore_index": 1}, name="ignore_mean"),
    Case([In((3, 3)), fixed_label([1, 1, 1])], {"ignore_index": 1}, name="all_ignored"),
    Case([In((4, 5)), label((4,), 5)], {"label_smoothing": 0.1, "reduction": "none"}, name="smoothing_none"),
    Case([In((4, 5)), label((4,), 5), weight(5)], {"label_smoothing": 0.2}, name="smoothing_weight"),
    Case([In((4, 5)), soft((4, 5))], {"soft_label": True}, name="soft_mean"),
    Case([In((4, 5)), soft((4, 5)), weight(5)], {"soft_label": True, "reduction": "none"}, name="soft_weight"),
    Case([In((4, 5)), soft((4, 5))], {"soft_label": True, "label_smoothing": 0.1}, name="soft_smoothing"),
    Case([In((2, 3, 4)), label((2, 4), 3)], {"axis": 1, "reduction": "none"}, name="axis1"),
    Case([In((2, 3, 4)), label((2, 1, 4), 3), weight(3)], {"axis": 1}, name="axis1_weight"),
    Case([In((2, 4, 3)), label((2, 4), 3)], name="3d_last_axis"),
    Case([In((5,)), label((), 5)], {"reduction": "none"}, name="1d_input"),
    Case([In((4, 5), domain=(-300.0, 300.0)), label((4,), 5)], {"reduction": "none"}, name="large_logits"),
    Case([probabilities((4, 3)), label((4, 1), 3)], {"use_softmax": False, "reduction": "none"}, name="no_softmax"),
    Case([probabilities((4, 3)), soft((4, 3))], {"use_softmax": False, "soft_label": True}, name="no_softmax_soft"),
    Case([In((0, 3)), label((0,), 3)], {"reduction": "sum"}, name="empty_sum"),
    Case([In((0, 3)), label((0,), 3)], name="empty_mean", grad=False),
]


SPECS = [
    OpSpec("softmax", _along_axis_cases(), ref=softmax_ref, out_dtype=_out_dtype, call=F.softmax),
    OpSpec("softmax_compat", [], check=_check_softmax_compat),
    OpSpec("log_softmax", [c for c in _along_axis_cases() if c.name != "dim_alias"], ref=log_softmax_ref,
           out_dtype=_out_dtype, call=F.log_softmax),
    OpSpec("cross_entropy", CROSS_ENTROPY_CASES, ref=cross_entropy_ref, dtypes=FLOATS, call=F.cross_entropy,
           rtol={"bfloat16": (5e-2, 5e-2)}),
    OpSpec("softmax_grad", [
        Case([In((3, 4), domain=(0.0, 1.0)), In((3, 4))], {"axis": -1}, name="last"),
        Case([In((3, 4, 5), domain=(0.0, 1.0)), In((3, 4, 5))], {"axis": 1}, name="middle"),
        Case([In((2, 0), domain=(0.0, 1.0)), In((2, 0))], {"axis": -1}, name="empty"),
    ], ref=lambda y, g, axis: y * (g - (g * y).sum(axis=axis, keepdims=True)), dtypes=FLOATS, grad=False,
           call=library_op("softmax_grad"), rtol={"bfloat16": (5e-2, 5e-2)}),
    OpSpec("cross_entropy_hard_label_grad", [
        Case([In((4, 5)), label((4,), 5), In(())], name="mean"),
        Case([In((4, 5)), label((4,), 5), In(())], {"reduction": "sum"}, name="sum"),
        Case([In((4, 5)), label((4, 1), 5), In((4, 1))], {"reduction": "none"}, name="none_n1"),
        Case([In((2, 3, 4)), label((2, 3), 4), In((2, 3))], {"reduction": "none"}, name="3d_none"),
        Case([In((5, 3)), fixed_label([0, 1, 2, 1, 1]), In(())], {"ignore_index": 1}, name="ignore_mean"),
        Case([In((3, 3)), fixed_label([1, 1, 1]), In(())], {"ignore_index": 1}, name="all_ignored"),
        Case([In((5, 3)), fixed_label([0, -100, 2, 1, -100]), In(())], name="ignored_mean_counts_all"),
    ], ref=_hard_label_grad_ref, dtypes=FLOATS, grad=False, call=library_op("cross_entropy_hard_label_grad"),
           rtol={"bfloat16": (5e-2, 5e-2)}),
]
