"""How Model takes its data: a Dataset becomes a DataLoader over a DistributedBatchSampler (as Paddle builds it:
shuffle=True permutes with numpy's RandomState(epoch), so a shuffled run visits the data in Paddle's order), a
DataLoader or any iterable of batches is used as given; each batch is flattened to [input1, ..., label1, ...]."""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.io


def to_list(value):
    """None -> [], a list/tuple -> a list, anything else -> [value] (Paddle's hapi to_list)."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def flatten(batch) -> list:
    """Nested lists/tuples/dicts (dict values in sorted key order) flattened to a list, as paddle.utils.flatten."""
    if isinstance(batch, (list, tuple)):
        return [leaf for item in batch for leaf in flatten(item)]
    if isinstance(batch, dict):
        return [leaf for key in sorted(batch) for leaf in flatten(batch[key])]
    return [batch]


def to_numpy(value) -> np.ndarray:
    """A step's output or loss as a numpy array (Paddle's hapi returns numpy from every *_batch)."""
    if isinstance(value, oarlock.Tensor):
        return value.numpy()
    return np.asarray(value)


def as_tensor(value):
    return value if isinstance(value, oarlock.Tensor) else oarlock.to_tensor(value)


def check_batch_size(owner: str, argument: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: argument '{argument}' must be an int >= 1, got {value!r}")
    return value


def make_loader(owner: str, argument: str, data, batch_size: int, shuffle=False, drop_last=False, num_workers=0):
    """A DataLoader over `data` when it is a Dataset (batches of `batch_size`), else `data` itself, which must be
    iterable (a DataLoader, a generator of batches, a list of batches)."""
    if isinstance(data, oarlock.io.Dataset):
        check_batch_size(owner, "batch_size", batch_size)
        sampler = oarlock.io.DistributedBatchSampler(data, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last)
        return oarlock.io.DataLoader(data, batch_sampler=sampler, num_workers=num_workers, return_list=True)
    if data is None or not hasattr(data, "__iter__"):
        raise TypeError(f"{owner}: argument '{argument}' must be an oarlock.io.Dataset, a DataLoader or an iterable "
                        f"of batches, got {type(data).__name__}")
    return data


def length_of(loader):
    """len(loader), or None when it has no length (an IterableDataset's loader, a generator)."""
    try:
        return len(loader)
    except Exception:
        return None


def leading_dim(value) -> int:
    shape = value.shape() if callable(getattr(value, "shape", None)) else value.shape
    return int(shape[0])
