"""The MoE gates' whole-batch options (batch_group, global_aux) on every rank of an MPI job: `moe_aux_job.py OUT`
on R ranks, rank r holding rows r*N .. (r+1)*N of one batch X (the same numpy seed on every rank).

Checked against float64 numpy over the whole batch, written here from Paddle's gate code:
- GShardGate(global_aux=True): every rank's aux loss is GShard's loss of the whole batch, in the data-parallel
  layout (world_size 1, batch_group = every rank) and the expert-parallel one (the moe group, no batch_group).
  Its gradients are what averaging over the ranks needs: each rank's input gradient is R x the whole-batch
  gradient on its own rows, and the gate weight's gradient averaged over the ranks is the whole batch's;
- global_aux=False keeps Paddle's loss: the rank's own rows';
- SwitchGate(global_aux=True) (evaluation: no noise): the whole batch's Switch loss and its gradients;
- random routing with batch_group: each rank's decisions are those of one process holding the whole batch
  (same seed);
- a batch_group that is not a group: a TypeError naming it.
"""

from __future__ import annotations

import functools
import sys

import numpy as np
from _checks import close, expect_error, leaf, registry, run_checks
from mpi4py import MPI

import oarlock
import oarlock.distributed as dist
from oarlock.incubate.distributed.models.moe import GShardGate, SwitchGate

CHECKS, check = registry()
close = functools.partial(close, rtol=1e-5, atol=1e-7)

D, EXPERTS, N = 8, 4, 16          # width, experts in all, tokens per rank


def whole_batch(ranks: int) -> tuple:
    """(X [ranks * N, D], W [D, EXPERTS], b [EXPERTS]), float32 values held as float64."""
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((ranks * N, D)), rng.standard_normal((D, EXPERTS)), rng.standard_normal(EXPERTS)
    return tuple(a.astype(np.float32).astype(np.float64) for a in (x, w, b))


def softmax(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def through_softmax(p, grad_p):
    """d/dz of a function of p = softmax(z), from its gradient in p."""
    return p * (grad_p - (p * grad_p).sum(axis=1, keepdims=True))


def gshard_numpy(x, w, b, num_expert: int) -> tuple:
    """GShard's loss (Paddle's GShardGate: mean(c_e * m_e) * num_expert ** 2, c_e the share of the top-2
    slots picking e, m_e the mean probability of e) and its gradients in x and w."""
    z = x @ w + b
    tokens, tot = z.shape
    c = np.bincount(np.argsort(-z, axis=1)[:, :2].ravel(), minlength=tot) / tokens
    p = softmax(z)
    loss = np.mean(c * p.mean(axis=0)) * num_expert ** 2
    dz = through_softmax(p, np.broadcast_to(c * num_expert ** 2 / tot / tokens, p.shape))
    return loss, dz @ w.T, x.T @ dz


def switch_numpy(x, w, b) -> tuple:
    """The Switch loss without noise or drops (sum_e f_e * P_e * E, f_e the share of tokens whose top-1 is e,
    P_e the mean probability of e) and its gradients in x and w."""
    z = x @ w + b
    tokens, tot = z.shape
    p = softmax(z)
    f = np.bincount(p.argmax(axis=1), minlength=tot) / tokens
    loss = np.sum(f * p.sum(axis=0) / tokens) * tot
    dz = through_softmax(p, np.broadcast_to(f * tot / tokens, p.shape))
    return loss, dz @ w.T, x.T @ dz


def with_weights(gate, w, b):
    gate.gate.weight.set_value(w.astype(np.float32))
    gate.gate.bias.set_value(b.astype(np.float32))
    return gate


def check_against(failures, what, env, gate, want: tuple) -> None:
    """Runs `gate` on this rank's rows and compares its aux loss and gradients with the whole batch's `want`."""
    rank, ranks, rows = env["rank"], env["ranks"], env["rows"]
    x = leaf(env["x"][rows], "float32")
    gate(x)
    loss = gate.get_loss()
    loss.backward()
    close(failures, f"{what}: aux loss", float(loss), want[0])
    close(failures, f"{what}: input gradient / ranks", x.grad.numpy() / ranks, want[1][rows])
    mean_w = MPI.COMM_WORLD.allreduce(gate.gate.weight.grad.numpy()) / ranks
    close(failures, f"{what}: gate weight gradient averaged over ranks", mean_w, want[2])
    if rank == 0 and not np.abs(want[1][rows]).max() > 0:
        failures.append(f"{what}: the reference gradient is zero")


@check
def gshard_data_parallel(env, failures):
    gate = with_weights(GShardGate(D, EXPERTS, 1, batch_group=env["world"], global_aux=True), env["w"], env["b"])
    check_against(failures, "GShard, batch_group of every rank", env, gate, gshard_numpy(env["x"], env["w"],
                                                                                         env["b"], EXPERTS))


@check
def gshard_expert_parallel(env, failures):
    local = EXPERTS // env["ranks"]
    gate = with_weights(GShardGate(D, local, env["ranks"], group=env["world"], global_aux=True), env["w"], env["b"])
    check_against(failures, "GShard, moe group", env, gate, gshard_numpy(env["x"], env["w"], env["b"], local))


@check
def gshard_local_by_default(env, failures):
    gate = with_weights(GShardGate(D, EXPERTS, 1, batch_group=env["world"]), env["w"], env["b"])
    gate(oarlock.to_tensor(env["x"][env["rows"]].astype(np.float32)))
    want = gshard_numpy(env["x"][env["rows"]], env["w"], env["b"], EXPERTS)[0]
    close(failures, "GShard, global_aux off: the rank's own rows' loss", float(gate.get_loss()), want)


@check
def switch_whole_batch(env, failures):
    gate = with_weights(SwitchGate(D, EXPERTS, 1, batch_group=env["world"], global_aux=True), env["w"], env["b"])
    gate.eval()
    check_against(failures, "Switch (eval), batch_group of every rank", env, gate,
                  switch_numpy(env["x"], env["w"], env["b"]))


@check
def random_routing_draws_the_whole_batch(env, failures):
    def decisions(group, x):
        gate = with_weights(GShardGate(D, EXPERTS, 1, batch_group=group), env["w"], env["b"])
        oarlock.seed(11)
        return gate(oarlock.to_tensor(x.astype(np.float32)))[1].numpy()

    got = decisions(env["world"], env["x"][env["rows"]])
    want = decisions(None, env["x"])
    if not (want[:, 1] == -1).any():
        failures.append("random routing dropped no second slot: the check would not see a wrong draw")
    close(failures, "random routing decisions against one process", got, want[env["rows"]])


@check
def bad_batch_group(env, failures):
    for gate in (GShardGate, SwitchGate):
        expect_error(failures, f"{gate.__name__}(batch_group=3)", TypeError,
                     [f"{gate.__name__}()", "batch_group must be an oarlock.distributed Group", "got int"],
                     lambda gate=gate: gate(D, EXPERTS, 1, batch_group=3))


def main(out: str) -> None:
    dist.init_parallel_env()
    rank, ranks = dist.get_rank(), dist.get_world_size()
    x, w, b = whole_batch(ranks)
    env = {"rank": rank, "ranks": ranks, "rows": slice(rank * N, (rank + 1) * N), "x": x, "w": w, "b": b,
           "world": dist.new_group(list(range(ranks)))}
    run_checks(CHECKS, out, env)


if __name__ == "__main__":
    main(sys.argv[1])
