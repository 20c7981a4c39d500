"""The fused CUDA kernels of oarlock_cuda.fused, checked at three depths:

1. everywhere: registration is for device "gpu" only and imports no cupy; each kernels/*.cu compiles with
   nvcc for sm_90 with every template instantiation the RawModule asks NVRTC for (skipped without nvcc);
2. without a GPU: the same .cu files compiled for the host with g++ (oarlock_cuda.emulation: one OS thread per
   CUDA thread, barriers for __syncthreads and warp shuffles, blocks one after another) run the real kernel
   code behind the real Python wrappers on numpy arrays, against the generic kernels: float32 to rtol 1e-5,
   float16/bfloat16 to 1e-2, odd row lengths (1, 33, 1500 > 1024 threads), every fallback. The shim also
   checks each launch's argument types against the kernel's C++ signature (what a cupy launch cannot).
   The host builds go to a temporary folder, or to OARLOCK_CUDA_EMU_CACHE to reuse them across runs;
3. on a GPU with cupy: each op on device "gpu" (fused) against the generic kernel on the same cupy arrays
   and against the CPU, forward and gradients (skipped with the reason otherwise).
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import oarlock
from oarlock_cuda import fused

ROOT = Path(__file__).resolve().parents[3]
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
TOL = {"float32": (1e-5, 1e-6), "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)}


def _np_dtype(name):
    return oarlock.dtypes.convert_dtype(name).np


# -- 1. registration and compilation ------------------------------------------------------------------------

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
               if fn.__module__ == "oarlock_cuda.fused"})
print(json.dumps({"attempts": spy.attempts, "cupy_loaded": any(m == "cupy" or m.startswith("cupy.")
                  for m in sys.modules), "kernels": mine}))
"""


def test_registers_only_gpu_kernels_and_imports_no_cupy():
    import json
    done = subprocess.run([sys.executable, "-c", _SPY], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["attempts"] == [] and not report["cupy_loaded"], report
    kernels = report["kernels"]
    assert {dev for _, dev, _ in kernels} == {"gpu"}, kernels
    assert {op for op, _, _ in kernels} == set(fused.KERNELS)
    assert sorted(map(tuple, kernels)) == sorted((op, "gpu", dt) for op in fused.KERNELS for dt in FLOAT_DTYPES)


def _instantiating(family):
    """The family's source plus a host array taking the address of every name expression (so nvcc emits
    each instantiation, as NVRTC does for the RawModule's name_expressions)."""
    refs = "\n".join(f"    (void*)&{name}," for name in fused.FAMILIES[family][1])
    return (fused.source(family) + "\n// every name expression of the RawModule\nextern void* oarlock_instances[];\n"
            f"void* oarlock_instances[] = {{\n{refs}\n}};\n")


@pytest.mark.parametrize("family", sorted(fused.FAMILIES))
def test_source_compiles_with_nvcc(family, tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    src = tmp_path / f"{family}.cu"
    src.write_text(_instantiating(family))
    flags = [o.replace("--fmad", "-fmad") for o in fused.OPTIONS]  # the RawModule's NVRTC options, nvcc spelling
    done = subprocess.run([nvcc, "-arch=sm_90", "--cubin", *flags, "-Werror", "all-warnings", "-o",
                           str(tmp_path / f"{family}.cubin"), str(src)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / f"{family}.cubin").stat().st_size > 0


def test_sources_are_self_contained():
    for family, (name, expressions) in fused.FAMILIES.items():
        text = fused.source(family)
        includes = [line for line in text.splitlines() if line.lstrip().startswith("#") and "include" in line]
        assert not includes, f"{name} includes a header ({includes}); the sources must compile as they are"
        for expression in expressions:
            assert expression.split("<")[0] in text, (name, expression)


# -- 2. the kernels on the host -------------------------------------------------------------------------------

def _generic(op):
    return fused.GENERIC(op)


def _rand(rng, shape, dtype, low=-3.0, high=3.0):
    return rng.uniform(low, high, shape).astype(_np_dtype(dtype))


def _close(got, want, dtype, what, scale=None):
    """allclose at the dtype's tolerance; `scale`: the magnitude of the terms a result sums (a reduction with
    cancellation is exact only to its terms' size, in any summation order)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    rtol, atol = TOL[dtype] if dtype in TOL else (1e-5, 1e-6)
    if scale is None:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, err_msg=what)
        return
    got, want = got.astype(np.float64), want.astype(np.float64)
    bound = atol + rtol * (np.abs(want) + scale)
    bad = ~(np.abs(got - want) <= bound)
    assert not bad.any(), f"{what}: {bad.sum()} of {bad.size} differ beyond rtol {rtol} of the terms' size, e.g. " \
                          f"{got[bad][:3]} vs {want[bad][:3]} (bound {np.broadcast_to(bound, bad.shape)[bad][:3]})"


def _same_outputs(got, want, dtype, what, scales=()):
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want), f"{what}: {len(got)} outputs, the generic kernel gives {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        _close(g, w, dtype, f"{what} output {k}", scales[k] if k < len(scales) else None)


ROW_SHAPES = [(3, 1), (4, 33), (2, 1500), (5,), (2, 3, 64)]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "softmax_compat"])
def test_host_softmax(host, op, dtype):
    rng = np.random.default_rng(1)
    for shape in ROW_SHAPES:
        x = _rand(rng, shape, dtype, -20, 20)
        axis = -1 if op != "softmax_compat" else len(shape) - 1
        _same_outputs(fused.KERNELS[op](np, x, axis=axis), _generic(op)(np, x, axis=axis), dtype, f"{op} {shape}")
    x = _rand(rng, (4, 40), dtype)
    x[1, :] = -np.inf           # a fully masked row: NaN, as the generic kernel gives
    x[2, 5:] = -np.inf          # a partly masked row
    with np.errstate(invalid="ignore"):
        _same_outputs(fused.KERNELS[op](np, x, axis=-1), _generic(op)(np, x, axis=-1), dtype, f"{op} masked")
    for kwargs in ({"axis": 0}, {"axis": -1, "dtype": np.dtype(np.float64)}):   # the generic kernel's cases
        _same_outputs(fused.KERNELS[op](np, x[:3, :3].copy(), **kwargs), _generic(op)(np, x[:3, :3].copy(), **kwargs),
                      dtype, f"{op} {kwargs}")


def _labels(rng, lead, classes, dtype="int64", ignore=None):
    labels = rng.integers(0, classes, lead).astype(dtype)
    if ignore is not None and labels.size:
        labels.reshape(-1)[:: 3] = ignore
    return labels


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_cross_entropy(host, dtype):
    rng = np.random.default_rng(2)
    kernel, generic = fused.KERNELS["cross_entropy"], _generic("cross_entropy")
    for shape in [(6, 1), (5, 33), (2, 1500), (7,), (2, 3, 10)]:
        classes = shape[-1]
        x = _rand(rng, shape, dtype, -8, 8)
        w = rng.uniform(0.1, 2.0, classes).astype(x.dtype)
        every = shape == (5, 33)  # every combination of options on one shape, the usual ones on the others
        for label_dtype in ("int64", "int32") if every else ("int64",):
            for keep_axis in (False, True) if every else (False,):
                for reduction in ("mean", "sum", "none") if every else ("mean", "none"):
                    for weight, ignore in ((None, -100), (w, -100), (None, 0), (w, 1)):
                        labels = _labels(rng, shape[:-1], classes, label_dtype, ignore if ignore >= 0 else -100)
                        if keep_axis:
                            labels = labels[..., None]
                        args = (x, labels, weight, ignore, reduction)
                        what = (f"cross_entropy {shape} {label_dtype} keep={keep_axis} {reduction} "
                                f"w={weight is not None} ignore={ignore}")
                        _same_outputs(kernel(np, *args), generic(np, *args), dtype, what)
    x = _rand(rng, (4, 5), dtype)
    for kwargs in ({"soft_label": True}, {"label_smoothing": 0.1}, {"use_softmax": False}, {"axis": 0}):
        label = rng.uniform(0, 1, (4, 5)).astype(x.dtype) if kwargs.get("soft_label") else \
            _labels(rng, (5,) if kwargs.get("axis") == 0 else (4,), 4 if kwargs.get("axis") == 0 else 5)
        xx = np.abs(x) + 0.1 if kwargs.get("use_softmax") is False else x
        _same_outputs(kernel(np, xx, label, **kwargs), generic(np, xx, label, **kwargs), dtype,
                      f"cross_entropy {kwargs}")
    bad = np.array([1, 7, 2, -3])
    for fn in (kernel, generic):
        with pytest.raises(IndexError, match="label value 7 is out of range for 5 classes"):
            fn(np, x, bad)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_layer_and_rms_norm(host, dtype):
    rng = np.random.default_rng(3)
    for shape, normalized in [((3, 1), (1,)), ((4, 33), (33,)), ((2, 1500), (1500,)), ((2, 3, 4, 5), (4, 5)),
                              ((7,), (7,))]:
        x = _rand(rng, shape, dtype)
        n = math.prod(normalized)
        w, b = _rand(rng, (n,), dtype), _rand(rng, normalized, dtype)
        for weight, bias in ((None, None), (w, None), (w, b), (None, b)):
            args = (x, weight, bias, normalized, 1e-5)
            _same_outputs(fused.KERNELS["layer_norm"](np, *args), _generic("layer_norm")(np, *args), dtype,
                          f"layer_norm {shape} w={weight is not None} b={bias is not None}")
        for weight in (None, w):
            for eps in (None, 1e-6):
                args = (x, weight, normalized, eps)
                _same_outputs(fused.KERNELS["rms_norm"](np, *args), _generic("rms_norm")(np, *args), dtype,
                              f"rms_norm {shape} w={weight is not None} eps={eps}")
    with pytest.raises(ValueError, match="normalized_shape"):
        fused.KERNELS["layer_norm"](np, _rand(rng, (2, 3), dtype), None, None, (4,), 1e-5)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_normalize_grad(host, dtype):
    rng = np.random.default_rng(4)
    for rows, n in [(3, 1), (4, 33), (2, 1500), (300, 7)]:
        x, g = _rand(rng, (rows, n), dtype), _rand(rng, (rows, n), dtype)
        w = _rand(rng, (n,), dtype)
        mean = rng.uniform(-1, 1, (rows, 1)).astype(np.float32)
        rstd = rng.uniform(0.5, 2, (rows, 1)).astype(np.float32)
        for weight in (None, w):
            for m in (mean, None):
                for bias in (True, False):
                    args = (x, weight, g, m, rstd, (rows, n), (1,), (1, n), False, bias)
                    # dweight and dbias sum `rows` terms of size |g| |xhat| and |g|
                    # and dx = (gh - xhat mean(gh xhat) - mean(gh)) rstd cancels down from terms of their size
                    xhat = (x.astype(np.float64) - (0 if m is None else m)) * rstd
                    terms = np.abs(g.astype(np.float64))
                    gh = terms if weight is None else terms * np.abs(weight.astype(np.float64))
                    dx_terms = (gh + np.abs(xhat) * (gh * np.abs(xhat)).mean(1, keepdims=True)
                                + gh.mean(1, keepdims=True)) * rstd
                    scales = (dx_terms, (terms * np.abs(xhat)).sum(0), terms.sum(0) if bias else None)
                    _same_outputs(fused.KERNELS["_normalize_grad"](np, *args), _generic("_normalize_grad")(np, *args),
                                  dtype, f"_normalize_grad {rows}x{n} w={weight is not None} center={m is not None}",
                                  scales)
    x = _rand(rng, (2, 3, 4), dtype)     # group_norm's plan: the generic kernel
    args = (x, None, x, np.zeros((2, 1, 1), np.float32), np.ones((2, 1, 1), np.float32), (2, 3, 4), (1, 2), (1, 3, 1))
    _same_outputs(fused.KERNELS["_normalize_grad"](np, *args), _generic("_normalize_grad")(np, *args), dtype, "plan")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_gelu(host, dtype):
    rng = np.random.default_rng(5)
    for shape in [(), (1,), (1000,), (3, 37)]:
        x = _rand(rng, shape, dtype, -12, 12)
        for approximate in (False, True, "none", "tanh"):
            _same_outputs(fused.KERNELS["gelu"](np, x, approximate=approximate),
                          _generic("gelu")(np, x, approximate=approximate), dtype, f"gelu {shape} {approximate}")
    with pytest.raises(ValueError, match="approximate"):
        fused.KERNELS["gelu"](np, x, approximate="erf")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_rotary(host, dtype):
    rng = np.random.default_rng(6)
    cases = [((2, 5, 3, 8), (1, 5, 1, 8), (1, 5, 1, 8)),
             ((2, 5, 6), (5, 6), (5, 6)),
             ((3, 4), (4,), (3, 1)),
             ((2,), (2,), (2,)),
             ((2, 3, 2, 2, 4), (2, 1, 2, 1, 4), (1, 3, 1, 2, 4)),     # 4 leading strides: the generic kernel
             ((2, 9, 2, 66), (1, 9, 1, 66), (1, 9, 1, 66))]
    for xs, cs, ss in cases:
        x, cos, sin = _rand(rng, xs, dtype), _rand(rng, cs, dtype), _rand(rng, ss, dtype)
        for transpose in (False, True):
            _same_outputs(fused.KERNELS["fused_rotary_embedding"](np, x, cos, sin, transpose=transpose),
                          _generic("fused_rotary_embedding")(np, x, cos, sin, transpose=transpose), dtype,
                          f"rotary {xs} {cs} {ss} transpose={transpose}")
    x = _rand(rng, (2, 6, 3, 8), dtype)   # strided cos/sin views (a slice of a longer table, as the model uses)
    table = _rand(rng, (1, 10, 1, 8), dtype)
    _same_outputs(fused.KERNELS["fused_rotary_embedding"](np, x, table[:, 2:8], table[:, 1:7]),
                  _generic("fused_rotary_embedding")(np, x, table[:, 2:8], table[:, 1:7]), dtype, "rotary views")
    with pytest.raises(ValueError, match="even"):
        fused.KERNELS["fused_rotary_embedding"](np, _rand(rng, (2, 3), dtype), _rand(rng, (3,), dtype),
                                                _rand(rng, (3,), dtype))


def _splitmix(z):
    z = z.astype(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_dropout(host, dtype):
    rng = np.random.default_rng(7)
    x = _rand(rng, (40, 101), dtype)
    for p, mode in ((0.3, "upscale_in_train"), (0.9, "upscale_in_train"), (0.5, "downscale_in_infer")):
        seed = int(np.random.default_rng(11).integers(0, 2 ** 62))
        out, mask = fused.KERNELS["dropout"](np, x, p, None, True, mode, generator=np.random.default_rng(11))
        ref_out, ref_mask = _generic("dropout")(np, x, p, None, True, mode, generator=np.random.default_rng(11))
        assert out.dtype == mask.dtype == ref_mask.dtype == x.dtype and out.shape == mask.shape == ref_mask.shape
        scale = np.asarray(1.0 / (1.0 - p) if mode == "upscale_in_train" else 1.0).astype(x.dtype)
        # the counter-based hash, recomputed here: key = splitmix(seed), u_i = splitmix(key + (i + 1) golden)
        key = _splitmix(np.array([seed], dtype=np.uint64))[0]
        with np.errstate(over="ignore"):
            z = _splitmix(key + (np.arange(x.size, dtype=np.uint64) + np.uint64(1)) * np.uint64(0x9E3779B97F4A7C15))
        u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
        want = np.where(u >= np.float32(p), scale, np.zeros((), x.dtype)).astype(x.dtype).reshape(x.shape)
        np.testing.assert_array_equal(mask.astype(np.float64), want.astype(np.float64))
        np.testing.assert_array_equal(out.astype(np.float64), (x * mask).astype(np.float64))
        assert abs(float(np.mean(mask == 0)) - p) < 0.03
        assert set(np.unique(mask.astype(np.float64))) <= {0.0, float(scale)}
        assert set(np.unique(ref_mask.astype(np.float64))) <= {0.0, float(scale)}
    for kwargs in ({"axis": 0}, {"training": False}, {"p": 0.0}, {"p": 1.0}):   # the generic kernel's cases
        args = {"p": 0.5, "axis": None, "training": True, "mode": "upscale_in_train", **kwargs}
        out, mask = fused.KERNELS["dropout"](np, x, **args, generator=np.random.default_rng(1))
        ref_out, ref_mask = _generic("dropout")(np, x, **args, generator=np.random.default_rng(1))
        np.testing.assert_array_equal(mask.astype(np.float64), ref_mask.astype(np.float64))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_host_adam_step_is_bit_exact(host, dtype):
    rng = np.random.default_rng(8)
    for n in (1, 33, 1000):
        for decoupled, weight_decay, amsgrad in ((True, 0.01, False), (False, 0.0, False), (False, 0.1, True),
                                                 (True, 0.0, True)):
            arrays = [_rand(rng, (n,), dtype), _rand(rng, (n,), dtype), _rand(rng, (n,), dtype, -0.1, 0.1),
                      _rand(rng, (n,), dtype, 0, 0.01), _rand(rng, (n,), dtype, 0, 0.01) if amsgrad else None]
            mine = [None if a is None else a.copy() for a in arrays]
            ref = [None if a is None else a.copy() for a in arrays]
            attrs = dict(lr=1e-3, beta1=0.9, beta2=0.95, epsilon=1e-8, weight_decay=weight_decay, decoupled=decoupled)
            for step in (1, 2, 3):
                fused.KERNELS["adam_step_"](np, *mine, step=step, **attrs)
                _generic("adam_step_")(np, *ref, step=step, **attrs)
            for k, (a, b) in enumerate(zip(mine, ref)):
                if a is not None:
                    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8),
                                                  err_msg=f"adam {dtype} n={n} array {k} {attrs} amsgrad={amsgrad}")


# -- the rotary op itself (generic kernel, any device) ------------------------------------------------------------

def test_rotary_op_equals_the_composite_it_replaces():
    """fused_rotary_embedding gives the model's former x * cos + rotate_half(x) * sin to the bit, forward and
    backward (so the training numbers of oarlock_train did not change)."""
    rng = np.random.default_rng(9)
    xs = rng.standard_normal((2, 6, 4, 8)).astype(np.float32)
    cos, sin = (oarlock.to_tensor(rng.standard_normal((1, 6, 1, 8)).astype(np.float32)) for _ in range(2))
    weights = oarlock.to_tensor(rng.standard_normal(xs.shape).astype(np.float32))
    results = []
    for composite in (True, False):
        x = oarlock.to_tensor(xs, stop_gradient=False)
        if composite:
            half = x.shape[-1] // 2
            out = x * cos + oarlock.concat([x[..., half:], x[..., :half]], axis=-1) * sin
        else:
            out = oarlock.nn.functional.fused_rotary_embedding(x, cos, sin)
        (out * weights).sum().backward()
        results.append((out.numpy(), x.grad.numpy()))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_rotary_op_errors_name_the_shapes():
    F = oarlock.nn.functional
    x = oarlock.ones([2, 3, 4])
    with pytest.raises(ValueError, match=r"cos must broadcast to x's shape \[2, 3, 4\].*\[5, 4\]"):
        F.fused_rotary_embedding(x, oarlock.ones([5, 4]), oarlock.ones([4]))
    with pytest.raises(ValueError, match=r"sin must broadcast .* without changing it.*\[2, 2, 3, 4\]"):
        F.fused_rotary_embedding(x, oarlock.ones([4]), oarlock.ones([2, 2, 3, 4]))
    with pytest.raises(ValueError, match="must be even"):
        F.fused_rotary_embedding(oarlock.ones([2, 3]), oarlock.ones([3]), oarlock.ones([3]))
    with pytest.raises(ValueError, match="at least one dimension"):
        F.fused_rotary_embedding(oarlock.ones([]), oarlock.ones([]), oarlock.ones([]))


# -- 3. on a GPU ---------------------------------------------------------------------------------------------------

def _gpu():
    """cupy, when it and a GPU device of oarlock are usable here; else skip saying what is missing."""
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed here (pip install 'oarlock-cuda[cuda12]'); bench/gpu_check.py runs these "
                    "checks on a GPU machine")
    import cupy
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy without a driver or a device
        pytest.skip(f"no usable GPU: {exc}")
    if count == 0 or oarlock.device.device_count("gpu") == 0:
        pytest.skip("no GPU device")
    return cupy


def _pair(host_array):
    """The same values as a cpu tensor and a gpu tensor."""
    return oarlock.to_tensor(host_array), oarlock.to_tensor(host_array, place="gpu")


def _check_gpu_vs_cpu(got, want, dtype, what):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    for g, w in zip(got, want):
        assert g.place.is_gpu_place(), f"{what}: the result is on {g.place}"
        assert g.dtype == w.dtype and g.shape == w.shape, (what, g.dtype, w.dtype, g.shape, w.shape)
        _close(g.astype("float64").numpy() if g.dtype != "float64" else g.numpy(),
               w.astype("float64").numpy() if w.dtype != "float64" else w.numpy(), dtype, what)


GPU_CASES = {  # op -> (call on tensors, input shapes)
    "softmax": (lambda x: oarlock.nn.functional.softmax(x), [(3, 1), (4, 33), (2, 1500), (2, 3, 64)]),
    "log_softmax": (lambda x: oarlock.nn.functional.log_softmax(x), [(3, 1), (4, 33), (2, 1500)]),
    "layer_norm": (lambda x: oarlock.nn.functional.layer_norm(x, x.shape[-1:]), [(3, 1), (4, 33), (2, 1500)]),
    "rms_norm": (lambda x: oarlock.nn.functional.rms_norm(x, x.shape[-1:]), [(3, 1), (4, 33), (2, 1500)]),
    "gelu": (lambda x: oarlock.nn.functional.gelu(x), [(1,), (1000,), (3, 37)]),
    "gelu_tanh": (lambda x: oarlock.nn.functional.gelu(x, approximate=True), [(1,), (1000,)]),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_gpu_forward_and_backward_match_cpu(case, dtype):
    _gpu()
    fn, shapes = GPU_CASES[case]
    rng = np.random.default_rng(10)
    for shape in shapes:
        host = rng.uniform(-3, 3, shape).astype(np.float32)
        cpu, gpu = (t.astype(dtype) for t in _pair(host))
        cpu.stop_gradient = gpu.stop_gradient = False
        out_cpu, out_gpu = fn(cpu), fn(gpu)
        _check_gpu_vs_cpu(out_gpu, out_cpu, dtype, f"{case} {shape}")
        weights = rng.standard_normal(shape).astype(np.float32)
        w_cpu, w_gpu = (t.astype(dtype) for t in _pair(weights))
        (out_cpu * w_cpu).sum().backward()
        (out_gpu * w_gpu).sum().backward()
        _check_gpu_vs_cpu(gpu.grad, cpu.grad, dtype, f"{case} {shape} gradient")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gpu_cross_entropy_rotary_dropout_adam(dtype):
    _gpu()
    F = oarlock.nn.functional
    rng = np.random.default_rng(12)
    for shape in [(6, 1), (5, 33), (2, 1500)]:
        logits = rng.uniform(-5, 5, shape).astype(np.float32)
        labels = rng.integers(0, shape[-1], shape[:-1])
        (xc, xg), (lc, lg) = _pair(logits), _pair(labels)
        xc, xg = xc.astype(dtype), xg.astype(dtype)
        xc.stop_gradient = xg.stop_gradient = False
        for reduction in ("mean", "sum", "none"):
            _check_gpu_vs_cpu(F.cross_entropy(xg, lg, reduction=reduction),
                              F.cross_entropy(xc, lc, reduction=reduction), dtype, f"cross_entropy {shape} {reduction}")
        F.cross_entropy(xc, lc).backward()
        F.cross_entropy(xg, lg).backward()
        _check_gpu_vs_cpu(xg.grad, xc.grad, dtype, f"cross_entropy {shape} gradient")
    x = rng.standard_normal((2, 7, 3, 8)).astype(np.float32)
    table = rng.standard_normal((1, 9, 1, 8)).astype(np.float32)
    (xc, xg), (tc, tg) = _pair(x), _pair(table)
    xc, xg, tc, tg = (t.astype(dtype) for t in (xc, xg, tc, tg))
    xc.stop_gradient = xg.stop_gradient = False
    oc, og = F.fused_rotary_embedding(xc, tc[:, :7], tc[:, 1:8]), F.fused_rotary_embedding(xg, tg[:, :7], tg[:, 1:8])
    _check_gpu_vs_cpu(og, oc, dtype, "rotary")
    oc.sum().backward()
    og.sum().backward()
    _check_gpu_vs_cpu(xg.grad, xc.grad, dtype, "rotary gradient")
    xg = oarlock.to_tensor(rng.standard_normal((64, 257)).astype(np.float32), place="gpu").astype(dtype)
    xg.stop_gradient = False
    out = F.dropout(xg, 0.25)
    kept = out.astype("float32").numpy() != 0
    assert abs(1 - kept.mean() - 0.25) < 0.02
    out.sum().backward()
    np.testing.assert_array_equal(xg.grad.astype("float32").numpy() != 0, kept)
    params = rng.standard_normal(1000).astype(np.float32)
    grads = rng.standard_normal(1000).astype(np.float32)
    finals = []
    for place in ("cpu", "gpu"):
        p = oarlock.to_tensor(params, place=place).astype(dtype)
        p.stop_gradient = False
        opt = oarlock.optimizer.AdamW(learning_rate=1e-2, parameters=[p])
        for _ in range(3):
            (p * oarlock.to_tensor(grads, place=place).astype(dtype)).sum().backward()
            opt.step()
            opt.clear_grad()
        finals.append(p.astype("float32").numpy())
    np.testing.assert_array_equal(finals[0], finals[1])


def test_gpu_fused_kernels_match_generic_on_the_same_arrays():
    """Each fused kernel against the generic kernel of its op, both run on the same cupy arrays."""
    cp = _gpu()
    rng = np.random.default_rng(13)
    for dtype in FLOAT_DTYPES:
        nd = _np_dtype(dtype)
        for n in (1, 33, 1500):
            x = cp.asarray(rng.uniform(-4, 4, (3, n)).astype(nd))
            w = cp.asarray(rng.uniform(0.5, 1.5, (n,)).astype(nd))
            g = cp.asarray(rng.uniform(-1, 1, (3, n)).astype(nd))
            labels = cp.asarray(rng.integers(0, n, (3,)))
            cases = [("softmax", (x,), {}), ("log_softmax", (x,), {}), ("gelu", (x,), {}),
                     ("gelu", (x,), {"approximate": True}),
                     ("layer_norm", (x, w, w, (n,), 1e-5), {}), ("rms_norm", (x, w, (n,), None), {}),
                     ("cross_entropy", (x, labels), {}), ("cross_entropy", (x, labels, w, -100, "none"), {})]
            if n % 2 == 0:
                cases.append(("fused_rotary_embedding", (x, w, w), {}))
            for op, args, kwargs in cases:
                got = fused.KERNELS[op](cp, *args, **kwargs)
                want = fused.GENERIC(op)(cp, *args, **kwargs)
                got = got if isinstance(got, tuple) else (got,)
                want = want if isinstance(want, tuple) else (want,)
                for a, b in zip(got, want):
                    _close(cp.asnumpy(a), cp.asnumpy(b), dtype, f"{op} {dtype} n={n}")
            mean = cp.asarray(rng.uniform(-1, 1, (3, 1)).astype(np.float32))
            rstd = cp.asarray(rng.uniform(0.5, 2, (3, 1)).astype(np.float32))
            args = (x, w, g, mean, rstd, (3, n), (1,), (1, n), False, True)
            for a, b in zip(fused.KERNELS["_normalize_grad"](cp, *args), fused.GENERIC("_normalize_grad")(cp, *args)):
                _close(cp.asnumpy(a), cp.asnumpy(b), dtype, f"_normalize_grad {dtype} n={n}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q", *sys.argv[1:]]))
