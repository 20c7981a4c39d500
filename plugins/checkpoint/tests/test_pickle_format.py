"""The "pickle" format: oarlock.save / oarlock.load with paddle.save / paddle.load semantics."""

from __future__ import annotations

import os
import pickle
from collections import OrderedDict
from fractions import Fraction

import numpy as np
import pytest

import oarlock
from oarlock_checkpoint import pickle_format


# Paddle's numpy form of a Tensor (what paddle.save stores and return_numpy gives), where not its own dtype
PADDLE_NUMPY = {"bfloat16": np.uint16, "float8_e4m3fn": np.int8, "float8_e5m2": np.int8}


@pytest.mark.parametrize("layout", ["paddle", "oarlock"])
def test_tensors_of_every_dtype_round_trip_bit_for_bit(tmp_path, dtype_name, pattern_array, bits, layout):
    """Both layouts keep every bit; the Paddle layout, as paddle.save, keeps float8 Tensors as int8."""
    values = pattern_array(dtype_name)
    tensor = oarlock.to_tensor(values)
    tensor.name = "linear_0.w_0"
    oarlock.save({"t": tensor, "scalar": tensor[0, 0], "empty": tensor[:0]}, tmp_path / "x.pdparams", layout=layout)
    loaded = oarlock.load(tmp_path / "x.pdparams")
    t = loaded["t"]
    dtype = oarlock.int8 if layout == "paddle" and dtype_name.startswith("float8") else tensor.dtype
    numpy_dtype = PADDLE_NUMPY.get(dtype_name, values.dtype) if layout == "paddle" else values.dtype
    assert isinstance(t, oarlock.Tensor) and t.dtype == dtype and t.place == "cpu"
    assert t.name == "linear_0.w_0" and t.stop_gradient
    np.testing.assert_array_equal(bits(t.numpy()), bits(values))
    assert loaded["scalar"].shape == []
    np.testing.assert_array_equal(bits(loaded["scalar"].numpy()), bits(values[0, 0]))
    assert loaded["empty"].shape == [0, 70]
    as_numpy = oarlock.load(tmp_path / "x.pdparams", return_numpy=True)["t"]
    assert type(as_numpy) is np.ndarray and as_numpy.dtype == numpy_dtype and as_numpy.flags.writeable
    np.testing.assert_array_equal(bits(as_numpy), bits(values))


def test_nested_python_containers_round_trip(tmp_path):
    obj = {"state": OrderedDict(w=oarlock.ones([2, 2]), step=3), "lr": [0.1, (1e-3, None)], "name": "adam",
           "flags": {True, False}, "z": 1 + 2j, "raw": b"\x00\xff",
           "arrays": [np.arange(4, dtype=">i4"), np.float32(2.5), np.array(7), np.array(["a", "bc"])]}
    oarlock.save(obj, tmp_path / "opt.pdopt")
    back = oarlock.load(tmp_path / "opt.pdopt")
    assert type(back["state"]) is OrderedDict and list(back["state"]) == ["w", "step"]
    assert back["state"]["w"].tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert (back["lr"], back["name"], back["flags"], back["z"], back["raw"]) == \
           ([0.1, (1e-3, None)], "adam", {True, False}, 1 + 2j, b"\x00\xff")
    big_endian, scalar, zero_d, strings = back["arrays"]
    assert big_endian.dtype == np.int32 and big_endian.tolist() == [0, 1, 2, 3]
    assert type(scalar) is np.float32 and scalar == 2.5
    assert zero_d.shape == () and zero_d == 7
    assert strings.tolist() == ["a", "bc"]


def test_state_dict_round_trip_restores_a_model(tmp_path, tiny_model):
    oarlock.seed(0)
    model = tiny_model()
    oarlock.save(model.state_dict(), tmp_path / "model.pdparams")
    fresh = tiny_model()
    fresh.set_state_dict(oarlock.load(tmp_path / "model.pdparams"))
    x = oarlock.randn([5, 3])
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
    assert fresh.scale.dtype == oarlock.bfloat16


def test_oarlock_layout_files_do_not_depend_on_class_layouts(tmp_path):
    """layout="oarlock": Tensors and arrays are records, not pickled classes: a state dict file names no
    global besides OrderedDict (so weights_only=True accepts it), and plain pickle cannot read it without
    our loader. The default (Paddle's layout) is a plain pickle of numpy arrays."""
    state = OrderedDict(w=oarlock.ones([2]).astype("bfloat16"), a=np.zeros(2))
    oarlock.save(state, tmp_path / "m.pdparams", layout="oarlock")
    assert oarlock.load(tmp_path / "m.pdparams", weights_only=True)["w"].dtype == oarlock.bfloat16
    with open(tmp_path / "m.pdparams", "rb") as f, pytest.raises(pickle.UnpicklingError, match="persistent"):
        pickle.load(f)
    oarlock.save(state, tmp_path / "p.pdparams")
    with open(tmp_path / "p.pdparams", "rb") as f:
        plain = pickle.load(f)
    name, bits = plain["w"]   # not a state dict (an array value): the Tensor is Paddle's (name, ndarray)
    assert name == "generated_tensor_0" and bits.dtype == np.uint16 and bits.tolist() == [0x3F80, 0x3F80]
    assert oarlock.load(tmp_path / "p.pdparams", weights_only=True)["w"].dtype == oarlock.bfloat16


def test_weights_only_refuses_other_objects(tmp_path):
    """The default (weights_only=True) refuses other classes; weights_only=False is Paddle's full pickle."""
    oarlock.save({"x": Fraction(1, 3)}, tmp_path / "f.pkl")
    assert oarlock.load(tmp_path / "f.pkl", weights_only=False)["x"] == Fraction(1, 3)
    for options in ({}, {"weights_only": True}):
        with pytest.raises(pickle.UnpicklingError, match="refused to unpickle the global fractions.Fraction"):
            oarlock.load(tmp_path / "f.pkl", **options)


def test_default_format_and_suffixes(tmp_path):
    oarlock.save([1, 2], tmp_path / "no_suffix")
    oarlock.save(oarlock.arange(3), tmp_path / "x.pdtensor")
    assert oarlock.load(tmp_path / "no_suffix") == [1, 2]
    assert oarlock.load(tmp_path / "x.pdtensor").tolist() == [0, 1, 2]
    assert set(pickle_format.SUFFIXES) >= {".pdparams", ".pdopt", ".pdtensor", ".pkl"}


def test_save_makes_directories_and_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "a" / "b" / "m.pdparams"
    oarlock.save({"k": 1}, target)
    assert oarlock.load(target) == {"k": 1}
    with pytest.raises(TypeError, match="save\\(\\): cannot pickle the object"):
        oarlock.save({"f": lambda: 0}, tmp_path / "bad.pdparams")
    assert os.listdir(tmp_path) == ["a"]


@pytest.mark.parametrize("call, error, message", [
    (lambda p: oarlock.save({}, p, protocol=1), ValueError, "protocol must be one of \\[2, 3, 4, 5\\], got 1"),
    (lambda p: oarlock.save({}, p, use_binary=True), TypeError,
     "unknown option\\(s\\) use_binary; it accepts protocol"),
    (lambda p: oarlock.save({}, os.path.dirname(p)), IsADirectoryError, "is a directory"),
])
def test_save_errors(tmp_path, call, error, message):
    with pytest.raises(error, match=message):
        call(tmp_path / "x.pdparams")


def test_truncated_and_empty_files(tmp_path):
    oarlock.save({"t": oarlock.ones([100])}, tmp_path / "m.pdparams")
    data = (tmp_path / "m.pdparams").read_bytes()
    (tmp_path / "m.pdparams").write_bytes(data[:len(data) // 2])
    with pytest.raises(pickle.UnpicklingError, match="truncated"):
        oarlock.load(tmp_path / "m.pdparams")
    (tmp_path / "m.pdparams").write_bytes(b"")
    with pytest.raises(pickle.UnpicklingError, match="ends early: it is truncated or not a pickle checkpoint"):
        oarlock.load(tmp_path / "m.pdparams")


def test_protocols(tmp_path):
    for protocol in (2, 3, 4, 5):
        oarlock.save({"t": oarlock.ones([2]), "b": b"x"}, tmp_path / "p.pdparams", protocol=protocol)
        back = oarlock.load(tmp_path / "p.pdparams", weights_only=True)
        assert back["t"].tolist() == [1.0, 1.0] and back["b"] == b"x"
