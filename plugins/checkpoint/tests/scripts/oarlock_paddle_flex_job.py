"""One rank's part of an oarlock job on Paddle's FlexCheckpoint layout (run alone, under mpiexec or
`oarlock launch`), the counterpart of paddle_flex_job.py:

    oarlock_paddle_flex_job.py save DIR LAYOUT          save_state_dict(..., format="paddle")
    oarlock_paddle_flex_job.py load DIR LAYOUT REPORT   load_state_dict into zeros of this rank's boxes

Every tensor is a ShardedWeight of its box under LAYOUT. load writes {"errors": [...]} to REPORT.<rank>.json.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import oarlock  # noqa: E402
import oarlock.distributed as dist  # noqa: E402

import paddle_flex_data as data  # noqa: E402


def tensor(values: np.ndarray, key: str):
    return oarlock.to_tensor(values.view(oarlock.bfloat16.np) if data.dtype_of(key) == data.BFLOAT16_BITS else values)


def state(layout: str, rank: int, world: int, fill: bool) -> dict:
    out = {}
    for key, array in data.tensors().items():
        offset, shape = data.box(array.shape, layout, rank, world)
        values = data.local(array, offset, shape) if fill else np.zeros(shape, array.dtype)
        out[key] = dist.ShardedWeight(key=key, local_tensor=tensor(values, key), local_shape=shape,
                                      global_shape=array.shape, global_offset=offset)
    return out


def main(phase: str, directory: str, layout: str, report: str | None = None) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    if phase == "save":
        dist.save_state_dict(state(layout, rank, world, fill=True), directory, format="paddle")
        return
    errors = []
    try:
        target = state(layout, rank, world, fill=False)
        dist.load_state_dict(target, directory)
        for key, array in data.tensors().items():
            offset, shape = data.box(array.shape, layout, rank, world)
            got = target[key].local_tensor
            if got.numpy().tobytes() != data.local(array, offset, shape).tobytes():
                errors.append(f"rank {rank}: {key} differs")
            if got.dtype.name != data.dtype_of(key):
                errors.append(f"rank {rank}: {key} is {got.dtype.name}")
    except Exception:
        errors.append(traceback.format_exc())
    with open(f"{report}.{rank}.json", "w") as f:
        json.dump({"errors": errors}, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
