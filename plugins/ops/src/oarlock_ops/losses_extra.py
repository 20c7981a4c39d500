"""Paddle 3.2's remaining losses in oarlock.nn.functional, written with Paddle's formulas over public ops (so
their gradients come from those ops): margin_ranking_loss, hinge_embedding_loss, soft_margin_loss,
multi_label_soft_margin_loss, triplet_margin_loss, triplet_margin_with_distance_loss, poisson_nll_loss,
gaussian_nll_loss, sigmoid_focal_loss, dice_loss, npair_loss, log_loss, square_error_cost,
cosine_embedding_loss, multi_margin_loss, multi_label_margin_loss, hsigmoid_loss and softmax_with_cross_entropy
(the legacy name).

One departure: gaussian_nll_loss passes the gradient to `variance` through the epsilon clamp (as PyTorch
does); Paddle 3.2 clamps under no_grad and so gives variance no gradient at all.
"""

from __future__ import annotations

import math

import numpy as np

import oarlock
from oarlock_ops.loss import check_reduction


def _tensor(function, name, x):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{function}: {name} must be a Tensor, got {type(x).__name__}")


def _reduce(function, loss, reduction):
    try:
        check_reduction(reduction)
    except ValueError as exc:
        raise ValueError(f"{function}: {exc}") from None
    if reduction == "mean":
        return oarlock.mean(loss)
    if reduction == "sum":
        return oarlock.sum(loss)
    return loss


def _same_shape(function, **tensors):
    shapes = {name: t.shape for name, t in tensors.items()}
    if len({tuple(s) for s in shapes.values()}) > 1:
        raise ValueError(f"{function}: {' and '.join(shapes)} must have the same shape, got "
                         f"{', '.join(f'{k} {v}' for k, v in shapes.items())}")


def margin_ranking_loss(input, other, label, margin=0.0, reduction="mean", name=None):  # noqa: A002
    """max(0, -label * (input - other) + margin)."""
    for arg, value in (("input", input), ("other", other), ("label", label)):
        _tensor("margin_ranking_loss", arg, value)
    loss = oarlock.clip(-label * (input - other) + margin, min=0.0)
    return _reduce("margin_ranking_loss", loss, reduction)


def hinge_embedding_loss(input, label, margin=1.0, reduction="mean", name=None):  # noqa: A002
    """input where label == 1, max(0, margin - input) where label == -1 (0 elsewhere)."""
    _tensor("hinge_embedding_loss", "input", input)
    _tensor("hinge_embedding_loss", "label", label)
    zero = oarlock.zeros_like(input)
    loss = oarlock.where(label == 1.0, input, zero) + oarlock.where(label == -1.0, oarlock.relu(margin - input), zero)
    return _reduce("hinge_embedding_loss", loss, reduction)


def soft_margin_loss(input, label, reduction="mean", name=None):  # noqa: A002
    """log(1 + exp(-label * input)), computed as softplus so a large margin does not overflow."""
    _tensor("soft_margin_loss", "input", input)
    _tensor("soft_margin_loss", "label", label)
    _same_shape("soft_margin_loss", input=input, label=label)
    loss = oarlock.nn.functional.softplus(-oarlock.cast(label, input.dtype) * input)
    return _reduce("soft_margin_loss", loss, reduction)


def multi_label_soft_margin_loss(input, label, weight=None, reduction="mean", name=None):  # noqa: A002
    """-mean over classes of label log sigmoid(input) + (1 - label) log sigmoid(-input), times weight."""
    _tensor("multi_label_soft_margin_loss", "input", input)
    _tensor("multi_label_soft_margin_loss", "label", label)
    _same_shape("multi_label_soft_margin_loss", input=input, label=label)
    log_sigmoid = oarlock.nn.functional.log_sigmoid
    label = oarlock.cast(label, input.dtype)
    loss = -(label * log_sigmoid(input) + (1 - label) * log_sigmoid(-input))
    if weight is not None:
        loss = loss * weight
    return _reduce("multi_label_soft_margin_loss", oarlock.mean(loss, axis=-1), reduction)


def triplet_margin_with_distance_loss(input, positive, negative, distance_function=None, margin=1.0, swap=False,  # noqa: A002
                                      reduction="mean", name=None):
    """max(0, d(input, positive) - d(input, negative) + margin); swap uses min(d(a, n), d(p, n))."""
    for arg, value in (("input", input), ("positive", positive), ("negative", negative)):
        _tensor("triplet_margin_with_distance_loss", arg, value)
    distance = distance_function or oarlock.nn.functional.pairwise_distance
    positive_dist = distance(input, positive)
    negative_dist = distance(input, negative)
    if swap:
        negative_dist = oarlock.minimum(negative_dist, distance(positive, negative))
    return _reduce("triplet_margin_with_distance_loss", oarlock.clip(positive_dist - negative_dist + margin, min=0.0),
                   reduction)


def triplet_margin_loss(input, positive, negative, margin=1.0, p=2, epsilon=1e-6, swap=False, reduction="mean",  # noqa: A002
                        name=None):
    """triplet_margin_with_distance_loss with the p-norm distance ||x - y + epsilon||_p."""
    for arg, value in (("input", input), ("positive", positive), ("negative", negative)):
        _tensor("triplet_margin_loss", arg, value)
    _same_shape("triplet_margin_loss", input=input, positive=positive, negative=negative)

    def distance(x, y):
        return oarlock.nn.functional.pairwise_distance(x, y, p=p, epsilon=epsilon)
    return triplet_margin_with_distance_loss(input, positive, negative, distance, margin, swap, reduction)


def poisson_nll_loss(input, label, log_input=True, full=False, epsilon=1e-8, reduction="mean", name=None):  # noqa: A002
    """exp(input) - label * input (log_input), else input - label * log(input + epsilon); full adds
    Stirling's term label log label - label + log(2 pi label) / 2 where label > 1."""
    _tensor("poisson_nll_loss", "input", input)
    _tensor("poisson_nll_loss", "label", label)
    if not epsilon > 0:
        raise ValueError(f"poisson_nll_loss: epsilon must be positive, got {epsilon!r}")
    _same_shape("poisson_nll_loss", input=input, label=label)
    if log_input:
        loss = oarlock.exp(input) - label * input
    else:
        loss = input - label * oarlock.log(input + epsilon)
    if full:
        safe = oarlock.where(label > 1, label, oarlock.ones_like(label))   # no log(0) in the discarded branch
        stirling = safe * oarlock.log(safe) - safe + 0.5 * oarlock.log(2 * math.pi * safe)
        loss = loss + oarlock.where(label > 1, stirling, oarlock.zeros_like(stirling))
    return _reduce("poisson_nll_loss", loss, reduction)


def gaussian_nll_loss(input, label, variance, full=False, epsilon=1e-6, reduction="mean", name=None):  # noqa: A002
    """(log(max(variance, epsilon)) + (input - label)^2 / max(variance, epsilon)) / 2 (+ log(2 pi) / 2 with
    full); variance has input's shape, or it without the last axis, or with a last axis of 1."""
    for arg, value in (("input", input), ("label", label), ("variance", variance)):
        _tensor("gaussian_nll_loss", arg, value)
    if variance.shape != input.shape:
        if list(input.shape[:-1]) == list(variance.shape):
            variance = oarlock.unsqueeze(variance, -1)
        elif not (input.shape[:-1] == variance.shape[:-1] and variance.shape[-1] == 1):
            raise ValueError(f"gaussian_nll_loss: variance must have input's shape {input.shape}, or it without the "
                             f"last axis or with a last axis of 1, got {variance.shape}")
    if bool(oarlock.any(variance < 0)):
        raise ValueError("gaussian_nll_loss: variance has negative entries")
    clamped = variance + (oarlock.clip(variance, min=epsilon) - variance).detach()   # the clamp passes the gradient
    loss = 0.5 * (oarlock.log(clamped) + oarlock.square(input - label) / clamped)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce("gaussian_nll_loss", loss, reduction)


def sigmoid_focal_loss(logit, label, normalizer=None, alpha=0.25, gamma=2.0, reduction="sum", name=None):
    """alpha_t (1 - p_t)^gamma BCE(logit, label) (/ normalizer), p = sigmoid(logit)."""
    _tensor("sigmoid_focal_loss", "logit", logit)
    _tensor("sigmoid_focal_loss", "label", label)
    loss = oarlock.nn.functional.binary_cross_entropy_with_logits(logit, label, reduction="none")
    pred = oarlock.sigmoid(logit)
    p_t = pred * label + (1 - pred) * (1 - label)
    loss = (alpha * label + (1 - alpha) * (1 - label)) * loss
    loss = oarlock.pow(1 - p_t, gamma) * loss
    if normalizer is not None:
        loss = loss / normalizer
    return _reduce("sigmoid_focal_loss", loss, reduction)


def dice_loss(input, label, epsilon=1e-5, name=None):  # noqa: A002
    """mean over the batch of 1 - 2 |input * one_hot(label)| / (|input| + |one_hot(label)| + epsilon);
    input [N, ..., C] probabilities, label [N, ..., 1] class indices."""
    _tensor("dice_loss", "input", input)
    _tensor("dice_loss", "label", label)
    if input.ndim < 2 or label.ndim != input.ndim or label.shape[-1] != 1 or label.shape[:-1] != input.shape[:-1]:
        raise ValueError(f"dice_loss: expected input [N, ..., C] and label [N, ..., 1] of the same rank, got "
                         f"{input.shape} and {label.shape}")
    one_hot = oarlock.cast(oarlock.nn.functional.one_hot(oarlock.squeeze(label, -1), input.shape[-1]), input.dtype)
    axes = list(range(1, input.ndim))
    overlap = oarlock.sum(input * one_hot, axis=axes)
    denominator = oarlock.sum(input, axis=axes) + oarlock.sum(one_hot, axis=axes)
    return oarlock.mean(1 - overlap * 2 / (denominator + epsilon))


def npair_loss(anchor, positive, labels, l2_reg=0.002):
    """Soft-target cross entropy of anchor @ positive^T against the same-label matrix (rows normalised), plus
    l2_reg / 4 times the mean squared norms of anchor and positive."""
    for arg, value in (("anchor", anchor), ("positive", positive), ("labels", labels)):
        _tensor("npair_loss", arg, value)
    if anchor.size == 0 or positive.size == 0:
        raise ValueError("npair_loss: anchor and positive must not be empty")
    batch = labels.shape[0]
    column = oarlock.reshape(labels, [batch, 1])
    targets = oarlock.cast(column == oarlock.reshape(column, [1, batch]), anchor.dtype)
    targets = targets / oarlock.sum(targets, axis=1, keepdim=True)
    l2 = (oarlock.mean(oarlock.sum(oarlock.square(anchor), 1)) + oarlock.mean(oarlock.sum(oarlock.square(positive), 1)))
    similarity = oarlock.matmul(anchor, positive, transpose_y=True)
    ce = -oarlock.sum(targets * oarlock.nn.functional.log_softmax(similarity, axis=-1), axis=-1, keepdim=True)
    return l2 * 0.25 * l2_reg + oarlock.mean(oarlock.sum(targets * ce, 0))


def log_loss(input, label, epsilon=1e-4, name=None):  # noqa: A002
    """-label log(input + epsilon) - (1 - label) log(1 - input + epsilon), elementwise."""
    _tensor("log_loss", "input", input)
    _tensor("log_loss", "label", label)
    return -label * oarlock.log(input + epsilon) - (1 - label) * oarlock.log(1 - input + epsilon)


def square_error_cost(input, label):  # noqa: A002
    """(input - label)^2, elementwise."""
    _tensor("square_error_cost", "input", input)
    _tensor("square_error_cost", "label", label)
    return oarlock.square(input - label)


def cosine_embedding_loss(input1, input2, label, margin=0, reduction="mean", name=None):
    """1 - cos(input1, input2) where label == 1, max(0, cos - margin) where label == -1; 1-D or 2-D inputs."""
    for arg, value in (("input1", input1), ("input2", input2), ("label", label)):
        _tensor("cosine_embedding_loss", arg, value)
    if label.ndim != 1:
        raise ValueError(f"cosine_embedding_loss: label must be 1-D, got shape {label.shape}")
    _same_shape("cosine_embedding_loss", input1=input1, input2=input2)
    if input1.ndim > 2:
        raise ValueError(f"cosine_embedding_loss: inputs must be 1-D or 2-D, got shape {input1.shape}")
    product = oarlock.sum(input1 * input2, axis=-1)
    norms = oarlock.sqrt((oarlock.sum(oarlock.square(input1), axis=-1) + 1e-11) *
                         (oarlock.sum(oarlock.square(input2), axis=-1) + 1e-11))
    cos = product / norms
    zeros = oarlock.zeros_like(cos)
    loss = oarlock.where(label == 1, 1 - cos, zeros) + oarlock.where(label == -1, oarlock.clip(cos - margin, min=0.0),
                                                                     zeros)
    return _reduce("cosine_embedding_loss", loss, reduction)


def multi_margin_loss(input, label, p=1, margin=1.0, weight=None, reduction="mean", name=None):  # noqa: A002
    """mean over classes j != y of w_y max(0, margin - input[y] + input[j])^p (Paddle sums all j and
    subtracts the j = y term, margin^p / C)."""
    _tensor("multi_margin_loss", "input", input)
    _tensor("multi_margin_loss", "label", label)
    if input.ndim != 2 or label.shape[0] != input.shape[0]:
        raise ValueError(f"multi_margin_loss: expected input [N, C] and label [N], got {input.shape} and {label.shape}")
    label = oarlock.reshape(label, [-1, 1])
    target = oarlock.take_along_axis(input, label, 1)
    terms = oarlock.pow(oarlock.clip(margin - target + input, min=0.0), p)
    classes = input.shape[1]
    if weight is None:
        loss = oarlock.mean(terms, axis=1) - margin ** p / classes
    else:
        if weight.shape[0] != classes:
            raise ValueError(f"multi_margin_loss: weight must have {classes} entries (one per class), got "
                             f"{weight.shape}")
        w = oarlock.reshape(oarlock.gather(weight, label, axis=0), [-1, 1])
        loss = oarlock.mean(w * terms, axis=1) - oarlock.squeeze(w * (margin ** p / classes), -1)
    return _reduce("multi_margin_loss", loss, reduction)


def multi_label_margin_loss(input, label, reduction="mean", name=None):  # noqa: A002
    """sum over targets j and non-targets k of max(0, 1 - (input[j] - input[k])) / C per sample; label [N, C]
    holds each sample's target classes, ended by the first -1."""
    _tensor("multi_label_margin_loss", "input", input)
    _tensor("multi_label_margin_loss", "label", label)
    if input.ndim != 2 or label.ndim != 2 or label.shape != input.shape:
        raise ValueError(f"multi_label_margin_loss: expected input and label of shape [N, C], got {input.shape} and "
                         f"{label.shape}")
    labels = label.numpy()
    n, c = input.shape
    if labels.size and (labels.min() < -1 or labels.max() >= c):
        raise ValueError(f"multi_label_margin_loss: label values must be in [-1, {c}), got values from "
                         f"{labels.min()} to {labels.max()}")
    valid = np.cumprod(labels != -1, axis=1).astype(bool)         # the targets before each row's first -1
    is_target = np.zeros((n, c), dtype=bool)
    rows = np.repeat(np.arange(n)[:, None], c, axis=1)
    is_target[rows[valid], labels[valid]] = True
    target_scores = oarlock.take_along_axis(input, oarlock.to_tensor(np.where(valid, labels, 0)), 1)   # [N, C]
    margins = oarlock.relu(1 - oarlock.unsqueeze(target_scores, 2) + oarlock.unsqueeze(input, 1))     # [N, C, C]
    pairs = oarlock.to_tensor((valid[:, :, None] & ~is_target[:, None, :]).astype(input.dtype.name))
    loss = oarlock.sum(margins * pairs, axis=[1, 2]) / c
    return _reduce("multi_label_margin_loss", loss, reduction)


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100, numeric_stable_mode=True,
                               return_softmax=False, axis=-1):
    """The legacy name: the per-sample cross entropy (the class axis kept, of size 1), and the softmax with
    return_softmax=True."""
    _tensor("softmax_with_cross_entropy", "logits", logits)
    _tensor("softmax_with_cross_entropy", "label", label)
    F = oarlock.nn.functional
    if not soft_label and label.ndim == logits.ndim - 1:
        label = oarlock.unsqueeze(label, axis % logits.ndim)
    loss = F.cross_entropy(logits, label, soft_label=soft_label, ignore_index=ignore_index, reduction="none",
                           axis=axis)
    if loss.ndim < logits.ndim:
        loss = oarlock.unsqueeze(loss, axis % logits.ndim)
    return (loss, F.softmax(logits, axis=axis)) if return_softmax else loss


FUNCTIONS = (margin_ranking_loss, hinge_embedding_loss, soft_margin_loss, multi_label_soft_margin_loss,
             triplet_margin_loss, triplet_margin_with_distance_loss, poisson_nll_loss, gaussian_nll_loss,
             sigmoid_focal_loss, dice_loss, npair_loss, log_loss, square_error_cost, cosine_embedding_loss,
             multi_margin_loss, multi_label_margin_loss, softmax_with_cross_entropy)




def _default_paths(labels, num_classes):
    """Paddle's SimpleCode: class c is leaf c + num_classes of a complete binary tree; its path visits the
    nodes (code >> (j + 1)) - 1 with the bits (code >> j) & 1, j < bit_length(code) - 1."""
    codes = labels.astype(np.int64) + num_classes
    lengths = np.floor(np.log2(codes)).astype(np.int64)
    width = int(num_classes - 1).bit_length()   # Paddle's code width: the longest path of any class
    j = np.arange(width)[None, :]
    valid = j < lengths[:, None]
    table = np.where(valid, (codes[:, None] >> (j + 1)) - 1, -1)
    code = np.where(valid, (codes[:, None] >> j) & 1, 0)
    return table, code


def hsigmoid_loss(input, label, num_classes, weight, bias=None, path_table=None, path_code=None,  # noqa: A002
                  is_sparse=False, name=None):
    """Hierarchical sigmoid: per sample, the sum over its tree path of log(1 + exp(z)) - bit * z, z = x . w_node
    + b_node clipped to [-40, 40] (plus Paddle's log 2 per padding slot); the default tree is Paddle's
    SimpleCode over num_classes leaves, or path_table / path_code give custom paths (-1 ends a path).
    Shape [N, 1]."""
    for arg, value in (("input", input), ("label", label), ("weight", weight)):
        _tensor("hsigmoid_loss", arg, value)
    if input.ndim != 2 or weight.ndim != 2 or weight.shape[1] != input.shape[1]:
        raise ValueError(f"hsigmoid_loss: expected input [N, D] and weight [nodes, D], got {input.shape} and "
                         f"{weight.shape}")
    labels = label.numpy().reshape(-1)
    if (path_table is None) != (path_code is None):
        raise ValueError("hsigmoid_loss: give path_table and path_code together (a custom tree) or neither")
    if path_table is None:
        if num_classes < 2 or labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(f"hsigmoid_loss: labels must be in [0, num_classes={num_classes}), got values from "
                             f"{labels.min()} to {labels.max()}")
        table, code = _default_paths(labels, num_classes)
    else:
        table, code = path_table.numpy().astype(np.int64), path_code.numpy().astype(np.int64)
        code = np.where(table >= 0, code, 0)
    valid = table >= 0
    nodes = oarlock.to_tensor(np.where(valid, table, 0))                            # [N, L]
    w = oarlock.gather(weight, oarlock.reshape(nodes, [-1]), axis=0)               # [N*L, D]
    w = oarlock.reshape(w, [table.shape[0], table.shape[1], weight.shape[1]])
    z = oarlock.sum(w * oarlock.unsqueeze(input, 1), axis=-1)                      # [N, L]
    if bias is not None:
        z = z + oarlock.reshape(oarlock.gather(oarlock.reshape(bias, [-1]), oarlock.reshape(nodes, [-1])), z.shape)
    z = oarlock.clip(z, -40.0, 40.0)
    mask = oarlock.cast(oarlock.to_tensor(valid), input.dtype)
    bits = oarlock.cast(oarlock.to_tensor(code), input.dtype)
    per_node = (oarlock.nn.functional.softplus(z, threshold=1e30) - bits * z) * mask
    # Paddle's kernel also counts softplus(0) = log 2 for every padding slot of the code matrix: kept, so the
    # values agree (a constant per sample; the gradients are unaffected)
    padding = oarlock.to_tensor((~valid).sum(axis=1, keepdims=True) * math.log(2.0)).astype(input.dtype)
    return oarlock.sum(per_node, axis=1, keepdim=True) + padding


FUNCTIONS += (hsigmoid_loss,)


def register_api(api):
    for function in FUNCTIONS:
        api.export("oarlock.nn.functional", function.__name__, function)
