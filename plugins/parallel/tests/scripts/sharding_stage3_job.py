"""GroupShardedStage3 ('p_g_os') checked against one process, run by each rank of an MPI job.

Every rank builds the same small GPT (numpy-seeded weights), wraps it in GroupShardedStage3 and trains on its
own slice of a global batch; as the reference, every rank also trains the plain model on the whole batch in
one process. Per-step losses (the ranks' mean), final weights (get_all_parameters, state_dict) must match
within rtol 1e-5; the bytes of parameter pieces + gradients + optimizer states are measured with the memory
counters and by counting elements. Results travel to rank 0 through raw mpi4py, which writes
{check: [failures]} as JSON to argv[1].

test_sharding_stage3.py imports this module to list the checks (CHECKS) and runs it on 2 and 4 ranks.
"""

from __future__ import annotations

import contextlib
import gc
import functools
import sys

import numpy as np
from _checks import close, expect_error, mean_over_ranks, registry, run_checks
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock_parallel.sharding_stage3 import GroupShardedStage3

CHECKS, check = registry()
RTOL, ATOL = 1e-5, 1e-6
VOCAB, SEQ, HIDDEN, STEPS = 32, 8, 16, 5
close = functools.partial(close, rtol=RTOL, atol=ATOL)


# -- the model -----------------------------------------------------------------------------------------------
class Attention(nn.Layer):
    def __init__(self, hidden, dropout=0.0):
        super().__init__()
        # no qkv bias: the key bias gets a gradient of exactly zero (softmax ignores it), which AdamW would
        # turn into rounding noise of size lr, differing between any two summation orders
        self.qkv = nn.Linear(hidden, 3 * hidden, bias_attr=False)
        self.proj, self.dropout = nn.Linear(hidden, hidden), dropout
        mask = np.triu(np.full((SEQ, SEQ), -1e9, dtype="float32"), 1)
        self.register_buffer("mask", oarlock.to_tensor(mask), persistable=False)

    def forward(self, x):
        q, k, v = oarlock.split(self.qkv(x), 3, axis=-1)
        scores = oarlock.matmul(q, k, transpose_y=True) / float(np.sqrt(x.shape[-1])) + self.mask
        probs = F.dropout(F.softmax(scores, axis=-1), p=self.dropout, training=self.training)
        return self.proj(oarlock.matmul(probs, v))


class Block(nn.Layer):
    def __init__(self, hidden, dropout=0.0):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(hidden), Attention(hidden, dropout)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(hidden), nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden,
                                                                                                      hidden)
        # a parameter of the block itself: its forward is wrapped around its sublayers' wrapped forwards
        self.gate = self.create_parameter([hidden], default_initializer=nn.initializer.Constant(1.0))

    def forward(self, x):
        x = x + self.attn(self.ln1(x)) * self.gate
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Layer):
    def __init__(self, vocab=VOCAB, hidden=HIDDEN, layers=2, dropout=0.0):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(SEQ, hidden)
        self.blocks = nn.LayerList([Block(hidden, dropout) for _ in range(layers)])
        self.ln_f, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(oarlock.arange(ids.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build(seed=0, **kwargs):
    """A GPT with the same weights on every rank and in every call with this seed."""
    model = GPT(**kwargs)
    rng = np.random.default_rng(seed)
    for p in model.parameters():
        p.set_value((rng.standard_normal(p.shape) * 0.3).astype("float32"))
    return model


def batch(size, seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, VOCAB, (size, SEQ)), rng.integers(0, VOCAB, (size, SEQ))


def loss_of(model, ids, labels):
    logits = model(oarlock.to_tensor(ids))
    return F.cross_entropy(logits.reshape([-1, logits.shape[-1]]), oarlock.to_tensor(labels).reshape([-1]))


def adamw(model, clip_norm=0.05):
    # epsilon 1e-6: with Paddle's 1e-8, an element whose gradient is ~1e-8 moves by about lr whatever the
    # sign its rounding took, so any two summation orders (one process, N ranks) disagree by lr there
    return oarlock.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters(), weight_decay=0.1,
                                   epsilon=1e-6, grad_clip=nn.ClipGradByGlobalNorm(clip_norm))


def reference_run(steps=STEPS, **build_kwargs):
    """(per-step losses, final state) of the plain model trained on the whole batch in one process."""
    size = MPI.COMM_WORLD.size
    model = build(**build_kwargs)
    opt = adamw(model)
    ids, labels = batch(2 * size)
    losses, norms = [], []
    for _ in range(steps):
        loss = loss_of(model, ids, labels)
        loss.backward()
        norms.append(float(oarlock.global_norm([p.grad for p in model.parameters()])))
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, norms, {k: v.numpy() for k, v in model.state_dict().items()}


def sharded_run(group, steps=STEPS, wrap_kwargs=None, build_kwargs=None):
    rank, size = MPI.COMM_WORLD.rank, MPI.COMM_WORLD.size
    model = build(**(build_kwargs or {}))
    opt = adamw(model)
    wrapped = GroupShardedStage3(model, opt, group=group, **(wrap_kwargs or {}))
    ids, labels = batch(2 * size)
    mine = slice(2 * rank, 2 * rank + 2)
    losses = []
    for _ in range(steps):
        loss = loss_of(wrapped, ids[mine], labels[mine])
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(mean_over_ranks(float(loss)))
    return wrapped, opt, losses


_REFERENCE = {}


def reference():
    if not _REFERENCE:
        _REFERENCE["run"] = reference_run()
    return _REFERENCE["run"]


def compare_training(failures, wrapped, losses, what):
    want_losses, norms, want_state = reference()
    if not norms[0] > 0.05:
        failures.append(f"the clip never bites: first gradient norm {norms[0]}")
    close(failures, f"{what}: per-step losses", losses, want_losses)
    wrapped.get_all_parameters()
    for name, p in wrapped._layer.named_parameters():
        close(failures, f"{what}: get_all_parameters {name}", p, want_state[name])
    state = wrapped.state_dict()
    if sorted(state) != sorted(want_state):
        failures.append(f"{what}: state_dict keys {sorted(state)} != {sorted(want_state)}")
    for key, value in state.items():
        if key in want_state:
            close(failures, f"{what}: state_dict {key}", value, want_state[key])


# -- the checks ------------------------------------------------------------------------------------------------
@check
def all_partitioned_matches_one_process(group, failures):
    wrapped, opt, losses = sharded_run(group, wrap_kwargs={"segment_size": 0})
    size = group.nranks
    for part in wrapped._partitions.values():
        if part.piece.shape != [-(-part.numel // size)]:
            failures.append(f"{part.param.name}: piece shape {part.piece.shape} for {part.numel} elements")
    if len(wrapped._partitions) != len(wrapped._layer.parameters()) or wrapped._unslice_params:
        failures.append(f"segment_size=0 must partition every parameter: {len(wrapped._partitions)} of "
                        f"{len(wrapped._layer.parameters())}, {len(wrapped._unslice_params)} unsliced")
    compare_training(failures, wrapped, losses, "segment_size=0")


@check
def unsliced_and_excluded_match_one_process(group, failures):
    # weights above 100 elements are partitioned; biases, norms, gates and the excluded head stay whole
    wrapped, opt, losses = sharded_run(group, wrap_kwargs={"segment_size": 100, "exclude_layer": ["Embedding"]})
    names = {p.name for p in wrapped._unslice_params}
    excluded = {p.name for p in wrapped._layer.tok.parameters() + wrapped._layer.pos.parameters()}
    if not excluded <= names or not wrapped._partitions:
        failures.append(f"expected the embeddings unsliced and some weights partitioned: unsliced {sorted(names)}")
    compare_training(failures, wrapped, losses, "segment_size=100 + exclude_layer")


@check
def sharding_within_pairs_dp_across(group, failures):
    # 4 ranks: parameters sharded over {0,1} and {2,3}, the pairs data parallel over {0,2} and {1,3}
    if group.nranks != 4:
        return
    rank = MPI.COMM_WORLD.rank
    pairs = [dist.new_group(r) for r in ([0, 1], [2, 3])]
    across = [dist.new_group(r) for r in ([0, 2], [1, 3])]
    shard, dp = pairs[rank // 2], across[rank % 2]
    wrapped, _, losses = sharded_run(shard, wrap_kwargs={"segment_size": 100, "dp_group": dp})
    for part in wrapped._partitions.values():
        if part.piece.shape != [-(-part.numel // 2)]:
            failures.append(f"{part.param.name}: piece shape {part.piece.shape}: must be split in 2, not 4")
    compare_training(failures, wrapped, losses, "sharding 2 x dp 2")


@check
def memory_is_one_nth(group, failures):
    size = group.nranks
    cfg = {"vocab": 256, "hidden": 64, "layers": 4}   # many layers: one layer's full weights are a small part
    ids, labels = batch(2)

    def measure(wrap):
        gc.collect()
        start = oarlock.device.memory_allocated("cpu")
        model = build(**cfg)
        opt = adamw(model)
        holder = GroupShardedStage3(model, opt, group=group, segment_size=0) if wrap else model
        gc.collect()
        oarlock.device.reset_max_memory_allocated("cpu")
        before_step = oarlock.device.memory_allocated("cpu")
        loss = loss_of(holder, ids, labels)
        loss.backward()
        opt.step()
        del loss
        gc.collect()
        peak = oarlock.device.max_memory_allocated("cpu") - start
        kept = oarlock.device.memory_allocated("cpu") - start
        params = holder.pieces() if wrap else model.parameters()
        elements = sum(p.size for p in params) + sum(p.grad.size for p in params if p.grad is not None)
        elements += sum(v.size for st in opt._state.values() for v in st.values() if isinstance(v, oarlock.Tensor))
        del holder, model, opt, params
        return kept, peak, elements, before_step - start

    kept, peak, elements, _ = measure(True)
    kept1, peak1, elements1, _ = measure(False)
    ratio = elements / elements1
    if not 1 / size <= ratio < 1.05 / size:
        failures.append(f"elements of pieces + grads + states: {elements} of {elements1} ({ratio:.3f}, want ~1/{size})")
    if not kept < 1.2 * kept1 / size:
        failures.append(f"bytes kept after a step: {kept} vs one process {kept1} ({kept / kept1:.3f}, want ~1/{size})")
    if not peak < peak1 * (0.5 + 0.5 / size):
        failures.append(f"peak bytes of a step: {peak} vs one process {peak1} ({peak / peak1:.3f})")
    if MPI.COMM_WORLD.rank == 0:
        print(f"memory on {size} ranks: kept {kept} / {kept1}, peak {peak} / {peak1}, elements {elements} / "
              f"{elements1}", flush=True)


def same_batch_step(group, failures, what, context, **build_kwargs):
    """Every rank the same batch and seed: the averaged gradient is the local one, so one SGD step of the
    sharded model must equal the plain model's, whose forward ran in the same `context` (the backward's
    recompute runs outside it and must replay it)."""
    ids, labels = batch(2, seed=5)
    results = []
    for wrap in (True, False):
        model = build(**build_kwargs)
        opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
        holder = GroupShardedStage3(model, opt, group=group, segment_size=0) if wrap else model
        oarlock.seed(7)
        with context():
            loss = loss_of(holder, ids, labels)
        loss.backward()
        opt.step()
        if wrap:
            holder.get_all_parameters()
        results.append((float(loss), {k: p.numpy() for k, p in model.named_parameters()}))
    close(failures, f"{what}: loss", results[0][0], results[1][0])
    for key, value in results[1][1].items():
        close(failures, f"{what}: updated {key}", results[0][1][key], value)


@check
def dropout_recompute_replays_the_rng(group, failures):
    same_batch_step(group, failures, "dropout 0.5", contextlib.nullcontext, dropout=0.5)


@check
def recompute_replays_autocast(group, failures):
    same_batch_step(group, failures, "auto_cast bfloat16",
                    lambda: oarlock.amp.auto_cast(True, dtype="bfloat16"))


@check
def batch_norm_statistics_updated_once(group, failures):
    # the recompute re-runs BatchNorm's forward: its running statistics must still move once per step
    x = np.random.default_rng(9).standard_normal((6, 8)).astype("float32")
    results = []
    for wrap in (True, False):
        oarlock.seed(4)
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1D(8), nn.Linear(8, 1))
        for p in model.parameters():
            p.set_value(np.random.default_rng(p.size).standard_normal(p.shape).astype("float32"))
        opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
        holder = GroupShardedStage3(model, opt, group=group, segment_size=0) if wrap else model
        for _ in range(2):
            holder(oarlock.to_tensor(x)).sum().backward()
            opt.step()
            opt.clear_grad()
        results.append({k: v.numpy() for k, v in holder.state_dict().items()})
    for key, want in results[1].items():
        close(failures, f"batch norm: {key}", results[0][key], want)


@check
def first_rank_weights_and_buffers_win(group, failures):
    # each rank starts from its own weights: wrapping gives every rank the first rank's (pretrain_sync_models);
    # sync_buffers broadcasts the first rank's buffers before each forward
    rank = MPI.COMM_WORLD.rank
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1D(8))
    for i, p in enumerate(model.parameters()):
        p.set_value(np.full(p.shape, 10 * rank + i, dtype="float32"))
    wrapped = GroupShardedStage3(model, adamw(model), group=group, segment_size=0, sync_buffers=True)
    wrapped.get_all_parameters()
    for i, (name, p) in enumerate(model.named_parameters()):
        close(failures, f"synced {name}", p, np.full(p.shape, i, dtype="float32"))
    # a registered buffer (BatchNorm's statistics are parameters, as in Paddle, which syncs only buffers here)
    model[1].register_buffer("probe", oarlock.zeros([8]))
    mean = model[1].probe
    mean.set_value(np.full(mean.shape, rank + 1.0, dtype="float32"))
    wrapped.eval()
    wrapped(oarlock.ones([2, 8]))
    close(failures, "synced buffer", mean, np.ones(mean.shape, dtype="float32"))


@check
def set_state_dict_and_clear_grad(group, failures):
    _, _, want_state = reference()
    model = build(seed=3)
    opt = adamw(model)
    wrapped = GroupShardedStage3(model, opt, group=group, segment_size=0)
    wrapped.set_state_dict(want_state)
    got = wrapped.state_dict()
    for key, value in want_state.items():
        close(failures, f"set_state_dict {key}", got[key], value, rtol=0, atol=0)
    partial = {k: v * 2 for k, v in want_state.items() if k != "head.weight"}
    wrapped.set_state_dict(partial, strict=False)      # head.weight not given: its pieces are kept
    got = wrapped.state_dict()
    for key, value in want_state.items():
        close(failures, f"set_state_dict(strict=False) {key}", got[key], partial.get(key, value), rtol=0, atol=0)
    loss = loss_of(wrapped, *batch(2))
    loss.backward()
    if any(p.grad is None for p in wrapped.pieces()):
        failures.append("after backward every piece must have a gradient")
    if any(p.grad is not None for p in model.parameters()):
        failures.append("after backward the full parameters must hold no gradient (only the pieces)")
    opt.clear_grad()
    if any(p.grad is not None and p.grad.numpy().any() for p in wrapped.pieces()):
        failures.append("clear_grad() left nonzero piece gradients")
    if not np.isnan(model.head.weight.numpy()).all():
        failures.append("after forward and backward the full parameters must be freed")


@check
def bad_arguments_fail_on_every_rank(group, failures):
    spare = build()
    opt = adamw(spare)
    expect_error(failures, "no parameters", ValueError, "has no parameters",
                 lambda: GroupShardedStage3(nn.ReLU(), opt, group=group))
    expect_error(failures, "not a layer", TypeError, "layer must be an oarlock.nn.Layer, got str",
                 lambda: GroupShardedStage3("model", opt, group=group))
    expect_error(failures, "bad segment_size", ValueError, "segment_size must be an int >= 0, got -1",
                 lambda: GroupShardedStage3(spare, opt, group=group, segment_size=-1))
    expect_error(failures, "group not a Group", TypeError,
                 ["GroupShardedStage3()", "group must be a process group", "str"],
                 lambda: GroupShardedStage3(spare, opt, group="world"))
    expect_error(failures, "exclude_layer not a list", TypeError, "exclude_layer must be a list",
                 lambda: GroupShardedStage3(spare, opt, group=group, exclude_layer="Linear"))
    expect_error(failures, "foreign optimizer", ValueError, "not in the layer",
                 lambda: GroupShardedStage3(build(), opt, group=group))


@check
def group_without_this_rank(group, failures):
    others = dist.new_group([r for r in range(group.nranks) if r != 1])   # every rank creates it, in order
    if MPI.COMM_WORLD.rank == 1:
        model = build()
        expect_error(failures, "group without this rank", ValueError,
                     ["GroupShardedStage3()", "do not include this rank"],
                     lambda: GroupShardedStage3(model, adamw(model), group=others))


class Tied(nn.Layer):
    def __init__(self):
        super().__init__()
        self.tok, self.ln = nn.Embedding(VOCAB, HIDDEN), nn.LayerNorm(HIDDEN)

    def forward(self, ids):
        return oarlock.matmul(self.ln(self.tok(ids)), self.tok.weight, transpose_y=True)


@check
def tied_weight_used_outside_its_owner(group, failures):
    model = Tied()
    wrapped = GroupShardedStage3(model, adamw(model), group=group, segment_size=0)
    ids, labels = batch(2)
    expect_error(failures, "tied weight", RuntimeError, "received a gradient from outside",
                 lambda: loss_of(wrapped, ids, labels).backward())


def main(out):
    dist.init_parallel_env()
    run_checks(CHECKS, out, dist.new_group(list(range(dist.get_world_size()))))


if __name__ == "__main__":
    main(sys.argv[1])
