"""A small data-parallel training that checkpoints with oarlock.distributed.resilience and can kill one of
its ranks, for the elastic-restart tests and bench/resilience_restart.py.

    oarlock launch -n 2 --max-restarts 2 elastic_job.py --ckpt DIR --out RUN [--kill-step S --kill-rank R]
                   [--delete-dir] [--steps N] [--every K] [--dropout P] [--mirror DIR]

Every rank draws the same global batch of step s from a generator seeded by s alone (the data order
depends on the step, not on the history), takes its share (rank r: rows r, r + world, ...) and
averages the gradients; dropout draws per-rank numbers from oarlock's generator (seeded per rank), so
a resumed run is bit-identical only if every rank's generator state is restored. On the first run
(OARLOCK_RESTART_COUNT 0) rank --kill-rank SIGKILLs itself after step --kill-step; with --delete-dir it
first deletes its checkpoint directory (its local disk lost with it). Rank 0 appends each step's loss
to RUN/losses.jsonl and, at the end, writes RUN/final.npz (the parameters) and RUN/report.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time

import numpy as np

import oarlock as paddle
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed import resilience

FEATURES, CLASSES, BATCH = 8, 4, 32


def batch_of(step: int):
    rng = np.random.default_rng(1000 + step)
    x = rng.standard_normal((BATCH, FEATURES)).astype("float32")
    y = (np.abs(x[:, :CLASSES]).argmax(axis=1)).astype("int64")
    return x, y


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--every", type=int, default=3)
    parser.add_argument("--kill-step", type=int)
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--delete-dir", action="store_true")
    parser.add_argument("--mirror")
    parser.add_argument("--hidden", type=int, default=32, help="hidden width (bench/resilience_restart.py: larger)")
    parser.add_argument("--dropout", type=float, default=0.2,
                        help="0 makes the losses independent of the number of ranks (the 4 -> 2 restart)")
    args = parser.parse_args()

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("OARLOCK_RESTART_COUNT", "0"))
    paddle.seed(0)
    model = nn.Sequential(nn.Linear(FEATURES, args.hidden), nn.ReLU(), nn.Dropout(args.dropout),
                          nn.Linear(args.hidden, CLASSES))
    optimizer = paddle.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())
    paddle.seed(100 + rank)   # per-rank dropout
    model_state = model.sharded_state_dict()
    state = {"model": model_state, "opt": optimizer.sharded_state_dict(model_state)}
    began = time.perf_counter()
    start = resilience.resume(state, args.ckpt, mirror=args.mirror)
    resume_s = time.perf_counter() - began
    first = 0 if start is None else start + 1
    if rank == 0:
        os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "losses.jsonl"), "a") if rank == 0 else None
    step_s, save_s = [], []
    for step in range(first, args.steps):
        began = time.perf_counter()
        x, y = batch_of(step)
        share = slice(rank, None, world)
        loss = F.cross_entropy(model(paddle.to_tensor(x[share])), paddle.to_tensor(y[share]))
        loss.backward()
        for param in model.parameters():
            dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)
        optimizer.step()
        optimizer.clear_grad()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if log is not None:
            log.write(json.dumps({"step": step, "loss": float(loss), "world": world, "restart": restart}) + "\n")
            log.flush()
        step_s.append(time.perf_counter() - began)
        if step % args.every == args.every - 1:
            began = time.perf_counter()
            resilience.save(state, args.ckpt, step, mirror=args.mirror)
            save_s.append(time.perf_counter() - began)
        if restart == 0 and step == args.kill_step and rank == args.kill_rank:
            if args.delete_dir:
                shutil.rmtree(os.path.join(args.ckpt, f"rank{rank}"))
            os.kill(os.getpid(), signal.SIGKILL)
    resilience.flush_replicas()
    dist.barrier()   # every replica stored before rank 0 removes the store
    if rank == 0:
        np.savez(os.path.join(args.out, "final.npz"), *[p.numpy() for p in model.parameters()])
        with open(os.path.join(args.out, "report.json"), "w") as fh:
            json.dump({"world": world, "restart": restart, "resumed_at": start,
                       "restore": resilience.last_restore(), "resume_s": resume_s,
                       "step_s": float(np.median(step_s)) if step_s else None,
                       "save_s": float(np.median(save_s)) if save_s else None}, fh)
        resilience.remove_replicas(args.ckpt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
