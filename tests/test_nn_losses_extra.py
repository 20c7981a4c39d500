"""Paddle 3.2's remaining losses (functional and layers) against real Paddle: values for every reduction and
the gradients of the inputs a model differentiates (labels and targets held constant); gaussian_nll_loss's
variance gradient, which Paddle does not give, against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from paddle_compare import compare

RNG = np.random.default_rng(0)
REDUCTIONS = ["mean", "sum", "none"]


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _sign(*shape):
    return np.where(RNG.random(shape) > 0.5, 1.0, -1.0).astype(np.float32)


def _both(paddle, name, arrays, constants=(), **kwargs):
    compare(paddle, lambda *t: getattr(F, name)(*t, **kwargs),
            lambda *t: getattr(paddle.nn.functional, name)(*t, **kwargs), arrays, constants=constants)


def _layers(paddle, layer, arrays, constants=(), **kwargs):
    compare(paddle, getattr(nn, layer)(**kwargs), getattr(paddle.nn, layer)(**kwargs), arrays, constants=constants)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pairwise_losses(paddle, reduction):
    _both(paddle, "margin_ranking_loss", [_x(4, 5), _x(4, 5), _sign(4, 5)], constants=(2,), margin=0.3,
          reduction=reduction)
    _layers(paddle, "MarginRankingLoss", [_x(4, 5), _x(4, 5), _sign(4, 5)], constants=(2,), margin=0.1,
            reduction=reduction)
    _both(paddle, "hinge_embedding_loss", [_x(4, 5), _sign(4, 5)], constants=(1,), margin=0.5, reduction=reduction)
    _layers(paddle, "HingeEmbeddingLoss", [_x(4, 5), _sign(4, 5)], constants=(1,), reduction=reduction)
    _both(paddle, "soft_margin_loss", [_x(4, 5), _sign(4, 5)], constants=(1,), reduction=reduction)
    _layers(paddle, "SoftMarginLoss", [_x(4, 5), _sign(4, 5)], constants=(1,), reduction=reduction)
    _both(paddle, "cosine_embedding_loss", [_x(4, 5), _x(4, 5), _sign(4)], constants=(2,), margin=0.2,
          reduction=reduction)
    _layers(paddle, "CosineEmbeddingLoss", [_x(5), _x(5), _sign(1)], constants=(2,), reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multi_label_and_margin_losses(paddle, reduction):
    targets = (_sign(4, 5) > 0).astype(np.float32)
    _both(paddle, "multi_label_soft_margin_loss", [_x(4, 5), targets], constants=(1,), reduction=reduction)
    weight = np.abs(_x(5))
    compare(paddle, lambda t, y: F.multi_label_soft_margin_loss(t, y, oarlock.to_tensor(weight), reduction=reduction),
            lambda t, y: paddle.nn.functional.multi_label_soft_margin_loss(t, y, paddle.to_tensor(weight),
                                                                           reduction=reduction),
            [_x(4, 5), targets], constants=(1,))
    labels = np.array([0, 3, 4, 1])
    _both(paddle, "multi_margin_loss", [_x(4, 5), labels], p=2, margin=0.7, reduction=reduction)
    compare(paddle, lambda t, y: F.multi_margin_loss(t, y, weight=oarlock.to_tensor(weight), reduction=reduction),
            lambda t, y: paddle.nn.functional.multi_margin_loss(t, y, weight=paddle.to_tensor(weight),
                                                                reduction=reduction), [_x(4, 5), labels])
    _layers(paddle, "MultiMarginLoss", [_x(4, 5), labels], reduction=reduction)
    _layers(paddle, "MultiLabelSoftMarginLoss", [_x(4, 5), targets], constants=(1,), reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p,swap", [(2.0, False), (1.5, True), (1.0, False)])
def test_triplet_losses(paddle, reduction, p, swap):
    arrays = [_x(6, 4), _x(6, 4), _x(6, 4)]
    _both(paddle, "triplet_margin_loss", arrays, p=p, swap=swap, margin=0.5, reduction=reduction)
    _layers(paddle, "TripletMarginLoss", arrays, p=p, swap=swap, reduction=reduction)
    compare(paddle, lambda a, b, c: F.triplet_margin_with_distance_loss(
                a, b, c, distance_function=lambda x, y: 1 - F.cosine_similarity(x, y), swap=swap, reduction=reduction),
            lambda a, b, c: paddle.nn.functional.triplet_margin_with_distance_loss(
                a, b, c, distance_function=lambda x, y: 1 - paddle.nn.functional.cosine_similarity(x, y), swap=swap,
                reduction=reduction), arrays)
    _layers(paddle, "TripletMarginWithDistanceLoss", arrays, margin=2.0, reduction=reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_likelihood_losses(paddle, reduction):
    counts = np.round(np.abs(_x(4, 5)) * 3).astype(np.float32)   # zeros, ones and larger counts
    _both(paddle, "poisson_nll_loss", [_x(4, 5), counts], constants=(1,), full=True, reduction=reduction)
    _both(paddle, "poisson_nll_loss", [np.abs(_x(4, 5)), counts], constants=(1,), log_input=False,
          reduction=reduction)
    _layers(paddle, "PoissonNLLLoss", [_x(4, 5), counts], constants=(1,), reduction=reduction)
    variance = np.abs(_x(4, 5)) + 0.1
    _both(paddle, "gaussian_nll_loss", [_x(4, 5), _x(4, 5), variance], constants=(1, 2), full=True,
          reduction=reduction)
    _both(paddle, "gaussian_nll_loss", [_x(4, 5), _x(4, 5), variance[:, 0]], constants=(1, 2), reduction=reduction)
    _layers(paddle, "GaussianNLLLoss", [_x(4, 5), _x(4, 5), variance[:, :1]], constants=(1, 2), reduction=reduction)


def test_gaussian_nll_variance_gradient_like_torch(torch):
    x, y = _x(4, 5), _x(4, 5)
    variance = np.abs(_x(4, 5))
    variance[0, :2] = 1e-9   # below epsilon: clamped, the gradient still passes (torch's rule)
    ours = oarlock.to_tensor(variance, stop_gradient=False)
    F.gaussian_nll_loss(oarlock.to_tensor(x), oarlock.to_tensor(y), ours, epsilon=1e-3).backward()
    theirs = torch.tensor(variance, requires_grad=True)
    torch.nn.functional.gaussian_nll_loss(torch.tensor(x), torch.tensor(y), theirs, eps=1e-3).backward()
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="gaussian_nll_loss: variance must have input's shape"):
        F.gaussian_nll_loss(oarlock.to_tensor(x), oarlock.to_tensor(y), oarlock.ones([4, 2]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_sigmoid_focal_loss(paddle, reduction):
    targets = (_sign(4, 5) > 0).astype(np.float32)
    _both(paddle, "sigmoid_focal_loss", [_x(4, 5), targets], constants=(1,), reduction=reduction)
    compare(paddle, lambda t, y: F.sigmoid_focal_loss(t, y, oarlock.to_tensor([3.0]), alpha=0.4, gamma=1.5,
                                                      reduction=reduction),
            lambda t, y: paddle.nn.functional.sigmoid_focal_loss(t, y, paddle.to_tensor([3.0]), alpha=0.4,
                                                                 gamma=1.5, reduction=reduction),
            [_x(4, 5), targets], constants=(1,))


def test_dice_npair_log_square_losses(paddle):
    _both(paddle, "dice_loss", [np.abs(_x(3, 4, 5)), RNG.integers(0, 5, (3, 4, 1))])
    _both(paddle, "dice_loss", [np.abs(_x(6, 3)), RNG.integers(0, 3, (6, 1))], epsilon=0.1)
    _both(paddle, "npair_loss", [_x(6, 5), _x(6, 5), np.array([1, 2, 1, 0, 2, 3], np.float32)], constants=(2,))
    _both(paddle, "npair_loss", [_x(4, 3), _x(4, 3), np.array([0, 1, 2, 3])], l2_reg=0.1)
    _both(paddle, "log_loss", [np.abs(_x(4, 1)) / 4, (_sign(4, 1) > 0).astype(np.float32)], constants=(1,))
    _both(paddle, "square_error_cost", [_x(4, 5), _x(4, 5)])


def test_softmax_with_cross_entropy(paddle):
    _both(paddle, "softmax_with_cross_entropy", [_x(4, 5), np.array([[0], [3], [4], [1]])])
    soft = np.abs(_x(4, 5))
    soft /= soft.sum(1, keepdims=True)   # Paddle's gradient assumes soft labels that sum to 1
    _both(paddle, "softmax_with_cross_entropy", [_x(4, 5), soft], constants=(1,), soft_label=True)
    _both(paddle, "softmax_with_cross_entropy", [_x(3, 5, 2), np.array([[[0, 1]], [[4, 2]], [[3, 3]]])], axis=1)
    labels = oarlock.to_tensor(np.array([[0], [1], [2], [3]]))
    loss, probs = F.softmax_with_cross_entropy(oarlock.to_tensor(_x(4, 5)), labels, return_softmax=True)
    assert loss.shape == [4, 1] and probs.shape == [4, 5]


def test_reduction_errors():
    with pytest.raises(ValueError, match="margin_ranking_loss: reduction must be one of"):
        F.margin_ranking_loss(oarlock.ones([2]), oarlock.ones([2]), oarlock.ones([2]), reduction="avg")
    with pytest.raises(ValueError, match="TripletMarginLoss: reduction must be one of"):
        nn.TripletMarginLoss(reduction="avg")
    with pytest.raises(ValueError, match="soft_margin_loss: input and label must have the same shape"):
        F.soft_margin_loss(oarlock.ones([2, 3]), oarlock.ones([3]))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multi_label_margin_loss(paddle, reduction):
    labels = np.array([[3, 0, -1, 1], [0, 1, 2, 3], [-1, 2, 0, 1], [2, -1, -1, -1]])   # targets end at the first -1
    _both(paddle, "multi_label_margin_loss", [_x(4, 4), labels], reduction=reduction)
    _layers(paddle, "MultiLabelMarginLoss", [_x(4, 4), labels], reduction=reduction)
    with pytest.raises(ValueError, match=r"multi_label_margin_loss: label values must be in \[-1, 4\)"):
        F.multi_label_margin_loss(oarlock.ones([1, 4]), oarlock.to_tensor(np.array([[4, -1, -1, -1]])))


CTC_LABELS = np.array([[1, 2, 2], [3, 1, 0], [4, 4, 4]], dtype=np.int32)   # repeats need a blank between them
CTC_INPUT_LENGTHS, CTC_LABEL_LENGTHS = np.array([7, 5, 6]), np.array([3, 2, 1])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("norm_by_times", [False, True])
def test_ctc_loss_matches_paddle(paddle, reduction, norm_by_times):
    def call(framework, function):
        return lambda t: function(t, framework.to_tensor(CTC_LABELS), framework.to_tensor(CTC_INPUT_LENGTHS),
                                  framework.to_tensor(CTC_LABEL_LENGTHS), reduction=reduction,
                                  norm_by_times=norm_by_times)
    compare(paddle, call(oarlock, F.ctc_loss), call(paddle, paddle.nn.functional.ctc_loss), [_x(7, 3, 5)], atol=1e-5)
    layer_args = [CTC_LABELS, CTC_INPUT_LENGTHS, CTC_LABEL_LENGTHS]
    compare(paddle, lambda t, *a: nn.CTCLoss(reduction=reduction)(t, *a, norm_by_times=norm_by_times),
            lambda t, *a: paddle.nn.CTCLoss(reduction=reduction)(t, *a, norm_by_times=norm_by_times),
            [_x(7, 3, 5), *layer_args], atol=1e-5)


def test_ctc_loss_blank_and_empty_label_like_torch(torch):
    """Another blank index and an empty label, against torch.nn.functional.ctc_loss on the log-softmax."""
    scores = _x(6, 3, 5)
    labels = np.array([[0, 1, 0], [2, 2, 3], [0, 0, 0]], dtype=np.int64)
    input_lengths, label_lengths = np.array([6, 6, 4]), np.array([3, 3, 0])
    ours = oarlock.to_tensor(scores, stop_gradient=False)
    loss = F.ctc_loss(ours, oarlock.to_tensor(labels), oarlock.to_tensor(input_lengths),
                      oarlock.to_tensor(label_lengths), blank=4, reduction="none")
    loss.sum().backward()
    theirs = torch.tensor(scores, requires_grad=True)
    expected = torch.nn.functional.ctc_loss(torch.log_softmax(theirs, -1), torch.tensor(labels),
                                            torch.tensor(input_lengths), torch.tensor(label_lengths), blank=4,
                                            reduction="none")
    expected.sum().backward()
    np.testing.assert_allclose(loss.numpy(), expected.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"ctc_loss: input_lengths must be in \[1, 6\]"):
        F.ctc_loss(ours, oarlock.to_tensor(labels), oarlock.to_tensor(np.array([7, 6, 4])),
                   oarlock.to_tensor(label_lengths))


@pytest.mark.parametrize("num_classes", [2, 6, 9])
def test_hsigmoid_loss_default_tree(paddle, num_classes):
    labels = RNG.integers(0, num_classes, (5, 1))
    arrays = [_x(5, 4), _x(num_classes - 1, 4), _x(num_classes - 1, 1)]
    compare(paddle, lambda x, w, b: F.hsigmoid_loss(x, oarlock.to_tensor(labels), num_classes, w, b),
            lambda x, w, b: paddle.nn.functional.hsigmoid_loss(x, paddle.to_tensor(labels), num_classes, w, b),
            arrays, atol=1e-5)
    theirs, ours = paddle.nn.HSigmoidLoss(4, num_classes), nn.HSigmoidLoss(4, num_classes)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}
    ours.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    compare(paddle, lambda x: ours(x, oarlock.to_tensor(labels)), lambda x: theirs(x, paddle.to_tensor(labels)),
            [arrays[0]], atol=1e-5)


def test_hsigmoid_loss_custom_paths(paddle):
    table = np.array([[0, 1, -1], [0, 2, 3], [0, 1, 4]])
    code = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0]])
    labels = np.array([[0], [1], [2]])

    def call(framework, function):
        return lambda x, w, b: function(x, framework.to_tensor(labels), 6, w, b, framework.to_tensor(table),
                                        framework.to_tensor(code))
    compare(paddle, call(oarlock, F.hsigmoid_loss), call(paddle, paddle.nn.functional.hsigmoid_loss),
            [_x(3, 4), _x(5, 4), _x(5, 1)], atol=1e-5)
    with pytest.raises(ValueError, match="hsigmoid_loss: give path_table and path_code together"):
        F.hsigmoid_loss(oarlock.ones([3, 4]), oarlock.to_tensor(labels), 6, oarlock.ones([5, 4]),
                        path_table=oarlock.to_tensor(table))
