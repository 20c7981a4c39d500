"""oarlock.metric.accuracy: the top-k accuracy of a batch as a float32 scalar Tensor (Paddle 3.2's function)."""

from __future__ import annotations

import numpy as np

import oarlock


def accuracy(input, label, k=1, correct=None, total=None, name=None):
    """The fraction of rows of `input` ([N, C] scores) whose `label` ([N, 1] int class) is among the k highest
    scores. `correct` and `total`, when given (int Tensors), receive the counts, as Paddle's op writes them."""
    if not isinstance(input, oarlock.Tensor) or len(input.shape) != 2:
        raise ValueError(f"accuracy(): argument 'input' must be a 2-D [N, C] Tensor of scores, got "
                         f"{_describe(input)}")
    if not isinstance(label, oarlock.Tensor) or len(label.shape) != 2 or label.shape[1] != 1:
        raise ValueError(f"accuracy(): argument 'label' must be a [N, 1] int Tensor (Paddle's accuracy op needs "
                         f"2-D labels), got {_describe(label)}")
    if label.shape[0] != input.shape[0]:
        raise ValueError(f"accuracy(): 'input' has {input.shape[0]} rows but 'label' has {label.shape[0]}")
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= input.shape[1]:
        raise ValueError(f"accuracy(): argument 'k' must be an int in [1, {input.shape[1]}] (the number of "
                         f"classes), got {k!r}")
    with oarlock.no_grad():
        _, indices = oarlock.topk(input, k=k)
        hits = (indices == label.astype(indices.dtype)).astype("int32").sum(axis=1)
        num_correct = int((hits > 0).astype("int32").sum().item())
    num_total = int(input.shape[0])
    for target, value, argument in ((correct, num_correct, "correct"), (total, num_total, "total")):
        if target is not None:
            if not isinstance(target, oarlock.Tensor):
                raise TypeError(f"accuracy(): argument '{argument}' must be a Tensor or None, "
                                f"got {type(target).__name__}")
            target.set_value(np.full(target.shape, value, dtype=target.numpy().dtype))
    return oarlock.to_tensor(np.float32(num_correct / num_total if num_total else 0.0))


def _describe(value) -> str:
    if isinstance(value, oarlock.Tensor):
        return f"a Tensor of shape {list(value.shape)} and dtype {value.dtype}"
    return type(value).__name__
