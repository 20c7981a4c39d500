"""A 2-rank (or more) job for tests/test_data_parallel.py, run with `oarlock launch -n 2`.

Each scenario trains a small model with oarlock.DataParallel, every rank on its share of a fixed
global batch, and a one-process replica on the whole batch in the same process (it never
communicates); per-step losses and final weights must agree. Prints "[rank r] ok <scenario>".
"""

from __future__ import annotations

import sys

import numpy as np

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F

STEPS, BATCH, RTOL, ATOL = 10, 16, 1e-6, 1e-7


class Branchy(nn.Layer):
    """An MLP with a head that forward never uses (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.unused = nn.Linear(16, 4)

    def forward(self, x):
        return self.body(x)


def mlp(seed: int, branchy: bool = False):
    oarlock.seed(seed)
    if branchy:
        return Branchy()
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def optimizer_for(kind: str, model):
    if kind == "sgd":
        return oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    return oarlock.optimizer.AdamW(learning_rate=0.01, weight_decay=0.01, parameters=model.parameters())


def batches(seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(STEPS):
        yield rng.standard_normal((BATCH, 8)).astype("float32"), rng.standard_normal((BATCH, 4)).astype("float32")


def close(a, b, what: str):
    np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL, err_msg=what)


def train(scenario: str, kind="sgd", micro=1, branchy=False, wrap=None, **dp_args):
    rank, world = dist.get_rank(), dist.get_world_size()
    reference = mlp(0, branchy)
    inner = mlp(rank, branchy)
    # the seeds differ: the wrap broadcasts rank 0's weights
    model = oarlock.DataParallel(inner, **dp_args) if wrap is None else wrap(inner)
    assert isinstance(model, oarlock.DataParallel), type(model)
    for key, value in reference.state_dict().items():
        close(model.state_dict()[key].numpy(), value.numpy(), f"{scenario}: {key} after the wrap")
    opt, ref_opt = optimizer_for(kind, model), optimizer_for(kind, reference)
    overlap = []      # buckets in flight when backward reaches the first layer's output
    (inner.body if branchy else inner)[0].register_forward_post_hook(
        lambda layer, inputs, out: out.register_hook(lambda g: overlap.append(model.launched_buckets)) and None)
    share = BATCH // world
    for step, (x, y) in enumerate(batches(1)):
        ref_loss = F.mse_loss(reference(oarlock.to_tensor(x)), oarlock.to_tensor(y))
        ref_loss.backward()
        ref_opt.step()
        ref_opt.clear_grad()
        xs, ys = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        total = 0.0
        for m in range(micro):            # gradient accumulation: all but the last under no_sync()
            part = slice(m * share // micro, (m + 1) * share // micro)
            loss = F.mse_loss(model(oarlock.to_tensor(xs[part])), oarlock.to_tensor(ys[part])) / micro
            if m < micro - 1:
                with model.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += float(loss)
        opt.step()
        opt.clear_grad()
        mean = oarlock.to_tensor(np.array(total, "float32"))
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        close(mean.numpy(), ref_loss.numpy(), f"{scenario}: loss of step {step}")
    for key, value in reference.state_dict().items():
        close(model.state_dict()[key].numpy(), value.numpy(), f"{scenario}: {key} after {STEPS} steps")
    return model, overlap


def missing_gradient():
    """Without find_unused_parameters an unused parameter is an error naming it, on every rank, and
    the group stays usable."""
    model = oarlock.DataParallel(mlp(0, branchy=True))
    x = oarlock.to_tensor(np.ones((4, 8), "float32"))
    try:
        model(x).sum().backward()
    except RuntimeError as exc:
        assert "unused.weight" in str(exc) and "find_unused_parameters=True" in str(exc), exc
    else:
        raise AssertionError("a parameter without a gradient was not reported")
    probe = oarlock.to_tensor(np.array([dist.get_rank() + 1.0], "float32"))
    dist.all_reduce(probe)
    assert float(probe) == sum(range(1, dist.get_world_size() + 1)), probe


class FailOnce(oarlock.autograd.PyLayer):
    """The identity, whose backward raises the first time: a backward that fails half-way."""

    failed = False

    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, grad):
        if not FailOnce.failed:
            FailOnce.failed = True
            raise ValueError("backward failed on purpose")
        return grad


def failed_backward():
    """A backward that raises after some buckets' all-reduces started: the next step still averages
    correctly (the started all-reduces are waited for, the state is reset)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    inner, reference = mlp(0), mlp(0)
    model = oarlock.DataParallel(inner, comm_buffer_size=0.001, last_comm_buffer_size=0.0005)
    x, y = next(batches(3))
    share = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    hidden = oarlock.to_tensor(x[share], stop_gradient=False)
    try:
        F.mse_loss(model(FailOnce.apply(hidden)), oarlock.to_tensor(y[share])).backward()
    except ValueError:
        pass
    else:
        raise AssertionError("the backward did not fail")
    for p in inner.parameters():
        p.clear_grad()
    F.mse_loss(model(oarlock.to_tensor(x[share])), oarlock.to_tensor(y[share])).backward()
    F.mse_loss(reference(oarlock.to_tensor(x)), oarlock.to_tensor(y)).backward()
    for (name, p), q in zip(inner.named_parameters(), reference.parameters()):
        close(p.grad.numpy(), q.grad.numpy(), f"failed_backward: gradient of {name} in the next step")


def through_fleet():
    """fleet.distributed_model with dp_degree 2 is DataParallel over the data-parallel group, with
    the strategy's bucket sizes."""
    from oarlock.distributed import fleet
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": dist.get_world_size()}
    strategy.fuse_grad_size_in_MB, strategy.last_comm_group_size_MB = 0.001, 0.0005
    fleet.init(is_collective=True, strategy=strategy)
    model, _ = train("fleet", wrap=fleet.distributed_model)
    assert model.bucket_count == 3 and model.group.ranks == list(range(dist.get_world_size())), model.group


def utilities():
    """broadcast_dp_parameters and fused_allreduce_gradients (hcg None: the world) by hand: the
    averaged gradients of the shares are the whole batch's."""
    from oarlock.distributed.fleet.utils.hybrid_parallel_util import (broadcast_dp_parameters,
                                                                      fused_allreduce_gradients)
    rank, world = dist.get_rank(), dist.get_world_size()
    model, reference = mlp(rank), mlp(0)
    broadcast_dp_parameters(model, None)
    x, y = next(batches(2))
    F.mse_loss(reference(oarlock.to_tensor(x)), oarlock.to_tensor(y)).backward()
    share = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
    F.mse_loss(model(oarlock.to_tensor(x[share])), oarlock.to_tensor(y[share])).backward()
    fused_allreduce_gradients(list(model.parameters()), None)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        close(p.numpy(), q.numpy(), f"utilities: {name} after broadcast_dp_parameters")
        close(p.grad.numpy(), q.grad.numpy(), f"utilities: gradient of {name} after fused_allreduce_gradients")


def main() -> int:
    dist.init_parallel_env()
    scenarios = {
        "sgd": lambda: train("sgd"),
        "adamw-buckets": lambda: train("adamw-buckets", kind="adamw", comm_buffer_size=0.001,
                                       last_comm_buffer_size=0.0005),
        "no_sync": lambda: train("no_sync", micro=2),
        "find_unused": lambda: train("find_unused", branchy=True, find_unused_parameters=True),
        "missing": missing_gradient,
        "utilities": utilities,
        "failed_backward": failed_backward,
        "fleet": through_fleet,
    }
    for name in sys.argv[1:] or scenarios:
        result = scenarios[name]()
        if name == "adamw-buckets":
            # the last layers' buckets are all-reducing while backward still works on the first layer
            model, overlap = result
            assert model.bucket_count == 3 and set(overlap) == {2}, (model.bucket_count, overlap)
            print(f"buckets {model.bucket_count}, in flight before the first layer's backward {overlap[0]}")
        print(f"ok {name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
