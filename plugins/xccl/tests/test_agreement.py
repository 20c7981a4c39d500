"""Ranks that disagree on a collective fail, all of them, at once, naming what each rank passed.

Real jobs run tests/scripts/agreement_job.py: 2 ranks under `oarlock launch` and 3 ranks under
plain `mpiexec`. In every case rank 1 passes something else than the others (element count,
dtype, collective, root, reduce op, per-peer counts); without the check MPI matched the calls and
the ranks carried on with wrong data (rank 1 of an all_reduce of 3 elements against 2 ended with
[2, 2, 1]) or hung. Receives whose message has another dtype or length fail on the receiving rank.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py")

JOB = Path(__file__).parent / "scripts" / "agreement_job.py"
JOB_TIMEOUT_S = 240     # a hang ends here; the collective timeout below is longer still, so the
COLLECTIVE_TIMEOUT_S = "600"    # watchdog cannot turn a hang into an error that passes for a check

# case -> (what the other ranks passed, what rank 1 passed)
COLLECTIVE_CASES = {
    "numel": ("all_reduce float32[2] op=SUM", "all_reduce float32[3] op=SUM"),
    "dtype": ("all_reduce float32[2] op=SUM", "all_reduce float64[2] op=SUM"),
    "barrier": ("all_reduce float32[2] op=SUM", "barrier"),
    "broadcast_root": ("broadcast float32[2] src=0", "broadcast float32[2] src=1"),
    "reduce_op": ("all_reduce float32[2] op=SUM", "all_reduce float32[2] op=MAX"),
    "all_gather": ("all_gather float32[2]", "all_gather float32[3]"),
    "reduce_root": ("reduce float32[2] dst=0 op=SUM", "reduce float32[2] dst=1 op=SUM"),
    "reduce_scatter_op": ("reduce_scatter float32[1] op=SUM", "reduce_scatter float32[1] op=PROD"),
    "gather": ("gather float32[2] dst=0", "gather float32[3] dst=0"),
    "scatter": ("scatter float32[2] src=0", "scatter float32[3] src=0"),
}
# case -> a pair of ranks whose counts disagree, as the error names it
COUNT_CASES = {
    "alltoall": "rank 0 sends 2 element(s) to rank 1, which expects 3",
    "alltoall_single": "rank 1 sends 1 element(s) to rank 0, which expects 2",
}
# case -> what rank 0 sent, what rank 1's receive expected
RECV_CASES = {
    "recv_dtype": ("float64[3]", "float32[3]"),
    "recv_shorter": ("float32[3]", "float32[2]"),
    "recv_longer": ("float32[2]", "float32[3]"),
}
RUNS = [(2, "oarlock launch"), (3, "mpiexec")]


def _command(size: int, how: str, *args) -> list:
    if how == "oarlock launch":
        return [sys.executable, "-m", "oarlock.cli", "launch", "-n", str(size), str(JOB), *map(str, args)]
    mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    return [mpiexec, "-n", str(size), sys.executable, str(JOB), *map(str, args)]


def _run(size: int, how: str, *args, **env):
    """(CompletedProcess, wall seconds) of a job; one still running after JOB_TIMEOUT_S gets SIGTERM,
    which `oarlock launch` and mpiexec pass on to the ranks, and the test fails."""
    environment = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT=COLLECTIVE_TIMEOUT_S, PYTHONWARNINGS="ignore", **env)
    environment.pop("OARLOCK_DISTRIBUTED_DEBUG", None)
    environment.setdefault("OARLOCK_COLLECTIVE_CHECK", "1")
    command = _command(size, how, *args)
    start = time.monotonic()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment) as job:
        try:
            stdout, stderr = job.communicate(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            job.terminate()
            stdout, stderr = job.communicate(timeout=30)
            pytest.fail(f"{how} job with {size} ranks hung (no end within {JOB_TIMEOUT_S} s):\n{stdout[-3000:]}\n"
                        f"{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr), time.monotonic() - start


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Each run's JSON report, made once (a run that failed fails every test that needs it, at once)."""
    cache = {}

    def get(size: int, how: str) -> dict:
        if (size, how) not in cache:
            out = tmp_path_factory.mktemp(f"agree{size}") / "report.json"
            try:
                done, _ = _run(size, how, out, "cases")
                cache[(size, how)] = (json.loads(out.read_text()) if done.returncode == 0 and out.exists() else
                                      f"{how} job with {size} ranks failed ({done.returncode}):\n"
                                      f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
            except pytest.fail.Exception as exc:
                cache[(size, how)] = str(exc)
        report = cache[(size, how)]
        if isinstance(report, str):
            pytest.fail(report)
        return report

    return get


def _listing(size: int, others: str, odd: str) -> str:
    """How the error lists the calls: rank 1 is the odd one out, the other ranks agree."""
    evens = "rank 0" if size == 2 else "ranks " + ", ".join(str(r) for r in range(size) if r != 1)
    return f"{evens} passed {others}; rank 1 passed {odd}"


@pytest.mark.parametrize("size,how", RUNS, ids=[f"{n}ranks-{how.replace(' ', '_')}" for n, how in RUNS])
@pytest.mark.parametrize("case", list(COLLECTIVE_CASES))
def test_every_rank_raises_naming_each_ranks_call(reports, case, size, how):
    records = reports(size, how)["cases"][case]
    others, odd = COLLECTIVE_CASES[case]
    for rank, record in enumerate(records):
        assert record["error"] == "CollectiveMismatchError", f"rank {rank} did not raise: {record}"
        assert "disagree on collective #" in record["message"] and "No data was exchanged" in record["message"]
        assert _listing(size, others, odd) in record["message"], record["message"]


@pytest.mark.parametrize("size,how", RUNS, ids=[f"{n}ranks-{how.replace(' ', '_')}" for n, how in RUNS])
@pytest.mark.parametrize("case", list(COUNT_CASES))
def test_alltoall_counts_that_do_not_pair_up_fail_on_every_rank(reports, case, size, how):
    for rank, record in enumerate(reports(size, how)["cases"][case]):
        assert record["error"] == "CollectiveMismatchError", f"rank {rank} did not raise: {record}"
        assert f"{case}(): the ranks of group 0 disagree on the element counts" in record["message"]
        assert COUNT_CASES[case] in record["message"], record["message"]


@pytest.mark.parametrize("size,how", RUNS, ids=[f"{n}ranks-{how.replace(' ', '_')}" for n, how in RUNS])
@pytest.mark.parametrize("case", list(RECV_CASES))
def test_a_receive_of_another_dtype_or_length_fails_on_the_receiver(reports, case, size, how):
    records = reports(size, how)["cases"][case]
    sent, expected = RECV_CASES[case]
    assert records[0] == {"error": None, "result": None}        # the sender's message went out
    assert records[1]["error"] == "CollectiveMismatchError", records[1]
    assert f"recv(): rank 0 sent {sent} but rank 1 received it with a receive of {expected}" in records[1]["message"]


@pytest.mark.parametrize("size,how", RUNS, ids=[f"{n}ranks-{how.replace(' ', '_')}" for n, how in RUNS])
def test_matching_calls_after_the_mismatches_are_right(reports, size, how):
    """No rank was left half-way through a collective: the group is in step and computes right."""
    expected_sum = np.arange(4, dtype=np.float64) * sum(rank + 1 for rank in range(size))
    expected_gather = [[rank, rank] for rank in range(size)]
    for rank, record in enumerate(reports(size, how)["cases"]["after"]):
        assert record["error"] is None, f"rank {rank}: {record}"
        np.testing.assert_array_equal(record["result"][0], expected_sum)
        assert record["result"][1:] == expected_gather


def test_an_uncaught_mismatch_fails_the_job_without_hanging(tmp_path):
    done, wall = _run(2, "oarlock launch", tmp_path / "unused.json", "uncaught")
    assert done.returncode != 0, done.stdout + done.stderr
    assert "CollectiveMismatchError" in done.stderr
    assert "rank 0 passed all_reduce float32[2] op=SUM; rank 1 passed all_reduce float32[3] op=SUM" in done.stderr
    assert wall < JOB_TIMEOUT_S / 2


def test_the_check_can_be_turned_off_and_on(tmp_path):
    """OARLOCK_COLLECTIVE_CHECK=0 turns the check off (MPI then matches SUM with MAX and nothing
    fails); set_collective_check(True) turns it back on and returns the previous setting."""
    out = tmp_path / "report.json"
    done, _ = _run(2, "mpiexec", out, "switch", OARLOCK_COLLECTIVE_CHECK="0")
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads(out.read_text())["cases"]
    assert [r["error"] for r in cases["unchecked"]] == [None, None]
    assert cases["previous"] == [False, False]
    assert [r["error"] for r in cases["checked"]] == ["CollectiveMismatchError"] * 2
    assert [r["error"] for r in cases["unchecked_again"]] == [None, None]


def test_the_default_check_samples_after_the_first_calls(tmp_path):
    """By default a group's first 64 collectives are checked, then one in 64: a mismatch at #100
    passes unchecked (as with the check off), every_call=True catches it, #128 is checked."""
    out = tmp_path / "report.json"
    done, _ = _run(2, "mpiexec", out, "sampled")
    assert done.returncode == 0, done.stdout + done.stderr
    cases = json.loads(out.read_text())["cases"]
    assert cases["due_100"] == [[False], [False]]
    assert [r["error"] for r in cases["not_due"]] == [None, None]
    assert [r["error"] for r in cases["every_call"]] == ["CollectiveMismatchError"] * 2
    assert [r["error"] for r in cases["due"]] == ["CollectiveMismatchError"] * 2
    assert "collective #128" in cases["due"][0]["message"]


def test_a_bad_switch_value_is_named():
    script = "import oarlock, oarlock.distributed as d; d.init_parallel_env(); d.all_reduce(oarlock.ones([2]))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OARLOCK_COLLECTIVE_CHECK="yes"))
    assert done.returncode != 0
    assert "OARLOCK_COLLECTIVE_CHECK='yes' must be 1" in done.stderr
    assert "all (every collective)" in done.stderr


def test_set_collective_check_rejects_a_non_bool():
    import oarlock.distributed as dist
    with pytest.raises(TypeError, match=r"set_collective_check\(\): enabled must be True or False, got 'no'"):
        dist.set_collective_check("no")
