"""Tensor basics, dtypes and promotion (against torch where installed), places and devices."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
from oarlock import dtypes as D


# -- dtypes ---------------------------------------------------------------------------------------------------

def test_dtype_spellings_and_equality():
    assert D.convert_dtype("float32") is oarlock.float32
    assert D.convert_dtype("paddle.bfloat16") is oarlock.bfloat16
    assert D.convert_dtype(np.int16) is oarlock.int16
    assert D.convert_dtype(float) is oarlock.float32 and D.convert_dtype(int) is oarlock.int64
    assert oarlock.float32 == "float32" and oarlock.float32 == np.float32 and oarlock.float32 != "float64"
    assert repr(oarlock.float8_e4m3fn) == "paddle.float8_e4m3fn"
    with pytest.raises(ValueError, match="unknown dtype 'float33'.*known dtypes"):
        D.convert_dtype("float33")
    assert {dt.name for dt in D.all_dtypes} >= {"float16", "float32", "float64", "bfloat16", "float8_e4m3fn",
                                                "float8_e5m2", "int8", "int16", "int32", "int64", "uint8",
                                                "bool", "complex64", "complex128"}


def test_every_dtype_round_trips_through_a_tensor():
    for dt in D.all_dtypes:
        t = oarlock.zeros([2], dtype=dt)
        assert t.dtype is dt and t.numpy().dtype == dt.np


def test_promotion_matches_torch():
    torch = pytest.importorskip("torch")
    names = [d.name for d in D.all_dtypes if not d.name.startswith("float8")]
    for a in names:
        for b in names:
            expected = str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[1]
            assert D.promote_types(D.convert_dtype(a), D.convert_dtype(b)).name == expected, (a, b)


def test_python_scalars_only_lift_the_kind():
    i32 = oarlock.to_tensor([1, 2], dtype="int32")
    f16 = oarlock.to_tensor([1.0], dtype="float16")
    assert (i32 + 2).dtype == oarlock.int32
    assert (i32 + 2.5).dtype == oarlock.float32
    assert (f16 * 2.5).dtype == oarlock.float16
    assert (oarlock.to_tensor([True]) + 1).dtype == oarlock.int64


def test_float8_mixing_needs_an_explicit_cast():
    a = oarlock.zeros([2], dtype="float8_e4m3fn")
    b = oarlock.zeros([2], dtype="float8_e5m2")
    with pytest.raises(TypeError, match="float8"):
        a + b


def test_set_default_dtype():
    try:
        oarlock.set_default_dtype("float64")
        assert oarlock.to_tensor([1.5]).dtype == oarlock.float64
        assert oarlock.get_default_dtype() == "float64"
        assert oarlock.zeros([1]).dtype == oarlock.float64
    finally:
        oarlock.set_default_dtype("float32")
    with pytest.raises(TypeError, match="set_default_dtype.*int64"):
        oarlock.set_default_dtype("int64")


# -- devices --------------------------------------------------------------------------------------------------

def test_places():
    assert repr(oarlock.CPUPlace()) == "Place(cpu)"
    assert oarlock.CPUPlace() == "cpu" and oarlock.CPUPlace() is oarlock.to_tensor([1]).place
    assert str(oarlock.CUDAPlace(1)) == "gpu:1" and oarlock.CustomPlace("npu", 2).get_device_id() == 2
    assert oarlock.get_device() == "cpu"
    assert oarlock.set_device("cpu") is oarlock.CPUPlace()


def test_unavailable_and_malformed_devices_give_clear_errors():
    with pytest.raises(ValueError, match="device type 'gpu' \\(from 'cuda:0'\\) is not available.*cpu"):
        oarlock.set_device("cuda:0")
    with pytest.raises(ValueError, match="malformed"):
        oarlock.set_device("gpu:one")
    with pytest.raises(ValueError, match="index 3"):
        oarlock.to_tensor([1.0], place="cpu:3")
    with pytest.raises(TypeError, match="device string"):
        oarlock.set_device(3)
    assert oarlock.device.get_all_device_type() == ["cpu"] or "cpu" in oarlock.device.get_all_device_type()


def test_rng_seed_and_state():
    oarlock.seed(7)
    state = oarlock.get_rng_state()
    a = oarlock.device.default_place().backend.generator().random(3)
    oarlock.set_rng_state(state)
    b = oarlock.device.default_place().backend.generator().random(3)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="seed must be an int"):
        oarlock.seed(1.5)


# -- tensors --------------------------------------------------------------------------------------------------

def test_tensor_metadata_and_host_access():
    t = oarlock.to_tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert t.shape == [2, 3] and t.ndim == 2 and t.size == 6 and len(t) == 2
    assert t.dtype == oarlock.float32 and t.place == "cpu"
    assert t.tolist() == [[1, 2, 3], [4, 5, 6]]
    host = t.numpy()
    host[0, 0] = 100
    assert t.tolist()[0][0] == 1, "numpy() must return a copy"
    assert np.asarray(t).dtype == np.float32
    assert oarlock.to_tensor(3.5).item() == 3.5 and float(oarlock.to_tensor([2.0])) == 2.0
    with pytest.raises(ValueError, match="one element"):
        t.item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(t)


def test_low_precision_values_come_back_as_python_floats():
    t = oarlock.to_tensor([1.5, 2.25], dtype="bfloat16")
    assert t.tolist() == [1.5, 2.25] and isinstance(t.tolist()[0], float)
    assert isinstance(oarlock.to_tensor(1.5, dtype="bfloat16").item(), float)


def test_repr_shows_values_dtype_place_and_stop_gradient():
    text = repr(oarlock.to_tensor([1.0, 2.0], stop_gradient=False))
    assert text.startswith("Tensor(shape=[2], dtype=float32, place=Place(cpu), stop_gradient=False")
    assert "[1., 2.]" in text


def test_astype_detach_and_to():
    t = oarlock.to_tensor([1.7, -2.2], stop_gradient=False)
    assert t.astype("int32").tolist() == [1, -2] and t.cast(oarlock.float64).dtype == oarlock.float64
    d = t.detach()
    assert d.stop_gradient and d._data is t._data
    assert t.to("float64").dtype == oarlock.float64 and t.to("cpu", "float16").dtype == oarlock.float16


def test_dlpack_round_trips_share_memory():
    src = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = oarlock.from_dlpack(src)
    src[0, 0] = 42
    assert t.tolist()[0][0] == 42
    back = np.from_dlpack(t)
    assert np.shares_memory(back, src)


def test_dlpack_with_torch():
    torch = pytest.importorskip("torch")
    tt = torch.arange(4, dtype=torch.float32)
    t = oarlock.from_dlpack(tt)
    tt[1] = 9
    assert t.tolist() == [0, 9, 2, 3]
    assert torch.from_dlpack(t).tolist() == [0, 9, 2, 3]


def test_numpy_operands_defer_to_tensor_operators():
    t = oarlock.to_tensor([1.0, 2.0])
    out = np.float32(2.0) * t
    assert isinstance(out, oarlock.Tensor) and out.tolist() == [2, 4]
