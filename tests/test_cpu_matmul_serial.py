"""oarlock-cpu's `matmul_serial` array function (oarlock_cpu.mkl): numpy.matmul by MKL on the calling thread alone,
for kernels that run products on threads of their own (oarlock-flashmask's tile pool). On the operand layouts the
FlashMask kernel passes it (slices of padded K^T, V with an extra column, transposed tiles, out= scratch views)
against float64 numpy within float32 rounding; it starts no MKL worker threads where `matmul` does; what MKL does
not take gives numpy's own result."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from oarlock_cpu import mkl

pytestmark = pytest.mark.skipif(mkl.LIBRARY is None, reason="the mkl wheel is not installed (non-x86-64 Linux)")

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def close(got, a, b):
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = 4 * a.shape[-1] * np.finfo(np.float32).eps * np.abs(a).max() * np.abs(b).max()
    assert got.shape == ref.shape and got.dtype == np.float32
    assert np.abs(got - ref).max() <= bound


def test_offered_to_kernels_generic_over_xp():
    import oarlock  # noqa: F401  (registers the cpu backend)
    from oarlock.plugin_api import xp_function
    assert xp_function(np, "matmul_serial") is mkl.matmul_serial


def test_flashmask_layouts_into_out_views():
    q = rand(2, 256, 64)
    kt = rand(2, 64, 1040)[..., :1024]          # K^T rows padded off a power-of-two stride, a column slice
    v = rand(2, 1024, 65)                        # V with an extra column
    flat = np.empty(2 * 128 * 512, np.float32)   # a scratch buffer the score tile is a view of
    s = flat[:2 * 128 * 384].reshape(2, 128, 384)
    got = mkl.matmul_serial(q[:, 128:], kt[..., 256:640], out=s)
    assert got is s
    close(s, q[:, 128:], kt[..., 256:640])
    pv = np.empty((2, 128, 65), np.float32)
    close(mkl.matmul_serial(s, v[:, 256:640], out=pv), s, v[:, 256:640])
    dk = np.empty((2, 384, 64), np.float32)      # dS^T Q: a transposed tile
    close(mkl.matmul_serial(s.swapaxes(-1, -2), q[:, 128:], out=dk), s.swapaxes(-1, -2), q[:, 128:])
    do = rand(2, 128, 65)
    close(mkl.matmul_serial(s.swapaxes(-1, -2), do[..., :64]), s.swapaxes(-1, -2), do[..., :64])


def test_what_mkl_does_not_take_is_numpys():
    a = RNG.integers(-5, 5, (3, 4))
    b = RNG.integers(-5, 5, (4, 2))
    np.testing.assert_array_equal(mkl.matmul_serial(a, b), np.matmul(a, b))
    with pytest.raises(ValueError):
        mkl.matmul_serial(rand(3, 4), rand(5, 2))


SCRIPT = """
import os
import numpy as np
from oarlock_cpu import mkl
a = np.ones((1024, 1024), np.float32)
mkl.matmul_serial(a, a)
serial = len(os.listdir('/proc/self/task'))
mkl.matmul(a, a)
print(serial, len(os.listdir('/proc/self/task')))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or len(os.sched_getaffinity(0)) < 2,
                    reason="counts threads in /proc/self/task; needs 2 usable cores")
def test_starts_no_mkl_worker_threads():
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True,
                         env={**os.environ, "OARLOCK_BLAS_THREADS": "", "OARLOCK_CPU_MKL": "threads"})
    serial, policy = (int(x) for x in run.stdout.split()[-2:])
    assert serial < policy, (serial, policy)   # the policy's 2 threads for 1024^3 start an OpenMP worker
