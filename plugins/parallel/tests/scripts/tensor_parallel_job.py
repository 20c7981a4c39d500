"""Tensor-parallel layers checked against their single-process counterparts, run by each rank of an MPI job.

Every rank builds the same full weights (numpy, fixed seed), gives its tensor-parallel layer its slice,
and runs the plain oarlock layer on the whole weights in-process as the reference: outputs and input
gradients must match, and each rank's weight gradient must equal its slice of the reference gradient.
ParallelCrossEntropy is compared with PyTorch's float64 cross_entropy. Results travel to rank 0 through
raw mpi4py (not through the code under test), which writes {check: [failures]} as JSON to argv[1].

test_tensor_parallel.py imports this module to list the checks (CHECKS) and runs it with 2 ranks.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
from _checks import close, expect_error, leaf, registry, run_checks
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed.fleet.meta_parallel import (ColumnParallelLinear, ParallelCrossEntropy, RowParallelLinear,
                                                     VocabParallelEmbedding, get_rng_state_tracker)

CHECKS, check = registry()
RTOL = 1e-6
# atol: float32 gradients of magnitude ~5 summed in another order than one process's differ by a few ulps
# (3.6e-7 on an AVX2 OpenBLAS); 1e-7 held only by luck
close = functools.partial(close, rtol=RTOL, atol=1e-6)


def cols(array, rank, size):
    """This rank's equal slice of the last dim."""
    return np.split(array, size, axis=-1)[rank]


def rows(array, rank, size):
    return np.split(array, size, axis=0)[rank]


@check
def column_parallel_linear(group, failures):
    rank, size = group.rank, group.nranks
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((6, 8)).astype("float32"), rng.standard_normal(8).astype("float32")
    x, coef = rng.standard_normal((3, 5, 6)).astype("float32"), rng.standard_normal((3, 5, 8)).astype("float32")
    ref = nn.Linear(6, 8)
    ref.weight.set_value(w), ref.bias.set_value(b)
    xr = leaf(x)
    (ref(xr) * oarlock.to_tensor(coef)).sum().backward()
    for gather in (True, False):
        layer = ColumnParallelLinear(6, 8, has_bias=True, gather_output=gather, mp_group=group)
        if layer.weight.shape != [6, 8 // size] or layer.bias.shape != [8 // size]:
            failures.append(f"gather_output={gather}: weight {layer.weight.shape}, bias {layer.bias.shape}")
        layer.weight.set_value(cols(w, rank, size)), layer.bias.set_value(cols(b, rank, size))
        xt = leaf(x)
        y = layer(xt)
        want = ref(oarlock.to_tensor(x)).numpy()
        close(failures, f"gather_output={gather} forward", y, want if gather else cols(want, rank, size))
        (y * oarlock.to_tensor(coef if gather else cols(coef, rank, size))).sum().backward()
        close(failures, f"gather_output={gather} input grad", xt.grad, xr.grad)
        for name in ("weight", "bias"):
            close(failures, f"gather_output={gather} {name} grad", getattr(layer, name).grad,
                  cols(getattr(ref, name).grad.numpy(), rank, size))
    if ColumnParallelLinear(6, 8, mp_group=group).bias is not None:
        failures.append("has_bias=None must mean no bias (Paddle's default)")


@check
def row_parallel_linear(group, failures):
    rank, size = group.rank, group.nranks
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((8, 5)).astype("float32"), rng.standard_normal(5).astype("float32")
    x, coef = rng.standard_normal((4, 8)).astype("float32"), rng.standard_normal((4, 5)).astype("float32")
    ref = nn.Linear(8, 5)
    ref.weight.set_value(w), ref.bias.set_value(b)
    xr = leaf(x)
    want = ref(xr)
    (want * oarlock.to_tensor(coef)).sum().backward()
    for parallel in (False, True):
        layer = RowParallelLinear(8, 5, input_is_parallel=parallel, mp_group=group)
        if layer.weight.shape != [8 // size, 5] or layer.bias.shape != [5] or layer.bias.numpy().any():
            failures.append(f"input_is_parallel={parallel}: weight {layer.weight.shape}, bias {layer.bias.shape} "
                            f"(whole, zero-initialised)")
        layer.weight.set_value(rows(w, rank, size)), layer.bias.set_value(b)
        xt = leaf(cols(x, rank, size) if parallel else x)
        y = layer(xt)
        close(failures, f"input_is_parallel={parallel} forward", y, want)
        (y * oarlock.to_tensor(coef)).sum().backward()
        close(failures, f"input_is_parallel={parallel} input grad", xt.grad,
              cols(xr.grad.numpy(), rank, size) if parallel else xr.grad)
        close(failures, f"input_is_parallel={parallel} weight grad", layer.weight.grad,
              rows(ref.weight.grad.numpy(), rank, size))
        close(failures, f"input_is_parallel={parallel} bias grad", layer.bias.grad, ref.bias.grad)


@check
def vocab_parallel_embedding(group, failures):
    rank, size = group.rank, group.nranks
    rng = np.random.default_rng(3)
    table = rng.standard_normal((10, 4)).astype("float32")
    ids = np.array([[0, 9, 4, 5], [5, 5, 1, 8]])          # ids from every rank's part, repeated ones
    coef = rng.standard_normal((2, 4, 4)).astype("float32")
    ref = nn.Embedding(10, 4)
    ref.weight.set_value(table)
    want = ref(oarlock.to_tensor(ids))
    (want * oarlock.to_tensor(coef)).sum().backward()
    layer = VocabParallelEmbedding(10, 4, mp_group=group)
    if layer.weight.shape != [10 // size, 4] or layer.vocab_start_index != rank * 10 // size:
        failures.append(f"weight {layer.weight.shape}, vocab_start_index {layer.vocab_start_index}")
    layer.weight.set_value(rows(table, rank, size))
    y = layer(oarlock.to_tensor(ids))
    close(failures, "forward", y, want)
    (y * oarlock.to_tensor(coef)).sum().backward()
    close(failures, "weight grad", layer.weight.grad, rows(ref.weight.grad.numpy(), rank, size))


@check
def parallel_cross_entropy(group, failures):
    import torch
    rank, size = group.rank, group.nranks
    rng = np.random.default_rng(4)
    logits = (3 * rng.standard_normal((2, 3, 12))).astype("float64")
    label = rng.integers(0, 12, size=(2, 3))
    label[0, 1] = label[1, 2] = -100                       # ignored tokens
    coef = rng.standard_normal((2, 3, 1))
    tl = torch.tensor(logits, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tl.reshape(-1, 12), torch.tensor(label).reshape(-1),
                                              reduction="none", ignore_index=-100).reshape(2, 3, 1)
    (tloss * torch.tensor(coef)).sum().backward()
    for labels in (label, label[..., None]):                # rank ndim-1 and ndim labels
        x = leaf(cols(logits, rank, size))
        loss = ParallelCrossEntropy(mp_group=group)(x, oarlock.to_tensor(labels))
        close(failures, f"label {list(labels.shape)} loss", loss, tloss.detach().numpy(), rtol=1e-10, atol=1e-12)
        (loss * oarlock.to_tensor(coef)).sum().backward()
        close(failures, f"label {list(labels.shape)} logits grad", x.grad, cols(tl.grad.numpy(), rank, size),
              rtol=1e-10, atol=1e-12)
    other = ParallelCrossEntropy(mp_group=group, ignore_index=3)(oarlock.to_tensor(cols(logits, rank, size)),
                                                                   oarlock.to_tensor(np.full((2, 3), 3)))
    close(failures, "ignore_index=3", other, np.zeros((2, 3, 1)))


@check
def mlp_training(group, failures):
    """Column(gather_output=False) -> relu -> Row(input_is_parallel=True), 5 SGD steps, equals one process."""
    rank, size = group.rank, group.nranks
    rng = np.random.default_rng(5)
    w1, b1 = rng.standard_normal((6, 8)).astype("float32") * 0.5, rng.standard_normal(8).astype("float32")
    w2, b2 = rng.standard_normal((8, 3)).astype("float32") * 0.5, rng.standard_normal(3).astype("float32")
    batches = [(rng.standard_normal((4, 6)).astype("float32"), rng.standard_normal((4, 3)).astype("float32"))
               for _ in range(5)]
    ref1, ref2 = nn.Linear(6, 8), nn.Linear(8, 3)
    for layer, w, b in ((ref1, w1, b1), (ref2, w2, b2)):
        layer.weight.set_value(w), layer.bias.set_value(b)
    col = ColumnParallelLinear(6, 8, has_bias=True, gather_output=False, mp_group=group)
    row = RowParallelLinear(8, 3, input_is_parallel=True, mp_group=group)
    col.weight.set_value(cols(w1, rank, size)), col.bias.set_value(cols(b1, rank, size))
    row.weight.set_value(rows(w2, rank, size)), row.bias.set_value(b2)
    runs = {"reference": (lambda x: ref2(F.relu(ref1(x))), ref1.parameters() + ref2.parameters()),
            "parallel": (lambda x: row(F.relu(col(x))), col.parameters() + row.parameters())}
    losses = {}
    for name, (model, params) in runs.items():
        opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=params)
        losses[name] = []
        for x, t in batches:
            loss = ((model(oarlock.to_tensor(x)) - oarlock.to_tensor(t)) ** 2).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
            losses[name].append(float(loss))
    close(failures, "per-step losses", losses["parallel"], losses["reference"])
    close(failures, "column weight after training", col.weight, cols(ref1.weight.numpy(), rank, size))
    close(failures, "row weight after training", row.weight, rows(ref2.weight.numpy(), rank, size))
    close(failures, "row bias after training", row.bias, ref2.bias)


@check
def rng_tracker(group, failures):
    """Dropout under rng_state('model_parallel_rng') differs across ranks; plain dropout matches."""
    comm = MPI.COMM_WORLD
    tracker = get_rng_state_tracker()
    tracker.reset()
    tracker.add("model_parallel_rng", 1000 + comm.rank)     # per-rank seeds, as model_parallel_random_seed gives
    oarlock.seed(7)
    ones = oarlock.ones([64])
    with tracker.rng_state():
        local = F.dropout(ones, p=0.5).numpy()
        weight = ColumnParallelLinear(4, 4, mp_group=group).weight.numpy()
    shared = F.dropout(ones, p=0.5).numpy()
    all_local, all_shared = comm.allgather(local), comm.allgather(shared)
    if any(np.array_equal(all_local[0], other) for other in all_local[1:]):
        failures.append("dropout under rng_state is the same on every rank")
    if not all(np.array_equal(all_shared[0], other) for other in all_shared[1:]):
        failures.append("plain dropout differs between ranks")
    all_weights = comm.allgather(weight)
    if any(np.array_equal(all_weights[0], other) for other in all_weights[1:]):
        failures.append("tensor-parallel weights start equal on every rank")
    # the tracked state stepped on: a second draw in it differs from the first
    with tracker.rng_state():
        if np.array_equal(F.dropout(ones, p=0.5).numpy(), local):
            failures.append("the tracked state did not advance")
    tracker.reset()


@check
def sharded_state_dicts(group, failures):
    """sharded_state_dict: split weights are this rank's box of the global tensor, the rest replicated."""
    size = group.nranks
    at = group.rank * 12 // size                            # this rank's offset along a split dim of 12
    layers = {"col.": (ColumnParallelLinear(4, 12, has_bias=True, mp_group=group),
                       {"weight": ([4, 12], [0, at]), "bias": ([12], [at])}),
              "row.": (RowParallelLinear(12, 4, mp_group=group), {"weight": ([12, 4], [at, 0]), "bias": ([4], [0])}),
              "emb.": (VocabParallelEmbedding(12, 3, mp_group=group), {"weight": ([12, 3], [at, 0])})}
    for prefix, (layer, want) in layers.items():
        state = layer.sharded_state_dict(prefix)
        if sorted(state) != sorted(prefix + k for k in want):
            failures.append(f"{prefix} keys {sorted(state)}")
            continue
        for key, (shape, offset) in want.items():
            got = state[prefix + key]
            if (list(got.global_shape), list(got.global_offset)) != (shape, offset) or got.key != prefix + key:
                failures.append(f"{prefix}{key}: key {got.key}, global shape {list(got.global_shape)}, "
                                f"offset {list(got.global_offset)}; want {shape}, {offset} (mp degree {size})")


@check
def bad_input(group, failures):
    """Sizes that do not divide by the mp degree, and bad ids, raise on every rank, naming the argument."""
    logits = oarlock.zeros([2, 6 // group.nranks])
    cases = [("out_features", "divisible", lambda: ColumnParallelLinear(4, 5, mp_group=group)),
             ("in_features", "divisible", lambda: RowParallelLinear(5, 4, mp_group=group)),
             ("num_embeddings", "divisible", lambda: VocabParallelEmbedding(7, 4, mp_group=group)),
             ("label ids", "[0, 6)", lambda: ParallelCrossEntropy(mp_group=group)(logits, oarlock.to_tensor([1, 6]))),
             ("label must have shape", "[2, 1]",
              lambda: ParallelCrossEntropy(mp_group=group)(logits, oarlock.to_tensor([[1, 2]]))),
             ("x must be an int32/int64", "float32",
              lambda: VocabParallelEmbedding(4, 2, mp_group=group)(oarlock.zeros([3])))]
    for argument, detail, make in cases:
        expect_error(failures, argument, (ValueError, TypeError), [argument, detail], make)


@check
def fleet_defaults(group, failures):
    """Under fleet.init with mp_degree = world size, mp_group=None is the HCG's model-parallel group, and
    model_parallel_random_seed(42) seeds 'model_parallel_rng' with 42 + 1 + mp_rank * pp_size + pp_rank
    and the default generator with 42 (Paddle's formula)."""
    fleet = oarlock.distributed.fleet
    from oarlock.distributed.fleet.meta_parallel import model_parallel_random_seed
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": group.nranks, "pp_degree": 1}
    strategy.tensor_parallel_configs = {"tensor_init_seed": 7}
    fleet.init(is_collective=True, strategy=strategy)
    hcg = fleet.get_hybrid_communicate_group()
    # fleet.init with mp > 1 seeds the tracker itself, as Paddle does (tensor_init_seed; -1 would be random)
    if "model_parallel_rng" not in get_rng_state_tracker().get_states_tracker():
        failures.append("fleet.init with mp > 1 did not register 'model_parallel_rng'")
    else:
        with get_rng_state_tracker().rng_state():
            seeded = oarlock.rand([4]).numpy()
        oarlock.seed(7 + 1 + hcg.get_model_parallel_rank())
        close(failures, "fleet.init's model_parallel_rng draws", seeded, oarlock.rand([4]), rtol=0, atol=0)
    layer = ColumnParallelLinear(4, 2 * group.nranks)
    if layer.model_parallel_group is not hcg.get_model_parallel_group() or layer.weight.shape != [4, 2]:
        failures.append(f"mp_group=None: group {layer.model_parallel_group}, weight {layer.weight.shape}")
    model_parallel_random_seed(42)
    tracker = get_rng_state_tracker()
    with tracker.rng_state():
        local = oarlock.rand([8]).numpy()
    shared = oarlock.rand([8]).numpy()
    oarlock.seed(42 + 1 + hcg.get_model_parallel_rank())
    close(failures, "model_parallel_rng draws", local, oarlock.rand([8]), rtol=0, atol=0)
    oarlock.seed(42)
    close(failures, "default generator draws", shared, oarlock.rand([8]), rtol=0, atol=0)
    tracker.reset()


def main(out):
    dist.init_parallel_env()
    run_checks(CHECKS, out, dist.new_group(list(range(dist.get_world_size()))))


if __name__ == "__main__":
    main(sys.argv[1])
