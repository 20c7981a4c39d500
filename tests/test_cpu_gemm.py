"""oarlock-cpu's matmul through MKL (oarlock_cpu.mkl, oarlock_cpu._gemm): the backend's `matmul` drop-in that
kernels generic over xp reach through plugin_api.xp_function. Every layout it takes (row-major and transposed
matrices, batch strides that merge or not, broadcast batches, a 2-D side, `out=` views whose rows interleave)
against float64 numpy within float32 rounding; every layout it leaves to numpy gives numpy's own result or error;
linear, matmul and attention ops in a model step go through it; OARLOCK_CPU_MKL=0 turns it off. The split path
(a product cut into pieces MKL runs on one thread each, shared by oarlock_cpu's worker pool) is checked on the
same layouts, on pieces of every kind (batch entries, rows, columns, uneven ones), from concurrent callers and
in a forked child."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from oarlock_cpu import mkl

pytestmark = pytest.mark.skipif(mkl.LIBRARY is None, reason="the mkl wheel is not installed (non-x86-64 Linux)")
gemm = pytest.importorskip("oarlock_cpu._gemm")

RNG = np.random.default_rng(0)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


# (threads, split): MKL on the calling thread; cut into pieces on 2 and on 3 pool threads
MODES = [(1, False), (2, True), (3, True)]


def check(a, b, out=None, mode=(1, False)):
    """gemm.matmul(a, b) is taken (not None), has numpy's shape and dtype, and equals the float64 product to
    the dtype's rounding (|error| <= 4 k eps max|a||b|, a dot product's bound)."""
    threads, split = mode
    got = gemm.matmul(a, b, threads, out, split)
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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layouts_against_float64(dtype, mode):
    product = functools.partial(check, mode=mode)
    a, b = rand(4, 3, 5, 7, dtype=dtype), rand(4, 3, 7, 6, dtype=dtype)
    product(a, b)
    product(a, b[0, 0])                                   # stacked rows times one matrix: one GEMM
    product(a[0, 0], b)                                   # one matrix times a batch (stride 0 for a)
    product(transposed_storage(a), b)
    product(a, transposed_storage(b))
    product(transposed_storage(a), transposed_storage(b))
    product(a[:, :, 1:4], b)                              # a slice of rows: leading dimension > columns
    product(a[..., 1:5], b[:, :, 1:5])                    # a slice of columns
    product(a[::2], b[::2])                               # batch strides that skip
    product(a[:, :1], b)                                  # broadcast batch dimensions
    product(a, np.broadcast_to(b[:1], b.shape))           # a stride-0 batch
    product(a.reshape(12, 5, 7), b.reshape(12, 7, 6))
    product(rand(1, 7, dtype=dtype), rand(7, 1, dtype=dtype))
    product(rand(6, 1, dtype=dtype), rand(1, 5, dtype=dtype))


@pytest.mark.parametrize("mode", MODES)
def test_attention_views_and_out(mode):
    """SDPA's operands: [B, S, H, D] viewed as [B, Hk, G, S, D] (batch dimensions that do not merge), written
    through out= into the same kind of view (rows of the matrices interleave, so MKL's batch call refuses them
    and each is its own GEMM)."""
    b, s, hk, g, d = 2, 16, 2, 2, 8
    q5 = rand(b, s, hk * g, d).reshape(b, s, hk, g, d).transpose(0, 2, 3, 1, 4)
    kt = rand(b, hk, 1, d, s)
    check(q5, kt, mode=mode)
    check(q5[..., 3:9, :], kt[..., :5], mode=mode)
    buffer = np.full((b, s, hk * g, s), np.nan, np.float32)
    out5 = buffer.reshape(b, s, hk, g, s).transpose(0, 2, 3, 1, 4)
    check(q5, kt, out5, mode)
    assert not np.isnan(buffer).any()
    rows = np.full((4, 3, 9, 6), np.nan, np.float32)
    check(rand(4, 3, 5, 7), rand(4, 3, 7, 6), rows[:, :, 2:7], mode)
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


@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("m, k, n", [(300, 70, 90), (90, 70, 300), (1, 50, 1000), (1000, 50, 1), (33, 17, 65)])
def test_split_pieces_of_every_kind(m, k, n, threads):
    """Rows (m >= n) or columns (n > m) of the result cut into blocks of 32 rows / 64 columns, the last one
    short, for every layout of the operands, into a slice of a wider result."""
    a, b = rand(m, k), rand(k, n)
    for x in (a, transposed_storage(a)):
        for y in (b, transposed_storage(b)):
            check(x, y, mode=(threads, True))
            wide = np.full((m, n + 9), np.nan, np.float32)
            check(x, y, wide[:, 4:n + 4], (threads, True))
            assert np.isnan(wide[:, :4]).all() and np.isnan(wide[:, n + 4:]).all()


@pytest.mark.parametrize("batch", [2, 3, 9, 40])
def test_split_batches(batch):
    """Batch entries handed out in blocks (up to 4 per thread), uneven ones included, and a batch of one
    matrix against many (stride 0)."""
    check(rand(batch, 20, 12), rand(batch, 12, 24), mode=(2, True))
    check(rand(batch, 20, 12), rand(12, 24), mode=(3, True))
    check(rand(1, 20, 12), rand(batch, 12, 24), mode=(2, True))


def test_split_from_concurrent_callers_and_a_forked_child():
    """Python threads calling split products at once (the pool runs one job at a time; the others wait for it)
    all get their own right results; a child forked after the pool's workers started gets workers of its own."""
    pairs = [(rand(150, 40), rand(40, 130)) for _ in range(6)]
    results = [None] * len(pairs)

    def work(i):
        for _ in range(20):
            results[i] = gemm.matmul(*pairs[i], 2, None, True)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(pairs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (a, b), got in zip(pairs, results):
        np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    pid = os.fork()
    if pid == 0:   # the child: a split product must finish (no worker inherited) and be right
        a, b = pairs[0]
        ok = np.allclose(gemm.matmul(a, b, 2, None, True), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def test_threads_do_not_change_the_shapes_handled():
    a, b = rand(256, 256), rand(256, 256)
    one, two = gemm.matmul(a, b, 1), gemm.matmul(a, b, 2)
    np.testing.assert_allclose(one, two, rtol=1e-5, atol=1e-5)


def test_ops_reach_it(monkeypatch):
    """linear's forward (straight to oarlock_cpu.mkl, the bias added inside the product), its fused backward and the
    generic SDPA kernel (with a mask: the fused one takes plain inputs; both through the backend's matmul drop-in)
    reach MKL: counted by wrapping the functions."""
    import oarlock
    import oarlock.nn.functional as F
    from oarlock.plugin_api import default_registry, xp_function
    from oarlock_cpu import mkl

    calls = []

    def counting(fn):
        def wrapped(a, b, *more, **keywords):
            calls.append(a.shape)
            return fn(a, b, *more, **keywords)
        return wrapped

    monkeypatch.setattr(mkl, "matmul_bias", counting(mkl.matmul_bias))
    backend = default_registry().backends["cpu"]
    original = backend.array_functions["matmul"]
    backend.array_functions["matmul"] = counting(original)
    default_registry().generation += 1          # xp_function's cache is per registry generation
    try:
        assert xp_function(np, "matmul") is backend.array_functions["matmul"]
        x = oarlock.to_tensor(rand(4, 6), stop_gradient=False)
        w = oarlock.to_tensor(rand(6, 3), stop_gradient=False)
        F.linear(x, w).sum().backward()
        assert len(calls) == 3                 # forward, dx, dw
        assert np.allclose(x.grad.numpy(), np.ones((4, 3)) @ w.numpy().T, rtol=1e-5)
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


def test_how_products_given_several_threads_run():
    """A product the policy gives 2 threads is split over the pool by default, run by MKL's OpenMP team with
    OARLOCK_CPU_MKL=threads, left to numpy's OpenBLAS with =numpy (see oarlock_cpu.mkl's docstring); a
    one-thread product always goes to MKL on the calling thread."""
    code = ("import numpy as np; from oarlock_cpu import mkl, blas; import oarlock_cpu._gemm as g\n"
            "blas.set_policy(blas.ThreadPolicy(cores=2))\n"
            "calls = []\n"
            "class Counting:\n"
            "    def matmul(self, *args):\n"
            "        calls.append(args[2:]); return g.matmul(*args)\n"
            "mkl._gemm = Counting()\n"
            "a = np.ones((512, 512), np.float32)\n"
            "mkl.matmul(a, a); mkl.matmul(a[:8, :8], a[:8, :8]); mkl.matmul_serial(a, a)\n"
            "print(calls)")
    runs = {v: subprocess.run([sys.executable, "-c", code], env={**os.environ, "OARLOCK_CPU_MKL": v},
                              capture_output=True, text=True, check=True).stdout.strip()
            for v in ("1", "threads", "numpy")}
    assert runs == {"1": "[(2, None, True), (1, None, False), (1, None, False)]",
                    "threads": "[(2, None, False), (1, None, False), (1, None, False)]",
                    "numpy": "[(1, None, False), (1, None, False)]"}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("a_shape, n", [((300, 70), 90), ((33, 70), 300), ((6, 20, 12), 24), ((5, 7), 1)])
def test_fused_bias_rounds_as_the_add_after_the_product(a_shape, n, mode):
    """bias=: each row of every piece gets the bias after its product, the same bits as numpy's add afterwards, for
    row, column and batch pieces; a bias of another shape, dtype or layout is not taken (None)."""
    threads, split = mode
    a, b, bias = rand(*a_shape), rand(a_shape[-1], n), rand(n)
    got = gemm.matmul(a, b, threads, None, split, bias)
    want = gemm.matmul(a, b, threads, None, split)
    want += bias
    np.testing.assert_array_equal(got, want)
    strided = [rand(2 * n)[::2]] if n > 1 else []   # one element is contiguous whatever its stride
    for wrong in [rand(n + 1), rand(n).astype(np.float64), rand(1, n), *strided]:
        assert gemm.matmul(a, b, threads, None, split, wrong) is None
    assert mkl.matmul_bias(a, b, bias) is not None


def test_linear_with_bias_takes_the_fused_path():
    import oarlock
    import oarlock.nn.functional as F
    from oarlock_cpu import kernels
    x, w, bias = rand(8, 16, 40), rand(40, 24), rand(24)
    got = F.linear(oarlock.to_tensor(x), oarlock.to_tensor(w), oarlock.to_tensor(bias)).numpy()
    np.testing.assert_array_equal(got, kernels.generic("linear")(np, x, w, bias))
    with pytest.raises(ValueError, match="bias of shape"):   # the generic kernel's message for a wrong bias
        F.linear(oarlock.to_tensor(x), oarlock.to_tensor(w), oarlock.to_tensor(rand(5)))
