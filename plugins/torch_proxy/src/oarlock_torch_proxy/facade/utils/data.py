"""torch.utils.data: Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset, random_split, the samplers,
default_collate and a single-process DataLoader with torch's arguments and batching rules (num_workers > 0 is
accepted and runs in-process: the batches are the same)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import oarlock
import oarlock.io as io

from oarlock_torch_proxy.missing import missing_getattr


# Datasets and samplers are oarlock.io's (checks, indexing, batching), under torch's names and signatures; each
# also subclasses the façade's Dataset / Sampler so `isinstance(x, torch.utils.data.Dataset)` holds.

class Dataset(io.Dataset):
    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(io.IterableDataset, Dataset):
    pass


class TensorDataset(io.TensorDataset, Dataset):
    def __init__(self, *tensors):   # torch takes the tensors as arguments, Paddle as one list
        super().__init__(list(tensors))
        self.tensors = tuple(self.tensors)


class Subset(io.Subset, Dataset):
    pass


class ConcatDataset(io.ConcatDataset, Dataset):
    pass


def _numpy_rng(generator):
    """oarlock.io's generator argument (a numpy Generator, or None for oarlock's cpu generator) for a torch one."""
    return None if generator is None else generator._rng


def random_split(dataset, lengths, generator=None):
    return [Subset(s.dataset, s.indices) for s in io.random_split(dataset, list(lengths), _numpy_rng(generator))]


class Sampler(io.Sampler):
    pass


class SequentialSampler(io.SequenceSampler, Sampler):
    pass


class RandomSampler(io.RandomSampler, Sampler):
    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        super().__init__(data_source, replacement, num_samples, _numpy_rng(generator))


class SubsetRandomSampler(io.SubsetRandomSampler, Sampler):
    def __init__(self, indices, generator=None):
        super().__init__(indices, _numpy_rng(generator))


class BatchSampler(io.BatchSampler, Sampler):
    def __init__(self, sampler, batch_size, drop_last):   # torch's order; Paddle's also takes a dataset
        super().__init__(sampler=sampler, batch_size=batch_size, drop_last=drop_last)


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
