"""oarlock-cpu's C kernels (oarlock_cpu._kernels: erf, gelu, gelu_grad, sigmoid, silu, silu_grad) against
oracles written elsewhere: mpmath at 40 digits (and math.erf), in ulps of the result's dtype, on edge values
and on random inputs across magnitudes; and against the generic numpy kernels they replace on "cpu"."""

from __future__ import annotations

import math

import numpy as np
import pytest

kernels = pytest.importorskip("oarlock_cpu._kernels")
mp = pytest.importorskip("mpmath")

from oarlock_cpu.kernels import generic  # noqa: E402

mp.mp.dps = 40
SQRT2 = mp.sqrt(2)

# float64 keeps a few ulps of the double-precision series. float32 is computed in float arithmetic:
# its bounds are the maxima measured over 4M inputs against the float64 kernels (erf 1.96, sigmoid 2.71,
# silu 3.29, silu_grad 4.37, gelu 4.87, gelu_grad 5.15 ulps), rounded up: exp's and the erfc series'
# roundings at float's ulp, and t = 2/(2 + z) in the erfc form, whose rounding the tail amplifies
ULPS = {np.float32: 1.0, np.float64: 4.0}
FLOAT32_ULPS = {"erf": 2.0, "sigmoid": 3.0, "silu": 3.5, "silu_grad": 4.5, "gelu": 5.0, "gelu_grad": 5.5}


def bound(name, dtype):
    return FLOAT32_ULPS[name] if dtype == np.float32 else ULPS[dtype]


def _phi(x):
    return mp.ncdf(x)


REFERENCE = {  # name -> f(x[, g]) in mpmath
    "erf": lambda x: mp.erf(x),
    "gelu": lambda x: x * _phi(x),
    "gelu_grad": lambda x, g: g * (_phi(x) + x * mp.npdf(x)),
    "sigmoid": lambda x: 1 / (1 + mp.exp(-x)),
    "silu": lambda x: x / (1 + mp.exp(-x)),
    "silu_grad": lambda x, g: g * (1 / (1 + mp.exp(-x))) * (1 + x * (1 - 1 / (1 + mp.exp(-x)))),
}
BINARY = ("gelu_grad", "silu_grad")


def reference(name, x, g=None):
    f = REFERENCE[name]
    args = [x] if g is None else [x, g]
    return np.array([float(f(*(mp.mpf(float(v)) for v in vs))) for vs in zip(*args)])


def ulp_error(out, ref, dtype):
    """|out - ref| in units of the spacing of dtype at ref (the smallest subnormal below the normal range)."""
    spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
    return np.abs(out.astype(np.float64) - ref) / spacing


def call(name, x, g=None):
    fn = getattr(kernels, name)
    return fn(x) if g is None else fn(x, g)


def inputs(dtype, n=400, seed=0):
    """Random values across magnitudes, both signs, from 1e-6 to 40 (where gelu's tail underflows in double)."""
    rng = np.random.default_rng(seed)
    mags = 10.0 ** rng.uniform(-6, math.log10(40), n)
    return (mags * rng.choice([-1.0, 1.0], n)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(REFERENCE))
def test_random_inputs_within_ulps(name, dtype):
    x = inputs(dtype)
    g = inputs(dtype, seed=1) if name in BINARY else None
    ref = reference(name, x, g)
    # the grads' references are differences of rounded terms near their zero crossings: measure those
    # in ulps of the larger term instead of the tiny result
    scale = np.abs(reference(name.removesuffix("_grad"), x) * g) if g is not None else np.abs(ref)
    err = ulp_error(call(name, x, g), ref, dtype) * np.spacing(np.abs(ref).astype(dtype)) / np.spacing(
        np.maximum(np.abs(ref), scale).astype(dtype))
    limit = bound(name, dtype) * (1 if dtype == np.float32 or g is None else 2)
    assert err.max() <= limit, (name, dtype.__name__, x[err.argmax()], err.max())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_against_math_erf_on_a_dense_grid(dtype):
    x = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-300, 1e-3, 500)]).astype(dtype)
    ref = np.array([math.erf(float(v)) for v in x])
    assert ulp_error(kernels.erf(x), ref, dtype).max() <= bound("erf", dtype) + 1  # math.erf's own: under 1 ulp


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_tail_keeps_relative_accuracy(dtype):
    # x Phi(x) for large negative x: from erfc, not 1 + erf (which would give 0 or garbage there)
    lo = -13.0 if dtype == np.float32 else -37.0
    x = np.linspace(lo, -4.0, 300).astype(dtype)
    ref = reference("gelu", x)
    assert (ulp_error(kernels.gelu(x), ref, dtype) <= bound("gelu", dtype)).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_special_values(dtype):
    info = np.finfo(dtype)
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal, -info.smallest_subnormal,
                  info.tiny, info.max, -info.max, 1e8, -1e8], dtype=dtype)
    with np.errstate(all="raise"):  # no spurious FP warnings (inf * 0 in a discarded branch)
        check_special_values(x, dtype)


def check_special_values(x, dtype):
    info = np.finfo(dtype)
    erf = kernels.erf(x)
    assert np.isnan(erf[0]) and list(erf[1:3]) == [1.0, -1.0]
    assert np.signbit(erf[4]) and erf[3] == 0 and not np.signbit(erf[3])
    sub = float(info.smallest_subnormal)
    assert erf[5] == dtype(2 / math.sqrt(math.pi) * sub) and erf[6] == -erf[5]  # erf(x) ~ 2x/sqrt(pi)
    assert list(erf[8:]) == [1.0, -1.0, 1.0, -1.0]

    gelu = kernels.gelu(x)
    assert np.isnan(gelu[0]) and gelu[1] == np.inf
    assert gelu[2] == 0 and np.signbit(gelu[2])  # the limit, where x * Phi(x) would be -inf * 0
    assert gelu[3] == 0 and np.signbit(gelu[4]) and gelu[5] == dtype(sub / 2) or gelu[5] == 0
    assert gelu[8] == info.max and gelu[9] == 0 and gelu[10] == 1e8 and gelu[11] == 0

    ones = np.ones_like(x)
    grad = kernels.gelu_grad(x, ones)
    assert np.isnan(grad[0]) and list(grad[1:5]) == [1.0, 0.0, 0.5, 0.5] and list(grad[8:]) == [1, 0, 1, 0]

    sig = kernels.sigmoid(x)
    assert np.isnan(sig[0]) and list(sig[1:5]) == [1.0, 0.0, 0.5, 0.5] and list(sig[8:]) == [1, 0, 1, 0]
    silu = kernels.silu(x)
    assert np.isnan(silu[0]) and silu[1] == np.inf and silu[2] == 0 and np.signbit(silu[4])
    silu_grad = kernels.silu_grad(x, ones)
    assert np.isnan(silu_grad[0]) and list(silu_grad[1:5]) == [1.0, 0.0, 0.5, 0.5]

    nan_payload = np.array([np.nan], dtype=dtype)  # NaN comes back as the input's NaN
    assert np.isnan(kernels.gelu_grad(np.array([1.0], dtype=dtype), nan_payload)[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts(dtype):
    """Strided views, in-place calls, 0-d and empty arrays, and lengths around the C code's block size."""
    base = inputs(dtype, n=3000, seed=3)
    for n in (0, 1, 7, 511, 512, 513, 1025):
        x = base[:n]
        assert np.array_equal(kernels.gelu(x), kernels.gelu(x.copy()))
    strided = base[::3]
    np.testing.assert_array_equal(kernels.erf(strided), kernels.erf(strided.copy()))
    np.testing.assert_array_equal(kernels.gelu_grad(strided, base[1::3]), kernels.gelu_grad(strided.copy(),
                                                                                            base[1::3].copy()))
    expected = kernels.silu(base)
    inplace = base.copy()
    kernels.silu(inplace, out=inplace)
    np.testing.assert_array_equal(inplace, expected)
    assert kernels.erf(np.array(0.5, dtype=dtype)) == dtype(math.erf(0.5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["erf", "gelu", "gelu_grad", "sigmoid", "silu", "silu_grad"])
def test_agrees_with_the_generic_kernel(name, dtype):
    """The generic numpy kernels of oarlock-ops (what "cpu" used before) agree, to their own accuracy."""
    pytest.importorskip("oarlock_ops")
    import oarlock  # noqa: F401  (loads the plugins, so the generic kernels are registered)
    x = inputs(dtype, n=2000, seed=4)
    x = x[np.abs(x) < 30]  # the generic gelu_grad's 1 + erf form has no tail accuracy to compare
    if name in BINARY:
        g = inputs(dtype, n=x.size, seed=5)
        ours, theirs = kernels.__dict__[name](x, g), generic(name)(np, x, g)
    else:
        ours, theirs = kernels.__dict__[name](x), generic(name)(np, x)
    # the generic float32 kernels compute in float32 and lose relative accuracy in the tails: compare
    # there in absolute terms (test_random_inputs_within_ulps holds ours to the ulp)
    rtol, atol = (2e-6, 1e-6) if dtype == np.float32 else (1e-13, 1e-15)
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol)


def test_registered_for_cpu_and_used_by_the_ops():
    oarlock = pytest.importorskip("oarlock")
    from oarlock.plugin_api import default_registry
    from oarlock_cpu import kernels as cpu_kernels
    registry = default_registry()
    x = oarlock.to_tensor(np.linspace(-3, 3, 13).astype("float32"), stop_gradient=False)
    for op in ("erf", "gelu", "sigmoid", "silu"):
        assert registry.find_kernel(op, "cpu", x.dtype) is cpu_kernels.KERNELS[op]
    assert registry.find_kernel("gelu", "cpu", oarlock.bfloat16) is not cpu_kernels.gelu  # generic for others
    y = oarlock.nn.functional.gelu(x)
    y.sum().backward()
    xs = x.numpy().astype(np.float64)
    np.testing.assert_allclose(y.numpy(), reference("gelu", xs), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(x.grad.numpy(), reference("gelu_grad", xs, np.ones_like(xs)), rtol=1e-6, atol=1e-7)
    # gelu's tanh form is not ours: the generic kernel answers it
    tanh_form = oarlock.nn.functional.gelu(x, approximate=True).numpy()
    np.testing.assert_allclose(tanh_form, generic("gelu")(np, x.numpy(), approximate=True))


@pytest.mark.parametrize("name,lo,hi", [("sigmoid", -104.0, -80.0), ("silu", -110.0, -80.0),
                                        ("silu_grad", -110.0, -80.0), ("gelu", -14.5, -12.0),
                                        ("gelu_grad", -14.5, -12.0), ("erf", 8.5, 9.5)])
def test_float32_underflowing_tails(name, lo, hi):
    """Where float32 results (or exp's intermediate) leave the normal range: scaled by 2^64 and rounded once
    into the subnormals at the end (within the bound, the subnormal spacing being absolute there)."""
    x = np.linspace(lo, hi, 301).astype(np.float32)
    g = np.full_like(x, 0.75) if name in BINARY else None
    ref = reference(name, x, g)
    err = ulp_error(call(name, x, g), ref, np.float32)
    assert err.max() <= bound(name, np.float32), (name, x[err.argmax()], err.max())
