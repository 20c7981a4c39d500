"""FlexCheckpoint in one process: round trips of every dtype and of nested state dicts with plain
values, checkpoint ids, the errors a user meets, Hugging Face directories made by the safetensors
library, merges that the safetensors library reads back, async saves, and AoA between a
separate-QKV and a fused-QKV (GQA) model giving the same outputs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist
from flex_models import FUSE, SPLIT, Model, fused_state, tokens, trained

SAFETENSORS_DTYPES = ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32",
                      "int16", "int8", "uint8", "bool", "complex64"]


def _zeros_like(state: dict) -> dict:
    return {k: _zeros_like(v) if isinstance(v, dict) else
            oarlock.zeros(v.shape, dtype=v.dtype.name) if isinstance(v, oarlock.Tensor) else None
            for k, v in state.items()}


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# -- round trips -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pickle"])
def test_every_dtype_and_shape_round_trips_bit_for_bit(tmp_path, pattern_array, safetensors):
    names = SAFETENSORS_DTYPES + ([] if safetensors else ["complex128"])
    state = {name: oarlock.to_tensor(pattern_array(name)) for name in names}
    state.update(scalar=oarlock.to_tensor(np.float32(2.5)), empty=oarlock.zeros([0, 3]))
    dist.save_state_dict(state, tmp_path, safetensors=safetensors)
    target = _zeros_like(state)
    dist.load_state_dict(target, tmp_path)
    for key, value in state.items():
        assert _same_bits(target[key].numpy(), value.numpy()), key


def test_nested_state_dicts_and_plain_values_round_trip(tmp_path):
    model, opt = trained()
    scheduler = oarlock.optimizer.lr.StepDecay(learning_rate=0.1, step_size=3)
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "sched": scheduler.state_dict(),
             "epoch": 3, "note": "warm", "flags": [True, None, 1.5]}
    dist.save_state_dict(state, tmp_path)
    target = {"model": _zeros_like(model.state_dict()), "opt": _zeros_like(opt.state_dict()),
              "sched": {k: None for k in scheduler.state_dict()}, "epoch": 0, "note": "", "flags": []}
    dist.load_state_dict(target, tmp_path)
    assert target["epoch"] == 3 and target["note"] == "warm" and target["flags"] == [True, None, 1.5]
    assert target["sched"] == scheduler.state_dict()
    for key, value in opt.state_dict().items():
        expected = value.numpy() if isinstance(value, oarlock.Tensor) else value
        got = target["opt"][key]
        assert _same_bits(got.numpy(), expected) if isinstance(value, oarlock.Tensor) else got == expected, key
    # the loaded optimizer state resumes training exactly like the original
    fresh_model, fresh_opt = Model(), None
    fresh_model.set_state_dict(target["model"])
    fresh_opt = oarlock.optimizer.AdamW(learning_rate=1e-2, parameters=fresh_model.parameters())
    fresh_opt.set_state_dict(target["opt"])
    for m, o in ((model, opt), (fresh_model, fresh_opt)):
        m(tokens(5)).mean().backward()
        o.step()
    for a, b in zip(model.parameters(), fresh_model.parameters()):
        assert _same_bits(a.numpy(), b.numpy())


def test_load_fills_the_given_tensors_in_place(tmp_path):
    saved = {"w": oarlock.to_tensor(np.arange(12, dtype=np.float32).reshape(3, 4))}
    dist.save_state_dict(saved, tmp_path)
    target = oarlock.zeros([3, 4])
    transposed = oarlock.zeros([4, 3]).transpose([1, 0])   # not a plain contiguous buffer: staged, then set
    for t in (target, transposed):
        dist.load_state_dict({"w": t}, tmp_path)
        np.testing.assert_array_equal(t.numpy(), saved["w"].numpy())


def test_a_shard_loads_only_its_box(tmp_path):
    full = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    dist.save_state_dict({"w": oarlock.to_tensor(full)}, tmp_path)
    part = dist.ShardedWeight("w", oarlock.zeros([2, 3]), (2, 3), (6, 5), (3, 1))
    dist.load_state_dict({"w": part}, tmp_path)
    np.testing.assert_array_equal(part.local_tensor.numpy(), full[3:5, 1:4])


# -- ids -----------------------------------------------------------------------------------------------------
def test_ids_count_up_and_the_newest_complete_one_loads(tmp_path):
    for value in (1.0, 2.0, 3.0):
        dist.save_state_dict({"x": oarlock.full([2], value)}, tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["0.metadata", "0_0.safetensors", "0_1.safetensors", "0_2.safetensors",
                                            "1.metadata", "2.metadata"]
    target = oarlock.zeros([2])
    dist.load_state_dict({"x": target}, tmp_path)
    assert target.numpy().tolist() == [3.0, 3.0]
    dist.load_state_dict({"x": target}, tmp_path, unique_id=0)
    assert target.numpy().tolist() == [1.0, 1.0]
    dist.save_state_dict({"x": oarlock.full([2], 9.0)}, tmp_path, unique_id=1)   # overwrite id 1
    dist.load_state_dict({"x": target}, tmp_path, unique_id=1)
    assert target.numpy().tolist() == [9.0, 9.0]


def test_an_interrupted_save_is_rejected_and_the_earlier_one_loads(tmp_path):
    dist.save_state_dict({"x": oarlock.full([2], 1.0)}, tmp_path)
    (tmp_path / "0_1.safetensors").write_bytes(b"partial")   # what a save killed before its metadata leaves
    (tmp_path / "1.metadata.0123456789ab.tmp").write_bytes(b"{")
    with pytest.raises(ValueError, match=r"checkpoint 1 .* is incomplete: its save did not finish .*0_1\.safetensors"):
        dist.load_state_dict({"x": oarlock.zeros([2])}, tmp_path, unique_id=1)
    target = oarlock.zeros([2])
    with pytest.warns(UserWarning, match=r"loading checkpoint 0 .* newer checkpoint\(s\) \[1\] are incomplete"):
        dist.load_state_dict({"x": target}, tmp_path)
    assert target.numpy().tolist() == [1.0, 1.0]
    dist.save_state_dict({"x": oarlock.full([2], 5.0)}, tmp_path)   # the next id skips the broken one
    assert (tmp_path / "2.metadata").exists()
    dist.save_state_dict({"x": oarlock.full([2], 6.0)}, tmp_path, unique_id=1)   # reusing it clears the remains
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.split(".")[0].endswith("1")) == \
        ["0_1.safetensors", "1.metadata"]


# -- damage --------------------------------------------------------------------------------------------------
def _saved(tmp_path):
    state = {"a": oarlock.to_tensor(np.arange(64, dtype=np.float32)), "b": oarlock.ones([4, 4])}
    dist.save_state_dict(state, tmp_path)
    return tmp_path / "0_0.safetensors"


def test_a_flipped_byte_in_a_shard_fails_its_checksum(tmp_path):
    path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x01   # inside the data area, in tensor "a"
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"tensor 'a' in .*0_0\.safetensors' fails its xxh3-64 checksum \(stored "
                                         r"[0-9a-f]{16}, read [0-9a-f]{16}\)"):
        dist.load_state_dict({"a": oarlock.zeros([64]), "b": oarlock.zeros([4, 4])}, tmp_path)


def test_a_truncated_or_missing_file_and_damaged_metadata_are_reported(tmp_path):
    path = _saved(tmp_path)
    data = path.read_bytes()
    target = {"a": oarlock.zeros([64]), "b": oarlock.zeros([4, 4])}
    path.write_bytes(data[:-10])
    with pytest.raises(ValueError, match=r"0_0\.safetensors' of checkpoint 0 .* has \d+ bytes, expected \d+"):
        dist.load_state_dict(target, tmp_path)
    path.unlink()
    with pytest.raises(ValueError, match="is missing"):
        dist.load_state_dict(target, tmp_path)
    path.write_bytes(data)
    meta = tmp_path / "0.metadata"
    meta.write_bytes(meta.read_bytes().replace(b'"bytes":', b'"bytez":', 1))
    with pytest.raises(ValueError, match=r"0\.metadata' fails its CRC-32 check"):
        dist.load_state_dict(target, tmp_path)


# -- errors --------------------------------------------------------------------------------------------------
def test_missing_keys_are_all_named_with_the_way_out(tmp_path):
    dist.save_state_dict({"a": oarlock.ones([2])}, tmp_path)
    with pytest.raises(KeyError, match=r"nothing for 'b', 'd'.*'_ -> key'"):
        dist.load_state_dict({"a": oarlock.zeros([2]), "b": oarlock.zeros([2]), "d": oarlock.zeros([1])}, tmp_path)
    with pytest.raises(KeyError, match=r"has no value for 'c'"):
        dist.load_state_dict({"a": oarlock.zeros([2]), "c": 0}, tmp_path)
    target = {"a": oarlock.zeros([2]), "b": oarlock.full([2], 7.0)}
    dist.load_state_dict(target, tmp_path, aoa_config={"aoa_statements": ["_ -> b"]})
    assert target["a"].numpy().tolist() == [1, 1] and target["b"].numpy().tolist() == [7, 7]


def test_nothing_is_cast_silently(tmp_path):
    dist.save_state_dict({"w": oarlock.to_tensor(np.array([1.5, 2.25], np.float32))}, tmp_path)
    with pytest.raises(TypeError, match=r"'w' is float32 in checkpoint 0 .* but bfloat16 in the state_dict.*"
                                        r"\"w -> w, dtype='bfloat16'\""):
        dist.load_state_dict({"w": oarlock.zeros([2], dtype="bfloat16")}, tmp_path)
    target = oarlock.zeros([2], dtype="bfloat16")
    dist.load_state_dict({"w": target}, tmp_path, aoa_config={"aoa_statements": ["w -> w, dtype='bfloat16'"]})
    assert target.numpy().astype(np.float32).tolist() == [1.5, 2.25]


def test_shape_mismatch_names_the_key(tmp_path):
    dist.save_state_dict({"w": oarlock.ones([2, 3])}, tmp_path)
    with pytest.raises(ValueError, match=r"'w'.*\[2, 3\].*\[3, 2\]|'w'.*\(2, 3\).*\(3, 2\)"):
        dist.load_state_dict({"w": oarlock.zeros([3, 2])}, tmp_path)


@pytest.mark.parametrize("state, message", [
    ([oarlock.ones([1])], "state_dict must be a dict"),
    ({"a": object()}, r"the value for 'a' is a object; a checkpoint holds Tensors"),
    ({1: oarlock.ones([1])}, "every key must be a str"),
    ({"c": oarlock.ones([2], dtype="complex128")}, r"'c' is complex128, which safetensors files cannot hold.*"
                                                   r"safetensors=False"),
])
def test_bad_state_dicts_are_refused_before_anything_is_written(tmp_path, state, message):
    with pytest.raises((TypeError, ValueError), match=message):
        dist.save_state_dict(state, tmp_path / "ckpt")
    assert not (tmp_path / "ckpt").exists() or not os.listdir(tmp_path / "ckpt")


def test_shards_that_do_not_tile_the_tensor_are_refused(tmp_path):
    part = dist.ShardedWeight("w", oarlock.ones([2, 4]), (2, 4), (4, 4), (0, 0))
    with pytest.raises(ValueError, match=r"the shards of 'w' cover 8 of its 16 elements"):
        dist.save_state_dict({"w": part}, tmp_path)


@pytest.mark.parametrize("kwargs, message", [
    (dict(unique_id=-1), "unique_id must be a non-negative int or None, got -1"),
    (dict(unique_id="3"), "unique_id must be a non-negative int or None, got '3'"),
    (dict(coordinator_rank=1), r"coordinator_rank must be a rank of the group, in \[0, 1\), got 1"),
])
def test_bad_save_arguments(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        dist.save_state_dict({"a": oarlock.ones([1])}, tmp_path, **kwargs)


def test_bad_load_paths_and_ids(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        dist.load_state_dict({"a": oarlock.ones([1])}, tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        dist.load_state_dict({"a": oarlock.ones([1])}, tmp_path)
    dist.save_state_dict({"a": oarlock.ones([1])}, tmp_path)
    with pytest.raises(FileNotFoundError, match=r"has no checkpoint 4; complete ids are \[0\]"):
        dist.load_state_dict({"a": oarlock.ones([1])}, tmp_path, unique_id=4)


@pytest.mark.parametrize("args, message", [
    (("w", "tensor", (1,), (1,), (0,)), "local_tensor of 'w' must be an oarlock Tensor, got str"),
    (("w", None, (2,), (4,), (0,)), "must be an oarlock Tensor, got NoneType"),
    (("", oarlock.ones([2]), (2,), (4,), (0,)), "key must be a non-empty str"),
    (("w", oarlock.ones([2]), (3,), (4,), (0,)), r"'w' has local_shape \[3\] but its local_tensor has shape \[2\]"),
    (("w", oarlock.ones([2]), (2,), (4, 1), (0,)), "need one entry per axis"),
    (("w", oarlock.ones([2]), (2,), (4,), (3,)), r"runs past global_shape \[4\] on axis 0"),
    (("w", oarlock.ones([2]), (2,), (4,), (-1,)), "global_offset must hold non-negative ints"),
    (("w", oarlock.ones([2]), 2, (4,), (0,)), "local_shape must be a tuple or list of ints, got 2"),
])
def test_sharded_weight_checks_its_arguments(args, message):
    with pytest.raises((TypeError, ValueError), match=message):
        dist.ShardedWeight(*args)


def test_shard_helpers_follow_paddle():
    w = oarlock.ones([3, 4])
    s = dist.shard_weight("w", w, axis=1)   # one process: the whole tensor is shard 0 of 1
    assert (s.local_shape, s.global_shape, s.global_offset) == ((3, 4), (3, 4), (0, 0))
    built = dist.build_sharded_state_dict({"w": w, "b": oarlock.ones([4])}, {"w": 0}, prefix="m.")
    assert sorted(built) == ["m.b", "m.w"] and built["m.b"].global_shape == (4,)
    with pytest.raises(KeyError, match=r"shard_rules names \['x'\]"):
        dist.build_sharded_state_dict({"w": w}, {"x": 0})
    with pytest.raises(ValueError, match=r"axis for 'w' must be an int in \[-2, 2\)"):
        dist.shard_full_weight("w", w, 2)
    replicated = dist.make_replicated_sharded_weight("w", w)
    assert replicated.global_offset == (0, 0)


# -- Hugging Face directories and merges --------------------------------------------------------------------
def test_a_hugging_face_directory_made_by_safetensors_loads(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(3)
    # a transformers-style checkpoint: "model." prefix and Linear weights stored [out, in]
    hf = {"model.layers.0.proj.weight": rng.standard_normal((5, 3)).astype(np.float32),
          "model.layers.1.proj.weight": rng.standard_normal((5, 3)).astype(np.float32),
          "model.norm.weight": rng.standard_normal(5).astype(np.float16)}
    st.save_file({k: hf[k] for k in list(hf)[:2]}, str(tmp_path / "model-00001-of-00002.safetensors"))
    st.save_file({k: hf[k] for k in list(hf)[2:]}, str(tmp_path / "model-00002-of-00002.safetensors"))
    index = {"metadata": {"total_size": 70}, "weight_map": {k: f"model-0000{1 + (i == 2)}-of-00002.safetensors"
                                                            for i, k in enumerate(hf)}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    target = {"layers.0.proj.weight": oarlock.zeros([3, 5]), "layers.1.proj.weight": oarlock.zeros([3, 5]),
              "norm.weight": oarlock.zeros([5], dtype="float16")}
    aoa = {"aoa_statements": ["model.layers.$LAYER_ID.proj.weight^T -> layers.$LAYER_ID.proj.weight",
                              "model.norm.weight -> norm.weight"]}
    dist.load_state_dict(target, tmp_path, aoa_config=aoa)
    for i in range(2):
        np.testing.assert_array_equal(target[f"layers.{i}.proj.weight"].numpy(), hf[f"model.layers.{i}.proj.weight"].T)
    np.testing.assert_array_equal(target["norm.weight"].numpy(), hf["model.norm.weight"])
    again = _zeros_like(target)   # the same with a prefix-stripping pattern rename, then transposes in place
    dist.load_state_dict(again, tmp_path, aoa_config={"aoa_statements": [
        "model.* -> *", "layers.$LAYER_ID.proj.weight^T -> layers.$LAYER_ID.proj.weight"]})
    assert all(_same_bits(again[k].numpy(), target[k].numpy()) for k in target)
    one = {"model.norm.weight": oarlock.zeros([5], dtype="float16")}   # a single file works too
    dist.load_state_dict(one, tmp_path / "model-00002-of-00002.safetensors")
    np.testing.assert_array_equal(one["model.norm.weight"].numpy(), hf["model.norm.weight"])


@pytest.mark.parametrize("file_num", [1, 3])
def test_merge_writes_what_the_safetensors_library_reads(tmp_path, file_num):
    st = pytest.importorskip("safetensors.numpy")
    model, opt = trained()
    parts = {k: dist.shard_full_weight(f"model.{k}", v, 0) if v.ndim else v for k, v in model.state_dict().items()}
    dist.save_state_dict({"model": parts, "opt": opt.state_dict()}, tmp_path / "ckpt")
    dist.merge_sharded_state_dict(tmp_path / "ckpt", tmp_path / "hf", prefix="model", file_num=file_num)
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-{i:05d}-of-{file_num:05d}.safetensors" for i in range(1, file_num + 1)]
    merged = {}
    for name in files:
        merged.update(st.load_file(str(tmp_path / "hf" / name)))
    expected = {k: v.numpy() for k, v in model.state_dict().items()}
    assert sorted(merged) == sorted(expected) == sorted(index["weight_map"])
    for key, value in expected.items():
        np.testing.assert_array_equal(merged[key], value)
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in expected.values())
    back = dist.load_merged_state_dict(tmp_path / "ckpt", prefix="model")
    assert sorted(back) == sorted(expected) and all(np.array_equal(back[k].numpy(), expected[k]) for k in expected)


def test_merge_checks_its_arguments(tmp_path):
    dist.save_state_dict({"a": oarlock.ones([1])}, tmp_path / "ckpt")
    with pytest.raises(ValueError, match="file_num must be a positive int, got 0"):
        dist.merge_sharded_state_dict(tmp_path / "ckpt", tmp_path / "out", file_num=0)
    with pytest.raises(ValueError, match="file_num=2 is more files than the 1 tensors"):
        dist.merge_sharded_state_dict(tmp_path / "ckpt", tmp_path / "out", file_num=2)
    with pytest.raises(ValueError, match=r"has no tensor whose key starts with 'x\.'"):
        dist.merge_sharded_state_dict(tmp_path / "ckpt", tmp_path / "out", prefix="x")


# -- async ---------------------------------------------------------------------------------------------------
@pytest.fixture(params=["cow", "copy", "fork"])
def async_mode(request, monkeypatch):
    """Both ways of writing in the background (OARLOCK_ASYNC_SAVE)."""
    monkeypatch.setenv("OARLOCK_ASYNC_SAVE", request.param)
    return request.param


def test_async_save_keeps_the_values_of_the_moment_it_was_called(tmp_path, async_mode):
    w = oarlock.to_tensor(np.arange(1 << 20, dtype=np.float32))
    model, opt = trained()
    before = {k: v.numpy() for k, v in model.state_dict().items()}
    dist.save_state_dict({"w": w, "model": model.state_dict()}, tmp_path, async_save=True)
    w[:] = 0.0   # training goes on, writing the same buffers in place
    model(tokens(3)).mean().backward()
    opt.step()   # in-place optimizer updates
    assert not np.array_equal(model.state_dict()["head.weight"].numpy(), before["head.weight"])
    dist.wait_async_save()
    loaded = _zeros_like(model.state_dict())
    dist.load_state_dict({"model": loaded}, tmp_path)
    assert all(np.array_equal(loaded[k].numpy(), before[k]) for k in before)
    target = oarlock.zeros([1 << 20])
    dist.load_state_dict({"w": target}, tmp_path)
    np.testing.assert_array_equal(target.numpy(), np.arange(1 << 20, dtype=np.float32))


def test_an_async_failure_is_raised_at_the_next_wait(tmp_path, monkeypatch, async_mode):
    from oarlock_checkpoint.flex import save

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(save, "write_data_file", disk_full)   # what a full disk does to the background writer
    dist.save_state_dict({"w": oarlock.ones([2])}, tmp_path, async_save=True, unique_id=5)
    with pytest.raises(RuntimeError, match=r"the async save of checkpoint 5 .* failed: OSError: .*No space left"):
        dist.wait_async_save()
    dist.wait_async_save()   # the error is reported once
    with pytest.raises(ValueError, match="checkpoint 5 .* is incomplete"):
        dist.load_state_dict({"w": oarlock.zeros([2])}, tmp_path, unique_id=5)


# raise_signal sends SIGINT to the main thread itself: os.kill's process-directed signal may land on the save's
# writer thread, and the main thread can then finish the script before it notices (a race under load)
@pytest.mark.parametrize("ending", ["", "signal.raise_signal(signal.SIGINT)"], ids=["returns", "ctrl_c"])
def test_exit_waits_for_an_async_save(tmp_path, ending, async_mode):
    script = textwrap.dedent(f"""
        import os, signal, numpy as np, oarlock, oarlock.distributed as dist
        signal.signal(signal.SIGINT, signal.default_int_handler)   # as a terminal's Ctrl-C finds it, whatever
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])   # the test runner's process left behind
        dist.save_state_dict({{"w": oarlock.to_tensor(np.arange(1 << 22, dtype=np.float32))}}, {str(tmp_path)!r},
                             async_save=True)
        {ending}
    """)   # the program ends right after the call returns, normally or by Ctrl-C
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, OARLOCK_ASYNC_SAVE=async_mode))
    assert done.returncode == (-signal.SIGINT if ending else 0), done.stderr
    assert "KeyboardInterrupt" in done.stderr if ending else not done.stderr
    target = oarlock.zeros([1 << 22])
    dist.load_state_dict({"w": target}, tmp_path)
    np.testing.assert_array_equal(target.numpy(), np.arange(1 << 22, dtype=np.float32))


def test_a_bad_async_mode_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("OARLOCK_ASYNC_SAVE", "threads")
    with pytest.raises(ValueError, match="OARLOCK_ASYNC_SAVE must be one of cow, copy, fork, got 'threads'"):
        dist.save_state_dict({"w": oarlock.ones([2])}, tmp_path, async_save=True)
    assert not os.listdir(tmp_path)


# -- AoA: separate and fused QKV give the same outputs -----------------------------------------------------------
def test_separate_qkv_checkpoint_runs_a_fused_gqa_model_and_back(tmp_path):
    model, _ = trained()
    dist.save_state_dict(model.state_dict(), tmp_path / "separate")
    fused = Model(fused=True)
    dist.load_state_dict(fused.state_dict(), tmp_path / "separate", aoa_config={"aoa_statements": FUSE})
    expected = fused_state({k: v.numpy() for k, v in model.state_dict().items()})
    for key, value in fused.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), expected[key])
    x = tokens(9)
    np.testing.assert_allclose(fused(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)  # float32 sums of size ~9
    dist.save_state_dict(fused.state_dict(), tmp_path / "fused")
    again = Model(fused=False)
    dist.load_state_dict(again.state_dict(), tmp_path / "fused", aoa_config={"aoa_statements": SPLIT})
    for (key, a), b in zip(model.state_dict().items(), again.state_dict().values()):
        assert _same_bits(a.numpy(), b.numpy()), key


def test_rounds_bound_what_a_rank_holds(tmp_path, monkeypatch):
    """With a small budget the load runs in many rounds and still fills every tensor exactly."""
    from oarlock_checkpoint.flex import plan
    rng = np.random.default_rng(4)
    state = {f"w{i}": oarlock.to_tensor(rng.standard_normal((16, 32)).astype(np.float32)) for i in range(6)}
    dist.save_state_dict(state, tmp_path)
    seen = []
    original = plan._rounds
    monkeypatch.setattr(plan, "_rounds", lambda *args: seen.append(original(*args)) or seen[-1])
    monkeypatch.setenv("OARLOCK_CHECKPOINT_ROUND_BYTES", "4096")   # two 2 KiB tensors per round
    target = _zeros_like(state)
    dist.load_state_dict(target, tmp_path)
    assert [len(r) for r in seen[0]] == [2, 2, 2]
    assert all(_same_bits(target[k].numpy(), v.numpy()) for k, v in state.items())
    monkeypatch.setenv("OARLOCK_CHECKPOINT_ROUND_BYTES", "lots")
    with pytest.raises(ValueError, match="ROUND_BYTES must be a positive number of bytes, got 'lots'"):
        dist.load_state_dict(target, tmp_path)
