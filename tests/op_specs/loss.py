"""Specs for the loss family (plugins/ops/src/oarlock_ops/loss.py): float64 numpy references written from
Paddle's formulas; the comparisons with torch and paddle themselves live in tests/test_losses.py."""

import numpy as np

import oarlock.nn.functional as F
from op_specs.base import FLOATS, Case, In, OpSpec

BF16 = {"bfloat16": (5e-2, 5e-2)}


def reduce_ref(loss, reduction):
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.sum(loss)
    if reduction == "batchmean":
        return np.sum(loss) / loss.shape[0] if loss.ndim else loss
    return np.mean(loss) if loss.size else np.array(np.nan)


def mse_ref(x, y, reduction="mean"):
    return reduce_ref((x - y) ** 2, reduction)


def l1_ref(x, y, reduction="mean"):
    return reduce_ref(np.abs(x - y), reduction)


def smooth_l1_ref(x, y, reduction="mean", delta=1.0, is_huber=True):
    r = np.abs(x - y)
    loss = np.where(r <= delta, 0.5 * r ** 2, delta * (r - 0.5 * delta))
    return reduce_ref(loss if is_huber else loss / delta, reduction)


def bce_ref(x, y, weight=None, reduction="mean"):
    with np.errstate(divide="ignore"):
        loss = -(y * np.maximum(np.log(x), -100) + (1 - y) * np.maximum(np.log(1 - x), -100))
    return reduce_ref(loss if weight is None else loss * weight, reduction)


def bce_logits_ref(x, y, weight=None, reduction="mean", pos_weight=None):
    p = 1 / (1 + np.exp(-x))
    pw = 1 if pos_weight is None else pos_weight
    loss = -(pw * y * np.log(p) + (1 - y) * np.log(1 - p))
    return reduce_ref(loss if weight is None else loss * weight, reduction)


def bce_logits_large_ref(x, y, weight=None, reduction="mean", pos_weight=None):
    """For |x| where sigmoid rounds to 0 or 1: -log sigmoid(x) = logaddexp(0, -x)."""
    pw = 1 if pos_weight is None else pos_weight
    return reduce_ref(pw * y * np.logaddexp(0, -x) + (1 - y) * np.logaddexp(0, x), reduction)


def kl_div_ref(x, y, reduction="mean", log_target=False):
    if log_target:
        loss = np.exp(y) * (y - x)
    else:
        safe = np.where(y > 0, y, 1.0)
        loss = np.where(y > 0, y * (np.log(safe) - x), 0.0)
    return reduce_ref(loss, reduction)


def nll_ref(x, label, weight=None, ignore_index=-100, reduction="mean"):
    lab = label.reshape(label.shape[:1] + label.shape[2:]) if label.ndim == x.ndim else label
    valid = lab != ignore_index
    safe = np.where(valid, lab, 0)
    picked = np.take_along_axis(x, safe[:, None], axis=1)[:, 0]
    w = valid * (1.0 if weight is None else weight[safe])
    loss = -picked * w
    if reduction == "mean":
        total = w.sum()
        return np.array(loss.sum() / (total if total else 1.0))
    return reduce_ref(loss, reduction)


def probabilities(shape, **kwargs):
    return In(shape, domain=(0.05, 0.95), **kwargs)


def fixed(values, grad=True):
    return In(np.shape(values), values=np.asarray(values, dtype=np.float64), grad=grad)


def weight(shape):
    return In(shape, domain=(0.5, 2.0), grad=False)


def label(shape, classes):
    return In(shape, dtype="int64", int_range=(0, classes), grad=False)


def fixed_label(values):
    return In(np.shape(values), dtype="int64", values=values, grad=False)


def reductions(make, **kwargs):
    """The same arguments under each reduction."""
    return [Case(make(), {**kwargs, "reduction": r}, name=r) for r in ("mean", "sum", "none")]


REGRESSION_CASES = reductions(lambda: [In((3, 4)), In((3, 4))]) + [
    Case([In((2, 3, 4)), In((4,))], name="broadcast_label"),
    Case([In((3, 1)), In((1, 4))], {"reduction": "none"}, name="broadcast_both"),
    Case([In(()), In(())], name="0d"),
    Case([In((0, 3)), In((0, 3))], {"reduction": "sum"}, name="empty_sum"),
    Case([In((0, 3)), In((0, 3))], name="empty_mean", grad=False),
]

SMOOTH_L1_CASES = reductions(lambda: [In((3, 4), domain=(-3, 3)), In((3, 4))]) + [
    Case([In((3, 4), domain=(-3, 3)), In((3, 4))], {"delta": 0.5, "reduction": "none"}, name="delta"),
    Case([In((3, 4), domain=(-3, 3)), In((3, 4))], {"delta": 2.0, "is_huber": False}, name="not_huber"),
    Case([In(()), In(())], name="0d"),
]

BCE_CASES = reductions(lambda: [probabilities((3, 4)), In((3, 4), domain=(0, 1))]) + [
    Case([probabilities((3, 4)), In((3, 4), domain=(0, 1)), weight((4,))], name="weight_broadcast"),
    Case([probabilities((3, 4)), In((3, 4), domain=(0, 1)), weight((3, 4))], {"reduction": "none"},
         name="weight_none"),
    # log 0 and log(1 - 1) are clamped at -100 instead of giving inf
    Case([fixed([0.0, 1.0, 1e-50, 0.5]), fixed([1.0, 0.0, 1.0, 0.0])], {"reduction": "none"}, name="clamped",
         grad=False),
    Case([probabilities(()), In((), domain=(0, 1))], name="0d"),
]

BCE_LOGITS_CASES = reductions(lambda: [In((3, 4), domain=(-4, 4)), In((3, 4), domain=(0, 1))]) + [
    Case([In((3, 4)), In((3, 4), domain=(0, 1)), weight((3, 1))], {"reduction": "none"}, name="weight"),
    # pos_weight goes positionally: the harness makes inputs only from a case's args
    Case([In((3, 4)), In((3, 4), domain=(0, 1)), None, "mean", weight((4,))], name="pos_weight"),
    Case([In((3, 4)), In((3, 4), domain=(0, 1)), weight((4,)), "sum", weight((3, 4))], name="both_weights"),
    Case([fixed([[1000.0, -1000.0, 40.0, -40.0]]), fixed([[0.0, 1.0, 0.0, 1.0]])], {"reduction": "none"},
         name="large_logits", ref=bce_logits_large_ref),
    Case([In(()), In((), domain=(0, 1))], name="0d"),
]

KL_CASES = reductions(lambda: [In((3, 4), domain=(-3, 0)), In((3, 4), domain=(0.05, 1))]) + [
    Case([In((3, 4), domain=(-3, 0)), In((3, 4), domain=(0.05, 1))], {"reduction": "batchmean"},
         name="batchmean"),
    Case([In((3, 4), domain=(-3, 0)), In((3, 4), domain=(-3, 0))], {"log_target": True, "reduction": "none"},
         name="log_target"),
    Case([In((3, 4), domain=(-3, 0)), In((3, 4), domain=(-3, 0))], {"log_target": True, "reduction": "batchmean"},
         name="log_target_batchmean"),
    # a label <= 0 contributes nothing (Paddle); the finite-difference check stays away from the kink at 0
    Case([In((4,), domain=(-3, 0)), fixed([0.5, 0.0, -0.3, 1.0], grad=False)],
         {"reduction": "none"}, name="nonpositive_label"),
    Case([In(()), In((), domain=(0.05, 1))], {"reduction": "batchmean"}, name="0d_batchmean"),
]

NLL_CASES = reductions(lambda: [In((4, 5)), label((4,), 5)]) + [
    Case([In((4, 5)), label((4,), 5), weight((5,))], name="weight_mean"),
    Case([In((4, 5)), label((4,), 5), weight((5,))], {"reduction": "none"}, name="weight_none"),
    Case([In((5, 3)), fixed_label([0, -100, 2, 1, -100])], name="ignored_mean"),
    Case([In((5, 3)), fixed_label([0, 1, 2, 1, 1]), weight((3,))], {"ignore_index": 1}, name="ignore_weight_mean"),
    Case([In((5, 3)), fixed_label([0, 1, 2, 1, 1])], {"ignore_index": 1, "reduction": "sum"}, name="ignore_sum"),
    Case([In((3, 3)), fixed_label([1, 1, 1])], {"ignore_index": 1}, name="all_ignored"),
    Case([In((4, 3)), label((4, 1), 3)], {"reduction": "none"}, name="label_n1"),
    Case([In((2, 3, 4)), label((2, 4), 3), weight((3,))], name="3d"),
    Case([In((2, 3, 2, 2)), label((2, 2, 2), 3)], {"reduction": "none"}, name="4d_none"),
    Case([In((2, 3, 4)), label((2, 1, 4), 3)], {"reduction": "none"}, name="3d_label_kept_axis"),
    Case([In((0, 3)), label((0,), 3)], name="empty_mean", grad=False),
]


def _spec(op, cases, ref, **kwargs):
    return OpSpec(op, cases, ref=ref, dtypes=FLOATS, call=getattr(F, op), rtol=BF16, **kwargs)


SPECS = [
    _spec("mse_loss", REGRESSION_CASES, mse_ref),
    _spec("l1_loss", REGRESSION_CASES, l1_ref),
    _spec("smooth_l1_loss", SMOOTH_L1_CASES, smooth_l1_ref),
    _spec("binary_cross_entropy", BCE_CASES, bce_ref),
    _spec("binary_cross_entropy_with_logits", BCE_LOGITS_CASES, bce_logits_ref),
    _spec("kl_div", KL_CASES, kl_div_ref),
    _spec("nll_loss", NLL_CASES, nll_ref),
]
