"""One rank's part of the 2-rank damage test (run under mpiexec -n 2):

    flex_damage_job.py DIR REPORT

For each data format a checkpoint is saved sharded by rows (rank r writes r_0.<suffix>); then one
bit of rank 1's file is flipped (in its header region, then in its data) and the job loads it into
tensors of known values, sharded by rows (each rank reads only its own file) and by columns (pieces
move between the ranks), one shard per round. Each load must fail on both ranks and leave both
ranks' tensors as they were; with the file repaired, both layouts then load the saved values. Each
rank writes {"cases": [{"name", "file", "raised", "unchanged"}], "errors": [...]} to REPORT.<rank>.json.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import oarlock  # noqa: E402
import oarlock.distributed as dist  # noqa: E402
from flex_damage import flipped, header_bytes, tensor_bits  # noqa: E402

SUFFIX = {"safetensors": ".safetensors", "pickle": ".distcp"}
AXIS = {"rows": 0, "cols": 1}


def arrays() -> dict:
    rng = np.random.default_rng(5)   # the same on every rank
    return {"w": rng.standard_normal((12, 6)).astype(np.float32), "n": rng.integers(-99, 99, (6, 4)),
            "v": oarlock.to_tensor(rng.standard_normal((8, 4)).astype(np.float32)).astype("bfloat16").numpy()}


def sharded(values: dict, layout: str) -> dict:
    return {k: dist.shard_full_weight(k, oarlock.to_tensor(v), AXIS[layout]) for k, v in values.items()}


def sentinel(layout: str) -> dict:
    """This rank's shards, filled with values no checkpoint here holds."""
    return sharded({k: np.full(v.shape, 42).astype(v.dtype) for k, v in arrays().items()}, layout)


def load_damaged(name: str, directory: Path, damaged: Path, layout: str) -> dict:
    state = sentinel(layout)
    before, raised = tensor_bits(state), None
    try:
        dist.load_state_dict(state, directory)
    except Exception as exc:
        raised = f"{type(exc).__name__}: {exc}"
    return {"name": f"{name}, {layout}", "file": damaged.name, "raised": raised,
            "unchanged": tensor_bits(state) == before}


def main() -> None:
    root, report = Path(sys.argv[1]), sys.argv[2]
    os.environ["OARLOCK_CHECKPOINT_ROUND_BYTES"] = "64"   # a round per shard: rank 0's shards are read first
    cases, errors = [], []
    try:
        for data_format, suffix in SUFFIX.items():
            directory = root / data_format
            dist.save_state_dict(sharded(arrays(), "rows"), directory, safetensors=data_format == "safetensors")
            damaged = directory / f"1_0{suffix}"
            for where, offset in (("header", header_bytes(damaged) // 2), ("data", damaged.stat().st_size * 2 // 3)):
                for layout in AXIS:
                    dist.barrier()
                    if dist.get_rank() == 0:
                        with flipped(damaged, offset, 4):
                            dist.barrier()   # rank 1 loads while the file is damaged
                            cases.append(load_damaged(f"{data_format} {where}", directory, damaged, layout))
                            dist.barrier()   # both loads done: repair
                    else:
                        dist.barrier()
                        cases.append(load_damaged(f"{data_format} {where}", directory, damaged, layout))
                        dist.barrier()
            dist.barrier()   # rank 0 has repaired the file
            for layout in AXIS:   # both layouts load the saved values
                state = sentinel(layout)
                dist.load_state_dict(state, directory)
                if tensor_bits(state) != tensor_bits(sharded(arrays(), layout)):
                    errors.append(f"{data_format}, {layout}: the repaired checkpoint loads wrong values")
    except Exception:
        errors.append(traceback.format_exc())
    with open(f"{report}.{dist.get_rank()}.json", "w") as f:
        json.dump({"cases": cases, "errors": errors}, f)


if __name__ == "__main__":
    main()
