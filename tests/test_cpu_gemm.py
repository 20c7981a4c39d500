"""oarlock-cpu's matmul through MKL (oarlock_cpu.mkl, oarlock_cpu._gemm): the backend's `matmul` drop-in that
kernels generic over xp reach through plugin_api.xp_function. Every layout it takes (row-major and transposed
matrices, batch strides that merge or not, broadcast batches, a 2-D side, `out=` views whose rows interleave)
against float64 numpy within float32 rounding; every layout it leaves to numpy gives numpy's own result or error;
linear, matmul and attention ops in a model step go through it; OARLOCK_CPU_MKL=0 turns it off."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from oarlock_cpu import mkl

pytestmark = pytest.mark.skipif(mkl.LIBRARY is None, reason="the mkl wheel is not installed (non-x86-64 Linux)")
gemm = pytest.importorskip("oarlock_cpu._gemm")

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def check(a, b, out=None):
    """gemm.matmul(a, b) is taken (not None), has numpy's shape and dtype, and equals the float64 product to
    the dtype's rounding (|error| <= 4 k eps max|a||b|, a dot product's bound)."""
    got = gemm.matmul(a, b, 1) if out is None else gemm.matmul(a, b, 1, out)
    assert got is not None, f"{a.shape}/{a.strides} @ {b.shape}/{b.strides} was left to numpy"
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == ref.shape and got.dtype == a.dtype
    bound = 4 * a.shape[-1] * np.finfo(a.dtype).eps * np.abs(a).max() * np.abs(b).max()
    assert np.abs(got - ref).max() <= bound
    if out is not None:
        assert got is out
    else:
        assert got.flags.c_contiguous


def transposed_storage(x):
    """x's values held column-major: a view whose last two axes are swapped back."""
    return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts_against_float64(dtype):
    a, b = rand(4, 3, 5, 7, dtype=dtype), rand(4, 3, 7, 6, dtype=dtype)
    check(a, b)
    check(a, b[0, 0])                                     # stacked rows times one matrix: one GEMM
    check(a[0, 0], b)                                     # one matrix times a batch (stride 0 for a)
    check(transposed_storage(a), b)
    check(a, transposed_storage(b))
    check(transposed_storage(a), transposed_storage(b))
    check(a[:, :, 1:4], b)                                # a slice of rows: leading dimension > columns
    check(a[..., 1:5], b[:, :, 1:5])                      # a slice of columns
    check(a[::2], b[::2])                                 # batch strides that skip
    check(a[:, :1], b)                                    # broadcast batch dimensions
    check(a, np.broadcast_to(b[:1], b.shape))             # a stride-0 batch
    check(a.reshape(12, 5, 7), b.reshape(12, 7, 6))
    check(rand(1, 7, dtype=dtype), rand(7, 1, dtype=dtype))
    check(rand(6, 1, dtype=dtype), rand(1, 5, dtype=dtype))


def test_attention_views_and_out():
    """SDPA's operands: [B, S, H, D] viewed as [B, Hk, G, S, D] (batch dimensions that do not merge), written
    through out= into the same kind of view (rows of the matrices interleave, so MKL's batch call refuses them
    and each is its own GEMM)."""
    b, s, hk, g, d = 2, 16, 2, 2, 8
    q5 = rand(b, s, hk * g, d).reshape(b, s, hk, g, d).transpose(0, 2, 3, 1, 4)
    kt = rand(b, hk, 1, d, s)
    check(q5, kt)
    check(q5[..., 3:9, :], kt[..., :5])
    buffer = np.full((b, s, hk * g, s), np.nan, np.float32)
    out5 = buffer.reshape(b, s, hk, g, s).transpose(0, 2, 3, 1, 4)
    check(q5, kt, out5)
    assert not np.isnan(buffer).any()
    rows = np.full((4, 3, 9, 6), np.nan, np.float32)
    check(rand(4, 3, 5, 7), rand(4, 3, 7, 6), rows[:, :, 2:7])
    assert np.isnan(rows[:, :, :2]).all() and np.isnan(rows[:, :, 7:]).all()   # nothing outside the slice


@pytest.mark.parametrize("a, b", [
    (rand(4, 5)[::-1], rand(5, 3)),                              # negative strides
    (rand(4, 5).astype(np.float16), rand(5, 3).astype(np.float16)),
    (rand(4, 5), rand(5, 3).astype(np.float64)),                 # mixed dtypes: numpy promotes
    (rand(3, 0), rand(0, 4)),                                    # an empty sum
    (rand(4, 10)[:, ::2], rand(5, 3)),                           # neither row- nor column-major
    (rand(5), rand(5, 3)),                                       # vectors: numpy's rules
])
def test_left_to_numpy_gives_numpys_result(a, b):
    assert gemm.matmul(a, b, 1) is None
    np.testing.assert_array_equal(mkl.matmul(a, b), np.matmul(a, b))


def test_overlapping_out_and_errors_are_numpys():
    x = rand(8, 8)
    expected = x @ x
    assert gemm.matmul(x, x, 1, x) is None               # out overlaps an operand: numpy buffers it
    mkl.matmul(x, x, out=x)
    np.testing.assert_allclose(x, expected, rtol=1e-6)
    with pytest.raises(ValueError) as ours:
        mkl.matmul(rand(2, 3), rand(4, 5))
    with pytest.raises(ValueError) as numpys:
        np.matmul(rand(2, 3), rand(4, 5))
    assert str(ours.value) == str(numpys.value)


def test_threads_do_not_change_the_shapes_handled():
    a, b = rand(256, 256), rand(256, 256)
    one, two = gemm.matmul(a, b, 1), gemm.matmul(a, b, 2)
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-5)


def test_ops_reach_it():
    """linear's forward and backward and the generic SDPA kernel (with a mask: the fused one takes plain inputs)
    call the backend's matmul: counted by wrapping the drop-in."""
    import oarlock
    import oarlock.nn.functional as F
    from oarlock.plugin_api import default_registry, xp_function

    backend = default_registry().backends["cpu"]
    calls = []
    original = backend.array_functions["matmul"]

    def counting(a, b, out=None):
        calls.append(a.shape)
        return original(a, b, out=out)

    backend.array_functions["matmul"] = counting
    default_registry().generation += 1          # xp_function's cache is per registry generation
    try:
        assert xp_function(np, "matmul") is counting
        x = oarlock.to_tensor(rand(4, 6), stop_gradient=False)
        w = oarlock.to_tensor(rand(6, 3), stop_gradient=False)
        F.linear(x, w).sum().backward()
        assert len(calls) == 3                 # forward, dx, dw
        q = oarlock.to_tensor(rand(1, 8, 2, 4))
        F.scaled_dot_product_attention(q, q, q, attn_mask=oarlock.to_tensor(np.tril(np.ones((8, 8), bool))))
        assert len(calls) > 3
    finally:
        backend.array_functions["matmul"] = original
        default_registry().generation += 1


def test_off_switch():
    code = "from oarlock_cpu import mkl; import oarlock.plugin_api as p, numpy as np; " \
           "print(mkl.LIBRARY, p.xp_function(np, 'matmul') is np.matmul)"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OARLOCK_CPU_MKL": "0"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["None", "True"]


def test_products_given_several_threads_stay_on_openblas_unless_asked():
    """MKL's OpenMP team is used only with OARLOCK_CPU_MKL=threads (see oarlock_cpu.mkl's docstring): by
    default a product the policy gives 2 threads goes to numpy, a one-thread product to MKL."""
    code = ("import numpy as np; from oarlock_cpu import mkl, blas; import oarlock_cpu._gemm as g\n"
            "blas.set_policy(blas.ThreadPolicy(cores=2))\n"
            "calls = []\n"
            "class Counting:\n"
            "    def matmul(self, *args):\n"
            "        calls.append(args[2]); return g.matmul(*args)\n"
            "mkl._gemm = Counting()\n"
            "a = np.ones((512, 512), np.float32)\n"
            "mkl.matmul(a, a); mkl.matmul(a[:8, :8], a[:8, :8]); mkl.matmul_serial(a, a)\n"
            "print(calls)")
    runs = {v: subprocess.run([sys.executable, "-c", code], env={**os.environ, "OARLOCK_CPU_MKL": v},
                              capture_output=True, text=True, check=True).stdout.strip()
            for v in ("1", "threads")}
    assert runs == {"1": "[1, 1]", "threads": "[2, 1, 1]"}
