"""The "safetensors" format, checked bit for bit against itself and against the safetensors library
(an optional test oracle: those comparisons skip without it)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

import oarlock
from oarlock_checkpoint import safetensors as st

# oarlock dtype -> what safetensors.numpy.load_file returns it as (None: it cannot, compare raw bytes)
_NUMPY_LOADS = {"float8_e4m3fn": None, "float8_e5m2": None}


@pytest.fixture(scope="module")
def lib():
    return pytest.importorskip("safetensors")


def _header(path) -> dict:
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), n


def test_every_dtype_round_trips_bit_for_bit(tmp_path, safetensors_dtype_name, pattern_array, bits):
    dtype_name = safetensors_dtype_name
    values = pattern_array(dtype_name)
    tensors = {"t": oarlock.to_tensor(values), "scalar": oarlock.to_tensor(values[1, 2]),
               "empty": oarlock.to_tensor(values[:0]), "array": values[::2, ::3]}  # a strided numpy view
    st.save_file(tensors, tmp_path / "x.safetensors")
    back = st.load_file(tmp_path / "x.safetensors")
    assert list(back) == list(tensors)
    for key, value in tensors.items():
        expected = value.numpy() if isinstance(value, oarlock.Tensor) else value
        assert isinstance(back[key], oarlock.Tensor) and back[key].dtype == dtype_name
        assert back[key].shape == list(expected.shape) and back[key].place == "cpu"
        np.testing.assert_array_equal(bits(back[key].numpy()), bits(expected))
    as_numpy = st.load_file(tmp_path / "x.safetensors", return_numpy=True)["t"]
    assert type(as_numpy) is np.ndarray and as_numpy.flags.writeable
    np.testing.assert_array_equal(bits(as_numpy), bits(values))


def test_layout_is_padded_and_aligned(tmp_path):
    st.save_file({"a": np.zeros(3, np.int8), "b": np.zeros(5, np.float64), "c": np.zeros(1, np.float16)},
                 tmp_path / "x.safetensors")
    header, n = _header(tmp_path / "x.safetensors")
    assert n % 8 == 0
    assert list(header) == ["a", "b", "c"]  # the caller's order
    for entry in header.values():
        begin = entry["data_offsets"][0]
        assert begin % np.dtype({"I8": np.int8, "F64": np.float64, "F16": np.float16}[entry["dtype"]]).itemsize == 0


def test_reads_files_written_by_the_safetensors_library(tmp_path, lib, bits):
    import safetensors.numpy
    rng = np.random.default_rng(0)
    arrays = {f"{np.dtype(dt).name}": rng.integers(0, 256, 48, dtype=np.uint8).view(dt).reshape(2, -1)
              for dt in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.int8, np.uint8,
                         np.uint16, np.uint32, np.uint64, np.complex64)}
    arrays["bool"] = rng.integers(0, 2, (3, 2)).astype(bool)
    arrays["scalar"] = np.array(1.5, np.float32)
    safetensors.numpy.save_file(arrays, tmp_path / "theirs.safetensors", metadata={"source": "lib"})
    ours = st.load_file(tmp_path / "theirs.safetensors", return_numpy=True)
    assert set(ours) == set(arrays)
    for key, value in arrays.items():
        assert ours[key].dtype == value.dtype and ours[key].shape == value.shape
        np.testing.assert_array_equal(bits(ours[key]), bits(value))
    assert st.load_metadata(tmp_path / "theirs.safetensors") == {"source": "lib"}


def test_the_safetensors_library_reads_our_files(tmp_path, lib, safetensors_dtype_name, pattern_array, bits):
    dtype_name = safetensors_dtype_name
    import safetensors.numpy
    values = pattern_array(dtype_name)
    st.save_file({"t": oarlock.to_tensor(values), "z": values[:0]}, tmp_path / "ours.safetensors",
                 metadata={"k": "v"})
    if _NUMPY_LOADS.get(dtype_name, "numpy") is None:  # safetensors.numpy has no float8: compare raw bytes
        with open(tmp_path / "ours.safetensors", "rb") as f:
            raw = dict(lib.deserialize(f.read()))
        assert raw["t"]["shape"] == [4, 70] and bytes(raw["t"]["data"]) == values.tobytes()
    else:
        theirs = safetensors.numpy.load_file(tmp_path / "ours.safetensors")
        assert theirs["t"].dtype == values.dtype and theirs["z"].shape == (0, 70)
        np.testing.assert_array_equal(bits(theirs["t"]), bits(values))
    with lib.safe_open(tmp_path / "ours.safetensors", framework="np") as f:
        assert f.metadata() == {"k": "v"}


def test_metadata_round_trip(tmp_path):
    st.save_file({"w": np.ones(2)}, tmp_path / "m.safetensors", metadata={"format": "pt", "note": "ünïcode"})
    assert st.load_metadata(tmp_path / "m.safetensors") == {"format": "pt", "note": "ünïcode"}
    st.save_file({"w": np.ones(2)}, tmp_path / "n.safetensors")
    assert st.load_metadata(tmp_path / "n.safetensors") == {}


def test_state_dict_through_oarlock_save_and_load(tmp_path, tiny_model):
    oarlock.seed(1)
    model = tiny_model()
    oarlock.save(model.state_dict(), tmp_path / "m.safetensors", metadata={"epoch": "3"})
    loaded = oarlock.load(tmp_path / "m.safetensors")
    assert list(loaded) == list(model.state_dict())
    fresh = tiny_model()
    fresh.set_state_dict(loaded)
    x = oarlock.randn([2, 3])
    np.testing.assert_array_equal(fresh(x).numpy(), model(x).numpy())
    assert st.load_metadata(tmp_path / "m.safetensors") == {"epoch": "3"}
    assert type(oarlock.load(tmp_path / "m.safetensors", return_numpy=True)["w"]) is np.ndarray
    oarlock.save({"w": oarlock.ones([1])}, tmp_path / "by_name.bin", format="safetensors")
    assert oarlock.load(tmp_path / "by_name.bin", format="safetensors")["w"].tolist() == [1.0]


@pytest.mark.parametrize("obj, message", [
    ({"a": {"b": oarlock.ones([1])}}, "value for key 'a' must be a Tensor or numpy array, got dict .safetensors "
                                      "holds a flat dict of tensors"),
    ([oarlock.ones([1])], "safetensors holds a flat dict of str -> Tensor .or numpy array., got list"),
    ({1: oarlock.ones([1])}, "every key must be a str other than '__metadata__', got 1"),
    ({"c": oarlock.ones([1]).astype("complex128")}, "dtype complex128, which safetensors cannot store"),
    ({"s": np.array(["x"])}, "dtype <U1, which safetensors cannot store"),
])
def test_unstorable_dtypes_and_structures(tmp_path, obj, message):
    with pytest.raises(TypeError, match=message):
        oarlock.save(obj, tmp_path / "x.safetensors")
    assert not list(tmp_path.iterdir())


def test_option_errors(tmp_path):
    with pytest.raises(TypeError, match="metadata must be a dict of str -> str"):
        oarlock.save({"a": np.ones(1)}, tmp_path / "x.safetensors", metadata={"epoch": 3})
    with pytest.raises(TypeError, match="unknown option\\(s\\) protocol; it accepts metadata"):
        oarlock.save({"a": np.ones(1)}, tmp_path / "x.safetensors", protocol=4)


def test_numpy_only_dtypes_need_return_numpy(tmp_path):
    st.save_file({"u": np.arange(3, dtype=np.uint16)}, tmp_path / "u.safetensors")
    assert st.load_file(tmp_path / "u.safetensors", return_numpy=True)["u"].tolist() == [0, 1, 2]
    with pytest.raises(TypeError, match="tensor 'u' .* has dtype U16, which oarlock Tensors do not have; load with "
                                        "return_numpy=True"):
        oarlock.load(tmp_path / "u.safetensors")


def _write_raw(path, header: dict, data: bytes = b"", size_field=None):
    encoded = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded) if size_field is None else size_field) + encoded + data)


@pytest.mark.parametrize("header, data, size_field, message", [
    ({}, b"", 10**6, "the header size field says 1000000 bytes"),
    ({"a": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}, b"\0", None, "dtype 'F4'; this reader knows"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, None, "spans 4 bytes, but dtype F32"),
    ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
      "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, b"\0" * 3, None, "without gaps or overlaps"),
    ({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 5, None, "cover 2 bytes but the data"),
    ({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 2]}}, b"\0" * 2, None, "a shape is a list of non-neg"),
    ({"__metadata__": {"a": 1}}, b"", None, "__metadata__ must map str to str"),
])
def test_malformed_files_are_refused(tmp_path, header, data, size_field, message):
    _write_raw(tmp_path / "bad.safetensors", header, data, size_field)
    with pytest.raises(ValueError, match=f"is not a valid safetensors file: .*{message}"):
        oarlock.load(tmp_path / "bad.safetensors")


def test_truncated_and_non_json_files(tmp_path):
    (tmp_path / "short.safetensors").write_bytes(b"\1\0")
    with pytest.raises(ValueError, match="fewer than the 8-byte header size"):
        st.load_file(tmp_path / "short.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(struct.pack("<Q", 4) + b"\xff\xfe{]")
    with pytest.raises(ValueError, match="the header is not UTF-8 JSON"):
        st.load_file(tmp_path / "junk.safetensors")
