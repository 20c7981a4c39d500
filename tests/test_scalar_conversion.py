"""Python numbers going into tensors are checked as PyTorch 2.13 checks them (issue 16, finding 6): nan,
inf or an out-of-range value into an integer dtype, a complex value with an imaginary part into a real
dtype and a finite value beyond float32 raise instead of storing a wrong value (full, full_like, new_full,
x[i] = v, fill_, masked_fill, to_tensor/tensor of Python data); what torch accepts
(truncation of 2.5, -1 wrapping into uint8, overflow to inf in float16 and in torch.tensor) gives torch's
value. Each case runs in both frameworks: torch's decision is the oracle. Arrays and Tensors converted
between dtypes keep numpy's casts (torch's too), so those cases must not raise.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
from oarlock.dtypes import ScalarConversionError

NAN, INF = float("nan"), float("inf")
MASK = [True, False, True]


def _setitem(make, value):
    def run(*t):
        x = make(*t)
        x[0] = value
        return x
    return run


def _fill(make, value):
    return lambda *t: make(*t).fill_(value)


def _oz(dt):
    return lambda: oarlock.zeros([3], dtype=dt)


def _tz(dt):
    return lambda t: t.zeros(3, dtype=getattr(t, dt))


def _tdt(t, dt):
    return None if dt is None else getattr(t, dt)


o = oarlock
# (name, ours(), theirs(torch), the words ours' error must hold when torch raises)
CASES = [
    *[(f"full[{v!r}-{dt}]", lambda v=v, dt=dt: o.full([2], v, dtype=dt),
       lambda t, v=v, dt=dt: t.full([2], v, dtype=getattr(t, dt)), ("oarlock.full()", "fill_value"))
      for v, dt in [(NAN, "int32"), (INF, "int64"), (-INF, "int8"), (300, "uint8"), (-1, "uint8"), (-256, "uint8"),
                    (2.5, "int32"), (-2.5, "int64"), (2147483647.5, "int32"), (1e10, "int32"), (-0.5, "uint8"),
                    (2 ** 63, "int64"), (-2 ** 63, "int64"), (128, "int8"), (True, "int32"), (2, "bool"),
                    (NAN, "bool"), (1 + 2j, "float32"), (1 + 0j, "float32"), (1 + 2j, "int32"), (1 + 0j, "int32"),
                    (complex(1, NAN), "float32"), (1e300, "float32"), (3.5e38, "float32"), (INF, "float32"),
                    (1e300, "float16"), (1e39, "bfloat16"), (NAN, "float16"), (1e300 + 1j, "complex64"),
                    (1e300 + 1j, "complex128")]],
    ("full_like[nan-int32]", lambda: o.full_like(o.zeros([2], dtype="int32"), NAN),
     lambda t: t.full_like(t.zeros(2, dtype=t.int32), NAN), ("oarlock.full", "fill_value")),
    ("new_full[inf-int64]", lambda: o.zeros([1], dtype="int64").new_full([2], INF),
     lambda t: t.zeros(1, dtype=t.int64).new_full([2], INF), ("oarlock.full", "fill_value")),
    # x[0] = value
    *[(f"setitem[{v!r}-{dt}]", _setitem(_oz(dt), v), _setitem(_tz(dt), v), ("Tensor.__setitem__()", "value"))
      for v, dt in [(5 + 2j, "float32"), (5 + 0j, "float32"), (NAN, "int32"), (INF, "int32"), (2 ** 40, "int32"),
                    (2.5, "int32"), (300, "uint8"), (-1, "uint8"), (1e300, "float32"), (2, "bool"),
                    (np.float64(NAN), "int64")]],
    # x.fill_(value)
    *[(f"fill_[{v!r}-{dt}]", _fill(_oz(dt), v), _fill(_tz(dt), v), ("Tensor.fill_()", "value"))
      for v, dt in [(NAN, "int32"), (2 ** 63, "int64"), (2 ** 40, "int32"), (1 + 2j, "float32"), (2.5, "int32"),
                    (1e300, "float32")]],
    # x.masked_fill(mask, value)
    *[(f"masked_fill[{v!r}-{dt}]", lambda v=v, dt=dt: o.zeros([3], dtype=dt).masked_fill(o.to_tensor(MASK), v),
       lambda t, v=v, dt=dt: t.zeros(3, dtype=getattr(t, dt)).masked_fill(t.tensor(MASK), v),
       ("oarlock.masked_fill()", "value"))
      for v, dt in [(NAN, "int32"), (2 ** 40, "int32"), (1 + 2j, "float32"), (2.5, "int32"), (-INF, "float32"),
                    (300, "uint8")]],
    # Python data into tensor (torch.tensor) and to_tensor
    *[(f"tensor[{d!r}-{dt}]", lambda d=d, dt=dt: o.tensor(d, dtype=dt),
       lambda t, d=d, dt=dt: t.tensor(d, dtype=_tdt(t, dt)), ("oarlock.tensor()", "data"))
      for d, dt in [([NAN], "int32"), ([1.0, INF], "int32"), ([2.5, -3.7], "int32"), ([2 ** 63], None),
                    (-2 ** 64, None), ([1, 2 ** 63], None), ([1.5, 2 ** 63], None), ([2 ** 63 - 1, -2 ** 63], None),
                    ([300], "uint8"), ([-1], "uint8"), ([[2 ** 40]], "int32"), ([1 + 2j], "float32"),
                    ([1e300], "float32"), ([1e300], "float16"), ([2 ** 63], "float32"), ([NAN], "bool"),
                    (NAN, "int64"), ([True, 2.5], "int32")]],
    ("to_tensor[nan-int32]", lambda: o.to_tensor([[0.0, NAN]], dtype="int32"),
     lambda t: t.tensor([[0.0, NAN]], dtype=t.int32), ("oarlock.to_tensor()", "data")),
    # arrays and tensors keep numpy's (and torch's) unchecked casts
    ("tensor[array-nan-int32]", lambda: o.tensor(np.array([NAN, 1e10]), dtype="int32"),
     lambda t: t.tensor(np.array([NAN, 1e10]), dtype=t.int32), None),
    ("astype[nan-int32]", lambda: o.to_tensor([NAN, 1e10]).astype("int32"),
     lambda t: t.tensor([NAN, 1e10]).to(t.int32), None),
]


@pytest.mark.parametrize("name,ours,theirs,words", CASES, ids=[c[0] for c in CASES])
def test_matches_torch(torch, name, ours, theirs, words):
    try:
        expected = theirs(torch)
    except (RuntimeError, ValueError, TypeError, OverflowError):
        with pytest.raises(ScalarConversionError) as info:
            ours()
        assert isinstance(info.value, ValueError) and isinstance(info.value, RuntimeError)
        for word in words:
            assert word in str(info.value), f"the error should name {word!r}: {info.value}"
        assert "without overflow" in str(info.value) or "imaginary part" in str(info.value), str(info.value)
        return
    got = ours()
    assert got.dtype.name == str(expected.dtype).replace("torch.", "")
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


# Where oarlock decides differently from torch on purpose, the value is spelled out.
def test_documented_differences():
    # torch.tensor refuses any complex into a real dtype (TypeError), torch.full takes 1+0j: both store
    # the real part here, as nothing is lost
    np.testing.assert_array_equal(oarlock.tensor([1 + 0j], dtype="float32").numpy(), [1.0])
    # torch.full goes through int64 and raises for 2**70; the correctly rounded float is stored here
    assert oarlock.full([1], 2 ** 70, dtype="float32").numpy()[0] == np.float32(2.0 ** 70)
    # float8_e4m3fn has no inf: torch saturates 1000 to 448 and ml_dtypes would store nan; refused here
    with pytest.raises(ScalarConversionError, match="float8_e4m3fn"):
        oarlock.full([1], 1000.0, dtype="float8_e4m3fn")


def test_int_scalar_beyond_the_op_dtype_names_the_op_and_argument():
    """torch wraps int32 * 2**40 silently (0); numpy refuses it with a bare message: here the error says
    which op and argument, and what to do."""
    x = oarlock.ones([2], dtype="int32")
    for run, op, arg in ((lambda: x * 2 ** 40, "oarlock.multiply()", "'y'"),
                         (lambda: oarlock.add(oarlock.ones([2], dtype="int64"), 2 ** 64), "oarlock.add()", "'y'")):
        with pytest.raises(ScalarConversionError) as info:
            run()
        for word in (op, arg, "without overflow", "cast that tensor"):
            assert word in str(info.value)
