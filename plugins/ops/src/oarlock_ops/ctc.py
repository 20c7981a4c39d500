"""nn.functional.ctc_loss with Paddle 3.2's semantics (its warpctc): `log_probs` [max_T, batch, classes] are
unscaled scores that get a log-softmax here, labels [batch, max_L] are padded class indices, and the loss of a
sample is -log p(labels | scores) summed over every alignment (the CTC forward algorithm).

The forward algorithm runs over time with vectorised tensor ops on the extended label sequence
(blank, l1, blank, l2, ..., blank) of every sample at once, in log space, so autograd gives the gradient.
Past a sample's input length its alphas stop changing. norm_by_times divides the gradient (not the loss)
by the input length, as warpctc does. reduction 'mean' divides each loss by its label length first.
"""

from __future__ import annotations

import numpy as np

import oarlock
from oarlock_ops.loss import check_reduction

NEG = -1e30   # log(0) kept finite, so no inf - inf reaches logsumexp's gradient


def _int_host(function, name, t, ndim):
    if not isinstance(t, oarlock.Tensor) or t.dtype.kind != "int" or t.ndim != ndim:
        raise ValueError(f"{function}: {name} must be a {ndim}-D integer Tensor, got "
                         f"{t.shape if isinstance(t, oarlock.Tensor) else type(t).__name__}"
                         f"{'' if not isinstance(t, oarlock.Tensor) else ' of ' + t.dtype.name}")
    return t.numpy().astype(np.int64)


def ctc_loss(log_probs, labels, input_lengths, label_lengths, blank=0, reduction="mean", norm_by_times=False):
    """The CTC loss per sample ('none': shape [batch]), summed ('sum') or averaged after dividing by the label
    lengths ('mean')."""
    if not isinstance(log_probs, oarlock.Tensor) or log_probs.ndim != 3:
        raise ValueError(f"ctc_loss: log_probs must be a 3-D Tensor [max_T, batch, classes], got "
                         f"{log_probs.shape if isinstance(log_probs, oarlock.Tensor) else type(log_probs).__name__}")
    try:
        check_reduction(reduction)
    except ValueError as exc:
        raise ValueError(f"ctc_loss: {exc}") from None
    steps, batch, classes = log_probs.shape
    label_host = _int_host("ctc_loss", "labels", labels, 2)
    input_len = _int_host("ctc_loss", "input_lengths", input_lengths, 1)
    label_len = _int_host("ctc_loss", "label_lengths", label_lengths, 1)
    if not 0 <= blank < classes:
        raise ValueError(f"ctc_loss: blank must be in [0, {classes}), got {blank}")
    if len(input_len) != batch or len(label_len) != batch or label_host.shape[0] != batch:
        raise ValueError(f"ctc_loss: labels, input_lengths and label_lengths must have the batch size {batch}")
    if (input_len < 1).any() or (input_len > steps).any() or (label_len < 0).any() or \
            (label_len > label_host.shape[1]).any():
        raise ValueError(f"ctc_loss: input_lengths must be in [1, {steps}] and label_lengths in "
                         f"[0, {label_host.shape[1]}], got {input_len.tolist()} and {label_len.tolist()}")

    width = 2 * label_host.shape[1] + 1
    extended = np.full((batch, width), blank, dtype=np.int64)
    extended[:, 1::2] = label_host
    positions = np.arange(width)[None, :]
    valid = positions < (2 * label_len[:, None] + 1)
    skip = np.zeros((batch, width), dtype=bool)   # s may come from s - 2: a label different from the one before
    skip[:, 2:] = (extended[:, 2:] != blank) & (extended[:, 2:] != extended[:, :-2])
    dtype = log_probs.dtype
    neg_column = oarlock.full([batch, 1], NEG, dtype=dtype)
    neg_two = oarlock.full([batch, 2], NEG, dtype=dtype)
    invalid = oarlock.to_tensor(~valid)
    no_skip = oarlock.to_tensor(~skip)
    index = oarlock.to_tensor(extended)

    lp = oarlock.nn.functional.log_softmax(log_probs, axis=-1)
    start = np.full((batch, width), NEG)
    start[:, 0] = 0.0
    start[:, 1] = np.where(label_len > 0, 0.0, NEG)
    alpha = oarlock.cast(oarlock.to_tensor(start), dtype) + oarlock.take_along_axis(lp[0], index, 1)
    alpha = oarlock.masked_fill(alpha, invalid, NEG)
    for t in range(1, steps):
        one_back = oarlock.concat([neg_column, alpha[:, :-1]], axis=1)
        two_back = oarlock.masked_fill(oarlock.concat([neg_two, alpha[:, :-2]], axis=1), no_skip, NEG)
        new = oarlock.logsumexp(oarlock.stack([alpha, one_back, two_back]), axis=0) + \
            oarlock.take_along_axis(lp[t], index, 1)
        new = oarlock.masked_fill(new, invalid, NEG)
        running = oarlock.to_tensor((t < input_len)[:, None])
        alpha = oarlock.where(running, new, alpha)
    ends = np.stack([2 * label_len, np.maximum(2 * label_len - 1, 0)], axis=1)
    finals = oarlock.take_along_axis(alpha, oarlock.to_tensor(ends), 1)
    if (label_len == 0).any():   # an empty label ends only at the single blank
        finals = oarlock.masked_fill(finals, oarlock.to_tensor(np.stack([label_len < 0, label_len == 0], 1)), NEG)
    loss = -oarlock.logsumexp(finals, axis=1)
    if norm_by_times:   # the loss stays, its gradient is divided by the input length
        scaled = loss / oarlock.cast(oarlock.to_tensor(input_len), dtype)
        loss = scaled + (loss - scaled).detach()
    if reduction == "mean":
        return oarlock.mean(loss / oarlock.cast(oarlock.to_tensor(np.maximum(label_len, 1)), dtype))
    if reduction == "sum":
        return oarlock.sum(loss)
    return loss


def register_api(api):
    api.export("oarlock.nn.functional", "ctc_loss", ctc_loss)
