"""Samplers (Paddle's paddle.io): iterables of sample indices, and BatchSampler, which groups them
into the lists of indices the DataLoader fetches.

Random samplers take `generator=`: None draws from oarlock's cpu generator
(a new order each epoch, reproducible under `oarlock.seed`), a
numpy.random.Generator is used as is, and RandomSampler also accepts
Paddle's form, an iterator that yields the indices itself.
"""

from __future__ import annotations

import numpy as np

from oarlock import Tensor
from oarlock_io._checks import check_bool, check_int, sized_length
from oarlock_io._random import check_generator, is_index_iterator, numpy_rng
from oarlock_io.dataset import IterableDataset


class Sampler:
    """Base class: subclasses implement `__iter__` (indices) and usually `__len__`."""

    def __init__(self, data_source=None):
        self.data_source = data_source

    def __iter__(self):
        raise NotImplementedError(f"{type(self).__name__} must implement __iter__ (it is a paddle.io.Sampler)")


class SequenceSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """Indices of `data_source` in random order: a permutation (or, with replacement=True, uniform
    draws), `num_samples` of them (default len(data_source))."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        where = "RandomSampler()"
        self.data_source = data_source
        self.replacement = check_bool(where, "replacement", replacement)
        self._num_samples = num_samples
        self.generator = check_generator(where, generator, iterator_ok=True)
        n = sized_length(where, "data_source", data_source)
        count = self.num_samples
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            empty = " (data_source is empty)" if num_samples is None else ""
            raise ValueError(f"{where}: num_samples must be a positive int, got {count!r}{empty}")
        if not replacement and count > n:
            raise ValueError(f"{where}: num_samples={count} is more than the {n} samples of data_source; "
                             f"without replacement each index is drawn at most once (pass replacement=True)")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        if is_index_iterator(self.generator):  # Paddle's form: the generator yields the indices
            for _ in range(self.num_samples):
                try:
                    yield next(self.generator)
                except StopIteration:
                    return
            return
        rng = numpy_rng(self.generator, "RandomSampler")
        n = len(self.data_source)
        if self.replacement:
            yield from rng.integers(0, n, size=self.num_samples).tolist()
        else:
            yield from rng.permutation(n)[:self.num_samples].tolist()

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given `indices` in random order (a new order each epoch)."""

    def __init__(self, indices, generator=None):
        if sized_length("SubsetRandomSampler()", "indices", indices) == 0:
            raise ValueError("SubsetRandomSampler(): indices must not be empty")
        self.indices = indices
        self.generator = check_generator("SubsetRandomSampler()", generator)

    def __iter__(self):
        order = numpy_rng(self.generator, "SubsetRandomSampler").permutation(len(self.indices))
        return (self.indices[i] for i in order.tolist())

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices in [0, len(weights)) drawn with probability proportional to `weights`.
    A 2-D `weights` draws `num_samples` for each row, one row after the other (Paddle)."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        where = "WeightedRandomSampler()"
        self.num_samples = check_int(where, "num_samples", num_samples, 1)
        self.replacement = check_bool(where, "replacement", replacement)
        w = weights.numpy() if isinstance(weights, Tensor) else np.asarray(weights)
        if w.dtype.kind not in "biuf" or not 1 <= w.ndim <= 2:
            raise ValueError(f"{where}: weights must be a 1-D or 2-D sequence of numbers, got dtype {w.dtype} "
                             f"with shape {list(w.shape)}")
        w = w.astype(np.float64).reshape(-1, w.shape[-1])
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError(f"{where}: weights must be finite and non-negative")
        positive = (w > 0).sum(axis=1)
        if np.any(positive == 0):
            raise ValueError(f"{where}: every row of weights needs a positive weight")
        if not replacement and np.any(positive < num_samples):
            raise ValueError(f"{where}: without replacement each row of weights needs at least num_samples="
                             f"{num_samples} positive weights, got {positive.min()}")
        self.weights = weights
        self.generator = check_generator(where, generator)
        self._probabilities = w / w.sum(axis=1, keepdims=True)

    def __iter__(self):
        rng = numpy_rng(self.generator, "WeightedRandomSampler")
        n = self._probabilities.shape[1]
        draws = [rng.choice(n, self.num_samples, replace=self.replacement, p=row) for row in self._probabilities]
        return iter(np.concatenate(draws).tolist())

    def __len__(self):
        return self.num_samples * self._probabilities.shape[0]


class BatchSampler(Sampler):
    """Lists of `batch_size` indices, from `sampler` or (exactly one of the two) from `dataset` in
    order or, with shuffle=True, at random. `drop_last` drops a final short batch.

    `generator=` (keyword, an oarlock extension like torch's) is passed to the RandomSampler that
    shuffle=True makes."""

    def __init__(self, dataset=None, sampler=None, shuffle=False, batch_size=1, drop_last=False, *,
                 generator=None):
        where = "BatchSampler()"
        check_bool(where, "shuffle", shuffle)
        if dataset is None and sampler is None:
            raise ValueError(f"{where}: give either dataset or sampler, got neither")
        if dataset is not None and sampler is not None:
            raise ValueError(f"{where}: give either dataset or sampler, not both")
        if sampler is not None:
            if shuffle:
                raise ValueError(f"{where}: shuffle must be False when sampler is given (the sampler sets the order)")
            if not hasattr(sampler, "__iter__"):
                raise TypeError(f"{where}: sampler must be a paddle.io.Sampler or an iterable of indices, got "
                                f"{type(sampler).__name__}")
            self.sampler = sampler
        elif isinstance(dataset, IterableDataset):
            raise TypeError(f"{where}: dataset must be map-style, got the IterableDataset {type(dataset).__name__}")
        else:
            self.sampler = (RandomSampler(dataset, generator=generator) if shuffle else SequenceSampler(dataset))
        self.batch_size = check_int(where, "batch_size", batch_size, 1)
        self.shuffle = shuffle
        self.drop_last = check_bool(where, "drop_last", drop_last)

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
        n = sized_length("BatchSampler", "sampler", self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
