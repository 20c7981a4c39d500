"""Paddle 3.2's own FlexCheckpoint layout in one process, against the installed Paddle: what
paddle.distributed.save_state_dict writes loads in oarlock bit for bit (whole and resharded into other
boxes); what save_state_dict(format="paddle") writes is Paddle's metadata byte for byte and loads in
Paddle's load_state_dict; hostile metadata pickles are refused before anything runs.
(test_paddle_flex_distributed.py runs the same exchange on 2 ranks of each framework.)"""

from __future__ import annotations

import pickle
import subprocess
import sys

import numpy as np
import pytest

import hostile_pickles as hostile
import oarlock
import oarlock.distributed as odist
from oarlock_checkpoint.flex import paddle_format
from oarlock_checkpoint.flex.datafile import DamagedFile

paddle = pytest.importorskip("paddle")

MODULE = paddle_format.MODULE


def _values() -> dict:
    """{nested key: numpy array} of every dtype Paddle's CPU build holds; bfloat16 as its uint16 bits."""
    rng = np.random.default_rng(3)
    return {"model": {"w": rng.standard_normal((4, 6)).astype(np.float32),
                      "emb": rng.integers(0, 2**16, (6, 4), dtype=np.uint16),
                      "half": rng.standard_normal(5).astype(np.float16),
                      "b": rng.standard_normal(6)},
            "opt": {"step": np.array(7, np.int64), "mask": rng.integers(0, 2, (2, 3)).astype(bool),
                    "ids": rng.integers(-9, 9, (3,), dtype=np.int32),
                    "c": (rng.standard_normal(2) + 1j).astype(np.complex64)}}


def _walk(tree, fn, path=()):
    return {k: _walk(v, fn, (*path, k)) if isinstance(v, dict) else fn(path + (k,), v) for k, v in tree.items()}


def _ours(path, array, zero=False):
    values = np.zeros_like(array) if zero else array
    return oarlock.to_tensor(values.view(oarlock.bfloat16.np) if path[-1] == "emb" else values)


def _same(tensor, array, path):
    got = tensor.numpy()
    want_dtype = "bfloat16" if path[-1] == "emb" else str(array.dtype)
    assert tensor.dtype.name == want_dtype and got.tobytes() == array.tobytes(), path


@pytest.fixture
def paddle_checkpoint(tmp_path):
    """A single-rank checkpoint written by paddle.distributed.save_state_dict, and its Paddle state dict."""
    state = _walk(_values(), lambda path, a: paddle.to_tensor(a))
    paddle.distributed.save_state_dict(state, str(tmp_path / "paddle"))
    return tmp_path / "paddle", state


def test_a_paddle_checkpoint_loads_bit_for_bit(paddle_checkpoint):
    directory, _ = paddle_checkpoint
    assert sorted(p.name for p in directory.iterdir()) == ["0.metadata", "0_0.distcp"]
    target = _walk(_values(), lambda path, a: _ours(path, a, zero=True))
    odist.load_state_dict(target, directory)
    _walk(_values(), lambda path, a: _same(target[path[0]][path[1]], a, path))


def test_a_paddle_checkpoint_of_safetensors_files_loads(tmp_path):
    """save_state_dict(..., safetensors=True) writes safetensors content under the .distcp names."""
    state = {"w": _values()["model"]["w"], "emb": _values()["model"]["emb"]}
    paddle.distributed.save_state_dict({k: paddle.to_tensor(v) for k, v in state.items()}, str(tmp_path),
                                       safetensors=True)
    assert (tmp_path / "0_0.distcp").read_bytes()[8:9] == b"{"   # a safetensors header, not a pickle
    target = {"w": oarlock.zeros([4, 6]), "emb": oarlock.zeros([6, 4], "bfloat16")}
    odist.load_state_dict(target, tmp_path)
    _same(target["w"], state["w"], ("w",))
    _same(target["emb"], state["emb"], ("emb",))


def test_a_paddle_checkpoint_loads_into_other_boxes(paddle_checkpoint):
    """Resharding in one process: ShardedWeights of parts of the saved tensors."""
    directory, _ = paddle_checkpoint
    values = _values()
    w, emb = values["model"]["w"], values["model"]["emb"]
    target = {"model.w": odist.ShardedWeight("model.w", oarlock.zeros([4, 2]), (4, 2), (4, 6), (0, 3)),
              "model.emb": odist.ShardedWeight("model.emb", oarlock.zeros([3, 4], "bfloat16"), (3, 4), (6, 4),
                                               (3, 0))}
    odist.load_state_dict(target, directory)
    assert target["model.w"].local_tensor.numpy().tobytes() == w[:, 3:5].tobytes()
    assert target["model.emb"].local_tensor.numpy().tobytes() == emb[3:].tobytes()


def test_oarlock_writes_paddles_bytes_and_paddle_loads_them(tmp_path, paddle_checkpoint, monkeypatch):
    """The metadata is Paddle's byte for byte; the data file too once the Tensors have Paddle's names
    (the only thing that differs); Paddle's load_state_dict reads it."""
    theirs, paddle_state = paddle_checkpoint
    names = {}
    _walk(paddle_state, lambda path, t: names.setdefault(path, t.name))

    def named(path, array):
        tensor = _ours(path, array)
        tensor.name = names[path]
        return tensor

    odist.save_state_dict(_walk(_values(), named), tmp_path / "ours", format="paddle")
    ours = tmp_path / "ours"
    assert sorted(p.name for p in ours.iterdir()) == ["0.metadata", "0_0.distcp"]
    assert (ours / "0.metadata").read_bytes() == (theirs / "0.metadata").read_bytes()
    assert (ours / "0_0.distcp").read_bytes() == (theirs / "0_0.distcp").read_bytes()
    # Paddle's loader moves CPU targets to the GPU and back (.cuda()); this CPU build has none
    monkeypatch.setattr(paddle.Tensor, "cuda", lambda self, *a, **k: self)
    target = _walk(_values(), lambda path, a: paddle.to_tensor(np.zeros_like(a)))
    paddle.distributed.load_state_dict(target, str(ours))
    for path, array in [((a, b), v) for a, inner in _values().items() for b, v in inner.items()]:
        tensor = target[path[0]][path[1]]
        assert tensor.numpy().tobytes() == array.tobytes(), path
        assert str(tensor.dtype) == f"paddle.{'bfloat16' if path[1] == 'emb' else array.dtype}", path


def test_oarlock_paddle_checkpoints_load_back_in_oarlock(tmp_path):
    source = _walk(_values(), _ours)
    odist.save_state_dict(source, tmp_path, format="paddle")
    target = _walk(_values(), lambda path, a: _ours(path, a, zero=True))
    odist.load_state_dict(target, tmp_path)
    _walk(_values(), lambda path, a: _same(target[path[0]][path[1]], a, path))


@pytest.mark.parametrize("state, options, error, message", [
    ({"w": oarlock.ones([2]), "step": 3}, {}, TypeError,
     r"format='paddle' holds only Tensors and ShardedWeights .* but 'step' is a plain value"),
    ({"w": oarlock.ones([2])}, {"safetensors": True}, ValueError,
     r"format='paddle' writes Paddle's pickled .distcp files .*; pass safetensors=False or None"),
    ({"w": oarlock.ones([2])}, {"format": "torch"}, ValueError,
     r"format must be one of \['oarlock', 'paddle'\], got 'torch'"),
])
def test_what_paddles_layout_cannot_hold_is_refused(tmp_path, state, options, error, message):
    with pytest.raises(error, match=r"save_state_dict\(\): " + message):
        odist.save_state_dict(state, tmp_path, **{"format": "paddle", **options})
    assert not any(tmp_path.iterdir())


def test_missing_data_file_is_named(paddle_checkpoint):
    directory, _ = paddle_checkpoint
    (directory / "0_0.distcp").unlink()
    with pytest.raises(DamagedFile, match=r"data file .*0_0.distcp' of Paddle checkpoint 0 in .* is missing"):
        odist.load_state_dict({"model": {"w": oarlock.zeros([4, 6])}}, directory)


def test_the_checkpoint_command_reads_paddle_checkpoints(paddle_checkpoint):
    """`oarlock checkpoint info` / `verify` on Paddle's checkpoints: no checksums to claim; a damaged data
    file is named."""
    directory, _ = paddle_checkpoint
    cli = [sys.executable, "-m", "oarlock.cli", "checkpoint"]
    info = subprocess.run([*cli, "info", str(directory)], capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert "Paddle checkpoint 0 in" in info.stdout and "8 tensors" in info.stdout and "no checksums" in info.stdout
    data = (directory / "0_0.distcp").read_bytes()
    (directory / "0_0.distcp").write_bytes(data[:len(data) // 2])
    verify = subprocess.run([*cli, "verify", str(directory)], capture_output=True, text=True, timeout=120)
    assert verify.returncode == 1 and "FAILED 'model.w' in 0_0.distcp" in verify.stdout, verify.stdout + verify.stderr
    assert "cannot be unpickled" in verify.stdout


# -- hostile metadata ------------------------------------------------------------------------------------
def _text(s: str) -> bytes:
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


def _cls(name: str) -> bytes:
    return _text(MODULE) + _text(name) + b"\x93"


def _metadata(**fields) -> bytes:
    """Paddle's pickling of a Metadata (our spelling of its classes) with the given fields."""
    return paddle_format.dumps(paddle_format.Metadata(**fields))


def _good_fields() -> dict:
    entry = paddle_format.LocalTensorMetadata((0,), (2,), "float32", (2,))
    return {"state_dict_metadata": {"w": [entry]},
            "storage_metadata": {paddle_format.LocalTensorIndex("w", (0,)): "0_0.distcp"},
            "flat_mapping": {"w": ("w",)}}


def _hostile_cases(sentinel_path: str) -> dict:  # noqa: ARG001 - the payloads read hostile.SENTINEL
    """name: (metadata bytes, what the refusal says)."""
    evil = pickle.dumps(hostile.Reduce(hostile.touch, ()), protocol=4)
    good = _good_fields()
    return {
        # a payload where Paddle's metadata holds plain values: Paddle's own pickle.load would run it
        "code in flat_mapping": (_metadata(**{**good, "flat_mapping": hostile.Reduce(hostile.touch, ())}),
                                 "refused to unpickle the global hostile_pickles.touch"),
        "another global of Paddle's module": (b"\x80\x04" + _text(MODULE) + _text("os") + b"\x93)\x81.",
                                              f"refused to unpickle the global {MODULE}.os"),
        "Metadata called with arguments": (b"\x80\x04" + _cls("Metadata") + b"K\x01\x85\x81.",
                                           f"a call (NEWOBJ) of {MODULE}.Metadata other than creating it empty"),
        "LocalTensorIndex by REDUCE": (b"\x80\x04" + _cls("LocalTensorIndex") + _text("w") + b")\x86R.",
                                       f"a call (REDUCE) of {MODULE}.LocalTensorIndex other than creating it empty"),
        "BUILD with a foreign field": (b"\x80\x04" + _cls("Metadata") + b")\x81}" + _text("__class__") + b"K\x01sb.",
                                       f"BUILD of {MODULE}.Metadata with a state other than a dict of its fields"),
        "BUILD with a non-dict state": (b"\x80\x04" + _cls("Metadata") + b")\x81]b.",
                                        f"BUILD of {MODULE}.Metadata with a state other than a dict of its fields"),
        "plain pickle's payload": (evil, "refused to unpickle the global hostile_pickles.touch"),
    }


@pytest.mark.parametrize("name", list(_hostile_cases("x")))
def test_hostile_metadata_is_refused_before_anything_runs(tmp_path, monkeypatch, name):
    sentinel = tmp_path / "payload-ran"
    monkeypatch.setattr(hostile, "SENTINEL", str(sentinel))
    data, says = _hostile_cases(str(sentinel))[name]
    odist.save_state_dict({"w": oarlock.ones([2])}, tmp_path / "ck", format="paddle")
    (tmp_path / "ck" / "0.metadata").write_bytes(data)
    with pytest.raises(DamagedFile, match="is not readable Paddle FlexCheckpoint metadata") as refused:
        odist.load_state_dict({"w": oarlock.zeros([2])}, tmp_path / "ck")
    assert str(tmp_path / "ck" / "0.metadata") in str(refused.value) and says in str(refused.value)
    assert not sentinel.exists(), "the payload ran"


def test_hostile_flat_mapping_runs_under_plain_pickle(tmp_path, monkeypatch):
    """The first case is a working exploit of an unrestricted loader: plain pickle (as paddle.load uses)
    imports Paddle's real Metadata and runs the payload."""
    sentinel = tmp_path / "payload-ran"
    monkeypatch.setattr(hostile, "SENTINEL", str(sentinel))
    data, _ = _hostile_cases(str(sentinel))["code in flat_mapping"]
    pickle.loads(data)
    assert sentinel.exists()


@pytest.mark.parametrize("fields, says", [
    ({"state_dict_metadata": {"w": [paddle_format.LocalTensorMetadata((0,), (2,), "object", (2,))]}},
     "dtype 'object'"),
    ({"state_dict_metadata": {"w": [paddle_format.LocalTensorMetadata((0,), (2,), "float32", (2,))]},
      "storage_metadata": {paddle_format.LocalTensorIndex("w", (0,)): "../../etc/0_0.distcp"}},
     "storage_metadata maps LocalTensorIndex(tensor_key='w', global_offset=(0,)) to '../../etc/0_0.distcp'"),
    ({"state_dict_metadata": {"w": [paddle_format.LocalTensorMetadata((-1,), (2,), "float32", (2,))]}},
     "has offset (-1,)"),
    ({"state_dict_metadata": {"w": "x"}}, "state_dict_metadata['w'] must be a non-empty list"),
    ({"state_dict_metadata": {"w": [paddle_format.LocalTensorMetadata((1,), (2,), "float32", (2,))]},
      "storage_metadata": {paddle_format.LocalTensorIndex("w", (1,)): "0_0.distcp"}},
     "places a box of 'w' at offset [1] with shape [2], outside its global shape [2]"),
    ({"storage_metadata": [1]}, "state_dict_metadata and storage_metadata must be dicts"),
])
def test_malformed_metadata_is_a_clear_error(tmp_path, fields, says):
    odist.save_state_dict({"w": oarlock.ones([2])}, tmp_path, format="paddle")
    (tmp_path / "0.metadata").write_bytes(_metadata(**{**_good_fields(), **fields}))
    with pytest.raises(DamagedFile, match="is not Paddle FlexCheckpoint metadata|the metadata is damaged") as error:
        odist.load_state_dict({"w": oarlock.zeros([2])}, tmp_path)
    assert says in str(error.value)


def test_paddles_flex_checkpoint_modules_resolve_under_the_paddle_alias(paddle_checkpoint):
    """Model code imports from paddle.distributed.flex_checkpoint.dcp.*; with `paddle` aliased to oarlock
    those are oarlock's, and full pickle of Paddle's metadata finds its classes there."""
    directory, _ = paddle_checkpoint
    with oarlock.compat.paddle_alias():
        from paddle.distributed.flex_checkpoint.dcp.load_state_dict import load_state_dict
        from paddle.distributed.flex_checkpoint.dcp.metadata import Metadata
        from paddle.distributed.flex_checkpoint.dcp.save_state_dict import save_state_dict
        from paddle.distributed.flex_checkpoint.dcp.sharded_weight import ShardedWeight
        import paddle as aliased
        loaded = aliased.load(str(directory / "0.metadata"), weights_only=False)
    assert (load_state_dict, save_state_dict, ShardedWeight) == (odist.load_state_dict, odist.save_state_dict,
                                                               odist.ShardedWeight)
    assert type(loaded) is Metadata is paddle_format.Metadata
    assert loaded == paddle_format.read_metadata(str(directory / "0.metadata"), "test")
