"""Sequence parallelism checked against one process, run by each rank of an MPI job (fleet with mp = world).

Every rank draws the same data (numpy, fixed seeds), so each can compute what the whole group should
produce: the four ops and the three functions are compared with numpy (float64) on every rank's inputs;
a sequence-parallel block ScatterOp -> LayerNorm -> ColumnSequenceParallelLinear -> gelu ->
RowSequenceParallelLinear -> GatherOp is compared with the plain block (LayerNorm, Linear, gelu, Linear)
run in-process on the full weights: output, input gradient, every weight gradient (each rank's slice of
the reference gradient) and the weights after SGD steps. Results travel to rank 0 through raw mpi4py (not
through the code under test), which writes {check: [failures]} as JSON to argv[1].

test_sequence_parallel.py imports this module to list the checks (CHECKS) and runs it with 2 ranks.
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
from oarlock.distributed import fleet
from oarlock.distributed.fleet.utils.sequence_parallel_utils import (
    AllGatherOp, ColumnSequenceParallelLinear, GatherOp, ReduceScatterOp, RowSequenceParallelLinear, ScatterOp,
    all_gather, is_sequence_parallel_parameter, mark_as_sequence_parallel_parameter, reduce_scatter,
    register_sequence_parallel_allreduce_hooks, scatter)
from oarlock_parallel import marks

CHECKS, check = registry()
COMM = MPI.COMM_WORLD
S, B, H, FF = 4, 3, 6, 8           # sequence (divisible by 2 and 4), batch, hidden, feed-forward
close = functools.partial(close, rtol=1e-5, atol=1e-5)
leaf = functools.partial(leaf, dtype="float32")


def share(array, rank, size, axis=0):
    """This rank's equal slice of `array` along `axis`."""
    return np.split(array, size, axis=axis)[rank]


def summed_over_ranks(tensor):
    """The sum of every rank's tensor, through raw MPI (an oracle independent of the code under test)."""
    return COMM.allreduce(tensor.numpy().astype("float64"), op=MPI.SUM)


# -- the ops and functions against numpy ---------------------------------------------------------------
def _op_table(rank, size):
    """name -> (op, function, rows of the input, forward oracle(xs), backward oracle(coefs)); xs and coefs
    hold every rank's arrays."""
    mine = lambda a: share(a, rank, size)                      # noqa: E731
    cat = lambda arrays: np.concatenate(arrays, axis=0)        # noqa: E731
    return {"ScatterOp": (ScatterOp, scatter, S, lambda xs: mine(xs[rank]), cat),
            "GatherOp": (GatherOp, all_gather, S // size, cat, lambda cs: mine(cs[rank])),
            "AllGatherOp": (AllGatherOp, all_gather, S // size, cat, lambda cs: mine(sum(cs))),
            "ReduceScatterOp": (ReduceScatterOp, reduce_scatter, S, lambda xs: mine(sum(xs)), cat)}


def _per_rank(rng, shape, size) -> list:
    """One float32 array per rank, every rank drawing them all (so each knows the others' for the oracle)."""
    return [rng.standard_normal(shape).astype("float32") for _ in range(size)]


@check
def ops_forward_backward(group, failures):
    """Each PyLayer's forward and backward with different inputs and output gradients on every rank."""
    rank, size = group.rank, group.nranks
    for index, (name, (op, _, rows, forward, backward)) in enumerate(_op_table(rank, size).items()):
        rng = np.random.default_rng(10 + index)
        xs = _per_rank(rng, (rows, B, H), size)
        want = forward([x.astype("float64") for x in xs])
        coefs = _per_rank(rng, want.shape, size)
        x = leaf(xs[rank])
        y = op.apply(x)
        close(failures, f"{name} forward", y, want, rtol=1e-6, atol=1e-6)
        (y * oarlock.to_tensor(coefs[rank])).sum().backward()
        close(failures, f"{name} backward", x.grad, backward([c.astype("float64") for c in coefs]),
              rtol=1e-6, atol=1e-6)
        close(failures, f"{name} with group=group", op.apply(oarlock.to_tensor(xs[rank]), group=group), want,
              rtol=1e-6, atol=1e-6)


@check
def functions(group, failures):
    """scatter / all_gather / reduce_scatter on dim 0, and the inputs left untouched."""
    rank, size = group.rank, group.nranks
    for index, (name, (_, fn, rows, forward, _)) in enumerate(_op_table(rank, size).items()):
        xs = _per_rank(np.random.default_rng(20 + index), (rows, B, H), size)
        x = oarlock.to_tensor(xs[rank])
        close(failures, f"{fn.__name__} (as in {name})", fn(x), forward([a.astype("float64") for a in xs]),
              rtol=1e-6, atol=1e-6)
        close(failures, f"{fn.__name__} input untouched", x, xs[rank], rtol=0, atol=0)


# -- the block ---------------------------------------------------------------------------------------
def _weights():
    rng = np.random.default_rng(7)
    return {"ln_w": 1 + 0.3 * rng.standard_normal(H), "ln_b": 0.3 * rng.standard_normal(H),
            "w1": 0.5 * rng.standard_normal((H, FF)), "b1": 0.3 * rng.standard_normal(FF),
            "w2": 0.5 * rng.standard_normal((FF, H)), "b2": 0.3 * rng.standard_normal(H)}


def _batches(count, seed=8):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((S, B, H)), rng.standard_normal((S, B, H))) for _ in range(count)]


class PlainBlock(nn.Layer):
    def __init__(self, w):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(H), nn.Linear(H, FF), nn.Linear(FF, H)
        for param, key in ((self.ln.weight, "ln_w"), (self.ln.bias, "ln_b"), (self.fc1.weight, "w1"),
                           (self.fc1.bias, "b1"), (self.fc2.weight, "w2"), (self.fc2.bias, "b2")):
            param.set_value(w[key].astype("float32"))

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.ln(x))))


class SequenceParallelBlock(nn.Layer):
    """The plain block on sequence shards; the LayerNorm's parameters are marked sequence-parallel."""

    def __init__(self, w, rank, size):
        super().__init__()
        self.ln = nn.LayerNorm(H)
        self.col = ColumnSequenceParallelLinear(H, FF, has_bias=True, gather_output=False)
        self.row = RowSequenceParallelLinear(FF, H, input_is_parallel=True)
        for param, value in ((self.ln.weight, w["ln_w"]), (self.ln.bias, w["ln_b"]),
                             (self.col.weight, share(w["w1"], rank, size, 1)),
                             (self.col.bias, share(w["b1"], rank, size)),
                             (self.row.weight, share(w["w2"], rank, size)), (self.row.bias, w["b2"])):
            param.set_value(value.astype("float32"))
        mark_as_sequence_parallel_parameter(self.ln.weight)
        mark_as_sequence_parallel_parameter(self.ln.bias)

    def forward(self, x):
        return GatherOp.apply(self.row(F.gelu(self.col(self.ln(ScatterOp.apply(x))))))


# sequence-parallel parameter -> (the plain block's parameter, the axis this rank holds a slice of)
COUNTERPARTS = {"ln.weight": ("ln.weight", None), "ln.bias": ("ln.bias", None), "col.weight": ("fc1.weight", 1),
                "col.bias": ("fc1.bias", 0), "row.weight": ("fc2.weight", 0), "row.bias": ("fc2.bias", None)}


def _param(model, path):
    layer, name = path.split(".")
    return getattr(getattr(model, layer), name)


def _pairs(sp, ref, rank, size):
    """(name, sequence-parallel parameter, plain parameter, its array -> what this rank must hold)."""
    def part(axis):
        return (lambda a: a) if axis is None else (lambda a: share(a, rank, size, axis))
    return [(name, _param(sp, name), _param(ref, path), part(axis)) for name, (path, axis) in COUNTERPARTS.items()]


def _backward(model, x, coef):
    xt = leaf(x)
    y = model(xt)
    loss = (y * oarlock.to_tensor(coef.astype("float32"))).sum()
    loss.backward()
    return y, xt, loss


def _compare_block(group, failures, tag, steps=2, **layer_settings):
    """The block with hooks (and layer_settings on the column linear) against the plain one: output, input
    gradient, every weight gradient, and the weights after each SGD step."""
    rank, size = group.rank, group.nranks
    w = _weights()
    ref, sp = PlainBlock(w), SequenceParallelBlock(w, rank, size)
    for key, value in layer_settings.items():
        setattr(sp.col, key, value)
    register_sequence_parallel_allreduce_hooks(sp)
    opts = [oarlock.optimizer.SGD(learning_rate=0.1, parameters=m.parameters()) for m in (ref, sp)]
    for step, (x, coef) in enumerate(_batches(steps)):
        y_ref, x_ref, loss_ref = _backward(ref, x, coef)
        y, xt, loss = _backward(sp, x, coef)
        close(failures, f"{tag} step {step} output", y, y_ref)
        close(failures, f"{tag} step {step} loss", float(loss), float(loss_ref))
        close(failures, f"{tag} step {step} input grad", xt.grad, x_ref.grad)
        for name, mine, theirs, part in _pairs(sp, ref, rank, size):
            close(failures, f"{tag} step {step} {name} grad", mine.grad, part(theirs.grad.numpy()))
        for opt in opts:
            opt.step()
            opt.clear_grad()
        for name, mine, theirs, part in _pairs(sp, ref, rank, size):
            close(failures, f"{tag} step {step} {name} after SGD", mine, part(theirs.numpy()))


@check
def block_equals_one_process(group, failures):
    _compare_block(group, failures, "block")


@check
def block_without_hooks_is_wrong(group, failures):
    """Without the hooks the marked gradients are each rank's shard's part only: not the reference, but
    summed over the ranks they are; the other gradients are right already."""
    rank, size = group.rank, group.nranks
    w = _weights()
    ref, sp = PlainBlock(w), SequenceParallelBlock(w, rank, size)
    (x, coef), = _batches(1)
    _backward(ref, x, coef)
    _backward(sp, x, coef)
    for name, mine, theirs, part in _pairs(sp, ref, rank, size):
        want = part(theirs.grad.numpy())
        if is_sequence_parallel_parameter(mine):
            if np.allclose(mine.grad.numpy(), want, rtol=1e-3, atol=1e-3):
                failures.append(f"{name}: the shard's gradient already equals the reference without the hooks")
            close(failures, f"{name} grad summed over ranks", summed_over_ranks(mine.grad), want)
        else:
            close(failures, f"{name} grad", mine.grad, want)


@check
def hooks_with_accumulation(group, failures):
    """accumulation_steps=2 (fused and not): the first backward leaves the marked gradients local, the
    second sums the accumulated ones over the group; the count starts again after that."""
    rank, size = group.rank, group.nranks
    w = _weights()
    batches = _batches(2, seed=9)
    ref = PlainBlock(w)
    reference = []           # the plain block's gradients after each micro-batch (accumulated)
    for x, coef in batches:
        _backward(ref, x, coef)
        reference.append({name: _param(ref, path).grad.numpy().copy() for name, (path, _) in COUNTERPARTS.items()})
    for fused in (False, True):
        sp = SequenceParallelBlock(w, rank, size)
        register_sequence_parallel_allreduce_hooks(sp, accumulation_steps=2, fuse_sequence_parallel_allreduce=fused)
        for cycle in range(2):
            for micro, (x, coef) in enumerate(batches):
                _backward(sp, x, coef)
                for name, mine, _, part in _pairs(sp, ref, rank, size):
                    want = part(reference[micro][name])
                    tag = f"fused={fused} cycle {cycle} micro-batch {micro} {name}"
                    if micro == 0 and is_sequence_parallel_parameter(mine):
                        close(failures, f"{tag} (local until the 2nd backward), summed over ranks",
                              summed_over_ranks(mine.grad), want)
                    else:
                        close(failures, f"{tag} grad", mine.grad, want)
            sp.clear_gradients()


@check
def shapes_and_marks(group, failures):
    """Paddle's per-rank shapes, the split marks, the sequence-parallel mark on the row bias only, weights
    drawn per rank, sharded_state_dict boxes."""
    rank, size = group.rank, group.nranks
    col = ColumnSequenceParallelLinear(H, FF, has_bias=True, gather_output=False)
    row = RowSequenceParallelLinear(FF, H, input_is_parallel=True)
    shapes = {"col.weight": (col.weight.shape, [H, FF // size]), "col.bias": (col.bias.shape, [FF // size]),
              "row.weight": (row.weight.shape, [FF // size, H]), "row.bias": (row.bias.shape, [H])}
    for name, (got, want) in shapes.items():
        if got != want:
            failures.append(f"{name} shape {got}, want {want}")
    if ColumnSequenceParallelLinear(H, FF, gather_output=False).bias is not None:
        failures.append("has_bias=None must mean no bias (Paddle's default)")
    if row.bias.numpy().any() or col.bias.numpy().any():
        failures.append("biases must start at zero")
    want_marks = {"col.weight": (col.weight, True, 1, False), "col.bias": (col.bias, True, 0, False),
                  "row.weight": (row.weight, True, 0, False), "row.bias": (row.bias, False, None, True)}
    for name, (param, distributed, axis, sequence) in want_marks.items():
        got = (marks.is_distributed(param), marks.get(param, "split_axis"), is_sequence_parallel_parameter(param))
        if got != (distributed, axis, sequence):
            failures.append(f"{name}: (is_distributed, split_axis, sequence_parallel) = {got}, "
                            f"want {(distributed, axis, sequence)}")
    weights = COMM.allgather(col.weight.numpy())
    if any(np.array_equal(weights[0], other) for other in weights[1:]):
        failures.append("column weights start equal on every rank (not drawn in the model-parallel RNG state)")
    at = rank * FF // size
    for prefix, layer, want in (("col.", col, {"weight": ([H, FF], [0, at]), "bias": ([FF], [at])}),
                                ("row.", row, {"weight": ([FF, H], [at, 0]), "bias": ([H], [0])})):
        state = layer.sharded_state_dict(prefix)
        for key, (shape, offset) in want.items():
            got = state.get(prefix + key)
            if got is None or (list(got.global_shape), list(got.global_offset)) != (shape, offset):
                failures.append(f"{prefix}{key}: {got and (list(got.global_shape), list(got.global_offset))}, "
                                f"want {shape}, {offset}")


@check
def bad_input(group, failures):
    """Each bad input raises on every rank, before any collective, naming the function and argument; the
    ranks are still in step afterwards."""
    size = group.nranks
    singles = [dist.new_group([r]) for r in range(dist.get_world_size())]    # every rank makes every group
    single = singles[dist.get_rank()]
    odd = oarlock.zeros([S + 1, B, H])
    col = ColumnSequenceParallelLinear(H, FF, gather_output=False)
    row = RowSequenceParallelLinear(FF, H, input_is_parallel=True)
    cases = [
        (ValueError, ["ColumnSequenceParallelLinear", "gather_output", "got gather_output=True"],
         lambda: ColumnSequenceParallelLinear(H, FF)),
        (ValueError, ["RowSequenceParallelLinear", "input_is_parallel", "got input_is_parallel=False"],
         lambda: RowSequenceParallelLinear(FF, H)),
        (ValueError, ["ColumnSequenceParallelLinear", "greater than 1", "got 1"],
         lambda: ColumnSequenceParallelLinear(H, FF, gather_output=False, mp_group=single)),
        (ValueError, ["ColumnSequenceParallelLinear", "out_features (7)", f"({size})"],
         lambda: ColumnSequenceParallelLinear(H, 7, gather_output=False)),
        (ValueError, ["RowSequenceParallelLinear", "in_features (7)"],
         lambda: RowSequenceParallelLinear(7, H, input_is_parallel=True)),
        (NotImplementedError, ["ColumnSequenceParallelLinear", "fuse_matmul_bias"],
         lambda: ColumnSequenceParallelLinear(H, FF, gather_output=False, fuse_matmul_bias=True)),
        (ValueError, ["scatter()", f"shape {odd.shape}", f"degree ({size})"], lambda: scatter(odd)),
        (ValueError, ["reduce_scatter()", f"shape {odd.shape}", f"degree ({size})"], lambda: reduce_scatter(odd)),
        (ValueError, ["ScatterOp.apply()", f"shape {odd.shape}"], lambda: ScatterOp.apply(odd)),
        (ValueError, ["ReduceScatterOp.apply()", f"shape {odd.shape}"], lambda: ReduceScatterOp.apply(odd)),
        (ValueError, ["scatter()", "0-d"], lambda: scatter(oarlock.to_tensor(1.0))),
        (TypeError, ["ScatterOp.apply()", "x must be a Tensor", "ndarray"], lambda: ScatterOp.apply(np.zeros(4))),
        (TypeError, ["all_gather()", "x must be a Tensor", "list"], lambda: all_gather([1.0])),
        (ValueError, ["ColumnSequenceParallelLinear.forward()", f"[*, {H}]", "got [2, 3, 5]"],
         lambda: col(oarlock.zeros([2, 3, 5]))),
        (ValueError, ["RowSequenceParallelLinear.forward()", f"[*, {FF // size}]"],
         lambda: row(oarlock.zeros([S, B, FF]))),
        (ValueError, ["RowSequenceParallelLinear.forward()", "sequence length", f"[{S + 1}, {B}, {FF // size}]"],
         lambda: row(oarlock.zeros([S + 1, B, FF // size]))),
        (TypeError, ["register_sequence_parallel_allreduce_hooks()", "model", "str"],
         lambda: register_sequence_parallel_allreduce_hooks("model")),
        (TypeError, ["register_sequence_parallel_allreduce_hooks()", "accumulation_steps", "'2'"],
         lambda: register_sequence_parallel_allreduce_hooks(col, accumulation_steps="2")),
    ]
    for kind, parts, make in cases:
        expect_error(failures, f"{parts[0]} ({parts[1]})", kind, parts, make)
    gathered = all_gather(oarlock.to_tensor([[float(group.rank)]]))
    close(failures, "a collective after the errors", gathered, np.arange(size, dtype="float32")[:, None])


@check
def overlapped_linear(group, failures):
    """mp_configs' sp_async_reduce_scatter (SPInnerOverlapLinear), with and without recompute_allgather,
    set through fleet.init as Paddle reads them: the same block results, and a column linear without bias.
    (Last: it re-initialises fleet.)"""
    rank, size = group.rank, group.nranks
    for recompute in (False, True):
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": size, "pp_degree": 1,
                                   "mp_configs": {"sp_async_reduce_scatter": True, "recompute_allgather": recompute}}
        fleet.init(is_collective=True, strategy=strategy)
        mp_group = fleet.get_hybrid_communicate_group().get_model_parallel_group()
        layer = ColumnSequenceParallelLinear(H, FF, gather_output=False)
        if not (layer.sp_async_reduce_scatter and layer.recompute_allgather == recompute):
            failures.append(f"fleet's mp_configs not taken up: sp_async_reduce_scatter="
                            f"{layer.sp_async_reduce_scatter}, recompute_allgather={layer.recompute_allgather}")
        _compare_block(mp_group, failures, f"overlap recompute_allgather={recompute}")
        w1 = _weights()["w1"].astype("float32")
        (x, coef), = _batches(1, seed=11)
        coef = coef[..., :1].repeat(FF, axis=-1) * np.arange(1, FF + 1)     # an output gradient [S, B, FF]
        ref = nn.Linear(H, FF, bias_attr=False)
        ref.weight.set_value(w1)
        layer.weight.set_value(share(w1, rank, size, 1))
        xr, xt = leaf(x), leaf(share(x, rank, size))
        want = ref(xr)
        (want * oarlock.to_tensor(coef.astype("float32"))).sum().backward()
        got = layer(xt)
        (got * oarlock.to_tensor(share(coef, rank, size, -1).astype("float32"))).sum().backward()
        tag = f"no bias, recompute_allgather={recompute}"
        close(failures, f"{tag} forward", got, share(want.numpy(), rank, size, -1))
        close(failures, f"{tag} input grad", xt.grad, share(xr.grad.numpy(), rank, size))
        close(failures, f"{tag} weight grad", layer.weight.grad, share(ref.weight.grad.numpy(), rank, size, 1))


def main(out):
    dist.init_parallel_env()
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": dist.get_world_size(), "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    run_checks(CHECKS, out, fleet.get_hybrid_communicate_group().get_model_parallel_group())


if __name__ == "__main__":
    main(sys.argv[1])
