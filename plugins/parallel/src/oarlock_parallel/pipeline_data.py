"""Paddle's pipeline data conventions (FakeMicroDataset in pipeline_parallel.py): the batch a program hands to
PipelineParallel.train_batch / eval_batch, cut into micro-batches.

`data` is [inputs, labels] (a list or tuple of two). Each of the two is a Tensor (split on dim 0 into
accumulate_steps micro-batches of micro_batch_size rows), a tuple or dict of such tensors (each split the same
way; an item may instead be a list holding one tensor per micro-batch, or None), a list of one value per
micro-batch, or None. Only the first stage reads the inputs and only the last stage the labels; the middle
stages get nothing. A tensor whose dim 0 is not micro_batch_size * accumulate_steps is an error.
"""

from __future__ import annotations

import oarlock


class MicroBatchError(ValueError):
    """The data handed to train_batch / eval_batch do not split into the configured micro-batches."""


def _split_tensor(t, what: str, where: str, size: int, count: int) -> list:
    if not isinstance(t, oarlock.Tensor):
        raise MicroBatchError(f"{what}: {where} is a {type(t).__name__}; accepted: a Tensor, a tuple / dict of "
                              "Tensors, a list of one value per micro-batch, or None")
    rows = t.shape[0] if t.ndim else None
    if rows != size * count:
        raise MicroBatchError(f"{what}: {where} has {rows} rows on dim 0 (shape {list(t.shape)}), but "
                              f"pipeline_configs micro_batch_size ({size}) x accumulate_steps ({count}) = "
                              f"{size * count}; the batch must be micro_batch_size * accumulate_steps rows (or "
                              "give a list of one tensor per micro-batch)")
    return [t[i * size:(i + 1) * size].detach() for i in range(count)]


def _per_micro_batch(value, what: str, where: str, size: int, count: int) -> list:
    if isinstance(value, list):
        if len(value) != count:
            raise MicroBatchError(f"{what}: {where} is a list of {len(value)} values, but a list must hold one per "
                                  f"micro-batch (accumulate_steps = {count})")
        return [v.detach() if isinstance(v, oarlock.Tensor) else v for v in value]
    if value is None:
        return [None] * count
    return _split_tensor(value, what, where, size, count)


def _split(value, what: str, where: str, size: int, count: int) -> list:
    if isinstance(value, tuple):
        parts = [_per_micro_batch(v, what, f"{where}[{i}]", size, count) for i, v in enumerate(value)]
        return [tuple(p[m] for p in parts) for m in range(count)]
    if isinstance(value, dict):
        parts = {k: _per_micro_batch(v, what, f"{where}[{k!r}]", size, count) for k, v in value.items()}
        return [{k: p[m] for k, p in parts.items()} for m in range(count)]
    return _per_micro_batch(value, what, where, size, count)


def micro_batches(data, what: str, size: int, count: int, first: bool, last: bool) -> list:
    """[(input, label)] per micro-batch for a stage (`first` / `last`: whether it reads the inputs / labels)."""
    if not (first or last):
        return [(None, None)] * count
    if not isinstance(data, (list, tuple)) or len(data) != 2:
        shown = f"a {type(data).__name__}" + (f" of {len(data)}" if isinstance(data, (list, tuple)) else "")
        raise MicroBatchError(f"{what}: data must be [inputs, labels] (a list or tuple of two) on the first and the "
                              f"last pipeline stage; got {shown}")
    inputs = _split(data[0], what, "data[0] (the inputs)", size, count) if first else [None] * count
    labels = _split(data[1], what, "data[1] (the labels)", size, count) if last else [None] * count
    return list(zip(inputs, labels))
