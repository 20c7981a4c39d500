"""The MPI job of tests/test_sdc_mpi.py (3 ranks under `oarlock launch -n 3`): small data-parallel trainings with
SDCMonitor and injected faults. Each scenario records what every rank saw (the error's fields, or None; equality
with reference runs); rank 0 gathers them through raw mpi4py (not the code under test) and writes JSON.

    python -m oarlock.cli launch -n 3 sdc_job.py OUT.json [CLEAN_STEPS]

Scenarios: clean (CLEAN_STEPS steps with every check on, the own-batch replay too; final weights bit-identical to
the same training without a monitor), bitflip (interval 1: caught at the next step by the rank itself),
bitflip_interval (interval 3, flipped after an unchecked step: caught by the replica vote), matmul (a faulty
matmul on one rank for one step, caught by the replay vote), matmul_transient (one wrong product in a training
forward: caught by the own-batch replay), matmul_rollback (the whole-step fault, rolled back to the step before),
matmul_pair (the same on a 2-rank group: no majority, the known-answer test decides), nan (a nan input on one
rank), spike (a loss spike on one rank), rollback (bit flip rolled back, training goes on; equal to a run that
dropped the lost step's update), strikes (max_strikes=0: the first detection raises "repeated"). """

from __future__ import annotations

import json
import sys
import traceback

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed.resilience import SDCMonitor, SilentDataCorruptionError, inject_fault

BATCH = 12   # global batch; each rank of a group takes its share


def model_and_optimizer(group):
    oarlock.seed(0)
    inner = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    model = oarlock.DataParallel(inner, group=group)
    return model, oarlock.optimizer.AdamW(learning_rate=0.01, weight_decay=0.01, parameters=model.parameters())


def batch(step: int, group_rank: int, size: int, spike=False, nan=False):
    rng = np.random.default_rng(step)
    x, y = rng.standard_normal((BATCH, 8)).astype("float32"), rng.standard_normal((BATCH, 4)).astype("float32")
    share = slice(group_rank * BATCH // size, (group_rank + 1) * BATCH // size)
    x, y = x[share], y[share]
    if spike:
        y = y * 1000.0
    if nan:
        x[0, 0] = np.nan
    return oarlock.to_tensor(x), oarlock.to_tensor(y)


def mse(model, batch):
    """The training loss of a micro-batch (x, y): also SDCMonitor's loss_fn for the own-batch replay."""
    x, y = batch
    return F.mse_loss(model(x), y)


def train(steps, monitor_args=None, group=None, skip=(), spike=None, nan=None):
    """(error fields or None, final weights as numpy, monitor) of `steps` steps; spike / nan: (rank, step) whose
    batch is bad; skip: steps whose update is dropped after their forward and backward (the reference of a
    rollback: the forward still draws its dropout masks)."""
    ranks = group.ranks if group is not None else list(range(dist.get_world_size()))
    me = ranks.index(dist.get_rank())
    model, opt = model_and_optimizer(group)
    monitor = SDCMonitor(model, opt, group=group, **monitor_args) if monitor_args is not None else None
    oarlock.seed(100 + dist.get_rank())   # dropout draws differ per rank, as in real DP training
    error = None
    try:
        for step in range(1, steps + 1):
            micro = batch(step, me, len(ranks), spike == (dist.get_rank(), step), nan == (dist.get_rank(), step))
            loss = mse(model, micro)
            loss.backward()
            if monitor is not None:
                monitor.record_loss(loss, micro)
            if step not in skip:
                opt.step()
            opt.clear_grad()
    except SilentDataCorruptionError as exc:
        error = {"step": exc.step, "ranks": exc.ranks, "parameter": exc.parameter, "kind": exc.kind,
                 "message": str(exc)}
    weights = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    return error, weights, monitor


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def scenario_clean(steps):
    error, weights, monitor = train(steps, dict(interval=1, replay_interval=20, loss_fn=mse))
    _, plain, _ = train(steps)
    return {"error": error, "steps": monitor.step, "equal_to_unmonitored": same(weights, plain)}


def scenario_bitflip():
    with inject_fault("bitflip", rank=1, step=5, param="_layers.3.weight", bit=2, index=5):
        error, _, _ = train(10, dict(interval=1))
    return {"error": error}


def scenario_bitflip_interval():
    with inject_fault("bitflip", rank=2, step=4, param="_layers.0.bias", bit=20, index=3):
        error, _, _ = train(12, dict(interval=3))
    return {"error": error}


def scenario_matmul():
    with inject_fault("matmul", rank=2, step=4):
        error, _, _ = train(10, dict(interval=1, replay_interval=2))
    return {"error": error}


def scenario_matmul_transient():
    """Only the first matrix product of step 4's training forward on rank 1 is wrong: the own-batch replay
    (loss_fn) sees its gradients differ from the training's; the shared replay alone could not."""
    # delta 1 makes the product's element positive, so the ReLU after it cannot mask the fault
    with inject_fault("matmul", rank=1, step=4, calls=1, delta=1.0):
        error, _, _ = train(6, dict(interval=1, replay_interval=2, loss_fn=mse))
    return {"error": error}


def scenario_matmul_rollback():
    """Caught by the replay after step 4, whose update used the faulty gradients: the rollback returns to the
    state after step 3, so the run equals one that dropped step 4's update."""
    with inject_fault("matmul", rank=2, step=4):
        error, weights, monitor = train(8, dict(interval=1, replay_interval=2, on_detect="rollback"))
    _, reference, _ = train(8, skip={4})
    return {"error": error, "detections": [(e.step, e.ranks, e.kind) for e in monitor.detections],
            "equal_to_reference": same(weights, reference)}


def scenario_matmul_pair(pair):
    if dist.get_rank() not in pair.ranks:   # a monitor on a group this rank is not in is an error
        try:
            SDCMonitor(nn.Linear(2, 2), group=pair)
        except ValueError as exc:
            return {"error": None, "member": False, "outsider": str(exc)}
        return {"error": None, "member": False, "outsider": None}
    with inject_fault("matmul", rank=1, step=3):
        error, _, _ = train(6, dict(interval=1, replay_interval=3), group=pair)
    return {"error": error, "member": True}


def scenario_nan():
    error, _, _ = train(8, dict(interval=1), nan=(0, 3))
    return {"error": error}


def scenario_spike():
    error, _, _ = train(40, dict(interval=1), spike=(2, 30))
    return {"error": error}


def scenario_rollback():
    with inject_fault("bitflip", rank=1, step=5, param="_layers.0.weight", bit=30, index=0):
        error, weights, monitor = train(10, dict(interval=1, on_detect="rollback"))
    _, reference, _ = train(10, skip={6})   # step 6's update is lost: rolled back to the check of step 5
    gathered = MPI.COMM_WORLD.allgather({k: v.tobytes() for k, v in weights.items()})
    return {"error": error, "detections": [(e.step, e.ranks, e.parameter, e.kind) for e in monitor.detections],
            "equal_to_reference": same(weights, reference), "replicas_equal": all(g == gathered[0] for g in gathered)}


def scenario_strikes():
    with inject_fault("bitflip", rank=0, step=2, param="_layers.3.bias", bit=1):
        error, _, _ = train(5, dict(interval=1, on_detect="rollback", max_strikes=0))
    return {"error": error}


def main(out: str, clean_steps: int):
    dist.init_parallel_env()
    pair = dist.new_group([0, 1])   # every rank calls new_group, members or not
    scenarios = {"clean": lambda: scenario_clean(clean_steps), "bitflip": scenario_bitflip,
                 "bitflip_interval": scenario_bitflip_interval, "matmul": scenario_matmul,
                 "matmul_transient": scenario_matmul_transient, "matmul_rollback": scenario_matmul_rollback,
                 "matmul_pair": lambda: scenario_matmul_pair(pair),
                 "nan": scenario_nan, "spike": scenario_spike, "rollback": scenario_rollback,
                 "strikes": scenario_strikes}
    results = {}
    for name, run in scenarios.items():
        try:
            results[name] = run()
        except Exception:   # noqa: BLE001 - reported to the test, which fails with it
            results[name] = {"crash": traceback.format_exc()}
        MPI.COMM_WORLD.Barrier()
    gathered = MPI.COMM_WORLD.gather(results, root=0)
    if MPI.COMM_WORLD.rank == 0:
        with open(out, "w") as f:
            json.dump({"size": MPI.COMM_WORLD.size, "ranks": gathered}, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 200)
