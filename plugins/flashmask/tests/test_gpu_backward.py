"""FlashMask attention's fused GPU backward (oarlock_flashmask.gpu_backward, cuda/bwd.cu), checked at three depths:

1. everywhere: the kernel family (prelude, tensor_core, mask.cuh, fwd.cu, bwd.cu) compiles with nvcc for sm_90
   with every backward name expression instantiated; ptxas's register and spill counts are printed (and
   recorded as test properties): the backward kernels must not spill (skipped without nvcc);
2. without a GPU: the same source compiled for the host (oarlock_cuda.emulation: one OS thread per CUDA thread,
   warp-collective mma / ldmatrix / cp.async with PTX's fragment layouts) runs behind the real Python entry
   point on numpy arrays. dq, dk, dv against the CPU kernel (kernel.flashmask_backward in float32 from the same
   bf16/f16-rounded inputs, with out and lse from the CPU forward, out rounded to the dtype as the GPU gets it)
   for no mask, causal, windows, the mask builders (causal document, sliding window), random masks with C = 1,
   2, 4 and Hm = 1, Hk, Hq, GQA, D = 64 and 128, bf16 and f16, lengths that are not multiples of 64, Sq != Sk,
   with and without grad_lse, and fully masked rows (their dq exactly 0); every output (and delta) is poisoned
   with NaN before the run, the relative (Frobenius) error of each gradient must stay under 1e-2, and two runs
   must agree to the bit. A mask that hides everything, with NaN keys and values, must give exact zeros (a
   SKIP tile that were loaded and used would bring the NaN in). The fallbacks are the generic kernel's;
3. on a GPU with cupy: the fused backward against the CPU path (skipped with the reason otherwise).

The support code shared with test_gpu_forward.py (input and mask builders, NaN poisoning, the nvcc and ptxas
helpers, the `host` and `no_launch` fixtures) is in gpu_support.py and conftest.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from oarlock_flashmask import gpu, gpu_backward, kernel, masks

from gpu_support import (PoisonedNumpy, assert_raises_alike, assert_same, broken_kwargs, builder, case, compile_family,
                         cupy_or_skip, everything_masked, np_dtype, reference_forward, relative_error, report_ptxas)

# -- 1. compilation --------------------------------------------------------------------------------------------

def test_name_expressions_are_in_the_family():
    names = gpu.names()
    assert all(n in names for n in gpu_backward.NAME_EXPRESSIONS), names
    assert len(gpu_backward.NAME_EXPRESSIONS) == 12
    text = gpu.source()
    assert "fm_bwd_dkdv" in text and "fm_bwd_dq" in text and "fm_bwd_delta" in text


def test_backward_compiles_with_nvcc_without_spills(tmp_path, record_property):
    stats = compile_family(tmp_path)
    backward = {n: s for n, s in stats.items() if "fm_bwd" in n}
    plain = report_ptxas(backward, record_property, ", backward")
    assert len(backward) == len(gpu_backward.NAME_EXPRESSIONS), sorted(plain.values())
    spilling = {plain[n]: s for n, s in backward.items() if s["spill_stores"] or s["spill_loads"] or s["stack"]}
    assert not spilling, f"backward kernels spill to local memory: {spilling}"


# -- 2. the kernels on the host ----------------------------------------------------------------------------------

# id: (b, sq, sk, hq, hk, d, dtype, options); options: mask=(builder | ("random", hm, c[, masked rows])), causal,
# window, scale, grad_lse, deterministic (run twice, compare bits)
CASES = {
    "none": (2, 100, 100, 2, 2, 64, "bfloat16", {"deterministic": True}),
    "none-sq<sk-scale-glse": (1, 70, 150, 2, 1, 128, "float16", {"scale": 0.3, "grad_lse": True}),
    "causal-gqa-glse": (1, 130, 130, 4, 2, 64, "float16", {"causal": True, "grad_lse": True}),
    "causal-sq>sk": (1, 150, 70, 2, 2, 128, "bfloat16", {"causal": True}),           # rows < 80 fully masked
    "window-sq<sk": (1, 90, 150, 2, 1, 64, "bfloat16", {"window": (20, 5)}),
    "sliding-window-builder": (1, 130, 130, 2, 2, 64, "float16",
                               {"mask": lambda: builder(masks.sliding_window_mask, 130, 33)}),
    "causal-document": (2, 130, 130, 2, 1, 128, "bfloat16", {
        "mask": lambda: builder(masks.causal_document_mask, [[40, 60, 30], [100, 30]]), "grad_lse": True,
        "deterministic": True}),
    "random-C2-Hm=Hq": (1, 100, 130, 4, 2, 64, "bfloat16", {"mask": ("random", 4, 2)}),
    "random-C4-Hm=Hk-masked-rows": (1, 100, 100, 4, 2, 128, "bfloat16",
                                    {"mask": ("random", 2, 4, 5), "grad_lse": True}),
    "random-C4-Hm=1": (1, 130, 100, 2, 2, 64, "float16", {"mask": ("random", 1, 4)}),
    "random-causal-C2-Hm=1-gqa": (1, 100, 160, 4, 2, 128, "float16", {"mask": ("random", 1, 2), "causal": True}),
}


def _case(rng, name):
    """(grad, q, k, v, out, lse, kwargs): 16-bit inputs, out from the CPU forward rounded to their dtype, lse
    float32, and the op's keyword arguments."""
    q, k, v, grad, kw = case(rng, CASES[name], grad=True)
    out, lse = reference_forward(q, k, v, kw)
    kw["grad_lse"] = rng.standard_normal(lse.shape).astype(np.float32) if CASES[name][7].get("grad_lse") else None
    return grad, q, k, v, out.astype(q.dtype), lse, kw


def _reference(grad, q, k, v, out, lse, kw):
    f32 = [x.astype(np.float32) for x in (grad, q, k, v, out)]
    return kernel.flashmask_backward(np, *f32, lse, kw["startend_row_indices"], None, kw["grad_lse"], 0.0,
                                     kw["causal"], kw["window_left"], kw["window_right"], kw["softmax_scale"])


def _check(got, want, inputs, lse, what):
    rels = []
    for name, g, w, x in zip(("dq", "dk", "dv"), got, want, inputs):
        assert g.shape == x.shape and g.dtype == x.dtype, (what, name, g.shape, g.dtype)
        g32 = g.astype(np.float32)
        assert np.isfinite(g32).all(), f"{what} {name}: {np.count_nonzero(~np.isfinite(g32))} non-finite (unwritten?)"
        rel = relative_error(g32, w)
        assert rel < 1e-2, f"{what} {name}: relative error {rel:.3e}"
        rels.append(rel)
    empty = np.isneginf(lse)                                         # [B, Hq, Sq]: fully masked rows
    dq = got[0].astype(np.float32).transpose(0, 2, 1, 3)
    assert (dq[empty] == 0).all(), f"{what}: a fully masked row has a nonzero dq"
    return rels


@pytest.mark.parametrize("name", list(CASES))
def test_host_backward_matches_cpu(host, name):
    rng = np.random.default_rng(list(CASES).index(name))
    grad, q, k, v, out, lse, kw = _case(rng, name)
    got = gpu_backward.flashmask_backward_gpu(grad, q, k, v, out, lse, **kw, xp=PoisonedNumpy())
    _check(got, _reference(grad, q, k, v, out, lse, kw), (q, k, v), lse, name)
    if CASES[name][7].get("deterministic"):
        again = gpu_backward.flashmask_backward_gpu(grad, q, k, v, out, lse, **kw, xp=PoisonedNumpy())
        for a, b in zip(got, again):
            np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16), err_msg=f"{name}: not deterministic")


def test_host_cases_cover_fully_masked_rows():
    for name in ("causal-sq>sk", "random-C4-Hm=Hk-masked-rows"):
        *_, lse, _kw = _case(np.random.default_rng(list(CASES).index(name)), name)
        assert np.isneginf(lse).any() and np.isfinite(lse).any(), name


def test_host_delta(host):
    """fm_bwd_delta alone: rowsum(dO * O) - grad_lse in float32, laid out [B, Hq, Sq]."""
    rng = np.random.default_rng(20)
    for d, dtype in ((64, "bfloat16"), (128, "float16")):
        b, sq, hq = 2, 37, 3
        do, o = (rng.standard_normal((b, sq, hq, d)).astype(np_dtype(dtype)) for _ in range(2))
        glse = rng.standard_normal((b, hq, sq)).astype(np.float32)
        want = (do.astype(np.float32) * o.astype(np.float32)).sum(-1).transpose(0, 2, 1)
        fn = gpu.RUNTIME.function(gpu.FAMILY, f"fm_bwd_delta<{gpu_backward.CTYPES[dtype]}, {d}>", 0)
        for g in (None, glse):
            delta = np.full((b, hq, sq), np.nan, dtype=np.float32)
            rows = b * sq * hq
            gpu.RUNTIME.launch(fn, 0, (-(-rows // gpu_backward.DELTA_ROWS),), (gpu_backward.THREADS,),
                               (do, o, delta if g is None else g, np.int32(g is not None), delta, np.int32(rows),
                                np.int32(sq), np.int32(hq)))
            np.testing.assert_allclose(delta, want - (0 if g is None else g), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,d", [("bfloat16", 128), ("float16", 64)])
def test_host_everything_masked_reads_no_keys(host, dtype, d):
    """A mask that hides every key: zero gradients even with NaN keys and values (no tile is computed)."""
    rng = np.random.default_rng(21)
    b, sq, sk, hq, hk = 1, 100, 130, 4, 2
    dt = np_dtype(dtype)
    q, grad, out = (rng.standard_normal((b, sq, hq, d)).astype(dt) for _ in range(3))
    k = np.full((b, sk, hk, d), np.nan, dtype=dt)
    v = np.full((b, sk, hk, d), np.nan, dtype=dt)
    lse = np.full((b, hq, sq), -np.inf, dtype=np.float32)
    for sri, causal in everything_masked(b, hq, sq, sk):
        got = gpu_backward.flashmask_backward_gpu(grad, q, k, v, out, lse, sri, causal=causal, xp=PoisonedNumpy())
        for name, g in zip(("dq", "dk", "dv"), got):
            assert (g.astype(np.float32) == 0).all(), (name, causal)


# -- fallbacks (no kernel runs) ------------------------------------------------------------------------------------

@pytest.mark.parametrize("what", ["float32", "d32", "dropout", "empty", "dv-mismatch", "mixed-dtypes"])
def test_fallbacks_are_the_generic_kernel(no_launch, what):
    rng = np.random.default_rng(22)
    dtype, d, dv, sq, kw = "bfloat16", 64, 64, 40, {"causal": True}
    if what == "float32":
        dtype = "float32"
    elif what == "d32":
        d = dv = 32
    elif what == "dropout":
        kw = {"dropout": 0.3, "seed_offset": np.array([3, 4], dtype=np.int64)}
    elif what == "empty":
        sq = 0
    elif what == "dv-mismatch":
        dv = 128
    dt = np_dtype(dtype)
    q, grad, out = (rng.standard_normal((1, sq, 2, d)).astype(dt) for _ in range(3))
    k = rng.standard_normal((1, 40, 2, d)).astype(dt)
    v = rng.standard_normal((1, 40, 2, dv)).astype(dt)
    if what == "mixed-dtypes":
        v = v.astype(np.float16)
    lse = rng.standard_normal((1, 2, sq)).astype(np.float32)
    args = (grad, q, k, v, out, lse)
    if what == "dv-mismatch":
        assert_raises_alike(lambda: gpu_backward.flashmask_backward_gpu(*args, **kw),
                            lambda: kernel.flashmask_backward(np, *args, **kw), ValueError)
        return
    assert_same(gpu_backward.flashmask_backward_gpu(*args, **kw), kernel.flashmask_backward(np, *args, **kw))


@pytest.mark.parametrize("bad", ["sri-dtype", "sri-values", "window-and-sri", "seed-offset"])
def test_errors_are_the_generic_kernels(no_launch, bad):
    rng = np.random.default_rng(23)
    dt = np_dtype("bfloat16")
    q, k, v, grad, out = (rng.standard_normal((1, 64, 2, 64)).astype(dt) for _ in range(5))
    lse = rng.standard_normal((1, 2, 64)).astype(np.float32)
    kw = broken_kwargs(bad)
    if bad == "seed-offset":
        kw["seed_offset"] = np.array([1, 2, 3], dtype=np.int64)
    assert_raises_alike(lambda: gpu_backward.flashmask_backward_gpu(grad, q, k, v, out, lse, **kw),
                        lambda: kernel.flashmask_backward(np, grad, q, k, v, out, lse, **kw))


def test_registered_kernel_takes_the_dispatchers_xp(no_launch):
    """The registered function is called as fn(xp, *arrays, *attrs)."""
    rng = np.random.default_rng(24)
    q, k, v, grad, out = (rng.standard_normal((1, 16, 2, 64)).astype(np.float32) for _ in range(5))
    lse = rng.standard_normal((1, 2, 16)).astype(np.float32)
    args = (grad, q, k, v, out, lse, None, None, None, 0.0, True, -1, -1, None)
    assert_same(gpu_backward.backward_kernel(np, *args), kernel.flashmask_backward(np, *args))


# -- 3. on a GPU ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CASES))
def test_gpu_backward_matches_cpu(name):
    cupy = cupy_or_skip()
    rng = np.random.default_rng(100 + list(CASES).index(name))
    grad, q, k, v, out, lse, kw = _case(rng, name)
    dev = {key: (cupy.asarray(val) if isinstance(val, np.ndarray) else val) for key, val in kw.items()}
    arrays = (grad, q, k, v, out)
    if q.dtype == np.float16:
        got = gpu_backward.flashmask_backward_gpu(*(cupy.asarray(x) for x in arrays), cupy.asarray(lse), **dev)
    else:                                     # cupy has no bfloat16 arrays: int16 views with the kernel type
        got = gpu_backward.flashmask_backward_gpu(*(cupy.asarray(x.view(np.int16)) for x in arrays),
                                                  cupy.asarray(lse), **dev, ctype="bf16_t")
    got = [cupy.asnumpy(g).view(q.dtype) for g in got]
    _check(got, _reference(grad, q, k, v, out, lse, kw), (q, k, v), lse, name)
    again = gpu_backward.flashmask_backward_gpu(*(cupy.asarray(x.view(np.int16)) for x in arrays), cupy.asarray(lse),
                                                **dev, ctype=gpu_backward.CTYPES[q.dtype.name])
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a.view(np.uint16), cupy.asnumpy(b).view(np.uint16), err_msg=name)
