"""The CUDA kernels of FP8 (oarlock_incubate/kernels/fp8.cu, registered for device "gpu") without a GPU: the
same source compiled for the host by oarlock-cuda's emulation (CUDA threads as fibers, warp shuffles, barriers)
and run on numpy arrays, against the generic kernels: the quantizers bit for bit (codes and decode scales; both
methods, pow2 on and off, epsilon, e5m2, zeros, inf, NaN, a subnormal block maximum, ragged sizes), the GEMM
within float32 summation-order differences (nvcc compiling the source: test_fp8_tc.py). The GPU run is owed."""

import os
import sys

import ml_dtypes
import numpy as np
import pytest

from oarlock_incubate import fp8_ops

sys.path.insert(0, os.path.dirname(__file__))   # fp8_reference, next to this file
import fp8_reference as ref  # noqa: E402

emulation = pytest.importorskip("oarlock_cuda.emulation", reason="oarlock-cuda's host emulation is not installed")


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if emulation.gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    previous = fp8_ops.RUNTIME
    fp8_ops.RUNTIME = emulation.HostRuntime(tmp_path_factory.mktemp("fp8emu"), fp8_ops.source,
                                            lambda family: fp8_ops.KERNELS)
    try:
        yield fp8_ops.RUNTIME
    finally:
        fp8_ops.RUNTIME = previous


def _input(m, k):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal([m, k]) * np.exp(rng.uniform(-8, 8, [m, 1]))).astype(np.float32)
    x[0, :128] = 0.0
    x[1, 5], x[2, 7], x[4, 9] = np.inf, np.nan, -3e38
    x[3, :128] = 1e-37
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


@pytest.mark.parametrize("method", ["1x128", "128x128"])
@pytest.mark.parametrize("pow2, eps, fmt", [(True, 0.0, "e4m3"), (False, 1e-3, "e4m3"), (True, 0.0, "e5m2")])
def test_quant_kernels_equal_the_generic_kernel(host, method, pow2, eps, fmt):
    x = _input(200, 320)
    codes, decode = fp8_ops.quant_gpu(np, x, method, eps, pow2, fmt)
    want_codes, want_decode = fp8_ops.quant_generic(np, x, method, eps, pow2, fmt)
    np.testing.assert_array_equal(decode, want_decode)
    nan = np.isnan(fp8_ops._decode_codes(want_codes, fmt))
    np.testing.assert_array_equal(np.isnan(fp8_ops._decode_codes(codes, fmt)), nan)
    np.testing.assert_array_equal(np.where(nan, 0, codes), np.where(nan, 0, want_codes))


def test_gemm_kernel_equals_the_generic_kernel(host):
    rng = np.random.default_rng(1)
    a = rng.standard_normal([40, 300]).astype(np.float32)
    b = rng.standard_normal([24, 300]).astype(np.float32)
    qa, sa = fp8_ops.quant_generic(np, a, "1x128", 0.0, True, "e4m3")
    qb, sb = fp8_ops.quant_generic(np, b, "1x128", 0.0, True, "e5m2")
    got = fp8_ops.gemm_gpu(np, qa, sa, qb, sb, "e4m3", "e5m2")
    want = fp8_ops.gemm_generic(np, qa, sa, qb, sb, "e4m3", "e5m2")
    da = ref.decode(qa, "e4m3") * np.repeat(sa, 128, axis=1)[:, :300]
    db = ref.decode(qb, "e5m2") * np.repeat(sb, 128, axis=1)[:, :300]
    bound = (128 + 3) * 2.0 ** -24 * (np.abs(da) @ np.abs(db).T)
    assert np.all(np.abs(got - da @ db.T) <= bound) and np.all(np.abs(want - da @ db.T) <= bound)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
