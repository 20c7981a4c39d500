"""oarlock.io.DistributedBatchSampler (used by Model for datasets) gives exactly Paddle 3.2's batches: every
rank's share for 1-4 ranks, padding, drop_last, the RandomState(epoch) shuffle over successive epochs, set_epoch;
and Model.fit with shuffle=True (the default) therefore trains on Paddle's order and matches its losses."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import paddle
import pytest

import oarlock
from paddle_twin import recorder_class


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


@pytest.mark.parametrize("n, batch_size, nranks", [(23, 4, 1), (23, 4, 3), (10, 3, 4), (5, 8, 2), (16, 4, 2)])
@pytest.mark.parametrize("shuffle, drop_last", [(False, False), (True, False), (True, True)])
def test_batches_match_paddle(n, batch_size, nranks, shuffle, drop_last):
    for rank in range(nranks):
        kwargs = dict(batch_size=batch_size, num_replicas=nranks, rank=rank, shuffle=shuffle, drop_last=drop_last)
        ours = oarlock.io.DistributedBatchSampler(_Sized(n), **kwargs)
        ref = paddle.io.DistributedBatchSampler(_Sized(n), **kwargs)
        for _ in range(3):   # successive epochs: a new permutation each time when shuffling
            assert list(ours) == list(ref)
        assert len(ours) == len(ref)
        ours.set_epoch(7)
        ref.set_epoch(7)
        assert list(ours) == list(ref)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"DistributedBatchSampler\(\): rank must be below num_replicas \(2\), got 2"):
        oarlock.io.DistributedBatchSampler(_Sized(4), 2, num_replicas=2, rank=2)
    with pytest.raises(TypeError, match=r"DistributedBatchSampler\(\): batch_size must be an int >= 1, got str"):
        oarlock.io.DistributedBatchSampler(_Sized(4), "2", num_replicas=1, rank=0)
    one_process = oarlock.io.DistributedBatchSampler(_Sized(4), 2)   # the launch environment: one rank
    assert (one_process.nranks, one_process.local_rank) == (1, 0)


def test_shuffled_fit_matches_paddle():
    rng = np.random.RandomState(4)
    x = rng.rand(30, 3).astype("float32")
    y = (x[:, :1] > 0.5).astype("int64")
    paddle.seed(1)
    ref_net = paddle.nn.Linear(3, 2)
    initial = {k: v.numpy() for k, v in ref_net.state_dict().items()}
    losses = []
    for framework in (paddle, oarlock):
        class Pairs(framework.io.Dataset):
            def __getitem__(self, i):
                return x[i], y[i]

            def __len__(self):
                return len(x)

        net = framework.nn.Linear(3, 2)
        net.set_state_dict({k: framework.to_tensor(v) for k, v in initial.items()})
        model = framework.Model(net)
        model.prepare(framework.optimizer.SGD(learning_rate=0.5, parameters=net.parameters()),
                      framework.nn.CrossEntropyLoss())
        recorder = recorder_class(framework.callbacks.Callback)()
        with contextlib.redirect_stdout(io.StringIO()):
            model.fit(Pairs(), batch_size=7, epochs=3, verbose=0, callbacks=[recorder])   # shuffle=True
        losses.append([e[2]["loss"][0] for e in recorder.of("train_batch")])
    assert len(losses[1]) == len(losses[0]) == 15
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
