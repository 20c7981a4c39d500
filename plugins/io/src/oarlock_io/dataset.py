"""Datasets (Paddle's paddle.io): the map-style Dataset and the stream-style IterableDataset, plus
TensorDataset, Subset, ComposeDataset, ConcatDataset, ChainDataset and random_split.

A map-style dataset has `__getitem__(index)` and `__len__()`; an iterable one
only `__iter__()`, and the DataLoader batches its stream.
"""

from __future__ import annotations

import bisect
import itertools
import math
import numbers
import warnings

from oarlock import Tensor
from oarlock_io._checks import sized_length
from oarlock_io._random import numpy_rng


class Dataset:
    """A map-style dataset: subclasses implement `__getitem__(index)` and `__len__()`."""

    def __getitem__(self, idx):
        raise NotImplementedError(f"{type(self).__name__} must implement __getitem__ (it is a paddle.io.Dataset)")

    def __len__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __len__ (it is a paddle.io.Dataset)")


class IterableDataset(Dataset):
    """A stream of samples: subclasses implement `__iter__()`. It has no length and no indexing.

    Both raise TypeError, where Paddle raises RuntimeError: TypeError is what `list(dataset)` expects
    from a length it may not ask for, so `list(stream)` works."""

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__ (it is a paddle.io.IterableDataset)")

    def __getitem__(self, idx):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: it has no __getitem__; iterate over it")

    def __len__(self):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: it has no __len__; iterate over it")


class TensorDataset(Dataset):
    """`TensorDataset(tensors)`: sample i is the tuple (t[i] for t in tensors); all tensors share dim 0.

    Batched by the DataLoader, a sample gives a list of stacked tensors: `for x, y in loader`."""

    def __init__(self, tensors):
        where = "TensorDataset()"
        if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
            hint = " (wrap one tensor in a list: TensorDataset([x]))" if isinstance(tensors, Tensor) else ""
            raise TypeError(f"{where}: tensors must be a list or tuple of Tensors, got "
                            f"{type(tensors).__name__}{hint}")
        if not tensors:
            raise ValueError(f"{where}: tensors must hold at least one Tensor, got an empty {type(tensors).__name__}")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"{where}: tensors[{i}] must be a Tensor, got {type(t).__name__}")
            if t.ndim == 0:
                raise ValueError(f"{where}: tensors[{i}] is 0-d; every tensor needs a first dimension to index")
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(f"{where}: all tensors must have the same size in dimension 0, got sizes {sizes}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


def _non_empty_list(where: str, datasets) -> list:
    datasets = list(datasets)
    if not datasets:
        raise ValueError(f"{where}: datasets must hold at least one dataset, got none")
    return datasets


class ComposeDataset(Dataset):
    """Map-style datasets of equal length side by side: sample i joins the fields of every dataset's
    sample i into one tuple (a sample that is not a list or tuple counts as one field)."""

    def __init__(self, datasets):
        where = "ComposeDataset()"
        self.datasets = _non_empty_list(where, datasets)
        for i, ds in enumerate(self.datasets):
            if isinstance(ds, IterableDataset) or not isinstance(ds, Dataset):
                raise TypeError(f"{where}: datasets[{i}] must be a map-style paddle.io.Dataset, got "
                                f"{type(ds).__name__}")
        lengths = [len(ds) for ds in self.datasets]
        if len(set(lengths)) > 1:
            raise ValueError(f"{where}: all datasets must have the same length, got lengths {lengths}")

    def __len__(self):
        return len(self.datasets[0])

    def __getitem__(self, idx):
        fields = []
        for ds in self.datasets:
            sample = ds[idx]
            fields.extend(sample if isinstance(sample, (list, tuple)) else [sample])
        return tuple(fields)


class ConcatDataset(Dataset):
    """Map-style datasets one after the other."""

    def __init__(self, datasets):
        where = "ConcatDataset()"
        self.datasets = _non_empty_list(where, datasets)
        for i, ds in enumerate(self.datasets):
            if isinstance(ds, IterableDataset):
                raise TypeError(f"{where}: datasets[{i}] is an IterableDataset; use ChainDataset for streams")
        self.cumulative_sizes = list(itertools.accumulate(sized_length(where, "each dataset", ds)
                                                          for ds in self.datasets))

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        n = len(self)
        if not -n <= idx < n:
            raise IndexError(f"ConcatDataset index {idx} is out of range for length {n}")
        idx = idx + n if idx < 0 else idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """IterableDatasets one after the other."""

    def __init__(self, datasets):
        where = "ChainDataset()"
        self.datasets = _non_empty_list(where, datasets)
        for i, ds in enumerate(self.datasets):
            if not isinstance(ds, IterableDataset):
                raise TypeError(f"{where}: datasets[{i}] must be a paddle.io.IterableDataset, got "
                                f"{type(ds).__name__}")

    def __iter__(self):
        for ds in self.datasets:
            yield from ds


def _split_lengths(n: int, lengths) -> list[int]:
    """Absolute lengths from `lengths`: ints, or fractions summing to 1 (torch's rule: floor each,
    then hand the remainder out one by one from the first split)."""
    where = "random_split()"
    if not isinstance(lengths, (list, tuple)) or not lengths:
        raise TypeError(f"{where}: lengths must be a non-empty list of ints or of fractions summing to 1, "
                        f"got {lengths!r}")
    for i, value in enumerate(lengths):
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{where}: lengths[{i}] must be a non-negative number, got {value!r}")
    total = sum(lengths)
    if all(isinstance(v, numbers.Integral) for v in lengths):
        if total != n:
            raise ValueError(f"{where}: the lengths {list(lengths)} sum to {total}, but the dataset has {n} samples")
        return [int(v) for v in lengths]
    if not math.isclose(total, 1.0) or total > 1 or any(v > 1 for v in lengths):
        raise ValueError(f"{where}: lengths must be ints summing to len(dataset) = {n} or fractions summing to 1, "
                         f"got {list(lengths)} (sum {total})")
    sizes = [math.floor(n * frac) for frac in lengths]
    for i in range(n - sum(sizes)):
        sizes[i % len(sizes)] += 1
    for i, size in enumerate(sizes):
        if size == 0:
            warnings.warn(f"random_split(): split {i} is empty (fraction {lengths[i]} of {n} samples)",
                          stacklevel=3)
    return sizes


def random_split(dataset, lengths, generator=None):
    """Split `dataset` into non-overlapping random Subsets of the given `lengths` (ints summing to
    len(dataset), or fractions summing to 1). The permutation comes from oarlock's cpu generator
    (`oarlock.seed` makes it reproducible) or from `generator`, a numpy.random.Generator."""
    n = sized_length("random_split()", "dataset", dataset)
    sizes = _split_lengths(n, lengths)
    order = numpy_rng(generator, "random_split()").permutation(n).tolist()
    ends = list(itertools.accumulate(sizes))
    return [Subset(dataset, order[end - size:end]) for end, size in zip(ends, sizes)]
