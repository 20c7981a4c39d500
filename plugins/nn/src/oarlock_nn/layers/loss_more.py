"""The rest of Paddle 3.2's loss layers: MarginRankingLoss, HingeEmbeddingLoss, SoftMarginLoss,
MultiLabelSoftMarginLoss, TripletMarginLoss, TripletMarginWithDistanceLoss, PoissonNLLLoss, GaussianNLLLoss,
CosineEmbeddingLoss, MultiMarginLoss, MultiLabelMarginLoss, CTCLoss and HSigmoidLoss. Each keeps Paddle's
constructor arguments and passes its inputs (as many as its functional takes: (input, label), (input, other,
label), (input, positive, negative), ...) to the oarlock.nn.functional loss of the same name, with `reduction`
checked at construction."""

from __future__ import annotations

from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_ops.loss import STANDARD


class _MultiInputLoss(Layer):
    functional = ""

    def __init__(self, reduction="mean", **options):
        super().__init__()
        if reduction not in STANDARD:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {', '.join(map(repr, STANDARD))}, "
                             f"got {reduction!r}")
        self.reduction, self._options = reduction, list(options)
        for key, value in options.items():
            setattr(self, key, value)

    def forward(self, *inputs):
        options = {key: getattr(self, key) for key in self._options}
        return getattr(F, self.functional)(*inputs, reduction=self.reduction, **options)

    def extra_repr(self):
        shown = [f"{key}={getattr(self, key)!r}" for key in self._options if key != "weight"]
        return ", ".join([f"reduction={self.reduction!r}", *shown])


class MarginRankingLoss(_MultiInputLoss):
    """forward(input, other, label): max(0, -label * (input - other) + margin)."""

    functional = "margin_ranking_loss"

    def __init__(self, margin=0.0, reduction="mean", name=None):
        super().__init__(reduction, margin=margin)


class HingeEmbeddingLoss(_MultiInputLoss):
    """forward(input, label): input for label 1, max(0, margin - input) for label -1."""

    functional = "hinge_embedding_loss"

    def __init__(self, margin=1.0, reduction="mean", name=None):
        super().__init__(reduction, margin=margin)


class SoftMarginLoss(_MultiInputLoss):
    """forward(input, label): log(1 + exp(-label * input))."""

    functional = "soft_margin_loss"

    def __init__(self, reduction="mean", name=None):
        super().__init__(reduction)


class MultiLabelSoftMarginLoss(_MultiInputLoss):
    """forward(input, label): the per-class logistic loss averaged over classes (weighted)."""

    functional = "multi_label_soft_margin_loss"

    def __init__(self, weight=None, reduction="mean", name=None):
        super().__init__(reduction, weight=weight)


class TripletMarginLoss(_MultiInputLoss):
    """forward(input, positive, negative) with the p-norm distance."""

    functional = "triplet_margin_loss"

    def __init__(self, margin=1.0, p=2.0, epsilon=1e-6, swap=False, reduction="mean", name=None):
        super().__init__(reduction, margin=margin, p=p, epsilon=epsilon, swap=swap)


class TripletMarginWithDistanceLoss(_MultiInputLoss):
    """forward(input, positive, negative) with any distance function (pairwise_distance by default)."""

    functional = "triplet_margin_with_distance_loss"

    def __init__(self, distance_function=None, margin=1.0, swap=False, reduction="mean", name=None):
        super().__init__(reduction, distance_function=distance_function, margin=margin, swap=swap)


class PoissonNLLLoss(_MultiInputLoss):
    """forward(input, label): the Poisson negative log-likelihood."""

    functional = "poisson_nll_loss"

    def __init__(self, log_input=True, full=False, epsilon=1e-8, reduction="mean", name=None):
        if not epsilon > 0:
            raise ValueError(f"PoissonNLLLoss: epsilon must be positive, got {epsilon!r}")
        super().__init__(reduction, log_input=log_input, full=full, epsilon=epsilon)


class GaussianNLLLoss(_MultiInputLoss):
    """forward(input, label, variance): the Gaussian negative log-likelihood."""

    functional = "gaussian_nll_loss"

    def __init__(self, full=False, epsilon=1e-6, reduction="mean", name=None):
        super().__init__(reduction, full=full, epsilon=epsilon)


class CosineEmbeddingLoss(_MultiInputLoss):
    """forward(input1, input2, label): 1 - cos for label 1, max(0, cos - margin) for label -1."""

    functional = "cosine_embedding_loss"

    def __init__(self, margin=0, reduction="mean", name=None):
        super().__init__(reduction, margin=margin)


class MultiMarginLoss(_MultiInputLoss):
    """forward(input, label): the multi-class hinge loss."""

    functional = "multi_margin_loss"

    def __init__(self, p=1, margin=1.0, weight=None, reduction="mean", name=None):
        super().__init__(reduction, p=p, margin=margin, weight=weight)


class MultiLabelMarginLoss(_MultiInputLoss):
    """forward(input, label): the multi-label hinge loss (label: target classes, ended by -1)."""

    functional = "multi_label_margin_loss"

    def __init__(self, reduction="mean", name=None):
        super().__init__(reduction)


class CTCLoss(Layer):
    """CTCLoss(blank=0, reduction='mean'): forward(log_probs, labels, input_lengths, label_lengths,
    norm_by_times=False) is F.ctc_loss."""

    def __init__(self, blank=0, reduction="mean"):
        super().__init__()
        if reduction not in STANDARD:
            raise ValueError(f"CTCLoss: reduction must be one of {', '.join(map(repr, STANDARD))}, got {reduction!r}")
        self.blank, self.reduction = blank, reduction

    def forward(self, log_probs, labels, input_lengths, label_lengths, norm_by_times=False):
        return F.ctc_loss(log_probs, labels, input_lengths, label_lengths, self.blank, self.reduction, norm_by_times)


class HSigmoidLoss(Layer):
    """HSigmoidLoss(feature_size, num_classes, weight_attr=None, bias_attr=None, is_custom=False, is_sparse=False):
    weight [num_classes - 1, feature_size] ([num_classes, ...] with is_custom), bias [same, 1];
    forward(input, label, path_table=None, path_code=None) is F.hsigmoid_loss."""

    def __init__(self, feature_size, num_classes, weight_attr=None, bias_attr=None, is_custom=False, is_sparse=False,
                 name=None):
        super().__init__()
        if (num_classes < 2 and not is_custom) or num_classes < 1 or feature_size < 1:
            raise ValueError(f"HSigmoidLoss: need feature_size >= 1 and num_classes >= 2 (>= 1 with is_custom), got "
                             f"{feature_size} and {num_classes}")
        self._feature_size, self._num_classes, self._is_custom = feature_size, num_classes, is_custom
        self._is_sparse, self._name = is_sparse, name
        nodes = num_classes if is_custom else num_classes - 1
        self.weight = self.create_parameter([nodes, feature_size], attr=weight_attr)
        self.bias = self.create_parameter([nodes, 1], attr=bias_attr, is_bias=True)

    def forward(self, input, label, path_table=None, path_code=None):  # noqa: A002
        return F.hsigmoid_loss(input, label, self._num_classes, self.weight, self.bias, path_table=path_table,
                               path_code=path_code, is_sparse=self._is_sparse)


EXPORTS = {"oarlock.nn": [MarginRankingLoss, HingeEmbeddingLoss, SoftMarginLoss, MultiLabelSoftMarginLoss,
                          TripletMarginLoss, TripletMarginWithDistanceLoss, PoissonNLLLoss, GaussianNLLLoss,
                          CosineEmbeddingLoss, MultiMarginLoss, MultiLabelMarginLoss, CTCLoss, HSigmoidLoss]}
