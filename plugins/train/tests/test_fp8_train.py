"""`oarlock train --fp8`: the GPT's linears become Fp8Linear under the chosen recipe; a short blockwise run is
deterministic, resumes to the same losses, and stays near the float32 run's losses; delayed and current train
too; the options that do not fit together are refused with the option named; --help lists them."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from oarlock_train import command

SMALL = ["--steps", "4", "--eval-every", "2", "--batch-size", "4", "--seq-len", "32", "--seed", "1",
         "--sample-len", "0"]


def _losses(out, *extra):
    assert command.main([*SMALL, "--out", str(out), *extra]) == 0
    with open(os.path.join(out, "trainer.json")) as fh:
        state = json.load(fh)
    return state["config"], np.array(state["history"]["train"]), state["history"]["valid"][-1][1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("fp8")
    return {name: (*_losses(base / name, *extra), base / name) for name, extra in (
        ("fp32", ()), ("blockwise", ("--fp8",)), ("delayed", ("--fp8", "--fp8-recipe", "delayed")))}


def test_fp8_runs_stay_near_float32_and_record_the_recipe(runs):
    _, fp32, fp32_valid, _ = runs["fp32"]
    for name in ("blockwise", "delayed"):
        config, losses, valid, _ = runs[name]
        assert config["fp8"] == name
        assert not np.array_equal(losses, fp32)                      # the GEMMs really ran in FP8
        assert abs(losses[0] - fp32[0]) < 0.01 * fp32[0]              # the same weights: only the forward differs
        assert abs(valid - fp32_valid) < 0.03 * fp32_valid            # after 4 steps of a fast warmup-free schedule
    assert runs["fp32"][0]["fp8"] is None


def test_blockwise_run_resumes_to_the_same_losses(runs, tmp_path):
    assert command.main([*SMALL, "--out", str(tmp_path), "--fp8", "--stop-after", "2"]) == 0
    _, losses, _ = _losses(tmp_path, "--fp8", "--resume")
    np.testing.assert_array_equal(losses, runs["blockwise"][1])


@pytest.mark.parametrize("extra, message", [
    (["--fp8-recipe", "delayed"], "argument --fp8-recipe: got delayed, but FP8 is off; it needs --fp8"),
    (["--fp8", "--fp8-recipe", "delayed", "--recompute"], "argument --fp8-recipe delayed: not with --recompute"),
    (["--fp8", "--nproc", "2"], "argument --fp8: one process only"),
])
def test_options_that_do_not_fit_are_refused(extra, message, tmp_path, capsys):
    assert command.main([*SMALL, "--out", str(tmp_path), *extra]) == 2
    assert message in capsys.readouterr().err


def test_resume_refuses_another_precision(runs, capsys):
    assert command.main([*SMALL, "--out", str(runs["blockwise"][3]), "--resume"]) == 2
    assert "--fp8: checkpoint 'blockwise', now None" in capsys.readouterr().err


def test_help_lists_the_fp8_options():
    proc = subprocess.run([sys.executable, "-m", "oarlock.cli", "train", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--fp8 " in proc.stdout and "--fp8-recipe {blockwise,delayed,current}" in proc.stdout
