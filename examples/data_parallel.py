"""Data-parallel training with oarlock.distributed: each rank trains on its shard of every batch
and the ranks average their gradients with all_reduce, so N ranks take the same steps as one
process on the whole batch. Paddle-style code (`import oarlock as paddle`).

    oarlock launch -n 2 examples/data_parallel.py [--steps 200] [--batch 256] [--check]

With --check, rank 0 also trains a single-process replica on the whole batch and compares
the parameters after every step (the run fails if they drift apart by more than --tolerance).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import oarlock as paddle
import oarlock.distributed as dist
import oarlock.nn as nn
import oarlock.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from two_moons import two_moons  # noqa: E402  (the example next to this one)


def make_model(seed: int):
    paddle.seed(seed)
    return nn.Sequential(nn.Linear(2, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))


def step(model, optimizer, x, y, world_size: int = 1):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    if world_size > 1:
        for param in model.parameters():
            dist.all_reduce(param.grad, op=dist.ReduceOp.AVG)
    optimizer.step()
    optimizer.clear_grad()
    return loss


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps (default 200)")
    parser.add_argument("--batch", type=int, default=256, help="global batch size, split over the ranks (256)")
    parser.add_argument("--lr", type=float, default=0.05, help="SGD-with-momentum learning rate (0.05)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and of the initial weights (0)")
    parser.add_argument("--check", action="store_true", help="compare with a one-process replica on rank 0")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest parameter difference --check "
                                                                       "accepts (1e-4)")
    args = parser.parse_args(argv)

    dist.init_parallel_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch % world:
        parser.error(f"--batch {args.batch} must be divisible by the number of ranks ({world})")
    model = make_model(args.seed)
    for param in model.parameters():          # start from rank 0's weights, as DataParallel does
        dist.broadcast(param, src=0)
    optimizer = paddle.optimizer.Momentum(learning_rate=args.lr, momentum=0.9, parameters=model.parameters())
    if args.check and rank == 0:
        replica = make_model(args.seed)
        replica.set_state_dict(model.state_dict())
        replica_optimizer = paddle.optimizer.Momentum(learning_rate=args.lr, momentum=0.9,
                                                        parameters=replica.parameters())
    rng = np.random.default_rng(args.seed)
    worst = 0.0
    for i in range(1, args.steps + 1):
        x_np, y_np = two_moons(args.batch, 0.1, rng)          # every rank draws the same global batch
        shard = slice(rank, None, world)
        loss = step(model, optimizer, paddle.to_tensor(x_np[shard]), paddle.to_tensor(y_np[shard]), world)
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)
        if args.check and rank == 0:
            step(replica, replica_optimizer, paddle.to_tensor(x_np), paddle.to_tensor(y_np))
            worst = max(worst, max(float(np.abs(a.numpy() - b.numpy()).max())
                                   for a, b in zip(model.parameters(), replica.parameters())))
        if rank == 0 and (i % 50 == 0 or i == args.steps):
            print(f"step {i:4d}  loss {float(loss):.4f}" + (f"  max |dp - single| {worst:.2e}" if args.check else ""),
                  flush=True)
    if args.check and rank == 0:
        verdict = "matches" if worst <= args.tolerance else "DIFFERS FROM"
        print(f"{world}-rank data parallel {verdict} one process on the whole batch (largest parameter difference "
              f"{worst:.2e}, tolerance {args.tolerance:g})")
        return 0 if worst <= args.tolerance else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
