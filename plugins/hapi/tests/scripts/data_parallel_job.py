"""A 2-rank job for test_data_parallel.py, run with `oarlock launch -n 2`: Model.fit / evaluate on several ranks.

Every rank trains the same MLP (same seed) with Model.fit on its DistributedBatchSampler share of a 44-sample
set; the job also trains a one-process replica, with no communication, on the global batches (the ranks' k-th
batches together), which data parallel training must equal. evaluate on a 25-sample set (padded to 26 by the
sampler) must gather every rank's outputs and count each sample once. Each rank writes what it found to
<out_dir>/rank<r>.json."""

from __future__ import annotations

import contextlib
import io
import json
import sys

import numpy as np

import oarlock
import oarlock.distributed as dist

RNG = np.random.RandomState(0)
X = RNG.rand(44, 5).astype("float32")
Y = (X[:, :1] + X[:, 1:2] > 1.0).astype("int64")
BATCH, EPOCHS = 6, 2


class Rows(oarlock.io.Dataset):
    def __init__(self, stop):
        self.stop = stop

    def __getitem__(self, i):
        return X[i], Y[i]

    def __len__(self):
        return self.stop


def network():
    oarlock.seed(0)
    return oarlock.nn.Sequential(oarlock.nn.Linear(5, 8), oarlock.nn.Tanh(), oarlock.nn.Linear(8, 2))


def replica(world: int):
    """One process, no communication: SGD on the global batches the ranks' shares make up."""
    net = network()
    opt = oarlock.optimizer.SGD(learning_rate=0.2, parameters=net.parameters())
    loss_fn = oarlock.nn.CrossEntropyLoss()
    shares = [list(oarlock.io.DistributedBatchSampler(Rows(44), BATCH, num_replicas=world, rank=r))
              for r in range(world)]
    for _ in range(EPOCHS):
        for batches in zip(*shares):
            # the mean over ranks of each rank's mean loss (equal batch sizes: the global batch's mean)
            losses = [loss_fn(net(oarlock.to_tensor(X[b])), oarlock.to_tensor(Y[b])) for b in batches]
            (oarlock.add(*losses[:2]) / len(losses) if len(losses) == 2 else losses[0]).backward()
            opt.step()
            opt.clear_grad()
    return net


def main(out_dir: str):
    rank, world = dist.get_rank(), dist.get_world_size()
    net = network()
    model = oarlock.Model(net)
    model.prepare(oarlock.optimizer.SGD(learning_rate=0.2, parameters=net.parameters()), oarlock.nn.CrossEntropyLoss(),
                  oarlock.metric.Accuracy())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.fit(Rows(44), batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=2, log_freq=2)
        evaluated = model.evaluate(Rows(25), batch_size=4, verbose=2)
    reference = replica(world)
    with oarlock.no_grad():
        logits = reference(oarlock.to_tensor(X[:25])).numpy()
    report = {
        "rank": rank, "world": world,
        "max_param_diff": max(float(np.abs(a.numpy() - b.numpy()).max())
                              for a, b in zip(net.parameters(), reference.parameters())),
        "eval_acc": float(evaluated["acc"]),
        "replica_acc": float((logits.argmax(axis=1) == Y[:25, 0]).mean()),
        "printed": printed.getvalue(),
    }
    with open(f"{out_dir}/rank{rank}.json", "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1])
