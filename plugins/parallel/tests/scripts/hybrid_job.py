"""Hybrid parallel training through fleet, checked against one process, run by each rank of an MPI job.

argv: mode out.json, mode "dp2mp2" (4 ranks, dp_degree 2 x mp_degree 2) or "mp2" (2 ranks).

A small language model made of VocabParallelEmbedding, ColumnParallelLinear, RowParallelLinear, a
replicated LayerNorm and ParallelCrossEntropy goes through fleet.distributed_model (TensorParallel) and
AdamW with a small ClipGradByGlobalNorm through fleet.distributed_optimizer (HybridParallelOptimizer);
it trains 5 steps, each data-parallel rank on its half of the batch. Every rank also trains the same
model with plain layers and the full weights in-process (the reference): per-step losses, the global
norm the clip saw and the weights after training must match it. To show that the wrapper makes the
replicas agree, ranks other than the first of their model-parallel group start with wrong replicated
parameters, the second data-parallel rank with every parameter wrong, and ranks other than the first
of their model-parallel group feed wrong token ids (TensorParallel broadcasts the inputs).

Results travel to rank 0 through raw mpi4py, which writes {check: [failures]} as JSON to argv[2].
roundtrip_job.py reuses the model, the weights and the batches.
"""

from __future__ import annotations

import functools
import sys
import traceback

import numpy as np
from _checks import close, expect_error, registry, run_checks
from mpi4py import MPI

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed import fleet
from oarlock.distributed.fleet.meta_parallel import (ColumnParallelLinear, ParallelCrossEntropy, RowParallelLinear,
                                                     VocabParallelEmbedding)

VOCAB, HIDDEN, FFN = 16, 8, 16
BATCH, SEQ = 4, 3
LR, CLIP, DECAY = 0.05, 0.05, 0.01
# the mp-split parameters and their split axis (Paddle's per-rank shapes)
SPLIT = {"embed.weight": 0, "up.weight": 1, "up.bias": 0, "down.weight": 0, "head.weight": 1}
REPLICATED = ("norm.weight", "norm.bias", "down.bias")
MODES = {"dp2mp2": {"dp_degree": 2, "mp_degree": 2}, "mp2": {"dp_degree": 1, "mp_degree": 2}}
RTOL = 1e-5

CHECKS, check = registry()
close = functools.partial(close, rtol=RTOL, atol=1e-6)


class Net(nn.Layer):
    """Embedding -> residual MLP -> LayerNorm -> vocabulary head -> mean cross-entropy; `parallel`: the
    tensor-parallel layers (under fleet), else their plain counterparts."""

    def __init__(self, parallel: bool):
        super().__init__()
        if parallel:
            self.embed = VocabParallelEmbedding(VOCAB, HIDDEN)
            self.up = ColumnParallelLinear(HIDDEN, FFN, has_bias=True, gather_output=False)
            self.down = RowParallelLinear(FFN, HIDDEN, input_is_parallel=True)
            self.head = ColumnParallelLinear(HIDDEN, VOCAB, has_bias=False, gather_output=False)
            self.cross_entropy = ParallelCrossEntropy()
        else:
            self.embed = nn.Embedding(VOCAB, HIDDEN)
            self.up, self.down = nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)
            self.head = nn.Linear(HIDDEN, VOCAB, bias_attr=False)
            self.cross_entropy = None
        self.norm = nn.LayerNorm(HIDDEN)

    def forward(self, ids, labels):
        h = self.embed(ids)
        logits = self.head(self.norm(h + self.down(F.relu(self.up(h)))))
        if self.cross_entropy is None:
            return F.cross_entropy(logits, labels)
        return self.cross_entropy(logits, labels).mean()


def full_weights() -> dict:
    rng = np.random.default_rng(0)
    shapes = {"embed.weight": (VOCAB, HIDDEN), "up.weight": (HIDDEN, FFN), "up.bias": (FFN,),
              "down.weight": (FFN, HIDDEN), "down.bias": (HIDDEN,), "head.weight": (HIDDEN, VOCAB),
              "norm.weight": (HIDDEN,), "norm.bias": (HIDDEN,)}
    weights = {k: (rng.standard_normal(s) * 0.5).astype("float32") for k, s in shapes.items()}
    weights["norm.weight"] += 1.0
    return weights


def batches(steps: int) -> list:
    rng = np.random.default_rng(1)
    return [(rng.integers(0, VOCAB, (BATCH, SEQ)).astype("int64"), rng.integers(0, VOCAB, (BATCH, SEQ)).astype("int64"))
            for _ in range(steps)]


def piece(key: str, array, mp_rank: int, mp: int):
    """This model-parallel rank's part of the full tensor `key`."""
    return np.split(array, mp, axis=SPLIT[key])[mp_rank] if key in SPLIT and mp > 1 else array


def load_full(model, weights, mp_rank=0, mp=1):
    for key, param in model.state_dict().items():
        param.set_value(piece(key, weights[key], mp_rank, mp))


def make_optimizer(model):
    return oarlock.optimizer.AdamW(learning_rate=LR, parameters=model.parameters(), weight_decay=DECAY,
                                   grad_clip=nn.ClipGradByGlobalNorm(CLIP))


def data_share(array, dp_rank: int, dp: int):
    return np.split(array, dp, axis=0)[dp_rank]


def reference_run(steps: int, start=None) -> dict:
    """One process, plain layers, full weights and full batches: per-step losses, the global norm of the
    gradients before clipping (float64), the final weights."""
    model = Net(parallel=False)
    load_full(model, full_weights())
    opt = make_optimizer(model)
    losses, norms = [], []
    for ids, labels in batches(steps):
        loss = model(oarlock.to_tensor(ids), oarlock.to_tensor(labels))
        loss.backward()
        norms.append(float(np.sqrt(sum((p.grad.numpy().astype("float64") ** 2).sum() for p in model.parameters()))))
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return {"losses": losses, "norms": norms, "weights": {k: v.numpy() for k, v in model.state_dict().items()}}


def init_fleet(degrees: dict):
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {**degrees, "pp_degree": 1}
    strategy.tensor_parallel_configs = {"tensor_init_seed": 5}
    fleet.init(is_collective=True, strategy=strategy)
    return fleet.get_hybrid_communicate_group()


def coords(hcg) -> tuple:
    return (hcg.get_data_parallel_rank(), hcg.get_data_parallel_world_size(), hcg.get_model_parallel_rank(),
            hcg.get_model_parallel_world_size())


def data_coords(hcg) -> tuple:
    """(index, count) of this rank's share of a batch: data-parallel and sharding ranks each take one."""
    sharding = hcg.get_sharding_parallel_world_size()
    return (hcg.get_data_parallel_rank() * sharding + hcg.get_sharding_parallel_rank(),
            hcg.get_data_parallel_world_size() * sharding)


def parallel_step(model, opt, hcg, ids, labels) -> float:
    """One training step on this rank's share; returns the loss of the whole batch (the mean of the
    data-parallel ranks' losses, gathered through raw mpi4py)."""
    share, shares = data_coords(hcg)
    mp_rank = hcg.get_model_parallel_rank()
    ids, labels = data_share(ids, share, shares), data_share(labels, share, shares)
    if mp_rank != 0:   # wrong ids on purpose: TensorParallel broadcasts the inputs from the first mp rank
        ids, labels = (ids + 1) % VOCAB, (labels + 3) % VOCAB
    loss = model(oarlock.to_tensor(ids), oarlock.to_tensor(labels))
    loss.backward()
    opt.step()
    opt.clear_grad()
    return float(np.mean(MPI.COMM_WORLD.allgather(float(loss))))   # every rank of a dp share has the same loss


def build_parallel(hcg, perturb: bool):
    """The fleet-wrapped model and optimizer, from the full weights; with `perturb`, the replicas that the
    wrapper must overwrite start wrong."""
    dp_rank, _, mp_rank, mp = coords(hcg)
    model = Net(parallel=True)
    load_full(model, full_weights(), mp_rank, mp)
    if perturb:
        state = model.state_dict()
        wrong = [k for k in state if dp_rank > 0 or (mp_rank > 0 and k in REPLICATED)]
        for key in wrong:
            state[key].set_value(state[key].numpy() + 1.0)
    model = fleet.distributed_model(model)
    opt = fleet.distributed_optimizer(make_optimizer(model))
    return model, opt


def parallel_run(hcg, steps: int) -> dict:
    model, opt = build_parallel(hcg, perturb=True)
    from oarlock_parallel.hybrid_optimizer import innermost
    clip = innermost(opt)._param_groups[0]["grad_clip"]
    norms = []
    plain_norm = clip.global_norm

    def spy(grads, distributed):   # the norm the clip computes, as every rank sees it
        norm = plain_norm(grads, distributed)
        norms.append(float(norm))
        return norm

    clip.global_norm = spy
    losses = [parallel_step(model, opt, hcg, ids, labels) for ids, labels in batches(5)]
    return {"model": model, "opt": opt, "losses": losses, "norms": norms, "clip": clip}


CTX: dict = {}


@check
def wrappers(failures):
    """distributed_model wraps once in TensorParallel (no DataParallel inside, also with dp 2),
    distributed_optimizer gives a HybridParallelOptimizer whose clip is rank-aware, and both delegate."""
    from oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.hybrid_parallel_optimizer import (
        HybridParallelClipGrad, HybridParallelOptimizer)
    from oarlock.distributed.fleet.meta_parallel import TensorParallel
    model, opt = CTX["run"]["model"], CTX["run"]["opt"]
    if type(model) is not TensorParallel or type(model._layers) is not Net:
        failures.append(f"distributed_model gave {type(model).__name__} around {type(model._layers).__name__}")
    if type(opt) is not HybridParallelOptimizer or not isinstance(CTX["run"]["clip"], HybridParallelClipGrad):
        failures.append(f"distributed_optimizer gave {type(opt).__name__}, clip {type(CTX['run']['clip']).__name__}")
    if sorted(model.state_dict()) != sorted(full_weights()):
        failures.append(f"TensorParallel.state_dict keys {sorted(model.state_dict())} (no prefix expected)")
    if opt.get_lr() != LR or opt._learning_rate != LR:
        failures.append(f"get_lr / _learning_rate not delegated: {opt.get_lr()}, {opt._learning_rate}")
    keys = sorted(opt.state_dict())
    if len([k for k in keys if k.endswith("_moment1_0")]) != len(full_weights()):
        failures.append(f"state_dict not delegated: {keys}")


@check
def per_step_losses(failures):
    """5 AdamW steps with global-norm clipping: the same losses as one process (rtol 1e-5)."""
    close(failures, "per-step losses", CTX["run"]["losses"], CTX["ref"]["losses"])


@check
def global_norm_and_clipping(failures):
    """The norm HybridParallelClipGrad computes equals the one-process norm at every step, and the clip
    bites (the norm is above clip_norm)."""
    norms, want = CTX["run"]["norms"], CTX["ref"]["norms"]
    close(failures, "global norm per step", norms, want)
    if min(want) <= CLIP:
        failures.append(f"clip_norm {CLIP} does not bite: norms {want}")


@check
def weights_after_training(failures):
    """Each rank's slices (and replicated parameters) equal its part of the one-process weights."""
    _, _, mp_rank, mp = coords(CTX["hcg"])
    for key, param in CTX["run"]["model"].state_dict().items():
        close(failures, key, param.numpy(), piece(key, CTX["ref"]["weights"][key], mp_rank, mp))


@check
def sharded_state_dicts(failures):
    """Through the wrapper: the mp slices are shards of their global tensors, the rest replicated; the
    optimizer's moments are sharded like their parameter and the step counts replicated."""
    _, _, mp_rank, mp = coords(CTX["hcg"])
    model, opt = CTX["run"]["model"], CTX["run"]["opt"]
    full = full_weights()
    msd = model.sharded_state_dict()
    if sorted(msd) != sorted(full):
        failures.append(f"model keys {sorted(msd)}")
        return
    for key, weight in msd.items():
        offset = [0] * full[key].ndim
        if key in SPLIT:
            offset[SPLIT[key]] = mp_rank * full[key].shape[SPLIT[key]] // mp
        if (list(weight.global_shape), list(weight.global_offset)) != (list(full[key].shape), offset):
            failures.append(f"{key}: global shape {list(weight.global_shape)} offset {list(weight.global_offset)}, "
                            f"want {list(full[key].shape)} {offset}")
    osd = opt.sharded_state_dict(msd)
    want_keys = sorted(f"{k}.{s}" for k in full for s in ("moment1_0", "moment2_0", "step"))
    if sorted(osd) != want_keys:
        failures.append(f"optimizer keys {sorted(osd)}")
        return
    for key in full:
        for state in ("moment1_0", "moment2_0"):
            got = osd[f"{key}.{state}"]
            if (got.global_shape, got.global_offset) != (msd[key].global_shape, msd[key].global_offset):
                failures.append(f"{key}.{state} placed at {got.global_offset} of {got.global_shape}")
        step = osd[f"{key}.step"]
        if step.global_shape != (1,) or int(step.local_tensor.numpy()[0]) != 5:
            failures.append(f"{key}.step: {step} holding {step.local_tensor.numpy()}")


@check
def bad_input(failures):
    """Inputs of different shapes on the model-parallel ranks, a wrapper of a non-Layer, a
    HybridParallelOptimizer of a non-optimizer and an unknown hybrid_configs key: the same clear error on
    every rank, no hang."""
    from oarlock.distributed.fleet.meta_optimizers import HybridParallelOptimizer
    from oarlock.distributed.fleet.meta_parallel import TensorParallel
    hcg, model = CTX["hcg"], CTX["run"]["model"]
    _, _, mp_rank, _ = coords(hcg)
    length = SEQ if mp_rank == 0 else SEQ + 1
    ids = oarlock.to_tensor(np.zeros((2, length), "int64"))
    cases = [("TensorParallel.forward()", "different input tensors", ValueError, lambda: model(ids, ids)),
             ("TensorParallel()", "layers must be an oarlock.nn.Layer", TypeError, lambda: TensorParallel("net", hcg)),
             ("HybridParallelOptimizer()", "must be an oarlock.optimizer.Optimizer", TypeError,
              lambda: HybridParallelOptimizer(object(), hcg, None)),
             ("key:xx_degree not in hybrid_configs", "accepts: cp_configs", ValueError,
              lambda: setattr(fleet.DistributedStrategy(), "hybrid_configs", {"dp_degree": 2, "xx_degree": 2}))]
    for name, detail, kind, call in cases:
        expect_error(failures, name, kind, [name, detail], call)


@check
def recompute_hybrid_partition(failures):
    """fleet.recompute.recompute_hybrid with partition and offload over the model-parallel group: each rank keeps
    1/mp of the input in the host pool and backward gathers it; gradients equal the plain run's (a dropout inside
    draws the same mask again). An input whose size does not divide by mp fails on every rank."""
    from oarlock.distributed.fleet.recompute import recompute_hybrid
    group = CTX["hcg"].get_model_parallel_group()
    ctx = {"mp_group": group, "offload": True, "partition": True}
    values = np.random.default_rng(5).standard_normal((4, 6)).astype("float32")
    grads = []
    for hybrid in (False, True):
        oarlock.seed(9)
        layer = nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.3), nn.Linear(8, 6))
        x = oarlock.to_tensor(values, stop_gradient=False)
        h = x * 2.0
        host = oarlock.device.host_memory_allocated()
        y = recompute_hybrid(ctx, layer, h) if hybrid else layer(h)
        if hybrid and oarlock.device.host_memory_allocated() - host != values.nbytes // group.nranks:
            failures.append(f"host pool grew by {oarlock.device.host_memory_allocated() - host} bytes, want "
                            f"{values.nbytes // group.nranks} (1/{group.nranks} of the input)")
        (y * y).sum().backward()
        grads.append([x.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()])
    for i, (got, want) in enumerate(zip(grads[1], grads[0])):
        close(failures, f"gradient {i}", got, want)
    odd = oarlock.to_tensor(np.ones((1, 3), "float32"), stop_gradient=False)
    expect_error(failures, "recompute_hybrid()", ValueError, ["cannot be partitioned", "multiple of 2"],
                 lambda: recompute_hybrid(ctx, lambda t: t * 2.0, odd))


def main(mode, out):
    CTX["hcg"] = hcg = init_fleet(MODES[mode])
    CTX["ref"] = reference_run(5)
    setup = None
    try:
        CTX["run"] = parallel_run(hcg, 5)
    except Exception:
        setup = traceback.format_exc()
    run_checks(CHECKS, out, setup_error=setup, mode=mode)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
