"""SDCMonitor in a real 3-rank data-parallel MPI job (scripts/sdc_job.py under `oarlock launch -n 3`), with faults
injected through oarlock.distributed.resilience.inject_fault:

- a bit flipped in one replica's parameter after a step is reported at the next check (within `interval` steps),
  naming that rank and parameter, on every rank; with interval 3 and the flip after an unchecked step, the
  replica vote names it;
- a faulty matmul on one rank for one step is caught by the replay check: by the vote of 3 ranks, and on a
  2-rank group (no majority) by the known-answer matmul test; with on_detect="rollback" the run goes back to
  the state before that step's update (equal to a run that dropped it); a single wrong product in one rank's
  training forward, gone by the replay, is caught by the replay of that rank's own micro-batch (loss_fn);
- a nan input and a loss spike on one rank are reported naming that rank and step;
- 200 clean monitored steps (every check on, both replays every 20 steps, dropout on) raise nothing and end
  bit-identical to the same training without a monitor (the checks do not disturb training); the 2,000-step run is
  plugins/resilience/tests/scripts/sdc_clean_run.py, figures in the README;
- on_detect="rollback": training goes on and ends bit-identical to a run that dropped the lost step's update,
  with the replicas equal; max_strikes=0 makes the first detection an error of kind "repeated".
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

SCRIPT = Path(__file__).parent / "scripts" / "sdc_job.py"
RANKS, CLEAN_STEPS = 3, 200


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """{scenario: [what each rank saw]}."""
    out = tmp_path_factory.mktemp("sdc") / "report.json"
    env = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")
    env.pop("OARLOCK_FAULT_INJECT", None)
    done = subprocess.run([sys.executable, "-m", "oarlock.cli", "launch", "-n", str(RANKS), str(SCRIPT), str(out),
                           str(CLEAN_STEPS)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and out.exists(), f"the SDC job failed ({done.returncode}):\n" \
                                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(out.read_text())
    assert report["size"] == RANKS
    by_scenario = {}
    for rank, seen in enumerate(report["ranks"]):
        for name, result in seen.items():
            assert "crash" not in result, f"scenario {name} crashed on rank {rank}:\n{result['crash']}"
            by_scenario.setdefault(name, []).append(result)
    return by_scenario


def error_everywhere(results, scenario, ranks=range(RANKS)):
    """The error every rank in `ranks` raised for `scenario`: the same one on each (none hangs, none differs)."""
    errors = [results[scenario][r]["error"] for r in ranks]
    assert errors[0] is not None, f"{scenario}: no error was raised"
    assert all(e == errors[0] for e in errors), f"{scenario}: the ranks disagree: {errors}"
    return errors[0]


@pytest.mark.parametrize("scenario,step,rank,parameter,kind", [
    ("bitflip", 6, 1, "_layers.3.weight", "changed_between_steps"),   # flipped after step 5, interval 1
    ("bitflip_interval", 6, 2, "_layers.0.bias", "replica_mismatch"),  # flipped after step 4, checks at 3, 6, ...
])
def test_bit_flip_is_reported_naming_rank_and_parameter(results, scenario, step, rank, parameter, kind):
    error = error_everywhere(results, scenario)
    assert (error["step"], error["ranks"], error["parameter"], error["kind"]) == (step, [rank], parameter, kind)
    assert f"rank(s) [{rank}]" in error["message"] and parameter in error["message"]


def test_faulty_matmul_is_caught_by_the_replay_vote(results):
    error = error_everywhere(results, "matmul")
    # the fault is armed for step 4 on rank 2, the replay runs every 2 steps
    assert (error["step"], error["ranks"], error["kind"]) == (4, [2], "replay_mismatch")
    assert "disagree with the majority" in error["message"]


def test_one_wrong_product_in_training_is_caught_by_the_own_batch_replay(results):
    error = error_everywhere(results, "matmul_transient")
    assert (error["step"], error["ranks"], error["kind"]) == (4, [1], "replay_mismatch")
    assert "own micro-batch gave other gradients than its training step" in error["message"]


def test_faulty_matmul_rolls_back_to_the_step_before(results):
    for seen in results["matmul_rollback"]:
        assert seen["error"] is None
        assert seen["detections"] == [[4, [2], "replay_mismatch"]]
        assert seen["equal_to_reference"]


def test_faulty_matmul_on_two_ranks_is_named_by_the_known_answer_test(results):
    members = [r for r, result in enumerate(results["matmul_pair"]) if result["member"]]
    assert members == [0, 1]
    outsider = results["matmul_pair"][2]                    # rank 2 is outside the group and trains nothing
    assert outsider["error"] is None
    assert "SDCMonitor(): this process (global rank 2) is not a member of the group [0, 1]" in outsider["outsider"]
    error = error_everywhere(results, "matmul_pair", members)
    assert (error["step"], error["ranks"], error["kind"]) == (3, [1], "replay_mismatch")
    assert "known-answer" in error["message"]


@pytest.mark.parametrize("scenario,step,rank,kind", [("nan", 3, 0, "nonfinite_loss"), ("spike", 30, 2, "loss_spike")])
def test_numeric_guards_name_step_and_rank(results, scenario, step, rank, kind):
    error = error_everywhere(results, scenario)
    assert (error["step"], error["ranks"], error["parameter"], error["kind"]) == (step, [rank], None, kind)


def test_clean_training_has_no_false_positive_and_is_undisturbed(results):
    for seen in results["clean"]:
        assert seen == {"error": None, "steps": CLEAN_STEPS, "equal_to_unmonitored": True}


def test_rollback_restores_the_last_good_state_and_excludes_the_rank(results):
    for seen in results["rollback"]:
        assert seen["error"] is None
        assert seen["detections"] == [[6, [1], "_layers.0.weight", "changed_between_steps"]]
        assert seen["equal_to_reference"] and seen["replicas_equal"]
    error = error_everywhere(results, "strikes")
    assert (error["step"], error["ranks"], error["kind"]) == (3, [0], "repeated")
