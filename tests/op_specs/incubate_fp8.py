"""oarlock-incubate: fp8_quant_op and fp8_gemm_op, the internal ops behind oarlock.incubate.nn.functional's
fp8_quant_blockwise and fp8_gemm_blockwise (uint8 codes of e4m3 / e5m2, float32 decode scales). Checked here
against float64 numpy on small cases; plugins/incubate/tests/test_fp8_quant.py has the bit-exact matrix against
an independent reference and test_fp8_kernels.py the CUDA kernels (host emulation)."""

import ml_dtypes
import numpy as np

from op_specs.base import OpSpec, library_op


def _check_quant(oarlock):
    x = np.array([[0.0] * 127 + [448.0], [3.0, -1.5] + [0.25] * 126], np.float32)
    codes, decode = library_op("fp8_quant_op")(oarlock.to_tensor(x), "1x128", 0.0, False, "e4m3")
    assert codes.dtype == oarlock.uint8 and list(decode.shape) == [2, 1]
    scale = 448.0 / np.abs(x).max(axis=1, keepdims=True)                   # not rounded to a power of two
    np.testing.assert_array_equal(decode.numpy(), (1 / scale).astype(np.float32))
    want = (x * scale).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)       # exact products, no ties here
    np.testing.assert_array_equal(codes.numpy(), want)
    codes, decode = library_op("fp8_quant_op")(oarlock.to_tensor(np.zeros([130, 3], np.float32)), "128x128")
    assert list(decode.shape) == [2, 1] and np.all(decode.numpy() == 1) and not codes.numpy().any()


def _check_gemm(oarlock):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 0x7E, [3, 200]).astype(np.uint8)                   # e4m3 codes, finite
    b = rng.integers(0, 0x7B, [2, 200]).astype(np.uint8)                   # e5m2 codes, finite
    sa, sb = rng.uniform(0.5, 2, [3, 2]).astype(np.float32), rng.uniform(0.5, 2, [2, 2]).astype(np.float32)
    out = library_op("fp8_gemm_op")(*(oarlock.to_tensor(v) for v in (a, sa, b, sb)), "e4m3", "e5m2")
    va = a.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * np.repeat(sa, 128, axis=1)[:, :200]
    vb = b.view(ml_dtypes.float8_e5m2).astype(np.float64) * np.repeat(sb, 128, axis=1)[:, :200]
    np.testing.assert_allclose(out.numpy(), va @ vb.T, rtol=1e-5, atol=1e-3 * np.abs(va @ vb.T).max())


SPECS = [
    OpSpec("fp8_quant_op", [], check=_check_quant),
    OpSpec("fp8_gemm_op", [], check=_check_gemm),
]
