"""torch.utils.data: Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset, random_split, the samplers,
default_collate and a single-process DataLoader with torch's arguments and batching rules (num_workers > 0 is
accepted and runs in-process: the batches are the same)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

import numpy as np
import oarlock

from oarlock_torch_proxy.missing import missing_getattr, not_implemented


class Dataset:
    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__} must define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class TensorDataset(Dataset):
    def __init__(self, *tensors):
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError(f"TensorDataset(): every tensor needs the same first dimension, got "
                             f"{[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return self.cumulative_sizes[-1] if self.cumulative_sizes else 0

    def __getitem__(self, idx):
        if idx < 0:
            idx += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


def _permutation(n, generator):
    if generator is not None:
        return generator._rng.permutation(n).tolist()
    return oarlock.randperm(n).numpy().tolist()


def random_split(dataset, lengths, generator=None):
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError(f"random_split(): the lengths {list(lengths)} do not add up to the dataset's length {n}")
    order = _permutation(n, generator)
    bounds = np.cumsum([0, *lengths])
    return [Subset(dataset, order[a:b]) for a, b in zip(bounds, bounds[1:])]


class Sampler:
    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        if replacement:
            not_implemented("torch.utils.data.RandomSampler", "with replacement=True")
        self.data_source, self.generator = data_source, generator
        self.num_samples = num_samples or len(data_source)

    def __iter__(self):
        return iter(_permutation(len(self.data_source), self.generator)[:self.num_samples])

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        return (self.indices[i] for i in _permutation(len(self.indices), self.generator))

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size, drop_last):
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


def default_collate(batch):
    """torch's rules: tensors are stacked, numbers become a tensor (float64 for floats, int64 for ints),
    numpy arrays are stacked as tensors, mappings and sequences are collated field by field, strings kept."""
    first = batch[0]
    if isinstance(first, oarlock.Tensor):
        return oarlock.stack(list(batch))
    if isinstance(first, np.ndarray):
        return oarlock.to_tensor(np.stack(batch))
    if isinstance(first, bool):
        return oarlock.to_tensor(np.array(batch, dtype=bool))
    if isinstance(first, (int, np.integer)):
        return oarlock.to_tensor(np.array(batch, dtype=np.int64))
    if isinstance(first, (float, np.floating)):
        return oarlock.to_tensor(np.array(batch, dtype=np.float64))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, Sequence):
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate(): batch elements must be tensors, numpy arrays, numbers, dicts or "
                    f"lists, got {type(first).__name__}")


def default_convert(data):
    return data


class DataLoader:
    """torch.utils.data.DataLoader, single process: the batches torch would make, in the same order for a
    given sampler."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.num_workers, self.pin_memory, self.generator = num_workers, pin_memory, generator
        self.collate_fn = collate_fn or (default_collate if batch_size is not None or batch_sampler else
                                         default_convert)
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            self.sampler, self.batch_sampler = None, None
            return
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        elif shuffle:
            raise ValueError("DataLoader(): sampler and shuffle=True cannot be given together")
        self.sampler = sampler
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_sampler = batch_sampler

    def __iter__(self):
        if self._iterable:
            return self._iter_iterable()
        if self.batch_sampler is None:
            return (self.collate_fn(self.dataset[i]) for i in self.sampler)
        return (self.collate_fn([self.dataset[i] for i in batch]) for batch in self.batch_sampler)

    def _iter_iterable(self):
        if self.batch_size is None:
            yield from (self.collate_fn(x) for x in self.dataset)
            return
        batch = []
        for item in self.dataset:
            batch.append(item)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self):
        if self._iterable:
            raise TypeError("DataLoader over an IterableDataset has no len()")
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)


def get_worker_info():
    return None


__getattr__ = missing_getattr("torch.utils.data")
