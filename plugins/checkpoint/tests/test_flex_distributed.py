"""FlexCheckpoint in real MPI jobs: a model and its AdamW state saved on 4 ranks sharded along rows
load bit for bit on 2 ranks sharded along columns, on 1 rank whole and on 4 ranks again; a
separate-QKV checkpoint loads into a fused-QKV (GQA) model through AoA and back; async saves (a
writer thread, and forked writers on 4 ranks) and pickle saves load; a process group of ranks 1 and
3 saves and one of ranks 3, 1, 0 loads; loads in many small rounds; replicated tensors are written
once with the bytes balanced over the ranks.

Every job runs scripts/flex_job.py; each rank compares what it loaded with the expected shard
(regenerated from the same seeded training) and reports errors and the files it read.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

JOB = Path(__file__).parent / "scripts" / "flex_job.py"

# name: (ranks, launcher, phase, checkpoint, layout, flags); a load's checkpoint is made by the save of that name
JOBS = {
    "save_rows4": (4, "mpiexec", "save", "rows4", "rows", []),
    "load_cols2": (2, "launch", "load", "rows4", "cols", []),
    "load_whole1": (1, "python", "load", "rows4", "whole", []),
    "load_rows4": (4, "mpiexec", "load", "rows4", "rows", []),
    "load_cols4_small_rounds": (4, "mpiexec", "load", "rows4", "cols", ["--round-bytes", "4096"]),
    "load_fused_cols2": (2, "launch", "load", "rows4", "cols", ["--fused", "--aoa", "fuse"]),
    "save_fused_async2": (2, "launch", "save", "fused2", "rows", ["--fused", "--async"]),
    "load_split_whole1": (1, "python", "load", "fused2", "whole", ["--aoa", "split"]),
    "save_async_fork4": (4, "mpiexec", "save", "fork4", "cols", ["--async", "--fork"]),
    "load_fork4_rows2": (2, "launch", "load", "fork4", "rows", []),
    "save_pickle_cols2": (2, "launch", "save", "pickle2", "cols", ["--pickle"]),
    "load_pickle_rows4": (4, "mpiexec", "load", "pickle2", "rows", []),
    "save_group13_rows": (4, "mpiexec", "save", "group13", "rows", ["--group", "1,3"]),
    "load_group310_cols": (4, "launch", "load", "group13", "cols", ["--group", "3,1,0"]),
    "save_whole4": (4, "mpiexec", "save", "whole4", "whole", []),
    "load_whole4_cols2": (2, "launch", "load", "whole4", "cols", []),
}
SAVE_OF = {"rows4": "save_rows4", "fused2": "save_fused_async2", "fork4": "save_async_fork4",
           "pickle2": "save_pickle_cols2", "group13": "save_group13_rows",
           "whole4": "save_whole4"}


def _command(ranks: int, how: str, args: list) -> list:
    if how == "python":
        return [sys.executable, str(JOB), *args]
    if how == "launch":
        return [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(ranks), str(JOB), *args]
    mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    return [mpiexec, "-n", str(ranks), sys.executable, str(JOB), *args]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """run(name) -> (list of rank reports, checkpoint dir); each job runs once, its save first."""
    root, done = tmp_path_factory.mktemp("flex"), {}

    def get(name: str):
        if name not in done:
            ranks, how, phase, checkpoint, layout, flags = JOBS[name]
            if phase == "load":
                get(SAVE_OF[checkpoint])
            report = root / name
            env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="120", PYTHONWARNINGS="ignore")
            args = [phase, str(root / checkpoint), layout, str(report), *flags]
            finished = subprocess.run(_command(ranks, how, args), capture_output=True, text=True, timeout=300,
                                      env=env)
            reports = []
            for rank in range(ranks):
                path = Path(f"{report}.{rank}.json")
                assert path.exists(), (f"{name}: rank {rank} wrote no report (exit {finished.returncode}):\n"
                                       f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}")
                reports.append(json.loads(path.read_text()))
            assert finished.returncode == 0, f"{name} exited {finished.returncode}:\n{finished.stderr[-3000:]}"
            done[name] = reports, root / checkpoint
        return done[name]

    return get


@pytest.mark.parametrize("name", list(JOBS))
def test_job_matches_bit_for_bit(run, name):
    reports, _ = run(name)
    errors = [f"rank {rank}: {e}" for rank, r in enumerate(reports) for e in r["errors"]]
    assert not errors, "\n".join(errors)


def test_unchanged_layout_reads_only_its_own_file(run):
    reports, _ = run("load_rows4")
    assert [r["files_read"] for r in reports] == [[f"{rank}_0.safetensors"] for rank in range(4)]


@pytest.mark.parametrize("name", ["load_cols2", "load_fused_cols2", "load_pickle_rows4", "load_whole4_cols2"])
def test_resharded_load_reads_each_file_once(run, name):
    reports, checkpoint = run(name)
    read = [f for r in reports for f in r["files_read"]]
    files = json.loads((checkpoint / "0.metadata").read_text())["files"]
    assert sorted(read) == sorted(files), "every data file is read, by exactly one rank"


def test_a_process_group_saves_with_its_own_ranks(run):
    reports, checkpoint = run("save_group13_rows")
    meta = json.loads((checkpoint / "0.metadata").read_text())
    assert meta["world_size"] == 2 and sorted(meta["files"]) == ["0_0.safetensors", "1_0.safetensors"]
    reports, _ = run("load_group310_cols")   # another group (ranks 3, 1, 0), another layout
    assert reports[2]["files_read"] == [] and sorted(f for r in reports for f in r["files_read"]) == \
        ["0_0.safetensors", "1_0.safetensors"]


def test_replicated_tensors_are_written_once_and_balanced(run):
    _, checkpoint = run("save_whole4")
    meta = json.loads((checkpoint / "0.metadata").read_text())
    assert all(len(entry["shards"]) == 1 for entry in meta["tensors"].values())
    sizes = sorted(info["bytes"] for info in meta["files"].values())
    assert len(sizes) == 4, "each of the 4 ranks writes a share"
    largest = max(math.prod(e["global_shape"]) * 4 for e in meta["tensors"].values())
    assert sizes[-1] - sizes[0] <= largest + 4096, f"bytes per rank {sizes} are not balanced"


def test_sharded_save_records_every_shard(run):
    _, checkpoint = run("save_rows4")
    meta = json.loads((checkpoint / "0.metadata").read_text())
    assert meta["world_size"] == 4 and sorted(meta["files"]) == [f"{r}_0.safetensors" for r in range(4)]
    weight = meta["tensors"]["model.embed.weight"]
    assert [s["offset"][0] for s in weight["shards"]] == [0, 12, 24, 36]
    assert meta["objects"]["opt.param_0_step"] == 2
