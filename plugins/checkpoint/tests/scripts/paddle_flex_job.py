"""One rank's part of a job of the real Paddle 3.2 on Paddle's FlexCheckpoint (run alone or under
`python -m paddle.distributed.launch`, which runs it on CPU over gloo):

    paddle_flex_job.py save DIR LAYOUT          paddle.distributed.save_state_dict of paddle_flex_data
    paddle_flex_job.py load DIR LAYOUT REPORT   load_state_dict into zeros of this rank's boxes; compare

Every tensor is a ShardedWeight of its box under LAYOUT. load writes {"errors": [...]} to REPORT.<rank>.json.

Paddle 3.2's loader moves each CPU target to the GPU with Tensor.cuda() while filling it and copies it
back (flex_checkpoint/dcp/load_state_dict.py, _load_state_dict); on a CPU-only build that call fails,
so where no CUDA device exists the job makes Tensor.cuda() return the tensor itself: the fill then
happens in the CPU tensor, through the same slices, assigns and broadcasts.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import paddle  # noqa: E402
import paddle.distributed as dist  # noqa: E402
from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight  # noqa: E402

import paddle_flex_data as data  # noqa: E402


def targets(layout: str, rank: int, world: int) -> dict:
    """Zeros to load into: whole Tensors alone, else dist tensors sharded as LAYOUT says over a mesh of
    the ranks (Paddle's CPU path of load_state_dict assigns into the target itself, which a
    ShardedWeight is not)."""
    out = {}
    mesh = dist.ProcessMesh(list(range(world)), dim_names=["x"]) if world > 1 else None
    for key, array in data.tensors().items():
        if mesh is None:
            out[key] = paddle.to_tensor(np.zeros(array.shape, array.dtype))
            continue
        _, shape = data.box(array.shape, layout, rank, world)
        axis = {"rows": 0, "cols": 1}.get(layout) if array.ndim >= 2 else None
        out[key] = dist.auto_parallel.api.dtensor_from_local(
            paddle.to_tensor(np.zeros(shape, array.dtype)), mesh,
            [dist.Replicate() if axis is None else dist.Shard(axis)])
    return out


def state(layout: str, rank: int, world: int, fill: bool) -> dict:
    out = {}
    for key, array in data.tensors().items():
        offset, shape = data.box(array.shape, layout, rank, world)
        values = data.local(array, offset, shape) if fill else np.zeros(shape, array.dtype)
        out[key] = ShardedWeight(key=key, local_tensor=paddle.to_tensor(values), local_shape=shape,
                                 global_shape=array.shape, global_offset=offset)
    return out


def main(phase: str, directory: str, layout: str, report: str | None = None) -> None:
    world = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))
    if world > 1:
        dist.init_parallel_env()
    rank = dist.get_rank() if world > 1 else 0
    if phase == "save":
        dist.save_state_dict(state(layout, rank, world, fill=True), directory)
        return
    if not paddle.device.is_compiled_with_cuda() or paddle.device.cuda.device_count() == 0:
        paddle.Tensor.cuda = lambda self, *args, **kwargs: self
    errors = []
    try:
        target = targets(layout, rank, world)
        dist.load_state_dict(target, directory)
        for key, array in data.tensors().items():
            offset, shape = data.box(array.shape, layout, rank, world)
            tensor = target[key]._local_value() if target[key].is_dist() else target[key]
            if tensor.numpy().tobytes() != data.local(array, offset, shape).tobytes():
                errors.append(f"rank {rank}: {key} differs")
            if str(tensor.dtype).removeprefix("paddle.") != data.dtype_of(key):
                errors.append(f"rank {rank}: {key} is {tensor.dtype}")
    except Exception:
        errors.append(traceback.format_exc())
    with open(f"{report}.{rank}.json", "w") as f:
        json.dump({"errors": errors}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
