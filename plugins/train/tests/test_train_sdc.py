"""oarlock train --sdc-check: oarlock-resilience's SDCMonitor inside the trainer.

- A bit flipped in one parameter of rank 1 after step 2 (OARLOCK_FAULT_INJECT, the monitor's test switch) stops a
  real 2-rank data-parallel job with SilentDataCorruptionError naming rank 1 and that parameter.
- A clean one-process run with the check on trains to the same losses as without it (the monitor only reads).
- Layouts whose ranks hold parts of the model are refused before any rank starts; the option is in --help.
"""

from __future__ import annotations

import os
import sys

import pytest

from oarlock_train import command

# the launched-run helpers of test_train_parallel (pytest imports test files with importlib: not on sys.path)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_train_parallel import SMALL, one_process, run_launched  # noqa: E402

pytest.importorskip("oarlock_resilience", reason="oarlock-resilience (the SDC monitor) is not installed")
PARAMETER = "blocks.0.attn.qkv.weight"


def test_a_flipped_bit_on_one_rank_stops_the_job_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("OARLOCK_FAULT_INJECT", f"bitflip:rank=1,step=2,param={PARAMETER},bit=20")
    status, stdout, stderr = run_launched(tmp_path / "run", "--nproc", "2", "--sdc-check")
    assert status != 0
    text = stdout + stderr
    assert "SilentDataCorruptionError" in text and "on rank(s) [1]" in text and repr(PARAMETER) in text, text[-3000:]


def test_the_check_does_not_change_a_clean_run(tmp_path, monkeypatch):
    monkeypatch.delenv("OARLOCK_SDC_CHECK", raising=False)
    plain = one_process(tmp_path / "plain")
    checked = one_process(tmp_path / "checked", "--sdc-check", "interval=1")
    monkeypatch.delenv("OARLOCK_SDC_CHECK", raising=False)   # set by the option, for the ranks
    assert checked["train"] == plain["train"]


@pytest.mark.parametrize("argv, split", [(["--nproc", "2", "--mp", "2"], "--mp 2"),
                                         (["--nproc", "2", "--pp", "2"], "--pp 2"),
                                         (["--nproc", "2", "--sharding", "2"], "--sharding 2")])
def test_split_layouts_are_refused_before_any_rank_starts(argv, split, tmp_path, capsys, monkeypatch):
    from oarlock_train import parallel
    monkeypatch.setattr(parallel, "launch", lambda *a: pytest.fail("a rank was started"))
    assert command.main([*SMALL, "--out", str(tmp_path), *argv, "--sdc-check"]) == 2
    err = capsys.readouterr().err
    assert "argument --sdc-check" in err and split in err, err


def test_help_tells_the_option():
    text = command.build_parser().format_help()
    assert "--sdc-check [SPEC]" in text and "SDCMonitor" in text and "OARLOCK_SDC_CHECK" in text
