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
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oarlock
from oarlock_flashmask import gpu, kernel, masks

DTYPES = ("bfloat16", "float16")


def _np_dtype(name):
    return oarlock.dtypes.convert_dtype(name).np


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
from oarlock._registry import default_registry
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


def _instantiating(names):
    """The family's source plus a host array taking the address of every name expression (so nvcc emits each
    instantiation, as NVRTC does for the RawModule's name_expressions)."""
    refs = "\n".join(f"    (void*)&{name}," for name in names)
    return (gpu.source() + "\n// every name expression of the RawModule\nextern void* oarlock_instances[];\n"
            f"void* oarlock_instances[] = {{\n{refs}\n}};\n")


def _ptxas_stats(text):
    """{mangled entry name: {"registers", "spill_stores", "spill_loads", "stack"}} from `ptxas -v` output."""
    stats = {}
    for block in text.split("Compiling entry function '")[1:]:
        name = block.split("'", 1)[0]
        spill = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", block)
        regs = re.search(r"Used (\d+) registers", block)
        assert spill and regs, f"unexpected ptxas output for {name}:\n{block}"
        stats[name] = {"registers": int(regs.group(1)), "spill_stores": int(spill.group(2)),
                       "spill_loads": int(spill.group(3)), "stack": int(spill.group(1))}
    return stats


def _demangle(names):
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        return {n: n for n in names}
    done = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, timeout=60)
    plain = done.stdout.splitlines()
    return {n: p.split("(")[0].removeprefix("void ") for n, p in zip(names, plain)}


def test_source_compiles_with_nvcc(tmp_path, record_property):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    src = tmp_path / "flashmask.cu"
    src.write_text(_instantiating(gpu.names()))
    cubin = tmp_path / "flashmask.cubin"
    done = subprocess.run([nvcc, "-arch=sm_90", "--cubin", *gpu.OPTIONS, "-Xptxas", "-v", "-Werror", "all-warnings",
                           "-o", str(cubin), str(src)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert cubin.stat().st_size > 0
    stats = _ptxas_stats(done.stderr)
    plain = _demangle(list(stats))
    print("\nptxas -v (sm_90):")
    for name, s in stats.items():
        line = (f"{plain[name]}: {s['registers']} registers, {s['stack']} bytes stack, {s['spill_stores']} bytes "
                f"spill stores, {s['spill_loads']} bytes spill loads")
        print("  " + line)
        record_property(plain[name], line)
    forward = [n for n in stats if "fm_fwd" in n or "fm_block_stats" in n]
    assert len(forward) == len(gpu.forward_names()), sorted(plain[n] for n in stats)
    spilling = {plain[n]: stats[n] for n in forward if stats[n]["spill_stores"] or stats[n]["spill_loads"]}
    assert not spilling, f"forward kernels spill to local memory: {spilling}"


# -- 2. the kernels on the host ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def host(tmp_path_factory):
    emulation = pytest.importorskip("oarlock_cuda.emulation")
    if emulation.gxx() is None:
        pytest.skip("g++ is not installed here (the host emulation of the CUDA kernels needs it)")
    build = Path(os.environ.get("OARLOCK_CUDA_EMU_CACHE") or tmp_path_factory.mktemp("emu"))
    build.mkdir(parents=True, exist_ok=True)
    previous = gpu.RUNTIME
    gpu.RUNTIME = emulation.HostRuntime(build, gpu.source, lambda family: gpu.forward_names())
    try:
        yield gpu.RUNTIME
    finally:
        gpu.RUNTIME = previous


class PoisonedNumpy:
    """numpy whose `empty` fills new arrays with NaN (floats) or a sentinel (ints), so that elements a kernel
    does not write stand out; passed to flashmask_forward_gpu as its `xp`."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float, **kwargs):
        a = np.empty(shape, dtype=dtype, **kwargs)
        a.fill(-987654 if a.dtype.kind in "iu" else np.nan)
        return a


def _inputs(rng, b, sq, sk, hq, hk, d, dtype, kv_fill=None):
    dt = _np_dtype(dtype)
    q = rng.standard_normal((b, sq, hq, d)).astype(dt)
    k = rng.standard_normal((b, sk, hk, d)).astype(dt)
    v = rng.standard_normal((b, sk, hk, d)).astype(dt)
    if kv_fill is not None:
        k[...] = kv_fill
        v[...] = kv_fill
    return q, k, v


def _blocky(rng, shape, low, high):
    """int32 values in [low, high] constant over random runs of columns (axis 2): runs of `low`, of `high`
    and of random values, so that 64-column tiles come out SKIP, FULL and PARTIAL."""
    b, hm, sk = shape
    out = np.empty(shape, dtype=np.int64)
    for i in range(b):
        for h in range(hm):
            j = 0
            while j < sk:
                n = int(rng.integers(8, 80))
                mode = rng.integers(0, 3)
                if mode == 0:
                    out[i, h, j:j + n] = low
                elif mode == 1:
                    out[i, h, j:j + n] = high
                else:
                    out[i, h, j:j + n] = rng.integers(low, high + 1, min(n, sk - j))
                j += n
    return out


def _random_mask(rng, b, hm, sq, sk, c, causal):
    """A valid startend_row_indices [B, Hm, Sk, C] (int32) for `causal` with C vectors."""
    if c == 1:
        cols = [_blocky(rng, (b, hm, sk), 0, sq)]
    elif causal or c == 4:
        cols = []
        for _ in range(c // 2):
            start = _blocky(rng, (b, hm, sk), 0, sq)
            cols += [start, np.minimum(start + _blocky(rng, (b, hm, sk), 0, sq), sq)]
    else:                                            # (LTS, UTE): rows >= LTS and rows < UTE masked
        cols = [_blocky(rng, (b, hm, sk), sq // 2, sq), _blocky(rng, (b, hm, sk), 0, sq // 2)]
    return np.ascontiguousarray(np.stack(cols, axis=-1).astype(np.int32))


def _builder(fn, *args, **kwargs):
    sri, causal = fn(*args, **kwargs)
    return np.ascontiguousarray(sri.numpy()), causal


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
                        {"mask": lambda: _builder(masks.causal_document_mask, [[50, 70, 72], [100, 92]])}),
    "sliding-window-builder": (1, 130, 130, 2, 1, 64, "float16",
                               {"mask": lambda: _builder(masks.sliding_window_mask, 130, 33)}),
    "document-C2": (1, 192, 192, 2, 2, 64, "float16",
                    {"mask": lambda: _builder(masks.document_mask, [40, 30, 50, 72])}),
    "global-sliding-C4": (1, 192, 192, 2, 1, 128, "float16",
                          {"mask": lambda: _builder(masks.global_sliding_window_mask, 192, 8, 20)}),
    "random-causal-C1-Hm=Hk": (2, 130, 160, 4, 2, 64, "bfloat16", {"mask": ("random", 2, 1), "causal": True}),
    "random-causal-C2-Hm=Hq": (1, 100, 130, 4, 2, 128, "float16", {"mask": ("random", 4, 2), "causal": True}),
    "random-C2-Hm=Hq": (1, 192, 100, 4, 1, 64, "bfloat16", {"mask": ("random", 4, 2)}),
    "random-C4-Hm=Hk": (2, 100, 100, 4, 2, 128, "bfloat16", {"mask": ("random", 2, 4)}),
    "random-C4-Hm=1-f16": (1, 130, 100, 2, 2, 64, "float16", {"mask": ("random", 1, 4)}),
    "fully-masked-rows": (1, 100, 100, 2, 1, 64, "float16",
                          {"mask": lambda: (np.full((1, 1, 100, 1), 37, dtype=np.int32), True)}),
}


def _case(rng, name):
    b, sq, sk, hq, hk, d, dtype, opt = CASES[name]
    q, k, v = _inputs(rng, b, sq, sk, hq, hk, d, dtype)
    causal = opt.get("causal", False)
    sri = None
    mask = opt.get("mask")
    if callable(mask):
        sri, causal = mask()
    elif mask is not None:
        sri = _random_mask(rng, b, mask[1], sq, sk, mask[2], causal)
    wl, wr = opt.get("window", (-1, -1))
    return q, k, v, dict(startend_row_indices=sri, causal=causal, window_left=wl, window_right=wr,
                         softmax_scale=opt.get("scale"))


def _reference(q, k, v, kw):
    f32 = [x.astype(np.float32) for x in (q, k, v)]
    out, lse, _ = kernel.flashmask_forward(np, *f32, kw["startend_row_indices"], None, 0.0, kw["causal"],
                                           kw["window_left"], kw["window_right"], kw["softmax_scale"])
    return out, lse


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
    norm = np.linalg.norm(ref_out)
    rel = np.linalg.norm(o - ref_out) / (norm if norm else 1.0)
    assert rel < 1e-2, f"{what}: relative error {rel:.3e}"
    np.testing.assert_allclose(lse[~empty], ref_lse[~empty], rtol=1e-4, atol=1e-3, err_msg=what)
    return rel


@pytest.mark.parametrize("name", sorted(CASES))
def test_host_forward_matches_cpu(host, name):
    rng = np.random.default_rng(sorted(CASES).index(name))
    q, k, v, kw = _case(rng, name)
    out, lse, seed_offset = gpu.flashmask_forward_gpu(q, k, v, **kw, xp=PoisonedNumpy())
    ref_out, ref_lse = _reference(q, k, v, kw)
    _check(out, lse, ref_out, ref_lse, q, name)
    assert seed_offset.dtype == np.int64 and seed_offset.tolist() == [0, 0]


def test_host_fully_masked_rows_are_there(host):
    """The fully-masked-rows and causal-sq>sk cases do contain rows with every key masked."""
    for name in ("fully-masked-rows", "causal-sq>sk"):
        q, k, v, kw = _case(np.random.default_rng(0), name)
        _, ref_lse = _reference(q, k, v, kw)
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
    q, k, v = _inputs(rng, b, sq, sk, hq, hk, d, dtype, kv_fill=np.nan)
    for sri, causal in ((np.zeros((b, 1, sk, 1), dtype=np.int32), True),          # rows >= 0
                        (np.stack([np.zeros((b, hq, sk)), np.full((b, hq, sk), sq)], -1).astype(np.int32), False)):
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
    q, k, v = _inputs(rng, 1, 64, 64, 2, 2, 64, "float16")
    fixed = np.array([12345, 2 ** 40 + 3], dtype=np.int64)
    got = gpu.flashmask_forward_gpu(q, k, v, fixed_seed_offset=fixed, causal=True)
    want = kernel.flashmask_forward(np, q, k, v, fixed_seed_offset=fixed, causal=True)
    np.testing.assert_array_equal(got[2], want[2])
    assert got[2].dtype == want[2].dtype


# -- fallbacks (no kernel runs) ------------------------------------------------------------------------------

class _NoLaunch:
    def function(self, *args):
        raise AssertionError("the fused kernels ran for inputs they do not take")

    def device_of(self, array):
        return 0

    def launch(self, *args, **kwargs):
        raise AssertionError("the fused kernels ran for inputs they do not take")


@pytest.fixture
def no_launch():
    previous = gpu.RUNTIME
    gpu.RUNTIME = _NoLaunch()
    try:
        yield
    finally:
        gpu.RUNTIME = previous


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64))


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
    dt = _np_dtype(dtype)
    q = rng.standard_normal((1, sq, 2, d)).astype(dt)
    k = rng.standard_normal((1, 40, 2, d)).astype(dt)
    v = rng.standard_normal((1, 40, 2, dv)).astype(dt)
    if what == "d-mismatch":
        with pytest.raises(ValueError) as got:
            gpu.flashmask_forward_gpu(q, k, v, **kw)
        with pytest.raises(ValueError) as want:
            kernel.flashmask_forward(np, q, k, v, **kw)
        assert str(got.value) == str(want.value)
        return
    _same(gpu.flashmask_forward_gpu(q, k, v, **kw), kernel.flashmask_forward(np, q, k, v, **kw))


@pytest.mark.parametrize("bad", ["sri-dtype", "sri-values", "window-and-sri", "gqa"])
def test_errors_are_the_generic_kernels(no_launch, bad):
    rng = np.random.default_rng(10)
    q, k, v = _inputs(rng, 1, 64, 64, 2, 2, 64, "bfloat16")
    kw = {"startend_row_indices": np.full((1, 1, 64, 1), 64, dtype=np.int32), "causal": True}
    if bad == "sri-dtype":
        kw["startend_row_indices"] = kw["startend_row_indices"].astype(np.int64)
    elif bad == "sri-values":
        kw["startend_row_indices"] = kw["startend_row_indices"] + 1
    elif bad == "window-and-sri":
        kw["window_left"] = 3
    else:
        q = np.concatenate([q, q[:, :, :1]], axis=2)            # 3 query heads over 2 key heads
    with pytest.raises((TypeError, ValueError)) as got:
        gpu.flashmask_forward_gpu(q, k, v, **kw)
    with pytest.raises((TypeError, ValueError)) as want:
        kernel.flashmask_forward(np, q, k, v, **kw)
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def test_registered_kernel_takes_the_dispatchers_xp(no_launch):
    """The registered function is called as fn(xp, *arrays, **attrs, generator=...)."""
    rng = np.random.default_rng(11)
    q, k, v = _inputs(rng, 1, 16, 16, 2, 2, 64, "float32")
    got = gpu._forward_kernel(np, q, k, v, None, None, 0.0, True, -1, -1, None, generator=None)
    _same(got, kernel.flashmask_forward(np, q, k, v, causal=True))


# -- 3. on a GPU ---------------------------------------------------------------------------------------------

def _cupy():
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except Exception as exc:                  # no cupy, no driver, no device
        pytest.skip(f"cupy with a GPU is not available here ({type(exc).__name__}: {exc})")
    return cupy


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_forward_matches_cpu(name):
    cupy = _cupy()
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
    ref_out, ref_lse = _reference(q, k, v, kw)
    _check(out, cupy.asnumpy(lse), ref_out, ref_lse, q, name)


def test_gpu_forward_large():
    cupy = _cupy()
    rng = np.random.default_rng(200)
    b, s, hq, hk, d = 1, 1000, 4, 2, 128
    q, k, v = _inputs(rng, b, s, s, hq, hk, d, "float16")
    sri, causal = _builder(masks.causal_document_mask, [300, 450, 250])
    out, lse, _ = gpu.flashmask_forward_gpu(*(cupy.asarray(x) for x in (q, k, v)), cupy.asarray(sri), causal=causal)
    kw = dict(startend_row_indices=sri, causal=causal, window_left=-1, window_right=-1, softmax_scale=None)
    ref_out, ref_lse = _reference(q, k, v, kw)
    _check(cupy.asnumpy(out), cupy.asnumpy(lse), ref_out, ref_lse, q, f"causal document S={s}")
    assert math.isfinite(float(cupy.asnumpy(lse).max()))
