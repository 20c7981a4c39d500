"""A 4-rank job for tests/test_auto_train.py (`oarlock launch -n 4 auto_gpt_job.py OUT`): a GPT trained under
auto parallel on the 2x2 mesh [["dp"], ["mp"]] = [[0, 1], [2, 3]] equals one process.

The GPT (vocab 64, width 32, 2 pre-LayerNorm blocks of 4 heads, seq 16, batch 8: the tiny GPT of the hybrid
tests, written with plain nn.Linear / nn.Embedding / nn.LayerNorm) is built with one seed, so every run starts
from the same weights; AdamW (lr 0.01, weight decay 0.01; no gradient clipping) trains it 20 steps on the same
batches. The oracle: the same model trained with plain tensors in this process. Three distributed runs:
  shard_layer  -- shard_fn: qkv / fc1 / head column parallel over mp, out / fc2 row parallel, the rest
                  replicated; the batch Shard(0) over dp;
  parallelize  -- the same plan as a Paddle mp_config (ColWiseParallel / RowWiseParallel) with dp_config;
  stage1       -- shard_layer's model with shard_optimizer(AdamW, ShardingStage1("dp")): moments sharded on dp;
  stage2       -- the same with ShardingStage2("dp"): after each backward every gradient of a parameter
                  replicated on dp is a DistTensor holding only this rank's dp shard (reduce-scattered);
  stage3       -- ShardingStage3("dp"): the parameters themselves dp shards (gathered where an op needs them),
                  their gradients shards too.
Each step's loss must be within 1e-5 relative of one process's; the final parameters (unsharded) too, except
the qkv biases (see main).
Rank 0 writes {"size", "losses": {run: [...]}, "failures": {check: [...]}} as JSON to OUT.
"""

from __future__ import annotations

import json
import math
import sys
import traceback

import numpy as np
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F

COMM = MPI.COMM_WORLD
RANK = COMM.rank
VOCAB, WIDTH, LAYERS, HEADS, SEQ, BATCH, STEPS = 64, 32, 2, 4, 16, 8, 20
MESH = dist.ProcessMesh([[0, 1], [2, 3]], dim_names=["dp", "mp"])
R = dist.Replicate()
TOL = 1e-5


class Attention(nn.Layer):
    def __init__(self):
        super().__init__()
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        # heads outer, (q, k, v) inner: a column split of qkv keeps whole heads on each mp rank
        qkv = oarlock.reshape(self.qkv(x), [b, s, HEADS, 3 * (WIDTH // HEADS)])
        q, k, v = (oarlock.transpose(t, [0, 2, 1, 3]) for t in oarlock.split(qkv, 3, axis=-1))
        future = np.triu(np.full((s, s), -1e9, dtype=np.float32), 1)
        scores = oarlock.matmul(q, k, transpose_y=True) * (1.0 / math.sqrt(WIDTH // HEADS)) + oarlock.to_tensor(future)
        context = oarlock.transpose(oarlock.matmul(F.softmax(scores, axis=-1), v), [0, 2, 1, 3])
        return self.out(oarlock.reshape(context, [b, s, WIDTH]))


class Block(nn.Layer):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=True))


class GPT(nn.Layer):
    def __init__(self):
        super().__init__()
        self.embed, self.position = nn.Embedding(VOCAB, WIDTH), nn.Embedding(SEQ, WIDTH)
        self.blocks = nn.LayerList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias_attr=False)

    def forward(self, tokens):
        x = self.embed(tokens) + self.position(oarlock.arange(tokens.shape[1], dtype="int64"))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def batch(step):
    """(tokens, labels) [BATCH, SEQ] int64: x[t+1] = x[t] + stride mod VOCAB, the same on every rank."""
    rng = np.random.default_rng([3, step])
    start, stride = rng.integers(0, VOCAB, (BATCH, 1)), rng.integers(1, 5, (BATCH, 1))
    seq = (start + stride * np.arange(SEQ + 1)) % VOCAB
    return seq[:, :-1].astype("int64"), seq[:, 1:].astype("int64")


def new_model():
    oarlock.seed(0)
    return GPT()


def new_optimizer(model):
    return oarlock.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters(), weight_decay=0.01)


COLUMN = ("qkv", "fc1", "head")
ROW = ("out", "fc2")


def shard_fn(name, layer, mesh):
    """The dp x mp plan: column-parallel weights Shard(1) (bias Shard(0)), row-parallel weights Shard(0)."""
    leaf = name.split(".")[-1]
    if leaf in COLUMN:
        layer.weight = dist.shard_tensor(layer.weight, mesh, [R, dist.Shard(1)])
        if getattr(layer, "bias", None) is not None:
            layer.bias = dist.shard_tensor(layer.bias, mesh, [R, dist.Shard(0)])
    elif leaf in ROW:
        layer.weight = dist.shard_tensor(layer.weight, mesh, [R, dist.Shard(0)])


def train(model, optimizer, distributed: bool, after_backward=None) -> list:
    losses = []
    for step in range(STEPS):
        tokens, labels = (oarlock.to_tensor(a) for a in batch(step))
        if distributed:
            tokens = dist.shard_tensor(tokens, MESH, [dist.Shard(0), R])
            labels = dist.shard_tensor(labels, MESH, [dist.Shard(0), R])
        loss = F.cross_entropy(model(tokens), labels)
        loss.backward()
        if after_backward is not None:
            after_backward(model)
        optimizer.step()
        optimizer.clear_grad()
        value = dist.unshard_dtensor(loss) if distributed else loss
        losses.append(float(value.numpy()))
    return losses


def final_params(model) -> dict:
    return {k: (dist.unshard_dtensor(v) if v.is_dist() else v).numpy() for k, v in model.state_dict().items()}


def run_shard_layer():
    model = dist.shard_layer(new_model(), MESH, shard_fn)
    return train(model, new_optimizer(model), True), final_params(model)


def run_parallelize():
    model = new_model()
    optimizer = new_optimizer(model)
    plan = {f"blocks.*.{n}": dist.ColWiseParallel() for n in ("attn.qkv", "fc1")}
    plan.update({f"blocks.*.{n}": dist.RowWiseParallel() for n in ("attn.out", "fc2")})
    plan["head"] = dist.ColWiseParallel()
    model, optimizer = dist.parallelize(model, optimizer, mesh=MESH, config={
        "mp_config": {"parallelize_plan": plan}, "dp_config": {"sharding_level": 0}})
    return train(model, optimizer, True), final_params(model)


def run_stage1():
    model = dist.shard_layer(new_model(), MESH, shard_fn)
    optimizer = dist.shard_optimizer(new_optimizer(model), dist.ShardingStage1("dp"))
    losses = train(model, optimizer, True)
    moment = next(iter(optimizer._inner_opt._state.values()))["moment1"]
    if not moment.placements[0].is_shard():
        raise AssertionError(f"ShardingStage1: a moment is not sharded over dp: {moment.placements}")
    return losses, final_params(model)


def only_gradient_shards(model):
    """ShardingStage2: every gradient of a parameter replicated on dp is this rank's dp shard, nothing more
    (except where no tensor dim is left to split: a bias already split on its one dim over mp)."""
    checked = 0
    for name, p in model.named_parameters():
        if p.placements[0].is_shard() or not dist.ShardingStage2("dp").sharded_placements(p)[0].is_shard():
            continue
        checked += 1
        g = p.grad
        if not (g.is_dist() and g.placements[0].is_shard()):
            raise AssertionError(f"ShardingStage2: the gradient of {name} is not sharded over dp: "
                                 f"{g.placements if g.is_dist() else 'a plain tensor'}")
        whole = p._local_value().shape
        d = g.placements[0].get_dim()
        if g._local_value().shape[d] * 2 != whole[d] or g.shape != p.shape:
            raise AssertionError(f"ShardingStage2: {name}'s gradient piece {g._local_value().shape} is not half "
                                 f"of its piece {whole} on dim {d}")
    if checked < 20:
        raise AssertionError(f"ShardingStage2: only {checked} gradients checked")


def run_stage2():
    model = dist.shard_layer(new_model(), MESH, shard_fn)
    optimizer = dist.shard_optimizer(new_optimizer(model), dist.ShardingStage2("dp"))
    return train(model, optimizer, True, only_gradient_shards), final_params(model)


def only_parameter_shards(model):
    """ShardingStage3: every parameter it could split holds only its dp shard, and so does its gradient."""
    checked = 0
    for name, p in model.named_parameters():
        if p.placements[0].is_shard():
            checked += 1
            if p.grad is None or list(p.grad.shape) != list(p._local_value().shape):
                raise AssertionError(f"ShardingStage3: {name}'s gradient is not its shard's shape "
                                     f"{p._local_value().shape}")
    if checked < 20:
        raise AssertionError(f"ShardingStage3: only {checked} parameters are sharded over dp")


def run_stage3():
    model = dist.shard_layer(new_model(), MESH, shard_fn)
    optimizer = dist.shard_optimizer(new_optimizer(model), dist.ShardingStage3("dp"))
    return train(model, optimizer, True, only_parameter_shards), final_params(model)


RUNS = {"shard_layer": run_shard_layer, "parallelize": run_parallelize, "stage1": run_stage1,
        "stage2": run_stage2, "stage3": run_stage3}


def run_and_report(runs: dict, out, every_parameter: bool = True) -> None:
    """Train the one-process reference, then each of `runs` ({name: () -> (losses, final parameters)}); every
    rank checks its losses and final parameters against the reference (every_parameter: a run's parameters must
    hold every key; False: a rank holds some, e.g. its pipeline stage's), and rank 0 writes {"size", "losses",
    "failures"} as JSON to `out`. Shared with pp_gpt_job.py."""
    model = new_model()
    reference = train(model, new_optimizer(model), False)
    ref_params = final_params(model)
    failures, losses = {}, {"one_process": reference}
    for name, run in runs.items():
        mine = []
        try:
            got, params = run()
            losses[name] = got
            for step, (g, w) in enumerate(zip(got, reference)):
                if abs(g - w) > TOL * abs(w):
                    mine.append(f"{name}: step {step} loss {g!r} != one process {w!r}")
                    break
            for key in ref_params if every_parameter else params:
                if key.endswith("qkv.bias"):
                    # its key third has a true gradient of 0 (softmax ignores a per-query constant): each
                    # run's ~1e-10 rounding noise is what AdamW normalises, so it moves differently; the
                    # losses show it changes nothing
                    continue
                got_value, want = params[key], ref_params[key]
                if not np.allclose(got_value, want, rtol=1e-4, atol=1e-5):
                    mine.append(f"{name}: final {key} differs by {np.abs(got_value - want).max():.3g}")
            if not params:
                mine.append(f"{name}: this rank holds no parameter")
        except Exception:
            mine.append(f"{name}: {traceback.format_exc(limit=8)}")
        everyone = COMM.gather(mine, root=0)
        if RANK == 0:
            failures[name] = [f"rank {r}: {f}" for r, fs in enumerate(everyone) for f in fs]
    if RANK == 0:
        with open(out, "w") as f:
            json.dump({"size": COMM.size, "losses": losses, "failures": failures}, f)


def main(out):
    run_and_report(RUNS, out)


if __name__ == "__main__":
    main(sys.argv[1])
