"""Damaged FlexCheckpoints: a load is all or nothing, and `oarlock checkpoint verify` reports.

A bit flipped at 25 offsets of each file kind (safetensors and pickle .distcp data files, header
region included, and the JSON metadata), loaded the same way, resharded, and through AoA (a
transpose and a cast): the load either gives the saved values bit for bit or raises an error naming
the damaged file and leaves every target tensor bit for bit as it was. Loads run one shard per round
(a tiny OARLOCK_CHECKPOINT_ROUND_BYTES), so a damaged shard is met after others were read. A 2-rank
job damages one rank's file only: both ranks raise, neither rank's tensors change.

Every flip in a safetensors file or the metadata is detected. Some flips in a .distcp file are not,
and load the right values: bytes the unpickler does not use for the values (the protocol number, the
advisory frame length, the record-kind name "numpy.ndarray" of arrays read as numpy).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flex_damage import flip_points, flipped, tensor_bits

import oarlock
import oarlock.distributed as dist
from oarlock.cli import main as cli

JOB = Path(__file__).parent / "scripts" / "flex_damage_job.py"
SUFFIX = {"safetensors": ".safetensors", "pickle": ".distcp"}
AOA = {"aoa_statements": ["a -> at, permute='[1,0]'", "b -> b2, dtype='float32'"]}


def _saved_arrays() -> dict:
    rng = np.random.default_rng(16)
    return {"a": rng.standard_normal((16, 8)).astype(np.float32),
            "b": oarlock.to_tensor(rng.standard_normal(8).astype(np.float32)).astype("bfloat16").numpy(),
            "c": rng.integers(-2**40, 2**40, 5), "d": rng.standard_normal((3, 3))}


def _save(directory: Path, data_format: str) -> dict:
    arrays = _saved_arrays()
    dist.save_state_dict({**{k: oarlock.to_tensor(v) for k, v in arrays.items()}, "step": 3}, directory,
                         safetensors=data_format == "safetensors")
    return arrays


def _sentinel(shape, dtype: str, seed: int):
    """A tensor of values no checkpoint here holds, so any write into it shows."""
    return oarlock.to_tensor(np.full(shape, 7 + seed)).astype(dtype)


def _targets(mode: str, saved: dict) -> tuple:
    """(state dict to load into, {key: the values a right load gives}) for each way of loading."""
    if mode == "same":
        state = {k: _sentinel(v.shape, oarlock.to_tensor(v).dtype.name, i) for i, (k, v) in enumerate(saved.items())}
        return state, dict(saved)
    if mode == "resharded":   # boxes of the saved tensors: pieces are cut out of the shards read
        state = {"a": dist.ShardedWeight("a", _sentinel([6, 8], "float32", 0), (6, 8), (16, 8), (5, 0)),
                 "d": dist.ShardedWeight("d", _sentinel([3, 2], "float64", 1), (3, 2), (3, 3), (0, 1)),
                 "c": dist.ShardedWeight("c", _sentinel([2], "int64", 2), (2,), (5,), (3,))}
        return state, {"a": saved["a"][5:11], "d": saved["d"][:, 1:], "c": saved["c"][3:]}
    state = {"at": _sentinel([8, 16], "float32", 0), "b2": _sentinel([8], "float32", 1), "d": _sentinel([3, 3],
                                                                                                        "float64", 2)}
    return state, {"at": saved["a"].T, "b2": saved["b"].astype(np.float32), "d": saved["d"]}


def _load(mode: str, state: dict, directory: Path) -> None:
    dist.load_state_dict(state, directory, aoa_config=AOA if mode == "aoa" else None)


@pytest.mark.parametrize("data_format", ["safetensors", "pickle"])
def test_a_flipped_bit_loads_the_saved_values_or_raises_naming_the_file_and_changes_nothing(
        tmp_path, monkeypatch, data_format):
    monkeypatch.setenv("OARLOCK_CHECKPOINT_ROUND_BYTES", "64")   # a round per shard
    saved = _save(tmp_path, data_format)
    undetected = []
    for path in (tmp_path / f"0_0{SUFFIX[data_format]}", tmp_path / "0.metadata"):
        for offset, bit in flip_points(path):
            with flipped(path, offset, bit):
                for mode in ("same", "resharded", "aoa"):
                    state, expected = _targets(mode, saved)
                    before, case = tensor_bits(state), f"{path.name} byte {offset} bit {bit}, {mode} load"
                    try:
                        _load(mode, state, tmp_path)
                    except ValueError as exc:
                        assert path.name in str(exc), f"{case}: the error names no file: {exc}"
                        assert tensor_bits(state) == before, f"{case}: the failed load changed target tensors"
                    else:
                        assert tensor_bits(state) == {k: np.ascontiguousarray(v).tobytes() for k, v in
                                                      expected.items()}, f"{case}: loaded wrong values"
                        if mode == "same":   # the other loads leave some tensors unread, and their flips unseen
                            undetected.append((path.name, offset, bit))
    assert {name for name, _, _ in undetected} <= ({"0_0.distcp"} if data_format == "pickle" else set()), undetected
    assert len(undetected) <= 8, f"most flips must be detected, {len(undetected)} of 25 were not"


def _verify(directory: Path, capsys) -> tuple:
    code = cli(["checkpoint", "verify", str(directory)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return code, out.out, out.err


@pytest.mark.parametrize("data_format", ["safetensors", "pickle"])
def test_verify_reports_every_damaged_shard_with_its_file_and_reason(tmp_path, capsys, data_format):
    saved = _save(tmp_path, data_format)
    path = tmp_path / f"0_0{SUFFIX[data_format]}"
    missed = 0
    for offset, bit in flip_points(path):
        with flipped(path, offset, bit):
            code, out, err = _verify(tmp_path, capsys)
            if code == 0:   # a flip the format cannot see: a load then gives the saved values
                assert "all checksums match" in out
                state, expected = _targets("same", saved)
                _load("same", state, tmp_path)
                assert tensor_bits(state) == {k: v.tobytes() for k, v in expected.items()}
                missed += 1
                continue
            failed = [line for line in out.splitlines() if line.startswith("FAILED")]
            assert code == 1 and failed and f"{len(failed)} shard(s) FAILED" in out, (offset, bit, out, err)
            for line in failed:   # FAILED 'a' in 0_0.distcp (offset [0, 0]): <reason>
                assert line.startswith("FAILED '") and f" in {path.name} (offset [" in line, line
                assert len(line.split("): ", 1)[1]) > 10, f"no reason given: {line}"
    assert missed <= (8 if data_format == "pickle" else 0)


def test_verify_reports_truncated_files_and_damaged_metadata(tmp_path, capsys):
    _save(tmp_path, "pickle")
    path = tmp_path / "0_0.distcp"
    data = path.read_bytes()
    path.write_bytes(data[:-100])
    code, out, _ = _verify(tmp_path, capsys)
    assert code == 1 and out.count("in 0_0.distcp (offset ") == 4 and "4 shard(s) FAILED" in out
    assert f"the file has {len(data) - 100} bytes, expected {len(data)}" in out
    path.write_bytes(data)
    meta = tmp_path / "0.metadata"
    meta.write_bytes(meta.read_bytes().replace(b'"bytes":', b'"bytez":', 1))
    code, out, _ = _verify(tmp_path, capsys)
    assert code == 1 and f"FAILED {meta}: fails its CRC-32 check" in out


def test_the_installed_command_reports_a_damaged_distcp_without_a_traceback(tmp_path):
    _save(tmp_path, "pickle")
    path = tmp_path / "0_0.distcp"
    with flipped(path, 12, 3):   # the pickle's opening records: nothing can be unpickled
        done = subprocess.run([sys.executable, "-m", "oarlock.cli", "checkpoint", "verify", str(tmp_path)],
                              capture_output=True, text=True, timeout=120)
        with pytest.raises(ValueError, match=r"load_state_dict\(\): '.*0_0\.distcp' cannot be unpickled"):
            dist.load_state_dict({"a": oarlock.zeros([16, 8])}, tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "FAILED 'a' in 0_0.distcp (offset [0, 0]): cannot be unpickled" in done.stdout


def test_two_ranks_both_raise_and_keep_their_tensors_when_one_ranks_file_is_damaged(tmp_path):
    pytest.importorskip("mpi4py")
    mpiexec = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    report = tmp_path / "report"
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, str(JOB), str(tmp_path / "ckpt"), str(report)],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="120", PYTHONWARNINGS="ignore"))
    reports = []
    for rank in range(2):
        path = Path(f"{report}.{rank}.json")
        assert path.exists(), f"rank {rank} wrote no report (exit {done.returncode}):\n{done.stderr[-3000:]}"
        reports.append(json.loads(path.read_text()))
    assert done.returncode == 0, done.stderr[-3000:]
    for rank, r in enumerate(reports):
        assert not r["errors"], f"rank {rank}: {r['errors']}"
        assert len(r["cases"]) == 8
        for case in r["cases"]:
            assert case["raised"] is not None, f"rank {rank}, {case['name']}: the load did not fail"
            assert case["file"] in case["raised"], f"rank {rank}, {case['name']}: {case['raised']}"
            assert case["unchanged"], f"rank {rank}, {case['name']}: the failed load changed this rank's tensors"
