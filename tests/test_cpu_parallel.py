"""oarlock_cpu.parallel: large elementwise and row C kernels run in pieces on the worker pool and give the bits of
one thread's call; the thread count follows the BLAS thread policy."""

from __future__ import annotations

import threading

import numpy as np
import pytest

_kernels = pytest.importorskip("oarlock_cpu._kernels", reason="oarlock-cpu's C extension is not built")
_rows = pytest.importorskip("oarlock_cpu._rows", reason="oarlock-cpu's C extension is not built")
from oarlock_cpu import blas, parallel  # noqa: E402

N = 51 * 3 * 811   # several pieces, a size no piece boundary divides; 51 columns for the rows


@pytest.fixture
def policy():
    """Set a forced thread count for one test; the previous policy (and the extensions' count) afterwards."""
    saved = []

    def use(threads):
        saved.append(blas.set_policy(blas.ThreadPolicy(forced=threads)))
        parallel.sync_threads()
    yield use
    if saved:
        blas.set_policy(saved[0])
        parallel.sync_threads()


def _ufunc_results(x, g):
    return [_kernels.silu(x), _kernels.gelu_grad(x, g), _kernels.erf(x.reshape(-1, 3)), _kernels.exp(x)]


def _update_results(x, g):
    """One AdamW and one SGD step in place on copies (the updates split over the pool like the kernels)."""
    from oarlock_cpu import _optim
    kind = x.dtype.type
    p, m1, m2 = x.copy(), g * kind(0.1), np.abs(g)
    scalars = [kind(s) for s in (0.999, 0.0, 0.1, 0.999, 0.001, 1e-8, 1e-3)]
    _optim.adam(p, g, m1, m2, *scalars, out=(p, m1, m2))
    q = x.copy()
    _optim.sgd(q, g, kind(0.01), kind(0.1), out=q)
    return [p, m1, m2, q]


def _row_results(x, g):
    rows = x.reshape(-1, 51)   # 51 columns: a piece is many rows, and rows do not align with anything
    grad = g.reshape(rows.shape)
    w = np.linspace(0.5, 1.5, rows.shape[1]).astype(x.dtype)
    out, mean, rstd = np.empty_like(rows), np.empty((len(rows), 1), x.dtype), np.empty((len(rows), 1), x.dtype)
    _rows.layer_norm(rows, w, w, 1e-5, out, mean, rstd)
    rms, rms_rstd = np.empty_like(rows), np.empty((len(rows), 1), x.dtype)
    _rows.rms_norm(rows, w, 1e-6, rms, rms_rstd)
    dx, dw, db = np.empty_like(rows), np.empty_like(w), np.empty_like(w)
    _rows.norm_grad(rows, w, grad, mean, rstd, dx, dw, db)
    return [out, mean, rstd, rms, rms_rstd, dx, dw, db]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pieces_on_two_threads_give_one_threads_bits(policy, dtype):
    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal(N).astype(dtype) * 4 for _ in range(2))
    policy(1)
    one = _ufunc_results(x, g) + _row_results(x, g) + _update_results(x, g)
    policy(2)
    two = _ufunc_results(x, g) + _row_results(x, g) + _update_results(x, g)
    for a, b in zip(one, two):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_the_policy_sets_the_extensions_thread_count(policy):
    policy(1)
    assert parallel.kernel_threads() == 1
    policy(2)
    assert parallel.kernel_threads() == 2 and parallel._told[0] == 2
    with pytest.raises(ValueError, match="set_threads"):
        _kernels.set_threads(0)


def test_strided_small_and_0d_inputs(policy):
    policy(2)
    x = np.linspace(-3, 3, N, dtype=np.float32)
    np.testing.assert_array_equal(parallel.run_ufunc(_kernels.silu, x[::3]), _kernels.silu(x)[::3])
    np.testing.assert_array_equal(parallel.run_ufunc(_kernels.silu, x[:100]), _kernels.silu(x)[:100])
    assert parallel.run_ufunc(_kernels.silu, np.float32(2.0)).shape == ()


def test_calls_from_several_threads_at_once(policy):
    """While one call holds the pool, another thread's call runs on its own thread: both right, no deadlock."""
    policy(2)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(N).astype(np.float32) for _ in range(4)]
    want = [_kernels.gelu(x) for x in inputs]
    got = [None] * len(inputs)

    def work(i):
        for _ in range(5):
            got[i] = _kernels.gelu(inputs[i])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
