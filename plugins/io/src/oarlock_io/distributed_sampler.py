"""DistributedBatchSampler: Paddle 3.2's batch sampler that gives each of `num_replicas` ranks its own part of
a map-style dataset.

The indices are padded (by repeating from the start) to a multiple of the number of ranks; with shuffle=True
they are permuted by numpy's RandomState(epoch), the epoch counting the iterations (or set by set_epoch), so
every rank draws the same permutation and a run is reproducible without any seed, exactly as Paddle's. Each
rank then takes its batches in turn, as Paddle's `_get_indices_by_batch_size` splits them. num_replicas and
rank default to the launch environment (oarlock.distributed.ParallelEnv, from plugin oarlock-xccl), looked up
only when one of them is not given."""

from __future__ import annotations

import math

import numpy as np

import oarlock
from oarlock_io._checks import check_bool, check_int, sized_length
from oarlock_io.sampler import BatchSampler


def _launch_environment():
    env = oarlock.distributed.ParallelEnv()
    return int(env.nranks), int(env.local_rank)


class DistributedBatchSampler(BatchSampler):
    """Batches of `batch_size` indices for rank `rank` of `num_replicas`."""

    def __init__(self, dataset, batch_size, num_replicas=None, rank=None, shuffle=False, drop_last=False):
        where = "DistributedBatchSampler()"
        self.dataset = dataset
        self.batch_size = check_int(where, "batch_size", batch_size, 1)
        self.shuffle = check_bool(where, "shuffle", shuffle)
        self.drop_last = check_bool(where, "drop_last", drop_last)
        if num_replicas is None or rank is None:
            env_ranks, env_rank = _launch_environment()
        self.nranks = env_ranks if num_replicas is None else check_int(where, "num_replicas", num_replicas, 1)
        self.local_rank = env_rank if rank is None else check_int(where, "rank", rank, 0)
        if self.local_rank >= self.nranks:
            raise ValueError(f"{where}: rank must be below num_replicas ({self.nranks}), got {self.local_rank}")
        self.epoch = 0
        self.num_samples = int(math.ceil(sized_length(where, "dataset", dataset) * 1.0 / self.nranks))
        self.total_size = self.num_samples * self.nranks
        self._acc_steps = 1

    def _rank_indices(self, indices):
        """This rank's share: its batch_size slice of each round of nranks batches, then its part of the rest."""
        last_batch_size = self.total_size % (self.batch_size * self.nranks)
        last_local_batch_size = last_batch_size // self.nranks
        mine = []
        for start in range(self.local_rank * self.batch_size, len(indices) - last_batch_size,
                           self.batch_size * self.nranks):
            mine.extend(indices[start:start + self.batch_size])
        rest = indices[len(indices) - last_batch_size:]
        mine.extend(rest[self.local_rank * last_local_batch_size:(self.local_rank + 1) * last_local_batch_size])
        return mine

    def __iter__(self):
        local_batch_size = self.batch_size * self._acc_steps
        indices = np.arange(len(self.dataset)).tolist()
        padding = self.total_size - len(indices)
        indices += (indices * math.ceil(padding / len(indices)))[:padding] if padding > 0 else []
        if self.shuffle:
            np.random.RandomState(self.epoch).shuffle(indices)
            self.epoch += 1
        if self.nranks > 1:
            indices = self._rank_indices(indices)
        batch = []
        for idx in indices:
            batch.append(idx)
            if len(batch) == local_batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        local_batch_size = self.batch_size * self._acc_steps
        return (self.num_samples + int(not self.drop_last) * (local_batch_size - 1)) // local_batch_size

    def set_epoch(self, epoch):
        """The epoch whose permutation the next iteration uses (shuffle=True)."""
        self.epoch = check_int("DistributedBatchSampler.set_epoch()", "epoch", epoch, 0)
