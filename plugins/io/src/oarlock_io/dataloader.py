"""paddle.io.DataLoader: iterate over a dataset in batches.

A map-style dataset is read in the order of a BatchSampler (built from
batch_size/shuffle/drop_last, or given); an IterableDataset's stream is cut
into batches of batch_size. `batch_size=None` turns batching off: each
sample is passed through collate_fn alone (default: default_convert_fn).
Whatever collate_fn returns goes through a final pass that makes numpy arrays
Tensors and tuples lists, as Paddle does.

Departures from Paddle: a map-style dataset of length 0 is refused at
construction (Paddle and torch yield nothing, or fail later in the shuffle
sampler with an unclear message); `shuffle=True` is honoured with
batch_size=None (Paddle ignores it); `generator=` (keyword, like torch's)
chooses where shuffling draws from. feed_list and return_list belong to
Paddle's static graph and are accepted and ignored; use_buffer_reader,
reader_buffer_size, use_shared_memory and persistent_workers are accepted
for compatibility and change nothing (workers start anew each epoch).
"""

from __future__ import annotations

import functools
import itertools
import numbers

import oarlock
from oarlock_io._checks import check_bool, check_int
from oarlock_io._random import check_generator, draw_seed
from oarlock_io._workers import MultiProcessIterator
from oarlock_io.collate import default_collate_fn, default_convert_fn, finish_batch
from oarlock_io.dataset import IterableDataset
from oarlock_io.fetch import EXHAUSTED, IterableFetcher, MapFetcher
from oarlock_io.sampler import BatchSampler, RandomSampler

_WHERE = "DataLoader()"


class DataLoader:
    """Batches from `dataset`; `len(loader)` is the number of batches of a map-style dataset.

    num_workers > 0 loads in that many worker processes (see oarlock_io._workers); batches come
    back in the same order as with num_workers=0."""

    def __init__(self, dataset, feed_list=None, places=None, return_list=True, batch_sampler=None, batch_size=1,
                 shuffle=False, drop_last=False, collate_fn=None, num_workers=0, use_buffer_reader=True,
                 prefetch_factor=2, use_shared_memory=True, timeout=0, worker_init_fn=None,
                 persistent_workers=False, *, reader_buffer_size=2, generator=None):
        self.dataset = dataset
        self.feed_list = feed_list
        self.return_list = check_bool(_WHERE, "return_list", return_list)
        self.places = places
        self._place = _parse_places(places)
        self.shuffle = check_bool(_WHERE, "shuffle", shuffle)
        self.drop_last = check_bool(_WHERE, "drop_last", drop_last)
        self.collate_fn = _check_callable("collate_fn", collate_fn)
        self.num_workers = check_int(_WHERE, "num_workers", num_workers, 0)
        self.use_buffer_reader = check_bool(_WHERE, "use_buffer_reader", use_buffer_reader)
        self.reader_buffer_size = reader_buffer_size
        self.prefetch_factor = check_int(_WHERE, "prefetch_factor", prefetch_factor, 1)
        self.use_shared_memory = check_bool(_WHERE, "use_shared_memory", use_shared_memory)
        if not isinstance(timeout, numbers.Real) or isinstance(timeout, bool) or timeout < 0:
            raise ValueError(f"{_WHERE}: timeout must be a number of seconds >= 0 (0: wait forever), got {timeout!r}")
        self.timeout = timeout
        self.worker_init_fn = _check_callable("worker_init_fn", worker_init_fn)
        self.persistent_workers = check_bool(_WHERE, "persistent_workers", persistent_workers)
        self.generator = check_generator(_WHERE, generator)
        self._iterable = isinstance(dataset, IterableDataset)
        self._check_dataset(batch_sampler)

        if batch_sampler is not None:
            if batch_size != 1 or shuffle or drop_last:
                raise ValueError(f"{_WHERE}: batch_size, shuffle and drop_last must keep their defaults when "
                                 f"batch_sampler is given (the batch sampler decides them), got batch_size="
                                 f"{batch_size!r}, shuffle={shuffle}, drop_last={drop_last}")
            self.batch_sampler, self.batch_size = batch_sampler, None
        elif batch_size is None:
            self.batch_sampler, self.batch_size = None, None
        else:
            self.batch_size = check_int(_WHERE, "batch_size", batch_size, 1)
            self.batch_sampler = None if self._iterable else BatchSampler(
                dataset, shuffle=shuffle, batch_size=self.batch_size, drop_last=drop_last, generator=generator)
        self.auto_collate_batch = self.batch_sampler is not None or self.batch_size is not None

    def _check_dataset(self, batch_sampler) -> None:
        if self._iterable:
            if self.shuffle:
                raise ValueError(f"{_WHERE}: shuffle=True needs a map-style dataset; an IterableDataset sets its "
                                 f"own order")
            if batch_sampler is not None:
                raise ValueError(f"{_WHERE}: batch_sampler needs a map-style dataset; an IterableDataset is "
                                 f"batched by batch_size")
            return
        if not hasattr(self.dataset, "__getitem__"):
            raise TypeError(f"{_WHERE}: dataset must be a paddle.io.Dataset (with __getitem__ and __len__) or a "
                            f"paddle.io.IterableDataset, got {type(self.dataset).__name__}")
        try:
            n = len(self.dataset)
        except TypeError:
            if batch_sampler is None:
                raise TypeError(f"{_WHERE}: a map-style dataset needs __len__ unless a batch_sampler is given; "
                                f"{type(self.dataset).__name__} has none") from None
            return
        if n == 0:
            raise ValueError(f"{_WHERE}: the dataset {type(self.dataset).__name__} is empty (len(dataset) == 0); "
                             f"there is nothing to load")

    # -- one epoch ------------------------------------------------------------------------------
    def _indices(self):
        """What each fetch gets: index lists from the batch sampler, single indices when batching is
        off, nothing (endless requests) for a stream."""
        if self._iterable:
            return itertools.repeat(None)
        if self.batch_sampler is not None:
            return iter(self.batch_sampler)
        if self.shuffle:
            return iter(RandomSampler(self.dataset, generator=self.generator))
        return iter(range(len(self.dataset)))

    def _make_fetcher(self):
        collate = self.collate_fn or (default_collate_fn if self.auto_collate_batch else default_convert_fn)
        if self._iterable:
            return functools.partial(IterableFetcher, self.dataset, self.auto_collate_batch, collate,
                                     self.batch_size, self.drop_last)
        return functools.partial(MapFetcher, self.dataset, self.auto_collate_batch, collate)

    def __iter__(self):
        finish = functools.partial(finish_batch, place=self._place)
        # drawn with or without workers (as torch does), so the shuffle order does not depend on num_workers
        worker_seed = draw_seed()
        if self.num_workers == 0:
            return _SingleProcessIterator(self._make_fetcher()(), self._indices(), finish)
        return MultiProcessIterator(self._make_fetcher(), self.dataset, self._indices(), self.num_workers,
                                    self.prefetch_factor, self.timeout, self.worker_init_fn, finish, worker_seed)

    def __call__(self):
        return self.__iter__()

    def __len__(self):
        if self._iterable:
            raise ValueError(f"len(DataLoader): the dataset {type(self.dataset).__name__} is an IterableDataset, "
                             f"whose number of batches is unknown")
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.dataset)


class _SingleProcessIterator:
    def __init__(self, fetcher, indices, finish):
        self._fetcher, self._indices, self._finish = fetcher, indices, finish

    def __iter__(self):
        return self

    def __next__(self):
        data = self._fetcher.fetch(next(self._indices))  # StopIteration from the indices ends the epoch
        if data is EXHAUSTED:
            raise StopIteration
        return self._finish(data)


def _check_callable(name: str, fn):
    if fn is not None and not callable(fn):
        raise TypeError(f"{_WHERE}: {name} must be callable or None, got {type(fn).__name__} {fn!r}")
    return fn


def _parse_places(places):
    """The one place batches go to, or None to leave them where collate_fn made them. Paddle takes a
    place or a list of one place in dynamic mode."""
    if places is None:
        return None
    if isinstance(places, (list, tuple)):
        if len(places) != 1:
            raise ValueError(f"{_WHERE}: places must be one place or a list of one place, got {len(places)} places")
        places = places[0]
    # an empty tensor made there parses and checks the place with the registry's own errors
    return oarlock.zeros([0], place=places).place
