"""Paddle's stream collectives and fused_allreduce_gradients_with_group on every rank of an MPI job, through the
`paddle` alias (the import paths PaddleFormers uses). Each rank writes what it got to OUTDIR/rank<k>.npz;
test_paddle_paths.py checks the values against numpy.

    python -m oarlock.cli launch -n 2 paddle_paths_job.py OUTDIR"""

import os
import sys

import numpy as np

import oarlock.compat

oarlock.compat.enable_paddle_alias()

import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
from paddle.distributed import stream  # noqa: E402
from paddle.distributed.communication.group import _get_global_group  # noqa: E402
from paddle.distributed.fleet.utils.hybrid_parallel_util import fused_allreduce_gradients_with_group  # noqa: E402


def main(outdir):
    dist.init_parallel_env()
    rank, size = dist.get_rank(), dist.get_world_size()
    mine = paddle.to_tensor(np.arange(6, dtype="float32").reshape(2, 3) + 10 * rank)
    gathered = paddle.zeros([2 * size, 3])
    stream.all_gather(gathered, mine, use_calc_stream=True)
    pieces = []
    stream.all_gather(pieces, mine)
    scattered = paddle.zeros([1, 3])
    stream.reduce_scatter(scattered, paddle.to_tensor(np.full([size, 3], rank + 1.0, dtype="float32")))
    layer = paddle.nn.Linear(3, 2)
    layer.weight.set_value(paddle.ones([3, 2]))
    (layer(paddle.full([1, 3], float(rank + 1))) ** 2).sum().backward()
    local_grad = layer.weight.grad.numpy().copy()
    fused_allreduce_gradients_with_group(layer.parameters(), None)      # mean over the world
    np.savez(os.path.join(outdir, f"rank{rank}.npz"), gathered=gathered.numpy(),
             pieces=np.stack([p.numpy() for p in pieces]), scattered=scattered.numpy(), local_grad=local_grad,
             mean_grad=layer.weight.grad.numpy(), world=np.array(_get_global_group().nranks))


if __name__ == "__main__":
    main(sys.argv[1])
