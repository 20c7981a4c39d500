"""oarlock-cpu's vectorised float32 exp and exp2 (oarlock_cpu._kernels, served to kernels generic over xp by
plugin_api.xp_function): within 1 ulp of the correctly rounded float64 result over float's whole range (numpy
float64 and mpmath as oracles), libm's special values, and numpy's own function for every other dtype."""

from __future__ import annotations

import numpy as np
import pytest

kernels = pytest.importorskip("oarlock_cpu._kernels")
mp = pytest.importorskip("mpmath")

from oarlock.plugin_api import xp_function  # noqa: E402
from oarlock_cpu import fastmath  # noqa: E402

NAMES = {"exp": (np.exp, mp.exp, (-110.0, 90.0)), "exp2": (np.exp2, lambda v: mp.mpf(2) ** v, (-155.0, 130.0))}


def ulps(got, ref64):
    """|got - ref| in ulps of the float32 result (the subnormal spacing below the normal range)."""
    spacing = np.spacing(np.abs(ref64.astype(np.float32))).astype(np.float64)
    return np.abs(got.astype(np.float64) - ref64) / spacing


@pytest.mark.parametrize("name", NAMES)
def test_within_one_ulp_across_the_range(name):
    plain, _, (lo, hi) = NAMES[name]
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(lo, hi, 1_000_000), rng.uniform(-1, 1, 200_000),
                        rng.uniform(-1e-6, 1e-6, 10_000)]).astype(np.float32)
    with np.errstate(over="ignore"):
        ref = plain(x.astype(np.float64))
    finite = ref < np.finfo(np.float32).max
    got = getattr(kernels, name)(x)
    assert ulps(got[finite], ref[finite]).max() <= 1.0
    assert np.isposinf(got[~finite]).all()


@pytest.mark.parametrize("name", NAMES)
def test_against_mpmath_near_the_ends(name):
    plain, exact, (lo, hi) = NAMES[name]
    ends = {"exp": [-103.9, -100.0, -87.4, -87.3, 0.3465, 88.7], "exp2": [-149.9, -140.0, -126.1, -0.5, 0.5, 127.9]}
    x = np.array(ends[name], np.float32)
    ref = np.array([float(exact(mp.mpf(float(v)))) for v in x])
    assert ulps(getattr(kernels, name)(x), ref).max() <= 1.0


@pytest.mark.parametrize("name", NAMES)
def test_special_values_as_numpy(name):
    plain = NAMES[name][0]
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, 89.0, 129.0, 1e30, -104.0, -151.0, -1e30], np.float32)
    with np.errstate(over="ignore"):
        want = plain(x)
    got = getattr(kernels, name)(x)
    np.testing.assert_array_equal(got, want)   # NaN in the same place, infinities and zeros alike


@pytest.mark.parametrize("name", NAMES)
def test_drop_in_keeps_numpys_behaviour_for_other_dtypes(name):
    plain, fn = NAMES[name][0], fastmath.FUNCTIONS[name]
    for dtype in (np.float16, np.float64, np.complex64, np.int32):
        x = np.arange(-3, 4).astype(dtype)
        got, want = fn(x), plain(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    x = np.linspace(-5, 5, 37, dtype=np.float32)[::2]         # strided, and in place through out=
    out = np.empty_like(x)
    assert fn(x, out=out) is out
    np.testing.assert_allclose(out, plain(x), rtol=2e-7)


def test_xp_function_serves_the_cpu_drop_in_and_plain_functions_elsewhere():
    import oarlock  # noqa: F401  (loads the plugins: the "cpu" backend registers its array functions)
    assert xp_function(np, "exp") is fastmath.FUNCTIONS["exp"]
    assert xp_function(np, "exp2") is fastmath.FUNCTIONS["exp2"]
    assert xp_function(np, "log") is np.log            # no drop-in: the array module's own
    import math

    class OtherModule:
        exp = staticmethod(math.exp)
    assert xp_function(OtherModule, "exp") is OtherModule.exp


def test_environment_switch_turns_them_off():
    import subprocess
    import sys
    code = ("import numpy, oarlock; from oarlock.plugin_api import xp_function; "
            "print(xp_function(numpy, 'exp2') is numpy.exp2, xp_function(numpy, 'exp') is numpy.exp)")
    import os
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "OARLOCK_CPU_FASTMATH": "0"}).stdout.split()
    assert out == ["True", "True"]
