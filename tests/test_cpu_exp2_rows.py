"""oarlock-cpu's exp2_rows (oarlock_cpu._kernels.exp2_rows through fastmath.exp2_rows): the FlashMask backward's
P = 2^(s - lse) and row sums in one pass. Against float64 numpy, bit for bit against the exp2 ufunc of x - bias
(so the backward's P is unchanged), with the strided bias columns the kernel passes, special values, numpy's
passes for other dtypes, and errors that name the argument."""

from __future__ import annotations

import numpy as np
import pytest

kernels = pytest.importorskip("oarlock_cpu._kernels")
if not hasattr(kernels, "exp2_rows"):
    pytest.skip("oarlock_cpu._kernels was built before exp2_rows", allow_module_level=True)

from oarlock_cpu import fastmath  # noqa: E402

RNG = np.random.default_rng(0)


def test_values_sums_and_bits():
    x = (RNG.standard_normal((2, 300, 133)) * 20).astype(np.float32)   # 133: a tail past the 16 lanes
    lse = (RNG.standard_normal((2, 1000, 1)) * 20).astype(np.float32)
    bias = lse[:, 100:400]                                               # a strided [A, R, 1] column
    sums = np.empty((2, 300, 1), np.float32)
    y = x.copy()
    assert fastmath.exp2_rows(y, bias, sums) is y
    ref = np.exp2((x - bias).astype(np.float64))   # x - bias rounds to float32 first, as in the kernel
    normal = ref > np.finfo(np.float32).tiny
    assert (np.abs(y - ref)[normal] / ref[normal]).max() < 3 * np.finfo(np.float32).eps   # within 2 ulp
    expect = x - bias
    kernels.exp2(expect, out=expect)
    np.testing.assert_array_equal(y, expect)
    ref_sums = ref.sum(axis=-1, keepdims=True)
    assert (np.abs(sums - ref_sums) / ref_sums).max() < 1e-5


def test_no_bias_no_sums_and_special_values():
    x = np.array([[[0.0, 1.0, -np.inf, np.nan, 200.0, -200.0, 3.5]]], np.float32)
    y = x.copy()
    fastmath.exp2_rows(y)
    np.testing.assert_array_equal(y[..., [0, 1, 2, 4, 5]], np.array([[[1.0, 2.0, 0.0, np.inf, 0.0]]], np.float32))
    assert np.isnan(y[0, 0, 3]) and abs(y[0, 0, 6] - 2 ** 3.5) < 1e-5
    huge = np.full((1, 1, 1), 1e30, np.float32)   # the backward's lse for rows that saw no key: P = 0
    z = x[..., [0, 1, 4]].copy()
    s = np.empty((1, 1, 1), np.float32)
    fastmath.exp2_rows(z, huge, s)
    assert not z.any() and s[0, 0, 0] == 0


def test_other_dtypes_take_numpys_passes():
    x = RNG.standard_normal((2, 3, 5))
    b = RNG.standard_normal((2, 3, 1))
    s = np.empty((2, 3, 1))
    y = fastmath.exp2_rows(x.copy(), b, s)
    np.testing.assert_allclose(y, np.exp2(x - b), rtol=1e-15)
    np.testing.assert_allclose(s, np.exp2(x - b).sum(-1, keepdims=True), rtol=1e-15)


def test_bad_arguments_name_what_they_got():
    x = np.zeros((2, 3, 4), np.float32)
    with pytest.raises(TypeError, match="'bias'.*float32 array of shape \\[2, 3, 1\\]"):
        kernels.exp2_rows(x, np.zeros((2, 4, 1), np.float32), None)
    with pytest.raises(TypeError, match="'sums'.*writeable"):
        ro = np.zeros((2, 3, 1), np.float32)
        ro.flags.writeable = False
        kernels.exp2_rows(x, None, ro)
    with pytest.raises(TypeError, match="'x'.*3-D float32"):
        kernels.exp2_rows(np.zeros((3, 4), np.float32), None, None)
