"""`oarlock checkpoint info | verify | merge`, run as a user runs it (a subprocess of the installed command)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "oarlock.cli", "checkpoint", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def checkpoint(tmp_path):
    rng = np.random.default_rng(2)
    weights = {"layer.w": oarlock.to_tensor(rng.standard_normal((64, 32)).astype(np.float32)),
               "layer.b": oarlock.zeros([32], dtype="bfloat16")}
    dist.save_state_dict({"model": weights, "step": 7}, tmp_path / "ckpt")
    dist.save_state_dict({"model": weights, "step": 8}, tmp_path / "ckpt")
    (tmp_path / "ckpt" / "0_2.safetensors.0123456789ab.tmp").write_bytes(b"partial")
    return tmp_path / "ckpt", weights


def test_info_lists_ids_interrupted_saves_and_tensors(checkpoint):
    path, _ = checkpoint
    done = _cli("info", path, "--tensors")
    assert done.returncode == 0, done.stderr
    assert "complete ids [0, 1]; interrupted saves [2] (2: 0_2.safetensors.0123456789ab.tmp)" in done.stdout
    assert "checkpoint 1 in" in done.stdout and "saved by 1 rank(s), 2 tensors, 8.26 KB" in done.stdout
    assert "model.layer.w  float32       [64, 32]" in done.stdout and "step           = 8" in done.stdout
    assert "note: oarlock checkpoint info: loading checkpoint 1" in done.stderr
    assert "checkpoint 0 in" in _cli("info", path, "--id", 0).stdout


def test_verify_passes_then_names_a_damaged_shard(checkpoint):
    path, _ = checkpoint
    done = _cli("verify", path)
    assert done.returncode == 0 and "read 2 shard(s), 8.26 KB from 1 file(s)" in done.stdout
    assert "all checksums match" in done.stdout
    data = bytearray((path / "0_1.safetensors").read_bytes())
    data[-10] ^= 0x40
    (path / "0_1.safetensors").write_bytes(bytes(data))
    done = _cli("verify", path, "--id", 1)
    assert done.returncode == 1
    assert "FAILED 'model.layer.b' in 0_1.safetensors (offset [0]): stored" in done.stdout   # the last bytes
    assert "1 shard(s) FAILED" in done.stdout
    assert _cli("verify", path, "--id", 0).returncode == 0   # the other checkpoint is untouched


def test_merge_writes_a_directory_the_safetensors_library_reads(checkpoint, tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path, weights = checkpoint
    done = _cli("merge", path, tmp_path / "hf", "--prefix", "model", "--id", 0)
    assert done.returncode == 0, done.stderr
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == ["layer.b", "layer.w"]
    merged = st.load_file(str(tmp_path / "hf" / "model-00001-of-00001.safetensors"))
    np.testing.assert_array_equal(merged["layer.w"], weights["layer.w"].numpy())


def test_errors_and_help(tmp_path):
    done = _cli("info", tmp_path / "nowhere")
    assert done.returncode == 2 and "oarlock checkpoint info: no checkpoint at" in done.stderr
    done = _cli("verify", tmp_path, "--id", 3)
    assert done.returncode == 2 and "holds no checkpoint" in done.stderr
    done = _cli("--help")
    assert done.returncode == 0 and all(action in done.stdout for action in ("info", "verify", "merge"))
