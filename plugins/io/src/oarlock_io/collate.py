"""Turning samples into batches: default_collate_fn, default_convert_fn, and the final pass the
DataLoader applies to whatever a collate_fn returns.

Paddle's rules: Tensors, numpy arrays and numbers are stacked along a new
first axis into Tensors (Python ints give int64, floats float64, bools
bool); strings stay a list; dicts are collated key by key and lists or
tuples field by field, recursively, giving dicts and lists.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import numpy as np

import oarlock
from oarlock import Tensor

_ACCEPTS = "Tensors, numpy arrays, numbers, strings, and dicts, lists or tuples of these"


def default_collate_fn(batch):
    """Stack a list of samples into one batch (see the module docstring for the rules)."""
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)) or len(batch) == 0:
        raise TypeError(f"default_collate_fn(): batch must be a non-empty list of samples, got "
                        f"{type(batch).__name__} {batch!r:.80}")
    return _collate(batch, "sample")


def _collate(samples, where: str):
    first = samples[0]
    if isinstance(first, Tensor):
        with oarlock.no_grad():  # a batch is data: it does not link back to the dataset's tensors
            return oarlock.stack(list(samples), axis=0)
    if isinstance(first, np.ndarray):
        return oarlock.to_tensor(np.stack(samples))
    if isinstance(first, (numbers.Number, np.bool_)):
        return oarlock.to_tensor(np.array(samples))
    if isinstance(first, (str, bytes)):
        return list(samples)
    if isinstance(first, Mapping):
        for s in samples:
            if not isinstance(s, Mapping) or s.keys() != first.keys():
                raise ValueError(f"default_collate_fn(): every {where} in a batch must be a dict with the keys "
                                 f"{list(first)}, got {type(s).__name__} {s!r:.80}")
        return {key: _collate([s[key] for s in samples], f"{where}[{key!r}]") for key in first}
    if isinstance(first, Sequence):
        width = len(first)
        for s in samples:
            if not isinstance(s, Sequence) or len(s) != width:
                raise ValueError(f"default_collate_fn(): every {where} in a batch must have {width} fields "
                                 f"like the first, got {type(s).__name__} {s!r:.80}")
        return [_collate(list(fields), f"{where}[{i}]") for i, fields in enumerate(zip(*samples))]
    raise TypeError(f"default_collate_fn(): a batch can only hold {_ACCEPTS}; {where} is "
                    f"{type(first).__name__} {first!r:.80}")


def default_convert_fn(sample):
    """The identity for one sample when automatic batching is off (batch_size=None), except that
    tuples become lists like Paddle's; numpy arrays become Tensors in the DataLoader's final pass."""
    if isinstance(sample, (Tensor, np.ndarray, str, bytes)):
        return sample
    if isinstance(sample, Mapping):
        return {key: default_convert_fn(value) for key, value in sample.items()}
    if isinstance(sample, Sequence):
        return [default_convert_fn(value) for value in sample]
    return sample


def finish_batch(data, place=None):
    """What the DataLoader yields for a collated batch: numpy arrays become Tensors, Tensors move to
    `place` if one was asked for, tuples become lists (Paddle); other values pass through."""
    if isinstance(data, Tensor):
        return data if place is None or data.place == place else data.to(place)
    if isinstance(data, np.ndarray):
        return oarlock.to_tensor(data, place=place)
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, Mapping):
        return {key: finish_batch(value, place) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finish_batch(value, place) for value in data]
    return data
