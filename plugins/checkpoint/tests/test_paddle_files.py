"""oarlock.load of files the installed Paddle 3.2 wrote with paddle.save returns what paddle.load returns:
the same types (Tensors, with the names Paddle keeps; numpy arrays with return_numpy=True), the same
keys in the same order and bit-identical values; oarlock layers loaded from them compute what Paddle's do."""

from __future__ import annotations

import os
import pickle
import re
from collections import OrderedDict

import numpy as np
import pytest

import oarlock
from same_structure import assert_same

paddle = pytest.importorskip("paddle")

NAME_TABLE, BIG_PARAMS = "StructuredToParameterName@@", "UnpackBigParamInfor@@"
# paddle.save splits an array only if it has over (2**30 - 1) // itemsize elements (io_utils._unpack_saved_dict)
BIG = 2**28  # float32 elements: 1 GiB, one more than that limit
BIG_OPT_IN = "OARLOCK_TEST_BIG_PARAMS"


def _layers():
    paddle.seed(0)
    linear, conv, bn = paddle.nn.Linear(3, 4), paddle.nn.Conv2D(2, 3, 3), paddle.nn.BatchNorm2D(3)
    bn(paddle.randn([2, 3, 4, 4]))  # moves _mean and _variance off their initial values
    return linear, conv, bn


def _adamw_state(linear):
    scheduler = paddle.optimizer.lr.StepDecay(0.1, step_size=2)
    adamw = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=linear.parameters())
    linear(paddle.randn([2, 3])).sum().backward()
    adamw.step()
    scheduler.step()
    return adamw.state_dict()


def _named(value, name, dtype=None):
    tensor = paddle.to_tensor(value, dtype=dtype)
    tensor.name = name
    return tensor


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Files paddle.save wrote: layer and optimizer state dicts (name table), Tensors alone and in
    containers ((name, ndarray) tuples), containers of bare arrays (Paddle 2.0's layout)."""
    out = tmp_path_factory.mktemp("paddle")
    linear, conv, bn = _layers()
    tensor = _named([[1.5, -2.0], [0.25, 3.0]], "my_tensor")
    bf16 = _named([1.0, -2.5, 3.0e38], "bf16_w", dtype="bfloat16")
    objects = {
        "linear.pdparams": linear.state_dict(), "conv.pdparams": conv.state_dict(), "bn.pdparams": bn.state_dict(),
        "adamw.pdopt": _adamw_state(linear),
        "dtypes.pdparams": {"bf16": bf16, "f16": paddle.to_tensor([1.5, -0.0], dtype="float16"),
                            "f64": paddle.to_tensor([np.pi]), "i64": paddle.arange(3), "u8": paddle.ones([2], "uint8"),
                            "flags": paddle.to_tensor([True, False]), "c64": paddle.to_tensor([1 + 2j], "complex64"),
                            "scalar": paddle.to_tensor(7.0),
                            "f8": paddle.to_tensor([0.5, -448.0]).astype("float8_e4m3fn")},  # Paddle: int8, both ways
        "tensor.pdtensor": tensor, "bf16.pdtensor": bf16, "list.pkl": [tensor, bf16, 3, "x"],
        "nested.pkl": {"list": [tensor, (1, bf16), None], "inner": OrderedDict(t=tensor, array=np.arange(3)),
                       "tuple": ("s", 4.5, True), "scalars": [np.float32(1.5), np.int64(3)], "complex": 3 + 2j},
        "arrays.pkl": [np.arange(3), {"a": np.ones((2, 2), np.float32), "b": (np.array(2.5), "s")}],
    }
    for name, obj in objects.items():
        paddle.save(obj, str(out / name))
    paddle.save(linear.state_dict(), str(out / "linear-protocol2.pdparams"), protocol=2)
    return out


def _tensors_same(ours, theirs, where):
    """A Paddle Tensor: oarlock gives a Tensor of the same dtype, shape, place, bits and (where Paddle keeps one)
    name."""
    if isinstance(theirs, paddle.Tensor):
        assert isinstance(ours, oarlock.Tensor), f"{where}: {type(ours).__name__}, Paddle gives a Tensor"
        assert ours.dtype.name == str(theirs.dtype).removeprefix("paddle."), where
        assert ours.shape == list(theirs.shape) and ours.stop_gradient == theirs.stop_gradient, where
        assert ours.place == "cpu" and theirs.place.is_cpu_place(), where
        assert ours.numpy().tobytes() == theirs.numpy().tobytes(), where  # bfloat16: Paddle's numpy is uint16
        if not theirs.name.startswith("generated_tensor"):  # Paddle names the Tensors it makes of bare arrays
            assert ours.name == theirs.name, where
        return True
    return False


def _same(ours, theirs, where="") -> None:
    """The same type, keys, names (where Paddle keeps one), dtype, shape and bits."""
    assert_same(ours, theirs, where, _tensors_same)


FILES = ["linear.pdparams", "conv.pdparams", "bn.pdparams", "adamw.pdopt", "dtypes.pdparams", "tensor.pdtensor",
         "bf16.pdtensor", "list.pkl", "nested.pkl", "arrays.pkl", "linear-protocol2.pdparams"]


@pytest.mark.parametrize("options", [{}, {"return_numpy": True}, {"keep_name_table": True},
                                     {"keep_name_table": True, "return_numpy": True}])
@pytest.mark.parametrize("name", FILES)
def test_paddle_files_load_as_paddle_loads_them(files, name, options):
    theirs = paddle.load(str(files / name), **options)
    for weights_only in (True, False):  # the safe unpickler and full pickle
        _same(oarlock.load(files / name, weights_only=weights_only, **options), theirs, name)


def test_what_paddle_keeps_is_there(files):
    """Spot checks that the comparison above sees names, the table and the optimizer's scheduler state."""
    weight = oarlock.load(files / "linear.pdparams")["weight"]
    assert weight.name == paddle.load(str(files / "linear.pdparams"), return_numpy=True,
                                      keep_name_table=True)[NAME_TABLE]["weight"]
    assert oarlock.load(files / "tensor.pdtensor").name == "my_tensor"
    assert oarlock.load(files / "bf16.pdtensor").dtype == oarlock.bfloat16
    assert oarlock.load(files / "nested.pkl")["list"][1][1].name == "bf16_w"
    adamw = oarlock.load(files / "adamw.pdopt")
    assert adamw["LR_Scheduler"] == {"last_epoch": 1, "last_lr": 0.1}
    assert all(isinstance(v, oarlock.Tensor) for k, v in adamw.items() if k != "LR_Scheduler")
    assert type(oarlock.load(files / "arrays.pkl")[1]["b"][0]) is oarlock.Tensor  # no tuples: arrays convert


@pytest.mark.parametrize("layer, args, name, shape", [
    ("Linear", (3, 4), "linear.pdparams", [5, 3]),
    ("Conv2D", (2, 3, 3), "conv.pdparams", [2, 2, 6, 5]),
    ("BatchNorm2D", (3,), "bn.pdparams", [2, 3, 4, 4]),
    ("Linear", (3, 4), "linear-protocol2.pdparams", [5, 3]),
])
def test_oarlock_layers_loaded_from_paddle_files_compute_what_paddle_computes(files, layer, args, name, shape):
    ours, theirs = getattr(oarlock.nn, layer)(*args), getattr(paddle.nn, layer)(*args)
    ours.set_state_dict(oarlock.load(files / name))
    theirs.set_state_dict(paddle.load(str(files / name)))
    ours.eval(), theirs.eval()  # batch norm: normalise by the loaded _mean and _variance
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    np.testing.assert_allclose(ours(oarlock.to_tensor(x)).numpy(), theirs(paddle.to_tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)


def _split_state_dict(path, pieces: int, protocol: int = 2):
    """A Linear state dict in paddle.save's layout for a split parameter (io_utils._unpack_saved_dict):
    the flattened weight as 1-D pieces "weight@@.<i>" after the name table, then the split table. Paddle
    splits only arrays over 1 GiB; this writes its layout for a small one, which paddle.load reads alike."""
    linear = _layers()[0]
    weight = linear.weight.numpy()
    saved = {"weight": weight, "bias": linear.bias.numpy(),
             NAME_TABLE: {"weight": linear.weight.name, "bias": linear.bias.name}}
    del saved["weight"]  # as _unpack_saved_dict does: the pieces and the split table then go last
    slices = [f"weight@@.{i}" for i in range(pieces)]
    saved.update(zip(slices, np.array_split(weight.flatten(), pieces)))
    saved[BIG_PARAMS] = {"weight": {"OriginShape": weight.shape, "slices": slices}}
    with open(path, "wb") as f:
        pickle.dump(saved, f, protocol=protocol)
    return linear


def test_split_big_parameters_are_put_back_together(tmp_path):
    linear = _split_state_dict(tmp_path / "split.pdparams", pieces=3)
    for options in ({}, {"return_numpy": True}, {"keep_name_table": True}):
        loaded = oarlock.load(tmp_path / "split.pdparams", **options)
        _same(loaded, paddle.load(str(tmp_path / "split.pdparams"), **options))
    assert list(loaded) == ["bias", NAME_TABLE, "weight"]  # paddle.load's order: the joined weight comes last
    ours = oarlock.nn.Linear(3, 4)
    ours.set_state_dict(oarlock.load(tmp_path / "split.pdparams"))
    np.testing.assert_array_equal(ours.weight.numpy(), linear.weight.numpy())


@pytest.mark.skipif(os.environ.get(BIG_OPT_IN) != "1",
                    reason=f"paddle.save splits only parameters over 1 GiB: this test takes about 7 GiB of memory, a "
                           f"1 GiB file and a minute; set {BIG_OPT_IN}=1 to run it")
def test_a_parameter_paddle_split_is_put_back_together(tmp_path):
    big = {"big": paddle.arange(BIG, dtype="float32"), "small": paddle.ones([2])}
    paddle.save(big, str(tmp_path / "big.pdparams"), protocol=2)
    del big
    with open(tmp_path / "big.pdparams", "rb") as f:
        assert BIG_PARAMS in pickle.load(f)  # Paddle did split it
    ours, theirs = oarlock.load(tmp_path / "big.pdparams"), paddle.load(str(tmp_path / "big.pdparams"))
    assert list(ours) == list(theirs) == ["small", "big"]
    assert ours["big"].name == theirs["big"].name and ours["big"].shape == [BIG]
    assert np.array_equal(ours["big"].numpy(), theirs["big"].numpy())


def _write(path, obj, protocol=4):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return path


@pytest.mark.parametrize("obj, message", [
    ({"w": np.ones(2), NAME_TABLE: {"w": "w_0", "gone": "b_0"}},
     "'StructuredToParameterName@@' names the key 'gone', which the file does not hold; the file is damaged"),
    ({"w": np.ones(2), NAME_TABLE: ["w"]}, "'StructuredToParameterName@@' should be a dict of key to Tensor name"),
    ({"w@@.0": np.ones(2), BIG_PARAMS: {"w": {"OriginShape": (3,), "slices": ["w@@.0"]}}},
     "'UnpackBigParamInfor@@' cannot put 'w' back together \\(ValueError: cannot reshape"),
    ({BIG_PARAMS: {"w": {"OriginShape": (2,), "slices": ["w@@.0"]}}},
     "'UnpackBigParamInfor@@' cannot put 'w' back together \\(KeyError: 'w@@.0'\\)"),
    ({BIG_PARAMS: ["w"]}, "'UnpackBigParamInfor@@' should be a dict of split parameters, got list"),
])
def test_damaged_paddle_tables_raise_unpickling_errors_naming_the_file(tmp_path, obj, message):
    path = _write(tmp_path / "bad.pdparams", obj)
    with pytest.raises(pickle.UnpicklingError, match=re.escape(f"load(): '{path}': ") + message):
        oarlock.load(path)


def test_crafted_deep_nesting_is_an_unpickling_error(tmp_path):
    """Neither pickler writes containers nested this deep; the restricted unpickler builds them without
    recursion, and walking them for Tensors must fail cleanly, not with RecursionError."""
    depth = 100_000  # EMPTY_LIST x depth, then APPEND x (depth - 1): each list holds the next
    path = tmp_path / "deep.pkl"
    path.write_bytes(b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b".")
    with pytest.raises(pickle.UnpicklingError, match="containers are nested too deeply to load"):
        oarlock.load(path)


def test_keep_name_table_must_be_a_bool(tmp_path):
    oarlock.save({"w": oarlock.ones([2])}, tmp_path / "m.pdparams")
    with pytest.raises(TypeError, match="load\\(\\): keep_name_table must be True or False, got 'yes'"):
        oarlock.load(tmp_path / "m.pdparams", keep_name_table="yes")


def test_oarlock_files_are_not_read_as_paddle_files(tmp_path):
    """oarlock.save stores arrays as records, never as the bare arrays and (name, array) tuples Paddle
    writes; what it pickles as is (string arrays and tuples of them, bytes) comes back as saved, with or
    without Tensors in the file, and keep_name_table changes nothing."""
    plain = {"labels": np.array(["a", "bc"]), "pair": ("x", np.array(["y"])), "raw": b"\x00"}
    for extra in ({}, {"w": oarlock.ones([2])}):
        oarlock.save({**plain, **extra}, tmp_path / "o.pdparams")
        for options in ({}, {"keep_name_table": True}, {"return_numpy": True}, {"weights_only": False}):
            back = oarlock.load(tmp_path / "o.pdparams", **options)
            assert list(back) == list(plain) + list(extra) and back["raw"] == b"\x00"
            assert back["labels"].tolist() == ["a", "bc"] and back["pair"][0] == "x"
            assert back["pair"][1].tolist() == ["y"]
