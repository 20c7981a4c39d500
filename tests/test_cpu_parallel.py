"""oarlock_cpu.parallel: large elementwise C kernels split over two threads give the single call's bits."""

from __future__ import annotations

import numpy as np
import pytest

_kernels = pytest.importorskip("oarlock_cpu._kernels", reason="oarlock-cpu's C extension is not built")
from oarlock_cpu import blas, parallel  # noqa: E402


@pytest.fixture(params=[1, 2], ids=["one_core", "two_cores"])
def cores(request):
    previous = blas.set_policy(blas.ThreadPolicy(forced=request.param))
    yield request.param
    blas.set_policy(previous)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_split_calls_match_one_call_bit_for_bit(cores, dtype):
    rng = np.random.default_rng(0)
    n = (parallel.MIN_ELEMENTS * 3 + 17) * 7   # halves not a multiple of the split alignment
    x, g = (rng.standard_normal(n).astype(dtype) * 4 for _ in range(2))
    for ufunc, args in ((_kernels.silu, (x,)), (_kernels.gelu_grad, (x, g)), (_kernels.erf, (x.reshape(-1, 7),))):
        got = parallel.split_ufunc(ufunc, *args)
        want = ufunc(*args)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_small_strided_and_mixed_inputs_take_one_call(cores):
    x = np.linspace(-3, 3, parallel.MIN_ELEMENTS * 2, dtype=np.float32)
    for args in ((x[:100],), (x[::2],), (x, x.astype(np.float64))):
        np.testing.assert_array_equal(parallel.split_ufunc(_kernels.silu_grad if len(args) == 2 else _kernels.silu,
                                                           *args),
                                      (_kernels.silu_grad if len(args) == 2 else _kernels.silu)(*args))
    assert parallel.split_ufunc(_kernels.silu, np.float32(2.0)).shape == ()


def test_an_error_on_the_worker_reaches_the_caller():
    previous = blas.set_policy(blas.ThreadPolicy(forced=2))
    try:
        def broken(*args):
            raise RuntimeError("worker half failed")
        with pytest.raises(RuntimeError, match="worker half failed"):
            parallel.split_ufunc(broken, np.zeros(parallel.MIN_ELEMENTS * 2, np.float32))
    finally:
        blas.set_policy(previous)
