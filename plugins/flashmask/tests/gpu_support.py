"""Plain helpers shared by the FlashMask GPU tests (test_gpu_forward.py, test_gpu_backward.py); their fixtures
(`host`, `host_kernels`, `no_launch`) are in conftest.py, which puts this folder on sys.path.

1. compilation: `compile_family` (nvcc for sm_90 with every name expression instantiated by `instantiating`,
   skipped without nvcc), `ptxas_stats`, `demangle`, `report_ptxas` (print and record ptxas's counts);
2. inputs: `inputs` (16-bit q, k, v), `blocky` / `random_mask` (startend_row_indices whose 64 x 64 tiles come
   out SKIP, FULL and PARTIAL), `builder` (a masks.* builder's result as numpy), `case` (the inputs and the
   op's keyword arguments of a test's CASES entry), `everything_masked` (masks that hide every key),
   `broken_kwargs` (invalid mask arguments), `reference_forward` (the CPU forward in float32), `relative_error`;
3. runs: `PoisonedNumpy` (an `xp` whose new arrays are NaN), `NoLaunch` (a runtime that fails if a fused kernel
   runs), `assert_same` / `assert_raises_alike` (the fused entry point's result or error is the generic
   kernel's), `cupy_or_skip`.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

import oarlock
from oarlock_flashmask import gpu, kernel

DTYPES = ("bfloat16", "float16")


def np_dtype(name):
    return oarlock.dtypes.convert_dtype(name).np


# -- 1. compilation ----------------------------------------------------------------------------------------------

def instantiating(names):
    """The family's source plus a host array taking the address of every name expression (so nvcc emits each
    instantiation, as NVRTC does for the RawModule's name_expressions)."""
    refs = "\n".join(f"    (void*)&{name}," for name in names)
    return (gpu.source() + "\n// every name expression of the RawModule\nextern void* oarlock_instances[];\n"
            f"void* oarlock_instances[] = {{\n{refs}\n}};\n")


def ptxas_stats(text):
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


def demangle(names):
    """{mangled: plain name} by c++filt (the names as they are without it)."""
    cxxfilt = shutil.which("c++filt")
    if cxxfilt is None:
        return {n: n for n in names}
    done = subprocess.run([cxxfilt], input="\n".join(names), capture_output=True, text=True, timeout=60)
    return {n: p.split("(")[0].removeprefix("void ") for n, p in zip(names, done.stdout.splitlines())}


def compile_family(tmp_path):
    """Compile the whole family (every name expression of gpu.names()) with nvcc for sm_90, warnings as errors,
    and return ptxas's stats of every entry; skips without nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    src = tmp_path / "flashmask.cu"
    src.write_text(instantiating(gpu.names()))
    cubin = tmp_path / "flashmask.cubin"
    done = subprocess.run([nvcc, "-arch=sm_90", "--cubin", *gpu.OPTIONS, "-Xptxas", "-v", "-Werror", "all-warnings",
                           "-o", str(cubin), str(src)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert cubin.stat().st_size > 0
    return ptxas_stats(done.stderr)


def report_ptxas(stats, record_property, title):
    """Print each entry's register and spill counts under `title` and record them as test properties (plain name:
    counts); returns {mangled: plain name}."""
    plain = demangle(list(stats))
    print(f"\nptxas -v (sm_90){title}:")
    for name, s in stats.items():
        line = (f"{s['registers']} registers, {s['stack']} bytes stack, {s['spill_stores']} bytes spill stores, "
                f"{s['spill_loads']} bytes spill loads")
        print(f"  {plain[name]}: {line}")
        record_property(plain[name], line)
    return plain


# -- 2. inputs -----------------------------------------------------------------------------------------------------

def inputs(rng, b, sq, sk, hq, hk, d, dtype, kv_fill=None):
    """q [B, Sq, Hq, D], k and v [B, Sk, Hk, D] standard normal rounded to `dtype` (k and v set to `kv_fill` if
    given)."""
    dt = np_dtype(dtype)
    q = rng.standard_normal((b, sq, hq, d)).astype(dt)
    k = rng.standard_normal((b, sk, hk, d)).astype(dt)
    v = rng.standard_normal((b, sk, hk, d)).astype(dt)
    if kv_fill is not None:
        k[...] = kv_fill
        v[...] = kv_fill
    return q, k, v


def blocky(rng, shape, low, high):
    """int32 values in [low, high] constant over random runs of columns (axis 2): runs of `low`, of `high`
    and of random values, so that 64 x 64 tiles come out SKIP, FULL and PARTIAL."""
    b, hm, sk = shape
    out = np.empty(shape, dtype=np.int64)
    for i in range(b):
        for h in range(hm):
            j = 0
            while j < sk:
                n = int(rng.integers(8, 80))
                mode = rng.integers(0, 3)
                out[i, h, j:j + n] = (low if mode == 0 else high if mode == 1
                                      else rng.integers(low, high + 1, min(n, sk - j)))
                j += n
    return out


def random_mask(rng, b, hm, sq, sk, c, causal, masked_rows=0):
    """A valid startend_row_indices [B, Hm, Sk, C] (int32) for `causal` with C vectors; `masked_rows` > 0 (C = 4)
    hides rows [0, masked_rows) from every key (fully masked rows)."""
    if c == 1:
        cols = [blocky(rng, (b, hm, sk), 0, sq)]
    elif causal or c == 4:
        cols = []
        for _ in range(c // 2):
            start = blocky(rng, (b, hm, sk), 0, sq)
            cols += [start, np.minimum(start + blocky(rng, (b, hm, sk), 0, sq), sq)]
        if masked_rows:
            cols[0][...] = 0
            cols[1][...] = np.maximum(cols[1], masked_rows)
    else:                                            # (LTS, UTE): rows >= LTS and rows < UTE masked
        cols = [blocky(rng, (b, hm, sk), sq // 2, sq), blocky(rng, (b, hm, sk), 0, sq // 2)]
    return np.ascontiguousarray(np.stack(cols, axis=-1).astype(np.int32))


def builder(fn, *args, **kwargs):
    """(startend_row_indices as a contiguous numpy array, causal) from a masks.* builder."""
    sri, causal = fn(*args, **kwargs)
    return np.ascontiguousarray(sri.numpy()), causal


def case(rng, spec, grad=False):
    """(q, k, v, grad, kwargs) of a case (b, sq, sk, hq, hk, d, dtype, options), options: mask=(builder |
    ("random", hm, c[, masked rows])), causal, window, scale; `grad` (an output gradient like q, drawn after
    k and v) is None unless asked for. kwargs: the op's startend_row_indices, causal, window_left, window_right
    and softmax_scale."""
    b, sq, sk, hq, hk, d, dtype, opt = spec
    q, k, v = inputs(rng, b, sq, sk, hq, hk, d, dtype)
    dout = rng.standard_normal(q.shape).astype(q.dtype) if grad else None
    causal = opt.get("causal", False)
    sri = None
    mask = opt.get("mask")
    if callable(mask):
        sri, causal = mask()
    elif mask is not None:
        sri = random_mask(rng, b, mask[1], sq, sk, mask[2], causal, *mask[3:])
    wl, wr = opt.get("window", (-1, -1))
    return q, k, v, dout, dict(startend_row_indices=sri, causal=causal, window_left=wl, window_right=wr,
                               softmax_scale=opt.get("scale"))


def everything_masked(b, hq, sq, sk):
    """(startend_row_indices, causal) pairs that hide every key from every row."""
    return ((np.zeros((b, 1, sk, 1), dtype=np.int32), True),                                   # rows >= 0
            (np.stack([np.zeros((b, hq, sk)), np.full((b, hq, sk), sq)], -1).astype(np.int32), False))


def broken_kwargs(bad):
    """The op's keyword arguments for Sq = Sk = 64 (a causal mask that hides nothing) broken as `bad` says:
    "sri-dtype" (int64 indices), "sri-values" (an index past Sq), "window-and-sri" (a window beside the mask);
    any other `bad` leaves them valid, for the test to break something else."""
    kw = {"startend_row_indices": np.full((1, 1, 64, 1), 64, dtype=np.int32), "causal": True}
    if bad == "sri-dtype":
        kw["startend_row_indices"] = kw["startend_row_indices"].astype(np.int64)
    elif bad == "sri-values":
        kw["startend_row_indices"] = kw["startend_row_indices"] + 1
    elif bad == "window-and-sri":
        kw["window_left"] = 3
    return kw


def reference_forward(q, k, v, kw):
    """(out, lse) of the CPU kernel in float32 from the (16-bit) inputs, for the op's kwargs `kw`."""
    f32 = [x.astype(np.float32) for x in (q, k, v)]
    out, lse, _ = kernel.flashmask_forward(np, *f32, kw["startend_row_indices"], None, 0.0, kw["causal"],
                                           kw["window_left"], kw["window_right"], kw["softmax_scale"])
    return out, lse


def relative_error(got, want):
    """|got - want| / |want| in the Frobenius norm (the absolute error where want is 0)."""
    norm = np.linalg.norm(want)
    return np.linalg.norm(got - want) / (norm if norm else 1.0)


# -- 3. runs -------------------------------------------------------------------------------------------------------

class PoisonedNumpy:
    """numpy whose `empty` fills new arrays with NaN (floats) or a sentinel (ints), so that elements a kernel
    does not write stand out; passed to flashmask_forward_gpu / flashmask_backward_gpu as their `xp`."""

    def __getattr__(self, name):
        return getattr(np, name)

    @staticmethod
    def empty(shape, dtype=float, **kwargs):
        a = np.empty(shape, dtype=dtype, **kwargs)
        a.fill(-987654 if a.dtype.kind in "iu" else np.nan)
        return a


class NoLaunch:
    """A gpu.RUNTIME under which any fused kernel launch fails the test (for the inputs the fused kernels do not
    take, which must go to the generic kernel)."""

    def function(self, *args):
        raise AssertionError("the fused kernels ran for inputs they do not take")

    def device_of(self, array):
        return 0

    def launch(self, *args, **kwargs):
        raise AssertionError("the fused kernels ran for inputs they do not take")


def assert_same(got, want):
    """The same number of arrays, each of the same dtype, shape and values."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64))


def assert_raises_alike(fused, generic, errors=(TypeError, ValueError)):
    """fused() and generic() both raise one of `errors`, of the same type with the same message."""
    with pytest.raises(errors) as got:
        fused()
    with pytest.raises(errors) as want:
        generic()
    assert type(got.value) is type(want.value) and str(got.value) == str(want.value)


def cupy_or_skip():
    """cupy with at least one GPU, or skip saying what is missing."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no GPU")
    except Exception as exc:                  # no cupy, no driver, no device
        pytest.skip(f"cupy with a GPU is not available here ({type(exc).__name__}: {exc})")
    return cupy
