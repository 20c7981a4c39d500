"""Expert-parallel MoE training checked against one process holding all 8 experts, run by each rank of an
MPI job: `moe_job.py EP DP OUT` on EP * DP ranks (fleet hybrid_configs ep_degree=EP, dp_degree=DP).

The model: embedding -> x + MoELayer(8 experts of Linear-ReLU-Linear, top-2 GShardGate with random routing
and a capacity that drops tokens) -> linear head, cross-entropy, AdamW with ClipGradForMOEByGlobalNorm
small enough to clip. Every rank builds the same full weights (numpy, fixed seed) and keeps its experts;
rank (d, r) trains on shard d * EP + r of each step's batch. `reference(EP, DP)` (run by the pytest side,
in one process) trains the same model with all 8 experts: data-parallel group d is micro-batch d (its
EP shards concatenated in rank order, the gate's random state rewound for each, as every data-parallel
group draws the same numbers), the capacity factor scaled so one expert takes as many tokens as under EP.

The report holds the per-step mean loss over ranks and the gate's decisions of every step in global token
order (train), next to the checks: the token exchange against a numpy transcription of Paddle's
global_scatter / global_gather, the gradients after sync_moe_gradients (dense ones equal on every rank,
experts' equal on their data-parallel replicas), and bad input failing on every rank without a hang.
"""

from __future__ import annotations

import functools
import math
import sys
import traceback

import numpy as np
from _checks import close, expect_error, leaf, registry, run_checks
from mpi4py import MPI

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.incubate.distributed.models.moe import (ClipGradForMOEByGlobalNorm, GShardGate, MoELayer, NaiveGate,
                                                     sync_moe_gradients)

CHECKS, check = registry()
close = functools.partial(close, rtol=1e-6, atol=1e-6)

VOCAB, D, HIDDEN, EXPERTS, ROWS, SEQ, STEPS = 16, 8, 16, 8, 2, 4, 20
TOKENS = ROWS * SEQ                 # per rank and step
CAPACITY = (0.6, 1.2)               # ceil(0.6 * 8) = 5 slots per expert per moe group: tokens get dropped
CLIP, LR, SEED = 0.5, 0.01, 7


class Expert(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, HIDDEN), nn.Linear(HIDDEN, D)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class MoEModel(nn.Layer):
    def __init__(self, first: int, count: int, gate, group):
        super().__init__()
        weights = np.random.default_rng(0)
        self.embed, self.head = nn.Embedding(VOCAB, D), nn.Linear(D, VOCAB)
        full = {"embed": weights.standard_normal((VOCAB, D)), "head_w": weights.standard_normal((D, VOCAB)) * 0.3,
                "head_b": weights.standard_normal(VOCAB) * 0.1, "gate_w": weights.standard_normal((D, EXPERTS)),
                "gate_b": weights.standard_normal(EXPERTS) * 0.5,
                "experts": [[weights.standard_normal(s) * 0.3 for s in ((D, HIDDEN), (HIDDEN,), (HIDDEN, D), (D,))]
                            for _ in range(EXPERTS)]}
        experts = nn.LayerList([Expert() for _ in range(count)])
        for expert, values in zip(experts, full["experts"][first:first + count]):
            for param, value in zip((expert.fc1.weight, expert.fc1.bias, expert.fc2.weight, expert.fc2.bias), values):
                param.set_value(value.astype("float32"))
        self.moe = MoELayer(D, experts, gate=gate, moe_group=group)
        for param, key in ((self.embed.weight, "embed"), (self.head.weight, "head_w"), (self.head.bias, "head_b"),
                           (gate.gate.weight, "gate_w"), (gate.gate.bias, "gate_b")):
            param.set_value(full[key].astype("float32"))
        self.decisions: list = []
        gate.register_forward_post_hook(lambda layer, inputs, output: self.decisions.append(output[1].numpy()))

    def forward(self, tokens):
        h = self.embed(tokens)
        return self.head(h + self.moe(h))

    def expert_param(self):
        ids = {id(p) for p in self.moe.experts.parameters()}
        return lambda p: id(p) in ids


def batch(step: int, dp: int, ep: int) -> tuple:
    """(tokens, targets) of every shard of step `step`: [dp * ep, ROWS, SEQ] each."""
    rng = np.random.default_rng(1000 + step)
    data = rng.integers(0, VOCAB, size=(2, dp * ep, ROWS, SEQ))
    return data[0], data[1]


def loss_of(model, tokens, targets):
    logits = model(oarlock.to_tensor(tokens))
    return F.cross_entropy(logits.reshape([-1, VOCAB]), oarlock.to_tensor(targets.reshape(-1)))


def optimizer(model, clip):
    return oarlock.optimizer.AdamW(learning_rate=LR, parameters=model.parameters(), weight_decay=0.01, grad_clip=clip)


def reference(ep: int, dp: int) -> dict:
    """One process, all 8 experts: {"losses": per step, "decisions": [step][dp * ep * TOKENS, 2]}."""
    factor = tuple(c * TOKENS / (ep * TOKENS) for c in CAPACITY)
    assert math.ceil(factor[0] * ep * TOKENS) == math.ceil(CAPACITY[0] * TOKENS)
    gate = GShardGate(D, EXPERTS, 1, capacity=factor)
    model = MoEModel(0, EXPERTS, gate, None)
    opt = optimizer(model, ClipGradForMOEByGlobalNorm(CLIP))
    oarlock.seed(SEED)
    losses, decisions = [], []
    for step in range(STEPS):
        tokens, targets = batch(step, dp, ep)
        state, total = oarlock.get_rng_state(), 0.0
        for d in range(dp):
            oarlock.set_rng_state(state)      # every data-parallel group draws the same numbers
            shard = slice(d * ep, (d + 1) * ep)
            loss = loss_of(model, tokens[shard].reshape(-1, SEQ), targets[shard].reshape(-1, SEQ))
            (loss / dp).backward()
            total += float(loss) / dp
        opt.step()
        opt.clear_grad()
        losses.append(total)
        decisions.append(np.concatenate(model.decisions).tolist())
        model.decisions.clear()
    return {"losses": losses, "decisions": decisions}


# -- the expert-parallel side --------------------------------------------------------------------------

def setup(ep: int, dp: int) -> dict:
    from oarlock.distributed import fleet
    from oarlock_parallel.moe_groups import expert_parallel_groups
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": dp, "ep_degree": ep,
                               "order": ["dp", "ep", "pp", "sharding", "sep", "cp", "mp"]}
    fleet.init(is_collective=True, strategy=strategy)
    moe_group, expert_dp, dense = expert_parallel_groups()
    hcg = fleet.get_hybrid_communicate_group()    # Paddle's EPHybridCommunicateGroup names give the same group
    assert hcg.get_expert_parallel_group() is moe_group and hcg.get_expert_parallel_world_size() == ep
    assert hcg.get_expert_parallel_rank() == moe_group.rank
    assert hcg.get_expert_parallel_group_src_rank() == moe_group.ranks[0]
    count = EXPERTS // ep
    gate = GShardGate(D, count, ep, capacity=CAPACITY, group=moe_group)
    model = MoEModel(moe_group.rank * count, count, gate, moe_group)
    return {"ep": ep, "dp": dp, "moe_group": moe_group, "expert_dp": expert_dp, "dense": dense, "model": model,
            "shard": expert_dp.rank * ep + moe_group.rank}


def train(env: dict) -> dict:
    """Trains STEPS steps; on rank 0 {"losses": mean over ranks per step, "decisions": global token order};
    env["grads"] keeps the synchronised gradients of the first step (checked below)."""
    model, comm = env["model"], MPI.COMM_WORLD
    is_expert = model.expert_param()
    clip = ClipGradForMOEByGlobalNorm(CLIP, is_expert_param_func=is_expert, moe_group=env["moe_group"])
    opt = optimizer(model, clip)
    oarlock.seed(SEED)
    losses, decisions = [], []
    for step in range(STEPS):
        tokens, targets = batch(step, env["dp"], env["ep"])
        loss = loss_of(model, tokens[env["shard"]], targets[env["shard"]])
        loss.backward()
        sync_moe_gradients(model.parameters(), is_expert, dense_group=env["dense"], expert_dp_group=env["expert_dp"])
        if step == 0:
            env["grads"] = [(is_expert(p), None if p.grad is None else p.grad.numpy().copy())
                           for p in model.parameters()]
            env["norm"] = float(clip.global_norm([(p, p.grad) for p in model.parameters()]))
        opt.step()
        opt.clear_grad()
        losses.append(comm.allreduce(float(loss)) / comm.size)
        mine = comm.gather((env["shard"], model.decisions.pop()), root=0)
        if comm.rank == 0:
            decisions.append(np.concatenate([d for _, d in sorted(mine, key=lambda x: x[0])]).tolist())
    return {"losses": losses, "decisions": decisions}


@check
def gradients_synchronised(env, failures):
    comm = MPI.COMM_WORLD
    every = comm.allgather((env["moe_group"].rank, env["grads"]))
    for rank, (ep_rank, grads) in enumerate(every):
        for i, ((expert, grad), (_, mine)) in enumerate(zip(grads, env["grads"])):
            if expert and ep_rank != env["moe_group"].rank:
                continue
            if (grad is None) != (mine is None) or (grad is not None and not np.allclose(grad, mine, 1e-6, 1e-8)):
                failures.append(f"{'expert' if expert else 'dense'} parameter {i}: gradient differs from rank {rank}")
    norms = comm.allgather(env["norm"])
    if max(norms) - min(norms) > 1e-6 * max(norms):
        failures.append(f"ClipGradForMOEByGlobalNorm.global_norm differs over ranks: {norms}")
    if not env["norm"] > CLIP:
        failures.append(f"the first step's norm {env['norm']} does not exceed clip_norm {CLIP}: the clip is untested")


def numpy_global_scatter(rows_of: list, counts: np.ndarray, rank: int, n_expert: int) -> np.ndarray:
    """Paddle's global_scatter on `rank`: rows_of[j] is rank j's input, counts[j] its local_count; the
    output is, for each local expert e and each source rank j, rank j's rows for (rank, e)."""
    out = []
    for e in range(n_expert):
        for j, rows in enumerate(rows_of):
            starts = np.concatenate([[0], np.cumsum(counts[j])])
            g = rank * n_expert + e
            out.append(rows[starts[g]:starts[g + 1]])
    return np.concatenate(out)


@check
def exchange_matches_numpy(env, failures):
    from oarlock.distributed.utils.moe_utils import global_gather, global_scatter
    group, n = env["moe_group"], env["moe_group"].nranks
    rng = np.random.default_rng(5)
    counts = rng.integers(0, 4, size=(n, n * 2))     # counts[j]: rank j's local_count (2 experts per rank)
    counts[0, 1] = 0                                 # an empty piece
    rows_of = [rng.standard_normal((int(c.sum()), 3)).astype("float32") for c in counts]
    me = group.rank
    local = counts[me]
    glob = np.array([counts[j, me * 2 + e] for j in range(n) for e in range(2)])
    x = leaf(rows_of[me])
    y = global_scatter(x, oarlock.to_tensor(local), oarlock.to_tensor(glob), group=group)
    close(failures, "global_scatter", y, numpy_global_scatter(rows_of, counts, me, 2))
    coef = rng.standard_normal((int(glob.sum()), 3)).astype("float32")
    back = global_gather(y * oarlock.to_tensor(coef), oarlock.to_tensor(local), oarlock.to_tensor(glob), group=group)
    if back.shape != x.shape:
        failures.append(f"global_gather(global_scatter(x) * c): shape {back.shape}, x {x.shape}")
    back.sum().backward()
    # d/dx sum(gather(scatter(x) * c)) = c sent back to where each row came from = gather(c)
    want = global_gather(oarlock.to_tensor(coef), oarlock.to_tensor(local), oarlock.to_tensor(glob), group=group)
    close(failures, "gradient through global_scatter / global_gather", x.grad, want)


@check
def model_parallel_slices_tokens(env, failures):
    """mp_group: each rank routes its slice of the tokens, the outputs are all-gathered; equal to one layer
    on all tokens (NaiveGate: no capacity, which would depend on the slice), gradients included (the
    parameters' summed over the group)."""
    group = env["moe_group"]
    oarlock.seed(3)                                   # the same experts and gate on every rank
    experts, gate = nn.LayerList([Expert() for _ in range(EXPERTS)]), NaiveGate(D, EXPERTS, 1)
    x = np.random.default_rng(8).standard_normal((2, 4 * group.nranks, D)).astype("float32")
    coef = oarlock.to_tensor(np.random.default_rng(9).standard_normal(x.shape).astype("float32"))
    results = []
    for mp_group in (None, group):
        layer = MoELayer(D, experts, gate=gate, mp_group=mp_group)
        xt = leaf(x)
        out = layer(xt)
        (out * coef).sum().backward()
        grads = [p.grad.numpy().copy() if p.grad is not None else np.zeros(p.shape, "float32")
                 for p in layer.parameters()]
        layer.clear_gradients()
        results.append((out.numpy(), xt.grad.numpy(), grads))
    (want_out, want_dx, want_grads), (out, dx, grads) = results
    close(failures, "output", out, want_out)
    close(failures, "input gradient", dx, want_dx)
    same_group = MPI.COMM_WORLD.Split(env["expert_dp"].rank)     # raw MPI over the ranks of `group`
    for i, (g, w) in enumerate(zip(grads, want_grads)):
        close(failures, f"parameter {i} gradient summed over the group", same_group.allreduce(g), w)
    same_group.Free()


@check
def bad_input_fails_on_every_rank(env, failures):
    group, count = env["moe_group"], EXPERTS // env["ep"]
    experts = nn.LayerList([Expert() for _ in range(count)])
    expect_error(failures, "experts as a list", TypeError, ["MoELayer()", "nn.LayerList", "list"],
                 lambda: MoELayer(D, list(experts), moe_group=group))
    expect_error(failures, "top_k > experts", ValueError, ["topk=9", "8 experts"],
                 lambda: MoELayer(D, experts, gate={"type": "naive", "top_k": 9}, moe_group=group))
    expect_error(failures, "capacity 0", ValueError, ["GShardGate()", "capacity", "0.0"],
                 lambda: GShardGate(D, count, env["ep"], capacity=(0.0, 1.0), group=group))
    layer = MoELayer(D, experts, moe_group=group)
    expect_error(failures, "d_model mismatch", ValueError, ["MoELayer.forward()", f"d_model={D}", "[2, 4, 6]"],
                 lambda: layer(oarlock.zeros([2, 4, 6])))
    # the layer still works on every rank afterwards: no rank was left inside a collective
    out = layer(oarlock.zeros([2, 4, D]))
    if out.shape != [2, 4, D]:
        failures.append(f"MoELayer after the errors: shape {out.shape}")


def main(ep: int, dp: int, out: str) -> None:
    env, setup_error, trained = None, None, {}
    try:
        env = setup(ep, dp)
        trained = train(env)
    except Exception:
        setup_error = traceback.format_exc()
    run_checks(CHECKS, out, env, setup_error=setup_error, ep=ep, dp=dp, **trained)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
