"""oarlock.io: datasets, samplers and the DataLoader (Paddle's paddle.io).

dataset.py   Dataset, IterableDataset, TensorDataset, Subset, ComposeDataset, ConcatDataset, ChainDataset,
             random_split
sampler.py   Sampler, SequenceSampler, RandomSampler, SubsetRandomSampler, WeightedRandomSampler, BatchSampler
distributed_sampler.py DistributedBatchSampler (each rank's share; Paddle's RandomState(epoch) shuffle)
collate.py   default_collate_fn, default_convert_fn
dataloader.py DataLoader; fetch.py makes one batch; _workers.py runs num_workers > 0 and get_worker_info
"""

from oarlock_io import dataloader, dataset, distributed_sampler, sampler
from oarlock_io._workers import get_worker_info

EXPORTS = (
    dataset.Dataset, dataset.IterableDataset, dataset.TensorDataset, dataset.Subset, dataset.ComposeDataset,
    dataset.ConcatDataset, dataset.ChainDataset, dataset.random_split,
    sampler.Sampler, sampler.SequenceSampler, sampler.RandomSampler, sampler.SubsetRandomSampler,
    sampler.WeightedRandomSampler, sampler.BatchSampler, distributed_sampler.DistributedBatchSampler,
    dataloader.DataLoader, get_worker_info,
)  # Paddle keeps default_collate_fn out of paddle.io: import it from oarlock_io.collate


def register_api(api):
    for obj in EXPORTS:
        api.export("oarlock.io", obj.__name__, obj)
