"""`oarlock train --nproc N --dp D --mp M --sharding S --sp --pp P --vpp V --schedule S`: real MPI jobs started
by the command itself (through `oarlock launch`), whose per-step losses (trainer.json) must equal one process's
with the same seed, checkpoints that resume across layouts, and the usage errors, which come before any rank
starts; and --memory-budget in one process and on a pipeline's ranks (the memory planner: same losses, the
plan's measured peak under the budget).

Each job is a few steps of the full-width model on 4 x 32-byte batches; every job runs once per module
(fixtures) and is checked by several tests.
"""

from __future__ import annotations

import json
import re
import os
import shutil
import sys

import numpy as np
import pytest

import oarlock
from oarlock_train import command
from oarlock_train.model import GPT, GPTConfig
from oarlock_train.parallel_model import shard, split_of, unshard

pytest.importorskip("mpi4py")

STEPS = 4
SMALL = ["--steps", str(STEPS), "--eval-every", "2", "--batch-size", "4", "--seq-len", "32", "--seed", "3",
         "--dropout", "0", "--sample-len", "0"]
RTOL = 1e-5


def history(out):
    with open(os.path.join(out, "trainer.json")) as fh:
        return json.load(fh)["history"]


def one_process(out, *extra):
    assert command.main([*SMALL, "--out", str(out), *extra]) == 0
    return history(out)


def launched(out, *extra):
    """A successful `oarlock train ... --nproc N ...`: (history, stdout, stderr)."""
    status, stdout, stderr = run_launched(out, *extra)
    assert status == 0, f"{extra} failed ({status}):\n{stdout[-3000:]}\n{stderr[-3000:]}"
    return history(out), stdout, stderr


def run_launched(out, *extra):
    """`oarlock train ... --nproc N ...` run in this process (the corpus it hands to the ranks is built once per
    process) with the launched ranks' stdout and stderr (file descriptors 1 and 2) in files: (exit status,
    stdout, stderr)."""
    logs = [out.parent / f"{out.name}.{name}" for name in ("stdout", "stderr")]
    saved = [os.dup(1), os.dup(2)]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        with open(logs[0], "w") as fd1, open(logs[1], "w") as fd2, pytest.MonkeyPatch.context() as patch:
            patch.setenv("OARLOCK_COLLECTIVE_TIMEOUT", "60")
            patch.setenv("PYTHONWARNINGS", "ignore")   # the stderr checks look for the ranks' own lines
            os.dup2(fd1.fileno(), 1)
            os.dup2(fd2.fileno(), 2)
            status = command.main([*SMALL, "--out", str(out), *extra])
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    return (status, *(log.read_text() for log in logs))


def assert_same_losses(got, want):
    assert len(got["train"]) == len(want["train"]) == STEPS
    np.testing.assert_allclose(got["train"], want["train"], rtol=RTOL)
    assert [s for s, _ in got["valid"]] == [s for s, _ in want["valid"]]
    np.testing.assert_allclose([v for _, v in got["valid"]], [v for _, v in want["valid"]], rtol=RTOL)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of the module, by name (each job started once)."""
    root = tmp_path_factory.mktemp("parallel")
    out = {"one": one_process(root / "one")}
    # mp2 in two pieces: the first piece's checkpoint (step 2) also resumes in one process
    launched(root / "mp2", "--nproc", "2", "--mp", "2", "--stop-after", "2")
    shutil.copytree(root / "mp2", root / "mp2_then_one")
    out["mp2"], out["mp2_stdout"], out["mp2_stderr"] = launched(root / "mp2", "--nproc", "2", "--mp", "2",
                                                                "--resume")
    out["mp2_dir"] = root / "mp2"
    out["mp2_then_one"] = one_process(root / "mp2_then_one", "--resume")
    out["dp2"], _, _ = launched(root / "dp2", "--nproc", "2", "--dp", "2")
    out["dp2mp2"], out["dp2mp2_stdout"], _ = launched(root / "dp2mp2", "--nproc", "4", "--dp", "2", "--mp", "2",
                                                      "--sample-len", "8")
    out["dp2mp2_dir"] = root / "dp2mp2"
    out["sharding2"], _, _ = launched(root / "sharding2", "--nproc", "2", "--sharding", "2")
    # one process for 2 steps, resumed by 2 ranks with mp 2 and sequence parallel
    one_process(root / "one_then_sp", "--stop-after", "2")
    out["one_then_sp"], _, _ = launched(root / "one_then_sp", "--nproc", "2", "--mp", "2", "--sp", "--resume")
    # the pipeline GPT: pp 2 x vpp 2 under the interleaved schedule with a memory budget per rank (the engine's
    # other schedules and layouts, and PipelineLayer's recompute, are covered by oarlock-parallel's
    # test_pipeline_gpt.py)
    out["pp2_vpp2"], out["pp2_stdout"], out["pp2_stderr"] = launched(
        root / "pp2", "--nproc", "2", "--pp", "2", "--vpp", "2", "--schedule", "VPP", "--memory-budget", "12MB")
    return out


@pytest.mark.parametrize("layout", ["mp2", "dp2", "dp2mp2", "sharding2"])
def test_per_step_losses_equal_one_process(runs, layout):
    assert_same_losses(runs[layout], runs["one"])


def test_mp2_checkpoint_resumes_in_one_process(runs):
    assert_same_losses(runs["mp2_then_one"], runs["one"])


def test_one_process_checkpoint_resumes_with_mp2_and_sequence_parallel(runs):
    assert_same_losses(runs["one_then_sp"], runs["one"])


def test_a_damaged_checkpoint_fails_every_rank_without_a_hang(runs, tmp_path):
    shutil.copytree(runs["mp2_dir"], tmp_path / "damaged")
    (tmp_path / "damaged" / "optimizer.pdopt").write_bytes(b"not a pickle")
    status, _, stderr = run_launched(tmp_path / "damaged", "--nproc", "2", "--mp", "2", "--resume")
    assert status == 2, stderr
    for rank in (0, 1):
        assert f"[rank {rank}] oarlock train: error: --resume: cannot use the checkpoint" in stderr, stderr


def test_checkpoint_holds_the_full_model(runs):
    saved = oarlock.load(os.path.join(runs["dp2mp2_dir"], "model.safetensors"))
    full = GPT(GPTConfig(max_seq_len=32)).state_dict()
    assert list(saved) == list(full)
    assert {k: list(v.shape) for k, v in saved.items()} == {k: list(v.shape) for k, v in full.items()}
    optimizer = oarlock.load(os.path.join(runs["dp2mp2_dir"], "optimizer.pdopt"), weights_only=True)
    assert list(optimizer["param_2_moment1_0"].shape) == list(full["blocks.0.attn.qkv.weight"].shape)
    assert (runs["dp2mp2_dir"] / "sample.txt").read_text().startswith("The ")


def test_only_rank_zero_prints(runs):
    for stdout in (runs["mp2_stdout"], runs["dp2mp2_stdout"]):
        assert stdout and all(line.startswith("[rank 0] ") for line in stdout.splitlines()), stdout
        assert any("resumed from" in line for line in runs["mp2_stdout"].splitlines())
    assert "[rank 1]" not in runs["mp2_stderr"]
    assert "2 ranks (dp 1 x mp 2)" in runs["mp2_stdout"]


def test_qkv_slices_hold_whole_heads_of_q_k_and_v():
    width, heads, ranks = 8, 4, 2
    full = np.arange(width * 3 * width, dtype=np.float32).reshape(width, 3 * width)  # [q heads | k heads | v heads]
    split = split_of("blocks.3.attn.qkv.weight")
    for rank in range(ranks):
        whole_heads = full.reshape(width, 3, heads, width // heads)[:, :, rank * 2:(rank + 1) * 2]
        np.testing.assert_array_equal(shard(full, split, rank, ranks), whole_heads.reshape(width, -1))


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_weight_round_trips_through_its_slices(ranks):
    for name, value in GPT(GPTConfig(max_seq_len=8)).state_dict().items():
        full, split = value.numpy(), split_of(name)
        parts = [shard(full, split, rank, ranks) for rank in range(ranks)]
        np.testing.assert_array_equal(unshard(parts, split), full)
        if split is not None:
            assert all(p.size * ranks == full.size for p in parts), name
    assert split_of("blocks.0.attn_norm.weight") is None and split_of("blocks.0.attn.proj.bias") is None


@pytest.mark.parametrize("argv, message", [
    (["--nproc", "4", "--dp", "1", "--mp", "2"], "--dp 1 x --mp 2 x --sharding 1 = 2 ranks, but --nproc is 4"),
    (["--nproc", "1", "--mp", "2"], "1 ranks cannot be split into --mp 2 x --sharding 1 groups"),
    (["--nproc", "2", "--mp", "4"], "2 ranks cannot be split into --mp 4"),
    (["--nproc", "3", "--mp", "3"], "the heads (4) must be divisible by --mp (3)"),
    (["--nproc", "2", "--sp"], "argument --sp: sequence parallel splits the sequence over the tensor-parallel"),
    (["--nproc", "2", "--mp", "2", "--sp", "--seq-len", "31"], "--seq-len (31) must be divisible by --mp (2)"),
    (["--nproc", "4", "--batch-size", "6"], "argument --batch-size: 6 rows cannot be shared equally by the 4 data"),
])
def test_usage_errors_come_before_any_rank_starts(argv, message, tmp_path, capsys, monkeypatch):
    from oarlock_train import parallel
    monkeypatch.setattr(parallel, "launch", lambda *a: pytest.fail("a rank was started"))
    assert command.main([*SMALL, "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oarlock train: error: argument --") and message in err, err


@pytest.mark.parametrize("argv", [["--nproc", "0"], ["--mp", "0"], ["--dp", "-1"], ["--sharding", "x"]])
def test_degrees_must_be_positive_integers(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        command.main(argv)
    assert exc.value.code == 2
    assert "expected a positive integer" in capsys.readouterr().err


def test_resume_with_other_options_is_refused_before_launching(runs, tmp_path, capsys, monkeypatch):
    from oarlock_train import parallel
    monkeypatch.setattr(parallel, "launch", lambda *a: pytest.fail("a rank was started"))
    one_process(tmp_path, "--steps", "2", "--eval-every", "2")
    assert command.main([*SMALL, "--out", str(tmp_path), "--resume", "--nproc", "2", "--mp", "2"]) == 2
    assert "--steps: checkpoint 2, now 4" in capsys.readouterr().err


def test_help_tells_the_new_options():
    text = command.build_parser().format_help()
    for option in ("--nproc N", "--dp D", "--mp M", "--sharding S", "--sp", "oarlock launch"):
        assert option in text, option
    assert "--corpus-file" not in text  # the ranks' own option


def _plan_peaks(text):
    """(peak without the plan, peak with it) from the command's "memory plan" line."""
    line = next(x for x in text.splitlines() if "memory plan" in x)
    return tuple(int(v.replace(",", "")) for v in re.search(r"peak without it ([\d,]+), with it ([\d,]+)",
                                                             line).groups())


def test_pipeline_losses_equal_one_process(runs):
    assert_same_losses(runs["pp2_vpp2"], runs["one"])
    assert "2 ranks (dp 1 x mp 1 x pp 2 x vpp 2 (VPP, 4 micro-batches))" in runs["pp2_stdout"]
    assert _plan_peaks(runs["pp2_stdout"] + runs["pp2_stderr"])[1] <= 12_000_000   # rank 0's measured plan


def test_memory_budget_keeps_the_losses_and_meets_the_budget(runs, tmp_path):
    """In a fresh process: the device statistics count the whole process, so this one's leftovers would count."""
    import subprocess
    budget = 18_000_000
    done = subprocess.run([sys.executable, "-m", "oarlock_train", *SMALL, "--out", str(tmp_path),
                           "--memory-budget", "18MB"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_losses(history(tmp_path), runs["one"])
    without, with_plan = _plan_peaks(done.stdout + done.stderr)
    assert with_plan <= budget < without


@pytest.mark.parametrize("argv, message", [
    (["--nproc", "4", "--pp", "2", "--mp", "2"], "argument --pp: the pipeline GPT of oarlock train combines with "
                                                 "--dp only"),
    (["--vpp", "2"], "argument --vpp: pipeline options need --pp 2 or more"),
    (["--nproc", "2", "--pp", "2", "--micro-batches", "3"], "argument --micro-batches: each data rank's 4 rows"),
    (["--nproc", "2", "--pp", "2", "--schedule", "ZB"], "argument --schedule:"),
    (["--nproc", "3", "--pp", "2"], "3 ranks cannot be split into --mp 1 x --sharding 1 x --pp 2 groups"),
    (["--memory-budget", "lots"], "argument --memory-budget: expected a positive number of bytes"),
    (["--memory-budget", "1GB", "--recompute"], "argument --memory-budget: not with --recompute"),
    (["--nproc", "2", "--pp", "2", "--schedule", "1F1BOffload", "--memory-budget", "1GB"],
     "argument --memory-budget: not with --schedule 1F1BOffload"),
])
def test_pipeline_and_memory_usage_errors_come_before_any_rank_starts(argv, message, tmp_path, capsys, monkeypatch):
    from oarlock_train import parallel
    monkeypatch.setattr(parallel, "launch", lambda *a: pytest.fail("a rank was started"))
    assert command.main([*SMALL, "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("oarlock train: error: argument --") and message in err, err


def test_an_unreachable_budget_is_a_usage_error(tmp_path, capsys):
    assert command.main([*SMALL, "--steps", "2", "--out", str(tmp_path), "--memory-budget", "1MB"]) == 2
    assert "argument --memory-budget: MemoryPlanner: the budget of 1000000 bytes cannot be met" in \
        capsys.readouterr().err


def test_help_tells_the_pipeline_and_memory_options():
    text = command.build_parser().format_help()
    for option in ("--pp P", "--vpp V", "--schedule MODE", "--micro-batches M", "--recompute", "--memory-budget BYTES",
                   "1F1BOffload", "MemoryPlanner"):
        assert option in text, option
