"""oarlock.io: datasets, samplers, collation and the DataLoader.

Batch contents and order are compared with torch.utils.data where both are
deterministic (sequential loading); shuffling is checked by its properties
(each index once per epoch, a new order each epoch, reproducible under
oarlock.seed or a numpy generator). torch is optional: those comparisons
skip without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
from oarlock.io import (BatchSampler, ChainDataset, ComposeDataset, ConcatDataset, DataLoader, Dataset,
                        IterableDataset, RandomSampler, SequenceSampler, Subset, SubsetRandomSampler, TensorDataset,
                        WeightedRandomSampler, get_worker_info, random_split)


@pytest.fixture(scope="module")
def tdata():
    return pytest.importorskip("torch.utils.data")


class Records(Dataset):
    """A map-style dataset whose samples mix every kind default_collate_fn handles."""

    def __init__(self, n=7):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"image": np.full((2, 3), i, dtype=np.float32), "label": i, "weight": i / 2,
                "flag": i % 2 == 0, "pair": (np.int32(i), np.arange(i, i + 2))}


class Stream(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)  # shard across workers
        return iter(range(start, self.n, step))


class Numbers(Dataset):
    """A torch- and oarlock-compatible dataset (duck-typed: torch's loader only needs the protocol)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.float32(i) * np.ones(2, np.float32), i


def as_numpy(batch):
    """A batch with every Tensor (ours or torch's) as a numpy array and tuples as lists."""
    if isinstance(batch, dict):
        return {k: as_numpy(v) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return [as_numpy(v) for v in batch]
    if hasattr(batch, "numpy"):
        return batch.numpy()
    return batch


def assert_same(ours, theirs):
    ours, theirs = as_numpy(ours), as_numpy(theirs)
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key])
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same(a, b)
    elif isinstance(theirs, np.ndarray):
        assert isinstance(ours, np.ndarray) and ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)
    else:
        assert ours == theirs


def indices_of(loader):
    """The sample indices each batch of a TensorDataset([arange]) loader holds."""
    return [batch[0].tolist() for batch in loader]


def index_dataset(n):
    return TensorDataset([oarlock.arange(n)])


# -- sequential loading against torch ---------------------------------------------------------------------

@pytest.mark.parametrize("batch_size", [1, 3, 7, 10])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sequential_batches_match_torch(tdata, batch_size, drop_last):
    ours = DataLoader(Records(), batch_size=batch_size, drop_last=drop_last)
    theirs = tdata.DataLoader(Records(), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(theirs)
    batches = list(ours)
    assert len(batches) == len(theirs)
    for a, b in zip(batches, theirs):
        assert_same(a, b)


def test_tensor_dataset_matches_torch(tdata):
    import torch
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    y = np.arange(10)
    ours = DataLoader(TensorDataset([oarlock.to_tensor(x), oarlock.to_tensor(y)]), batch_size=4)
    theirs = tdata.DataLoader(tdata.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=4)
    for (xb, yb), b in zip(ours, theirs):  # `for x, y in loader` works: each batch is [x, y]
        assert isinstance(xb, oarlock.Tensor) and xb.dtype == oarlock.float32
        assert_same([xb, yb], b)
    assert len(ours) == len(theirs) == 3


def test_collate_dtypes_follow_paddle():
    batch = next(iter(DataLoader(Records(), batch_size=3)))
    assert batch["image"].dtype == oarlock.float32 and batch["image"].shape == [3, 2, 3]
    assert batch["label"].dtype == oarlock.int64
    assert batch["weight"].dtype == oarlock.float64
    assert batch["flag"].dtype == oarlock.bool
    assert batch["pair"][0].dtype == oarlock.int32
    assert batch["pair"][1].shape == [3, 2]
    assert all(isinstance(v, oarlock.Tensor) for v in (batch["label"], batch["pair"][1]))


def test_strings_stay_lists_and_collated_tensors_are_data():
    class Texts(Dataset):
        def __init__(self):
            self.w = oarlock.ones([4, 2]).requires_grad_()

        def __len__(self):
            return 4

        def __getitem__(self, i):
            return f"s{i}", self.w[i]

    text, w = next(iter(DataLoader(Texts(), batch_size=3)))
    assert text == ["s0", "s1", "s2"]
    assert w.shape == [3, 2] and w.stop_gradient


# -- shuffling ----------------------------------------------------------------------------------------

def test_shuffle_covers_every_index_once_per_epoch_and_changes_order():
    loader = DataLoader(index_dataset(50), batch_size=8, shuffle=True)
    epochs = [sum(indices_of(loader), []) for _ in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(50))
    assert len({tuple(order) for order in epochs}) == 3


def test_shuffle_is_reproducible_under_oarlock_seed():
    loader = DataLoader(index_dataset(40), batch_size=5, shuffle=True)
    oarlock.seed(123)
    first = [indices_of(loader) for _ in range(2)]
    oarlock.seed(123)
    assert [indices_of(loader) for _ in range(2)] == first
    oarlock.seed(124)
    assert indices_of(loader) != first[0]


def test_shuffle_with_numpy_generator():
    run = lambda: indices_of(DataLoader(index_dataset(20), batch_size=6, shuffle=True,
                                        generator=np.random.default_rng(7)))
    assert run() == run()
    with pytest.raises(TypeError, match=r"DataLoader\(\): generator must be None .* numpy.random.Generator, got int"):
        DataLoader(index_dataset(5), shuffle=True, generator=7)


@pytest.mark.parametrize("shuffle", [False, True])
def test_drop_last(shuffle):
    loader = DataLoader(index_dataset(10), batch_size=3, shuffle=shuffle, drop_last=True)
    batches = indices_of(loader)
    assert len(loader) == len(batches) == 3
    assert all(len(b) == 3 for b in batches)
    assert len(DataLoader(index_dataset(10), batch_size=3, shuffle=shuffle)) == 4


# -- samplers -----------------------------------------------------------------------------------------

def test_batch_sampler_matches_torch(tdata):
    for n, size, drop in [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False)]:
        ours = BatchSampler(range(n), batch_size=size, drop_last=drop)
        theirs = tdata.BatchSampler(tdata.SequentialSampler(range(n)), batch_size=size, drop_last=drop)
        assert list(ours) == list(theirs) and len(ours) == len(theirs)
    via_sampler = BatchSampler(sampler=SequenceSampler(range(5)), batch_size=2)
    assert list(via_sampler) == [[0, 1], [2, 3], [4]]


def test_random_sampler_forms():
    oarlock.seed(0)
    assert sorted(RandomSampler(range(9))) == list(range(9))
    assert len(list(RandomSampler(range(9), num_samples=4))) == 4
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=30))
    assert len(drawn) == 30 and set(drawn) <= {0, 1, 2}
    assert list(RandomSampler(range(5), generator=iter([4, 2, 0]))) == [4, 2, 0]  # Paddle's iterator form
    with pytest.raises(ValueError, match="num_samples=6 is more than the 5 samples"):
        RandomSampler(range(5), num_samples=6)
    with pytest.raises(ValueError, match="num_samples must be a positive int, got 0 .data_source is empty"):
        RandomSampler([])
    with pytest.raises(TypeError, match="replacement must be a bool"):
        RandomSampler(range(3), replacement=1)


def test_subset_and_weighted_samplers():
    oarlock.seed(1)
    assert sorted(SubsetRandomSampler([5, 7, 9])) == [5, 7, 9]
    draws = list(WeightedRandomSampler([0.0, 1.0, 0.0, 3.0], num_samples=200))
    assert len(draws) == 200 and set(draws) == {1, 3}
    assert sorted(WeightedRandomSampler([1, 1, 1], 3, replacement=False)) == [0, 1, 2]
    with pytest.raises(ValueError, match="at least num_samples=3 positive weights"):
        WeightedRandomSampler([1, 0, 1], 3, replacement=False)


# -- iterable datasets and batch_size=None ---------------------------------------------------------------

def test_iterable_dataset_is_batched():
    assert [b.tolist() for b in DataLoader(Stream(7), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Stream(7), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    assert [b for b in DataLoader(Stream(3), batch_size=None)] == [0, 1, 2]
    with pytest.raises(ValueError, match="IterableDataset, whose number of batches is unknown"):
        len(DataLoader(Stream(3)))
    with pytest.raises(ValueError, match="shuffle=True needs a map-style dataset"):
        DataLoader(Stream(3), shuffle=True)


def test_batch_size_none_converts_each_sample():
    sample = next(iter(DataLoader(Records(), batch_size=None)))
    assert isinstance(sample["image"], oarlock.Tensor) and sample["image"].shape == [2, 3]
    assert sample["label"] == 0 and isinstance(sample["pair"], list)


def test_custom_collate_output_gets_paddles_final_pass():
    loader = DataLoader(Numbers(4), batch_size=2, collate_fn=lambda b: (np.stack([x for x, _ in b]), "tag"))
    x, tag = next(iter(loader))
    assert isinstance(x, oarlock.Tensor) and x.shape == [2, 2] and tag == "tag"


# -- datasets -----------------------------------------------------------------------------------------

def test_dataset_combinators():
    a, b = Numbers(3), Numbers(2)
    concat = ConcatDataset([a, b])
    assert len(concat) == 5 and concat[3][1] == 0 and concat[-1][1] == 1
    with pytest.raises(IndexError, match="index 5 is out of range for length 5"):
        concat[5]
    compose = ComposeDataset([a, Numbers(3)])
    assert len(compose[1]) == 4 and compose[1][1] == 1
    assert list(ChainDataset([Stream(2), Stream(3)])) == [0, 1, 0, 1, 2]
    sub = Subset(a, [2, 0])
    assert [sub[i][1] for i in range(len(sub))] == [2, 0]
    with pytest.raises(ValueError, match="all datasets must have the same length, got lengths \\[3, 2\\]"):
        ComposeDataset([a, b])


def test_tensor_dataset_items_and_errors():
    ds = TensorDataset([oarlock.arange(6).reshape([3, 2]), oarlock.arange(3)])
    x, y = ds[1]
    assert x.tolist() == [2, 3] and y.item() == 1 and len(ds) == 3
    with pytest.raises(ValueError, match="same size in dimension 0, got sizes \\[3, 2\\]"):
        TensorDataset([oarlock.zeros([3]), oarlock.zeros([2])])
    with pytest.raises(TypeError, match="wrap one tensor in a list"):
        TensorDataset(oarlock.zeros([3]))


def test_random_split(tdata):
    import torch
    for lengths in ([3, 7], [0.3, 0.7], [0.33, 0.33, 0.34], [0.5, 0.5]):
        parts = random_split(range(11 if isinstance(lengths[0], float) else 10), lengths)
        theirs = tdata.random_split(range(len(parts[0].dataset)), lengths, generator=torch.Generator().manual_seed(0))
        assert [len(p) for p in parts] == [len(t) for t in theirs]
        every = sorted(i for p in parts for i in p.indices)
        assert every == list(range(len(parts[0].dataset)))
    oarlock.seed(5)
    first = [p.indices for p in random_split(range(10), [4, 6])]
    oarlock.seed(5)
    assert [p.indices for p in random_split(range(10), [4, 6])] == first
    with pytest.raises(ValueError, match="sum to 9, but the dataset has 10 samples"):
        random_split(range(10), [4, 5])
    with pytest.raises(ValueError, match="fractions summing to 1"):
        random_split(range(10), [0.5, 0.2])


# -- errors -------------------------------------------------------------------------------------------

def test_empty_dataset_is_refused_at_construction():
    with pytest.raises(ValueError, match="DataLoader\\(\\): the dataset Numbers is empty \\(len\\(dataset\\) == 0\\)"):
        DataLoader(Numbers(0), batch_size=4)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1, got 0"),
    ({"batch_size": 2.0}, TypeError, "batch_size must be an int >= 1, got float"),
    ({"batch_sampler": BatchSampler(range(4)), "batch_size": 2}, ValueError, "must keep their defaults"),
    ({"num_workers": -1}, ValueError, "num_workers must be an int >= 0"),
    ({"shuffle": "yes"}, TypeError, "shuffle must be a bool"),
    ({"collate_fn": 3}, TypeError, "collate_fn must be callable"),
    ({"places": ["cpu", "cpu"]}, ValueError, "places must be one place or a list of one place"),
])
def test_argument_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        DataLoader(Numbers(4), **kwargs)


def test_collate_errors_name_the_field():
    from oarlock_io.collate import default_collate_fn
    with pytest.raises(ValueError, match=r"every sample\['x'\] in a batch must have 1 fields"):
        default_collate_fn([{"x": [1]}, {"x": [1, 2]}])
    with pytest.raises(TypeError, match=r"sample\['o'\] is object"):
        default_collate_fn([{"o": object()}])


def test_places_moves_batches():
    x = next(iter(DataLoader(Numbers(2), batch_size=2, places="cpu")))[0]
    assert x.place == "cpu"


# -- worker processes -----------------------------------------------------------------------------------

def test_workers_give_the_same_batches_in_the_same_order():
    oarlock.seed(3)
    single = indices_of(DataLoader(index_dataset(23), batch_size=4, shuffle=True))
    oarlock.seed(3)
    multi = indices_of(DataLoader(index_dataset(23), batch_size=4, shuffle=True, num_workers=2))
    assert multi == single
    shards = [b.tolist() for b in DataLoader(Stream(7), batch_size=2, num_workers=2)]
    assert sorted(sum(shards, [])) == list(range(7))  # each worker reads its shard


_INIT_MARK = [-1]


def _mark_worker(worker_id):
    _INIT_MARK[0] = 100 + worker_id


def test_worker_init_fn_and_worker_info():
    class Probe(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            info = get_worker_info()
            return np.array([info.id, info.num_workers, _INIT_MARK[0]])

    batches = [b.tolist() for b in DataLoader(Probe(), num_workers=2, worker_init_fn=_mark_worker)]
    assert batches == [[[0, 2, 100]], [[1, 2, 101]]] * 2  # requests go round-robin
    assert _INIT_MARK == [-1]  # the main process is untouched


def _fail_on_three(i):
    if i == 3:
        raise KeyError("bad sample")
    return np.float32(i)


def test_worker_errors_are_raised_in_the_main_process():
    class Failing(Dataset):
        def __len__(self):
            return 6

        def __getitem__(self, i):
            return _fail_on_three(i)

    with pytest.raises(RuntimeError, match="(?s)DataLoader worker 1 failed.*KeyError: 'bad sample'"):
        list(DataLoader(Failing(), batch_size=2, num_workers=2))


def test_exports():
    assert set(oarlock.io.__dir__()) >= {"DataLoader", "Dataset", "IterableDataset", "TensorDataset", "Subset",
                                         "random_split", "BatchSampler", "RandomSampler", "get_worker_info"}
    assert get_worker_info() is None
