"""Expert parallelism against one process holding all 8 experts (scripts/moe_job.py): a tiny MoE model
trained 20 steps with AdamW and ClipGradForMOEByGlobalNorm on ep2, ep4 and ep2 x dp2 (one MPI job each,
which also checks the token exchange, the synchronised gradients and bad input on every rank). The
per-step losses must agree within 1e-5 relative and the gate's decisions (capacity drops and random
routing included) must be identical."""

from __future__ import annotations

import numpy as np
import pytest
from parallel_jobs import assert_check_passed, launch_report, load_job

JOB = load_job("moe_job")
CONFIGS = {"ep2": (2, 1), "ep4": (4, 1), "ep2xdp2": (2, 2)}


@pytest.fixture(scope="module", params=list(CONFIGS))
def run(request, tmp_path_factory):
    """(ep, dp, the job's report, the single-process reference)."""
    ep, dp = CONFIGS[request.param]
    out = tmp_path_factory.mktemp(f"moe_{request.param}") / "report.json"
    report = launch_report("moe_job", out, ep, dp, ranks=ep * dp, timeout=300)
    return ep, dp, report, JOB.reference(ep, dp)


def test_losses_equal_one_process(run):
    _, _, report, reference = run
    got, want = np.array(report["losses"]), np.array(reference["losses"])
    assert got.shape == want.shape == (JOB.STEPS,)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
    assert want[-1] < want[0] * 0.8           # it trained


def test_same_gate_decisions(run):
    ep, dp, report, reference = run
    got, want = np.array(report["decisions"]), np.array(reference["decisions"])
    assert got.shape == want.shape == (JOB.STEPS, ep * dp * JOB.TOKENS, 2)
    np.testing.assert_array_equal(got, want)
    assert (want == -1).any() and (want[:, :, 0] >= 0).any()     # capacity and random routing dropped slots


@pytest.mark.parametrize("check", list(JOB.CHECKS))
def test_job_check(run, check):
    assert_check_passed(run[2], check)
