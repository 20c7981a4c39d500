"""Fetchers: how one batch is made from a dataset, shared by the single-process loader and the
worker processes. A map-style fetcher gets the indices to load; an iterable one takes the next
samples of its own stream and returns EXHAUSTED when the stream has no full batch left."""

from __future__ import annotations

import itertools

EXHAUSTED = object()  # workers turn it into a picklable message of their own


class MapFetcher:
    def __init__(self, dataset, auto_batch: bool, collate_fn):
        self.dataset, self.auto_batch, self.collate_fn = dataset, auto_batch, collate_fn

    def fetch(self, index):
        """`index` is a list of indices when batching, else one index."""
        if self.auto_batch:
            return self.collate_fn([self.dataset[i] for i in index])
        return self.collate_fn(self.dataset[index])


class IterableFetcher:
    def __init__(self, dataset, auto_batch: bool, collate_fn, batch_size, drop_last: bool):
        self.stream = iter(dataset)
        self.auto_batch, self.collate_fn = auto_batch, collate_fn
        self.batch_size, self.drop_last = batch_size, drop_last

    def fetch(self, index=None):
        if not self.auto_batch:
            sample = next(self.stream, EXHAUSTED)
            return sample if sample is EXHAUSTED else self.collate_fn(sample)
        samples = list(itertools.islice(self.stream, self.batch_size))
        if not samples or (self.drop_last and len(samples) < self.batch_size):
            return EXHAUSTED
        return self.collate_fn(samples)
