"""FlashMask attention's fused GPU forward (oarlock_flashmask.gpu, cuda/fwd.cu), checked at three depths:

1. everywhere: registration is for device "gpu" (bfloat16, float16) only and imports no cupy; the kernel family
   compiles with nvcc for sm_90 with every name expression instantiated, and ptxas's register and spill counts
   are printed (and recorded as test properties): the forward kernels must not spill (skipped without nvcc);
2. without a GPU: the same source compiled for the host (oarlock_cuda.emulation: one OS thread per CUDA thread,
   warp-collective mma / ldmatrix with PTX's fragment layouts) runs behind the real Python entry point on numpy
   arrays, against the CPU kernel (float32 from the same bf16/f16-rounded inputs) for every mask type, GQA,
   D = 64 and 128, bf16 and f16, Sq != Sk, lengths that are not multiples of the tiles and fully masked rows,
   with every output poisoned (NaN) before the run. Skipping is checked by the kernel's per-CTA tile counts
   (FULL and PARTIAL tiles computed), which must equal the CPU classification of the same 64 x 64 tiles for
   each (batch, mask head); a mask that hides everything must compute no tile and, with NaN keys and values,
   still give out 0 and lse -inf (a loaded and used tile would bring the NaN in through P V);
3. on a GPU with cupy: the fused forward against the CPU path (skipped with the reason otherwise).

The support code shared with test_gpu_backward.py (input and mask builders, NaN poisoning, the nvcc and ptxas
helpers, the `host` and `no_launch` fixtures) is in gpu_support.py and conftest.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from oarlock_flashmask import gpu, kernel, masks

from gpu_support import (DTYPES, PoisonedNumpy, assert_raises_alike, assert_same, broken_kwargs, builder, case,
                         compile_family, cupy_or_skip, everything_masked, inputs, np_dtype, reference_forward,
                         relative_error, report_ptxas)

# -- 1. registration and compilation ---------------------------------------------------------------------

_SPY = """
import json, sys

class CupySpy:
    attempts = []

    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith("cupy."):
            self.attempts.append(name)
        return None

spy = CupySpy()
sys.meta_path.insert(0, spy)
import oarlock
from oarlock.registry import default_registry
mine = sorted({(op, dev, dt.name if dt else None) for (op, dev, dt), (fn, plugin) in default_registry().kernels.items()
               if fn.__module__.startswith("oarlock_flashmask.gpu")})
print(json.dumps({"attempts": spy.attempts, "cupy_loaded": any(m == "cupy" or m.startswith("cupy.")
                  for m in sys.modules), "kernels": mine}))
"""


def test_registers_only_gpu_kernels_and_imports_no_cupy():
    done = subprocess.run([sys.executable, "-c", _SPY], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["attempts"] == [] and not report["cupy_loaded"], report
    ops = ["flashmask_attention_op", "flashmask_attention_grad"]
    assert sorted(map(tuple, report["kernels"])) == sorted((op, "gpu", dt) for op in ops for dt in DTYPES)


def test_source_is_self_contained():
    text = gpu.source()
    includes = [line for line in text.splitlines() if line.lstrip().startswith("#") and "include" in line]
    assert not includes, f"the family includes a header ({includes}); the source must compile as it is"
    for name in gpu.names():
        assert name.split("<")[0] in text, name


def test_source_compiles_with_nvcc(tmp_path, record_property):
    stats = compile_family(tmp_path)
    plain = report_ptxas(stats, record_property, "")
    forward = [n for n in stats if "fm_fwd" in n or "fm_block_stats" in n]
    assert len(forward) == len(gpu.forward_names()), sorted(plain[n] for n in stats)
    spilling = {plain[n]: stats[n] for n in forward if stats[n]["spill_stores"] or stats[n]["spill_loads"]}
    assert not spilling, f"forward kernels spill to local memory: {spilling}"


# -- 2. the kernels on the host ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host_kernels():
    """The host build compiles the forward kernels only (conftest's `host` takes them from here)."""
    return lambda family: gpu.forward_names()


# id: (b, sq, sk, hq, hk, d, dtype, options); options: mask=(builder | ("random", hm, c)), causal, window, scale
CASES = {
    "none": (2, 100, 130, 4, 2, 64, "bfloat16", {}),
    "none-scale-sq>sk": (1, 130, 100, 2, 1, 128, "float16", {"scale": 0.3}),
    "causal-sq>sk": (2, 130, 100, 4, 2, 128, "float16", {"causal": True}),
    "causal-sk>sq": (1, 100, 192, 2, 2, 64, "bfloat16", {"causal": True}),
    "window-causal": (1, 192, 192, 2, 1, 64, "float16", {"causal": True, "window": (40, 0)}),
    "window-bidirectional": (1, 130, 192, 4, 2, 128, "bfloat16", {"window": (50, 20)}),
    "window-left-only": (1, 100, 100, 2, 2, 64, "bfloat16", {"window": (30, -1)}),
    "causal-document": (2, 192, 192, 4, 2, 128, "bfloat16",
                        {"mask": lambda: builder(masks.causal_document_mask, [[50, 70, 72], [100, 92]])}),
    "sliding-window-builder": (1, 130, 130, 2, 1, 64, "float16",
                               {"mask": lambda: builder(masks.sliding_window_mask, 130, 33)}),
    "document-C2": (1, 192, 192, 2, 2, 64, "float16",
                    {"mask": lambda: builder(masks.document_mask, [40, 30, 50, 72])}),
    "global-sliding-C4": (1, 192, 192, 2, 1, 128, "float16",
                          {"mask": lambda: builder(masks.global_sliding_window_mask, 192, 8, 20)}),
    "random-causal-C1-Hm=Hk": (2, 130, 160, 4, 2, 64, "bfloat16", {"mask": ("random", 2, 1), "causal": True}),
    "random-causal-C2-Hm=Hq": (1, 100, 130, 4, 2, 128, "float16", {"mask": ("random", 4, 2), "causal": True}),
    "random-C2-Hm=Hq": (1, 192, 100, 4, 1, 64, "bfloat16", {"mask": ("random", 4, 2)}),
    "random-C4-Hm=Hk": (2, 100, 100, 4, 2, 128, "bfloat16", {"mask": ("random", 2, 4)}),
    "random-C4-Hm=1-f16": (1, 130, 100, 2, 2, 64, "float16", {"mask": ("random", 1, 4)}),
    "fully-masked-rows": (1, 100, 100, 2, 1, 64, "float16",
                          {"mask": lambda: (np.full((1, 1, 100, 1), 37, dtype=np.int32), True)}),
}


def _case(rng, name):
    q, k, v, _, kw = case(rng, CASES[name])
    return q, k, v, kw


def _check(out, lse, ref_out, ref_lse, q, what):
    assert out.shape == q.shape and out.dtype == q.dtype, (what, out.shape, out.dtype)
    assert lse.shape == ref_lse.shape and lse.dtype == np.float32, (what, lse.shape, lse.dtype)
    o = out.astype(np.float32)
    assert np.isfinite(o).all(), f"{what}: {np.count_nonzero(~np.isfinite(o))} non-finite outputs (unwritten?)"
    assert not np.isnan(lse).any(), f"{what}: NaN in lse (unwritten?)"
    empty = np.isneginf(ref_lse)                                      # [B, Hq, Sq]: fully masked rows
    assert np.array_equal(np.isneginf(lse), empty), f"{what}: -inf lse rows differ"
    assert not np.isposinf(lse).any(), what
    assert (o.transpose(0, 2, 1, 3)[empty] == 0).all(), f"{what}: a fully masked row has a nonzero output"
    rel = relative_error(o, ref_out)
    assert rel < 1e-2, f"{what}: relative error {rel:.3e}"
    np.testing.assert_allclose(lse[~empty], ref_lse[~empty], rtol=1e-4, atol=1e-3, err_msg=what)
    return rel


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_forward_matches_cpu(host, name):
    rng = np.random.default_rng(sorted(CASES).index(name))
    q, k, v, kw = _case(rng, name)
    out, lse, seed_offset = gpu.flashmask_forward_gpu(q, k, v, **kw, xp=PoisonedNumpy())
    ref_out, ref_lse = reference_forward(q, k, v, kw)
    _check(out, lse, ref_out, ref_lse, q, name)
    assert seed_offset.dtype == np.int64 and seed_offset.tolist() == [0, 0]


def test_host_fully_masked_rows_are_there(host):
    """The fully-masked-rows and causal-sq>sk cases do contain rows with every key masked."""
    for name in ("fully-masked-rows", "causal-sq>sk"):
        q, k, v, kw = _case(np.random.default_rng(0), name)
        _, ref_lse = reference_forward(q, k, v, kw)
        assert np.isneginf(ref_lse).any() and np.isfinite(ref_lse).any(), name


def test_host_block_stats(host):
    rng = np.random.default_rng(5)
    for b, hm, sk, c in ((2, 3, 130, 2), (1, 1, 64, 1), (1, 2, 100, 4), (1, 1, 5, 1)):
        sri = rng.integers(0, 200, (b, hm, sk, c)).astype(np.int32)
        nkb = -(-sk // gpu.BLOCK_N)
        bmin, bmax = gpu.block_stats(PoisonedNumpy(), sri, nkb)
        for kb in range(nkb):
            cols = sri[:, :, kb * gpu.BLOCK_N:(kb + 1) * gpu.BLOCK_N]
            np.testing.assert_array_equal(bmin[:, :, kb], cols.min(axis=2))
            np.testing.assert_array_equal(bmax[:, :, kb], cols.max(axis=2))


def _expected_counts(sri, causal, wl, wr, b, hq, sq, sk):
    """(FULL, PARTIAL) tiles per (b, query head, query block) by the CPU classification of 64 x 64 tiles."""
    nqb = -(-sq // gpu.BLOCK_M)
    counts = np.zeros((b, hq, nqb, 2), dtype=np.int32)
    for i in range(b):
        for h in range(hq):
            s = None if sri is None else sri[i:i + 1, h // (hq // sri.shape[1])][:, None]
            m = kernel._Mask(np, s, causal, wl, wr, 1, sq, sk, 1, 1, gpu.BLOCK_M, gpu.BLOCK_N)
            counts[i, h, :, 0] = (m.classes == kernel.FULL).sum(axis=1)
            counts[i, h, :, 1] = (m.classes == kernel.PARTIAL).sum(axis=1)
    return counts


@pytest.mark.parametrize("name", ["causal-sq>sk", "window-causal", "window-bidirectional", "causal-document",
                                  "document-C2", "random-causal-C2-Hm=Hq"])
def test_host_skips_tiles_like_the_cpu_classification(host, name):
    """The kernel computes exactly the FULL and PARTIAL 64 x 64 tiles of the CPU classification per (batch,
    mask head): SKIP tiles are neither loaded nor computed (the loads are issued only for the tiles the
    kernel computes, see fwd.cu). The outputs of these cases are checked by test_host_forward_matches_cpu."""
    rng = np.random.default_rng(sorted(CASES).index(name))
    q, k, v, kw = _case(rng, name)
    b, sq, hq, _ = q.shape
    sk = k.shape[1]
    counts = np.full((b, hq, -(-sq // gpu.BLOCK_M), 2), -1, dtype=np.int32)
    gpu.forward(np, q, k, v, kw["startend_row_indices"], kw["causal"], kw["window_left"],
                           kw["window_right"], kw["softmax_scale"], tile_counts=counts)
    want = _expected_counts(kw["startend_row_indices"], kw["causal"], kw["window_left"], kw["window_right"], b, hq,
                            sq, sk)
    np.testing.assert_array_equal(counts, want, err_msg=name)
    nkb = -(-sk // gpu.BLOCK_N)
    assert want.sum() < want.size // 2 * nkb, f"{name}: no tile to skip"


@pytest.mark.parametrize("dtype,d", [("bfloat16", 128), ("float16", 64)])
def test_host_everything_masked_reads_no_keys(host, dtype, d):
    """A mask that hides every key: no tile computed, out 0 and lse -inf even with NaN keys and values."""
    rng = np.random.default_rng(7)
    b, sq, sk, hq, hk = 2, 100, 130, 4, 2
    q, k, v = inputs(rng, b, sq, sk, hq, hk, d, dtype, kv_fill=np.nan)
    for sri, causal in everything_masked(b, hq, sq, sk):
        counts = np.full((b, hq, -(-sq // gpu.BLOCK_M), 2), -1, dtype=np.int32)
        out = np.full(q.shape, np.nan, dtype=q.dtype)
        lse = np.full((b, hq, sq), np.nan, dtype=np.float32)
        gpu.forward(np, q, k, v, sri, causal, tile_counts=counts, out=out, lse=lse)
        assert (counts == 0).all()
        assert (out.astype(np.float32) == 0).all() and np.isneginf(lse).all()
        out2, lse2, _ = gpu.flashmask_forward_gpu(q, k, v, sri, causal=causal, xp=PoisonedNumpy())
        assert (out2.astype(np.float32) == 0).all() and np.isneginf(lse2).all()


def test_host_seed_offset_like_the_generic_kernel(host):
    rng = np.random.default_rng(8)
    q, k, v = inputs(rng, 1, 64, 64, 2, 2, 64, "float16")
    fixed = np.array([12345, 2 ** 40 + 3], dtype=np.int64)
    got = gpu.flashmask_forward_gpu(q, k, v, fixed_seed_offset=fixed, causal=True)
    want = kernel.flashmask_forward(np, q, k, v, fixed_seed_offset=fixed, causal=True)
    np.testing.assert_array_equal(got[2], want[2])
    assert got[2].dtype == want[2].dtype


# -- fallbacks (no kernel runs) ------------------------------------------------------------------------------

@pytest.mark.parametrize("what", ["float32", "d32", "d-mismatch", "dropout", "empty"])
def test_fallbacks_call_the_generic_kernel(no_launch, what):
    rng = np.random.default_rng(9)
    dtype, d, dv, kw = "bfloat16", 64, 64, {"causal": True}
    sq = 40
    if what == "float32":
        dtype = "float32"
    elif what == "d32":
        d = dv = 32
    elif what == "d-mismatch":
        dv = 32
    elif what == "dropout":
        kw = {"dropout": 0.3, "fixed_seed_offset": np.array([3, 4], dtype=np.int64)}
    else:
        sq = 0
    dt = np_dtype(dtype)
    q = rng.standard_normal((1, sq, 2, d)).astype(dt)
    k = rng.standard_normal((1, 40, 2, d)).astype(dt)
    v = rng.standard_normal((1, 40, 2, dv)).astype(dt)
    if what == "d-mismatch":
        assert_raises_alike(lambda: gpu.flashmask_forward_gpu(q, k, v, **kw),
                            lambda: kernel.flashmask_forward(np, q, k, v, **kw), ValueError)
        return
    assert_same(gpu.flashmask_forward_gpu(q, k, v, **kw), kernel.flashmask_forward(np, q, k, v, **kw))


@pytest.mark.parametrize("bad", ["sri-dtype", "sri-values", "window-and-sri", "gqa"])
def test_errors_are_the_generic_kernels(no_launch, bad):
    rng = np.random.default_rng(10)
    q, k, v = inputs(rng, 1, 64, 64, 2, 2, 64, "bfloat16")
    kw = broken_kwargs(bad)
    if bad == "gqa":
        q = np.concatenate([q, q[:, :, :1]], axis=2)            # 3 query heads over 2 key heads
    assert_raises_alike(lambda: gpu.flashmask_forward_gpu(q, k, v, **kw),
                        lambda: kernel.flashmask_forward(np, q, k, v, **kw))


def test_registered_kernel_takes_the_dispatchers_xp(no_launch):
    """The registered function is called as fn(xp, *arrays, **attrs, generator=...)."""
    rng = np.random.default_rng(11)
    q, k, v = inputs(rng, 1, 16, 16, 2, 2, 64, "float32")
    got = gpu._forward_kernel(np, q, k, v, None, None, 0.0, True, -1, -1, None, generator=None)
    assert_same(got, kernel.flashmask_forward(np, q, k, v, causal=True))


# -- 3. on a GPU ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_forward_matches_cpu(name):
    cupy = cupy_or_skip()
    rng = np.random.default_rng(100 + sorted(CASES).index(name))
    q, k, v, kw = _case(rng, name)
    dev = dict(kw)
    if kw["startend_row_indices"] is not None:
        dev["startend_row_indices"] = cupy.asarray(kw["startend_row_indices"])
    if q.dtype == np.float16:
        out, lse, _ = gpu.flashmask_forward_gpu(*(cupy.asarray(x) for x in (q, k, v)), **dev)
    else:                                     # cupy has no bfloat16 arrays: int16 views with the kernel type
        args = [cupy.asarray(x.view(np.int16)) for x in (q, k, v)]
        out, lse = gpu.forward(cupy, *args, dev["startend_row_indices"], kw["causal"], kw["window_left"],
                               kw["window_right"], kw["softmax_scale"], ctype="bf16_t")
    out = cupy.asnumpy(out).view(q.dtype)
    ref_out, ref_lse = reference_forward(q, k, v, kw)
    _check(out, cupy.asnumpy(lse), ref_out, ref_lse, q, name)


def test_gpu_forward_large():
    cupy = cupy_or_skip()
    rng = np.random.default_rng(200)
    b, s, hq, hk, d = 1, 1000, 4, 2, 128
    q, k, v = inputs(rng, b, s, s, hq, hk, d, "float16")
    sri, causal = builder(masks.causal_document_mask, [300, 450, 250])
    out, lse, _ = gpu.flashmask_forward_gpu(*(cupy.asarray(x) for x in (q, k, v)), cupy.asarray(sri), causal=causal)
    kw = dict(startend_row_indices=sri, causal=causal, window_left=-1, window_right=-1, softmax_scale=None)
    ref_out, ref_lse = reference_forward(q, k, v, kw)
    _check(cupy.asnumpy(out), cupy.asnumpy(lse), ref_out, ref_lse, q, f"causal document S={s}")
    assert math.isfinite(float(cupy.asnumpy(lse).max()))
