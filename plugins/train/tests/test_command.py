"""`oarlock train`: help, option errors, a deterministic 20-step run with its outputs, and --resume.

Runs use --batch-size 4 --seq-len 32 so that 20 steps of the full-width model take a few seconds, and
dropout, so that equal losses also show that dropout draws from the seeded (and checkpointed) generators.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest

from oarlock_train import command

SMALL = ["--steps", "20", "--eval-every", "10", "--batch-size", "4", "--seq-len", "32", "--seed", "3",
         "--sample-len", "20", "--dropout", "0.1"]


def train(out, *extra):
    assert command.main([*SMALL, "--out", str(out), *extra]) == 0
    with open(os.path.join(out, "trainer.json")) as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("reference")
    return out, train(out)


def test_run_is_deterministic_and_writes_its_outputs(reference, tmp_path):
    out, state = reference
    for name in ("model.safetensors", "optimizer.pdopt", "trainer.json", "loss.png", "sample.txt"):
        assert os.path.getsize(out / name) > 0, name
    assert state["step"] == 20 and len(state["history"]["train"]) == 20
    assert [step for step, _ in state["history"]["valid"]] == [10, 20]
    assert (out / "sample.txt").read_text().startswith("The ")
    again = train(tmp_path / "again")
    assert again["history"] == state["history"]  # exact: same seed, same losses
    other = train(tmp_path / "other", "--seed", "4", "--steps", "2", "--sample-len", "0")
    assert other["history"]["train"][0] != state["history"]["train"][0]  # the seed reaches initialisation


def test_resume_continues_exactly(reference, tmp_path):
    _, state = reference
    first = train(tmp_path, "--stop-after", "10")
    assert first["step"] == 10
    resumed = train(tmp_path, "--resume")
    assert resumed["step"] == 20
    assert resumed["history"] == state["history"]


def test_no_document_mask_trains_plain_causal_attention(tmp_path):
    short = ["--steps", "3", "--eval-every", "3", "--sample-len", "0"]
    masked = train(tmp_path / "masked", *short)
    plain = train(tmp_path / "plain", *short, "--no-document-mask")
    assert masked["config"]["document_mask"] is True and plain["config"]["document_mask"] is False
    # the validation split certainly has separators inside rows, so the mask changes its loss
    assert masked["history"]["valid"] != plain["history"]["valid"]


def test_resume_refuses_other_options_or_a_missing_checkpoint(reference, tmp_path, capsys):
    out, _ = reference
    assert command.main([*SMALL, "--out", str(out), "--resume", "--lr", "0.01"]) == 2
    assert "--lr: checkpoint 0.006, now 0.01" in capsys.readouterr().err
    assert command.main([*SMALL, "--out", str(out), "--resume", "--no-document-mask"]) == 2
    assert "--no-document-mask: checkpoint False, now True" in capsys.readouterr().err
    assert command.main([*SMALL, "--out", str(tmp_path / "empty"), "--resume"]) == 2
    assert "no checkpoint" in capsys.readouterr().err


class _Planted:
    """Pickles as builtins.open(path, "w"): unpickling it creates `path`."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def test_resume_refuses_a_planted_optimizer_file(reference, tmp_path, capsys):
    """optimizer.pdopt is a pickle: one that names code to run is refused (a usage error naming the file
    and the code) and the code does not run."""
    out, sentinel = tmp_path / "run", tmp_path / "payload-ran"
    shutil.copytree(reference[0], out)
    # what someone with write access to --out could leave: a state-dict-shaped pickle with a payload
    planted = {"linear_0.w_0_moment1_0": np.zeros(2, np.float32), "LR_Scheduler": _Planted(str(sentinel))}
    (out / "optimizer.pdopt").write_bytes(pickle.dumps(planted, protocol=4))
    assert command.main([*SMALL, "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and os.path.join(str(out), "optimizer.pdopt") in err, err
    assert "refused to unpickle the global io.open" in err, err
    assert not sentinel.exists(), "the planted payload ran"


@pytest.mark.parametrize("argv, message", [
    (["--steps", "0"], "argument --steps: expected a positive integer, got '0'"),
    (["--batch-size", "x"], "argument --batch-size: expected a positive integer, got 'x'"),
    (["--seq-len", "1"], "argument --seq-len: expected an integer from 2 to 4096, got '1'"),
    (["--lr", "-1"], "argument --lr: expected a positive number, got '-1'"),
    (["--dropout", "1"], "argument --dropout: expected a number in [0, 1), got '1'"),
])
def test_bad_option_values_name_the_option(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        command.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_warmup_and_device_errors(tmp_path, capsys):
    assert command.main(["--steps", "5", "--warmup", "5", "--out", str(tmp_path)]) == 2
    assert "argument --warmup: expected fewer steps than --steps (5)" in capsys.readouterr().err
    assert command.main(["--steps", "5", "--device", "nosuchdevice", "--out", str(tmp_path)]) == 2
    assert "argument --device" in capsys.readouterr().err


def test_help_documents_every_option():
    proc = subprocess.run([sys.executable, "-m", "oarlock.cli", "train", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    for option in ("--steps", "--seed", "--batch-size", "--seq-len", "--out", "--resume", "--device", "--lr",
                   "--eval-every", "--warmup", "--dropout", "--stop-after", "--prompt", "--sample-len", "--top-k",
                   "--no-document-mask", "--log-dir"):
        assert option in proc.stdout, option
    assert f"default {command.DEFAULT_STEPS}" in proc.stdout
    assert "nats per byte" in proc.stdout
