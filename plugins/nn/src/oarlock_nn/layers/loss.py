"""Loss layers of oarlock.nn with Paddle's constructor signatures: CrossEntropyLoss, NLLLoss, MSELoss, L1Loss,
SmoothL1Loss, BCELoss, BCEWithLogitsLoss and KLDivLoss.

Each layer keeps its configuration and calls the op of oarlock.nn.functional in forward(input, label);
the semantics (and their departures from torch) are documented with the ops in oarlock_ops/loss.py and
oarlock_ops/softmax.py. A layer checks `reduction` when it is built, so a typo fails at construction rather
than at the first forward. A weight is kept as a plain attribute, not a parameter or buffer, as in Paddle.
"""

from __future__ import annotations

from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_ops.loss import STANDARD


class _Loss(Layer):
    """Holds `reduction` (checked against `reductions`) and the options forward passes to `functional`.

    Subclasses set `functional` (the name in oarlock.nn.functional) and call super().__init__ with their
    options; forward(input, label) calls the op with them."""

    functional = ""
    reductions = STANDARD

    def __init__(self, reduction="mean", **options):
        super().__init__()
        if reduction not in self.reductions:
            raise ValueError(f"{type(self).__name__}: reduction must be one of "
                             f"{', '.join(map(repr, self.reductions))}, got {reduction!r}")
        self.reduction = reduction
        self._options = options
        for key, value in options.items():
            setattr(self, key, value)

    def forward(self, input, label):
        options = {key: getattr(self, key) for key in self._options}  # attributes may be changed after __init__
        return getattr(F, self.functional)(input, label, reduction=self.reduction, **options)

    def extra_repr(self):
        options = {key: getattr(self, key) for key in self._options}
        shown = [f"{key}={value!r}" for key, value in options.items() if key != "weight" and key != "pos_weight"]
        return ", ".join([f"reduction={self.reduction!r}", *shown])


class CrossEntropyLoss(_Loss):
    """Softmax cross entropy with hard or soft labels (oarlock.nn.functional.cross_entropy)."""

    functional = "cross_entropy"

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                 use_softmax=True, label_smoothing=0.0, name=None):
        super().__init__(reduction, weight=weight, ignore_index=ignore_index, soft_label=soft_label, axis=axis,
                         use_softmax=use_softmax, label_smoothing=label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities along class axis 1 (oarlock.nn.functional.nll_loss)."""

    functional = "nll_loss"

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", name=None):
        super().__init__(reduction, weight=weight, ignore_index=ignore_index)


class MSELoss(_Loss):
    """Mean squared error (oarlock.nn.functional.mse_loss)."""

    functional = "mse_loss"

    def __init__(self, reduction="mean"):
        super().__init__(reduction)


class L1Loss(_Loss):
    """Mean absolute error (oarlock.nn.functional.l1_loss)."""

    functional = "l1_loss"

    def __init__(self, reduction="mean", name=None):
        super().__init__(reduction)


class SmoothL1Loss(_Loss):
    """The Huber loss with threshold delta, divided by delta when is_huber=False
    (oarlock.nn.functional.smooth_l1_loss)."""

    functional = "smooth_l1_loss"

    def __init__(self, reduction="mean", delta=1.0, is_huber=True, name=None):
        super().__init__(reduction, delta=delta, is_huber=is_huber)


class BCELoss(_Loss):
    """Binary cross entropy of probabilities (oarlock.nn.functional.binary_cross_entropy)."""

    functional = "binary_cross_entropy"

    def __init__(self, weight=None, reduction="mean", name=None):
        super().__init__(reduction, weight=weight)


class BCEWithLogitsLoss(_Loss):
    """Binary cross entropy of sigmoid(logit), computed stably from the logits
    (oarlock.nn.functional.binary_cross_entropy_with_logits)."""

    functional = "binary_cross_entropy_with_logits"

    def __init__(self, weight=None, reduction="mean", pos_weight=None, name=None):
        super().__init__(reduction, weight=weight, pos_weight=pos_weight)

    def forward(self, logit, label):
        return super().forward(logit, label)


class KLDivLoss(_Loss):
    """KL divergence of log-probabilities from a target distribution (oarlock.nn.functional.kl_div)."""

    functional = "kl_div"
    reductions = (*STANDARD, "batchmean")

    def __init__(self, reduction="mean", log_target=False):
        super().__init__(reduction, log_target=log_target)


EXPORTS = {
    "oarlock.nn": [CrossEntropyLoss, NLLLoss, MSELoss, L1Loss, SmoothL1Loss, BCELoss, BCEWithLogitsLoss, KLDivLoss],
}
