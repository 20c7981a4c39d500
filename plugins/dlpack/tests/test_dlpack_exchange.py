"""oarlock.utils.dlpack and Tensor.__dlpack__: zero-copy exchange with PyTorch, numpy, Paddle (the API's
reference) and CuPy, both ways, for every dtype oarlock has. "Shared" is checked by writing on one side and
reading on the other; PyTorch and Paddle are the oracles (nobody here wrote their DLPack)."""

import gc

import ml_dtypes
import numpy as np
import pytest

import oarlock
from oarlock.plugin_api import array_of
from oarlock.utils.dlpack import from_dlpack, to_dlpack

torch = pytest.importorskip("torch")

# (oarlock/numpy dtype, torch dtype)
PAIRS = [(np.bool_, torch.bool), (np.uint8, torch.uint8), (np.int8, torch.int8), (np.int16, torch.int16),
         (np.int32, torch.int32), (np.int64, torch.int64), (np.float16, torch.float16),
         (ml_dtypes.bfloat16, torch.bfloat16), (np.float32, torch.float32), (np.float64, torch.float64),
         (np.complex64, torch.complex64), (np.complex128, torch.complex128),
         (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn), (ml_dtypes.float8_e5m2, torch.float8_e5m2)]
IDS = [np.dtype(d).name for d, _ in PAIRS]


def _values(dtype):
    return (np.arange(12) % 5).reshape(3, 4).astype(dtype)


def _as_float64(t):
    if t.dtype.is_complex:
        return t.to(torch.complex128).numpy()
    return t.to(torch.float64).numpy()


def _host(x):
    a = array_of(x)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


@pytest.mark.parametrize("np_dtype,torch_dtype", PAIRS, ids=IDS)
def test_oarlock_to_torch_shares_memory(np_dtype, torch_dtype):
    x = oarlock.to_tensor(_values(np_dtype))
    assert x.dtype.name == np.dtype(np_dtype).name
    for t in (torch.from_dlpack(x), torch.utils.dlpack.from_dlpack(to_dlpack(x))):   # protocol, then capsule
        assert t.dtype == torch_dtype and tuple(t.shape) == (3, 4)
        np.testing.assert_array_equal(_as_float64(t), _host(x))
        t[1, 2] = 1            # torch writes: oarlock sees it
        assert _host(x)[1, 2] == 1
        array_of(x)[2, 3] = np.asarray(1, dtype=np_dtype)   # oarlock's storage written: torch sees it
        assert _as_float64(t)[2, 3] == 1
        array_of(x)[2, 3] = np.asarray(0, dtype=np_dtype)


@pytest.mark.parametrize("np_dtype,torch_dtype", PAIRS, ids=IDS)
def test_torch_to_oarlock_shares_memory(np_dtype, torch_dtype):
    source = torch.from_numpy((np.arange(12) % 5).reshape(3, 4).astype(np.float64)).to(torch_dtype)
    for x in (from_dlpack(source), from_dlpack(torch.utils.dlpack.to_dlpack(source)), oarlock.from_dlpack(source)):
        assert x.dtype.name == np.dtype(np_dtype).name and x.shape == [3, 4] and x.place.is_cpu_place()
        np.testing.assert_array_equal(_host(x), _as_float64(source))
        source[0, 1] = 1
        assert _host(x)[0, 1] == 1
        array_of(x)[0, 0] = np.asarray(1, dtype=np_dtype)
        assert _as_float64(source)[0, 0] == 1


def test_strided_torch_view_and_its_lifetime():
    """A transposed, offset torch view arrives with its strides; torch's memory lives while oarlock holds it."""
    base = torch.arange(20, dtype=torch.bfloat16).reshape(4, 5)
    view = base[1:, 1:].t()
    x = from_dlpack(view)
    np.testing.assert_array_equal(_host(x), _as_float64(view))
    del base, view
    gc.collect()
    np.testing.assert_array_equal(_host(x), np.arange(20).reshape(4, 5)[1:, 1:].T)


def test_numpy_both_ways():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = from_dlpack(a)
    back = np.from_dlpack(x)                      # Tensor.__dlpack__ through numpy's own reader
    assert np.shares_memory(array_of(x), a) and np.shares_memory(back, a)
    back[0, 0] = 5
    assert a[0, 0] == 5 and _host(x)[0, 0] == 5
    # bfloat16: numpy has no DLPack for it, but its ml_dtypes array is what an oarlock CPU tensor holds
    b = np.zeros(4, dtype=ml_dtypes.bfloat16)
    y = from_dlpack(b)
    assert y.dtype.name == "bfloat16" and np.shares_memory(array_of(y), b)


def test_paddle_both_ways(paddle):
    """paddle.utils.dlpack is the API's reference: capsules go both ways and memory is shared."""
    p = paddle.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    x = from_dlpack(paddle.utils.dlpack.to_dlpack(p))
    array_of(x)[0, 0] = 9
    assert float(p.numpy()[0, 0]) == 9
    q = paddle.utils.dlpack.from_dlpack(to_dlpack(x))
    assert q.shape == [2, 3] and str(q.dtype) == "paddle.float32"
    array_of(x)[1, 2] = -3
    assert float(q.numpy()[1, 2]) == -3


def test_capsules_are_consumed_once_and_released():
    from oarlock_dlpack import capsule
    x = oarlock.to_tensor(np.ones(3, dtype=ml_dtypes.bfloat16))
    live = len(capsule._LIVE)
    cap = to_dlpack(x)
    y = from_dlpack(cap)
    with pytest.raises(ValueError, match="unused DLPack capsule named 'dltensor'.*used_dltensor"):
        from_dlpack(cap)
    del y
    gc.collect()
    to_dlpack(x)                                   # made and dropped unused
    gc.collect()
    assert len(capsule._LIVE) == live


def test_bad_input_is_named():
    with pytest.raises(TypeError, match=r"to_dlpack\(\): argument 'x' must be an oarlock.Tensor, got list"):
        to_dlpack([1, 2])
    with pytest.raises(TypeError, match=r"from_dlpack\(\): argument 'dlpack' must be a DLPack capsule .* got int"):
        from_dlpack(3)
    frozen = np.zeros(3, dtype=ml_dtypes.bfloat16)
    frozen.flags.writeable = False
    with pytest.raises(BufferError, match="read-only"):
        to_dlpack(from_dlpack(frozen))


def test_cupy_both_ways():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed here (GPU exchange goes through oarlock-cuda)")
    try:
        cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:   # noqa: BLE001 - any CUDA failure means no usable GPU
        pytest.skip(f"no usable GPU: {exc}")
    c = cupy.arange(6, dtype=cupy.float32)
    x = from_dlpack(c)
    assert x.place.is_gpu_place()
    c[0] = 7
    assert float(array_of(x)[0]) == 7
    back = cupy.from_dlpack(to_dlpack(x))
    back[1] = -1
    assert float(c[1]) == -1
