"""One rank's part of a FlexCheckpoint test job (run under mpiexec, `oarlock launch` or alone).

    flex_job.py save DIR LAYOUT REPORT [--async [--fork]] [--fused] [--pickle]
    flex_job.py load DIR LAYOUT REPORT [--fused] [--aoa fuse|split] [--round-bytes N]
    (either phase: [--group r,s,...] to save / load over a process group of those ranks)

save: the trained test model (the same on every rank) and its AdamW state,
sharded by LAYOUT ("rows", "cols" or "whole") over the job, go to DIR. With
--async the tensors are zeroed right after save_state_dict returns, as
training would change them, which the checkpoint must not see.
load: zeroed tensors of this rank's shards are filled from DIR and compared
bit for bit with the expected shard (for --fused: the fused layout computed in
numpy). Each rank writes {"errors": [...], "files_read": [...]} to
REPORT.<rank>.json.
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
from flex_models import FUSE, SPLIT, fused_state, sharded, trained  # noqa: E402
from oarlock_checkpoint.flex import datafile  # noqa: E402


def expected_state(fused: bool) -> tuple[dict, dict]:
    model, opt = trained()
    weights = {k: v.numpy() for k, v in model.state_dict().items()}
    return (fused_state(weights) if fused else weights), opt.state_dict()


GROUP = None   # --group r,s: a process group of those ranks saves / loads; the other ranks only make the group


def zeros_like_layout(arrays: dict, layout: str, prefix: str) -> dict:
    return sharded({k: oarlock.zeros(list(v.shape), dtype=str(v.dtype)) if isinstance(v, np.ndarray) else
                    oarlock.zeros(v.shape, dtype=v.dtype.name) if isinstance(v, oarlock.Tensor) else 0
                    for k, v in arrays.items()}, layout, prefix, GROUP)


def compare(loaded: dict, expected: dict, layout: str, prefix: str, errors: list) -> None:
    want = sharded({k: oarlock.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in expected.items()},
                   layout, prefix, GROUP)
    for key, value in loaded.items():
        got, exp = value, want[key]
        if isinstance(got, dist.ShardedWeight):
            got, exp = got.local_tensor, exp.local_tensor
        if isinstance(got, oarlock.Tensor):
            a, b = got.numpy(), exp.numpy()
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                errors.append(f"{prefix}.{key}: loaded values differ from the saved ones")
        elif got != exp:
            errors.append(f"{prefix}.{key}: loaded {got!r}, expected {exp!r}")


def main() -> None:
    phase, directory, layout, report = sys.argv[1:5]
    flags = sys.argv[5:]
    fused = "--fused" in flags
    rank = dist.get_rank()
    errors, files_read = [], []
    original_read = datafile.DataFile.read

    def counting_read(self, *args, **kwargs):
        files_read.append(os.path.basename(self.path))
        return original_read(self, *args, **kwargs)

    datafile.DataFile.read = counting_read
    global GROUP
    try:
        if "--group" in flags:
            GROUP = dist.new_group([int(r) for r in flags[flags.index("--group") + 1].split(",")])
            if not GROUP.is_member():
                phase = "none"
        if phase == "save":
            model, opt = trained()
            if fused:
                arrays = fused_state({k: v.numpy() for k, v in model.state_dict().items()})
                weights = {k: oarlock.to_tensor(v) for k, v in arrays.items()}
            else:
                weights = model.state_dict()
            state = {"model": sharded(weights, layout, "model", GROUP),
                     "opt": sharded(opt.state_dict(), layout, "opt", GROUP)}
            if "--fork" in flags:
                os.environ["OARLOCK_ASYNC_SAVE"] = "fork"
            dist.save_state_dict(state, directory, process_group=GROUP, async_save="--async" in flags,
                                 safetensors="--pickle" not in flags)
            if "--async" in flags:   # training goes on and changes the tensors; the checkpoint must not see it
                for value in list(weights.values()) + list(opt.state_dict().values()):
                    if isinstance(value, oarlock.Tensor):
                        value.set_value(np.zeros(value.shape, value.numpy().dtype))
                dist.wait_async_save()
        elif phase == "load":
            aoa = flags[flags.index("--aoa") + 1] if "--aoa" in flags else None
            weights, opt_state = expected_state(fused)
            target = {"model": zeros_like_layout(weights, layout, "model"),
                      "opt": zeros_like_layout(opt_state, layout, "opt")}
            config = None
            if aoa is not None:   # the statements name model keys; the checkpoint nests them under "model."
                statements = {"fuse": FUSE, "split": SPLIT}[aoa]
                config = {"aoa_statements": [s.replace("layers.", "model.layers.") for s in statements]}
                target.pop("opt")    # the optimizer's keys follow parameter order, which fusing changes
            if "--round-bytes" in flags:   # many small rounds: every all-to-all path runs several times
                os.environ["OARLOCK_CHECKPOINT_ROUND_BYTES"] = flags[flags.index("--round-bytes") + 1]
            dist.load_state_dict(target, directory, process_group=GROUP, aoa_config=config)
            compare(target["model"], weights, layout, "model", errors)
            if "opt" in target:
                compare(target["opt"], opt_state, layout, "opt", errors)
    except Exception:
        errors.append(traceback.format_exc())
    with open(f"{report}.{rank}.json", "w") as f:
        json.dump({"errors": errors, "files_read": sorted(set(files_read))}, f)


if __name__ == "__main__":
    main()
