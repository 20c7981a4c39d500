"""The kernels oarlock-cuda registers for oarlock-incubate's internal ops on "gpu": kernels/moe.cu
(moe_gate_dispatch_op, moe_combine_op, moe_combine_grad_op), kernels/partial_rope.cu (fused_partial_rope_op) and
kernels/bias_act.cu (fused_bias_act_op). Compiled for the host with g++ (oarlock_cuda.emulation) and run behind
the real wrappers of oarlock_cuda.fused on numpy arrays, against the ops' generic kernels: routing and copies bit
for bit, sums to the dtype's tolerance; ties, dropped slots, corr_bias, both paddings, 16-bit inputs and the
fallbacks. nvcc compiles the families with the others in test_fused_kernels.py. The GPU checks at the end run
where cupy and a device exist; here they skip: the GPU run is owed."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import oarlock
from oarlock_cuda import fused

DTYPES = ("float32", "float16", "bfloat16")


def _generic(op):
    if (op, None, None) not in oarlock.registry.default_registry().kernels:
        pytest.skip(f"{op} is defined by oarlock-incubate, which is not installed")
    return fused.GENERIC(op)


def _np(dtype):
    return oarlock.dtypes.convert_dtype(dtype).np


def _gate(rng, rows, experts):
    gate = rng.random((rows, experts)).astype(np.float32)
    gate[1] = 0.5                      # ties: the lower expert ids win
    gate[2, :2] = gate[2, 2]
    return gate


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_dispatch_matches_generic(host, dtype):
    rng = np.random.default_rng(0)
    generic = _generic("moe_gate_dispatch_op")
    for rows, experts, hidden, k, capacity in ((9, 4, 5, 2, 3), (16, 6, 40, 3, 16), (5, 3, 1, 1, 1)):
        x = rng.standard_normal((rows, hidden)).astype(_np(dtype))
        gate = _gate(rng, rows, experts)
        bias = rng.normal(0, 0.1, experts).astype(np.float32)
        for use_pad in (True, False):
            for corr in (None, bias):
                got = fused.KERNELS["moe_gate_dispatch_op"](np, x, gate, corr, k=k, capacity=capacity,
                                                            use_pad=use_pad)
                want = generic(np, x, gate, corr, k=k, capacity=capacity, use_pad=use_pad)
                what = f"{dtype} {rows}x{experts} h{hidden} k{k} cap{capacity} pad={use_pad} bias={corr is not None}"
                assert len(got) == len(want) == 5, what
                for i, (g, w) in enumerate(zip(got, want)):
                    assert g.shape == w.shape and g.dtype == w.dtype, (what, i, g.shape, w.shape, g.dtype, w.dtype)
                    np.testing.assert_array_equal(g, w, err_msg=f"{what} output {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_combine_matches_generic(host, dtype):
    rng = np.random.default_rng(1)
    generic = _generic("moe_combine_op")
    tol = 1e-6 if dtype == "float32" else 0
    for n, rows, k, hidden in ((12, 5, 2, 7), (40, 16, 4, 33), (3, 3, 1, 1)):
        x = rng.standard_normal((n, hidden)).astype(_np(dtype))
        w = rng.random((rows, k)).astype(_np(dtype))
        w[0, -1] = 0
        index = rng.integers(0, n, (rows, k)).astype(np.int32)
        got = fused.KERNELS["moe_combine_op"](np, x, w, index)
        want = generic(np, x, w, index)
        assert got.shape == want.shape and got.dtype == want.dtype
        # float32 sums in the same order (j ascending, no FMA); 16-bit ones sum in float32 and round once on both
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_host_fallbacks_are_the_generic_kernels(host):
    rng = np.random.default_rng(2)
    x64 = rng.standard_normal((6, 3))
    gate = _gate(rng, 6, 3)
    got = fused.KERNELS["moe_gate_dispatch_op"](np, x64, gate, None, k=2, capacity=2, use_pad=True)
    want = _generic("moe_gate_dispatch_op")(np, x64, gate, None, k=2, capacity=2, use_pad=True)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    mixed = fused.KERNELS["moe_combine_op"](np, x64.astype(np.float32), np.ones((2, 2)), np.zeros((2, 2), np.int32))
    np.testing.assert_allclose(mixed, 2 * x64.astype(np.float32)[[0, 0]])


# -- on a GPU (skipped without cupy and a device: the GPU run is owed) -------------------------------------------

def _gpu():
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed here (pip install 'oarlock-cuda[cuda12]'); the GPU run of these kernels "
                    "is owed")
    import cupy
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # cupy without a driver or a device
        pytest.skip(f"no usable GPU: {exc}")
    if count == 0 or oarlock.device.device_count("gpu") == 0:
        pytest.skip("no GPU device")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_dispatch_and_combine_match_cpu(dtype):
    """moe_gate_dispatch -> moe_combine on device "gpu" (the moe.cu kernels) against the CPU, forward and the
    gradients of x and gate_logits."""
    _gpu()
    import oarlock.incubate.nn.functional as IF
    rng = np.random.default_rng(3)
    x, gate = rng.standard_normal((64, 48)).astype(np.float32), _gate(rng, 64, 8)
    bias = rng.normal(0, 0.1, 8).astype(np.float32)
    results = []
    for place in ("cpu", "gpu"):
        ox = oarlock.to_tensor(x, place=place).astype(dtype)
        og = oarlock.to_tensor(gate, place=place)
        ox.stop_gradient = og.stop_gradient = False
        y, cw, si, off, eid = IF.moe_gate_dispatch(ox, og, oarlock.to_tensor(bias, place=place), 2, 12, True)
        out = IF.moe_combine(y * 2, cw.astype(dtype), si.transpose([1, 0]))
        (out.astype("float32").sum() + cw.sum()).backward()
        results.append([t.astype("float64").numpy() if t.dtype.name.startswith(("float", "bfloat")) else t.numpy()
                        for t in (y, cw, si, off, eid, out, ox.grad, og.grad)])
    tol = 1e-5 if dtype == "float32" else 1e-2
    for i, (c, g) in enumerate(zip(*results)):
        np.testing.assert_allclose(g, c, rtol=tol, atol=tol, err_msg=f"{dtype} output {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_partial_rope_matches_generic(host, dtype):
    """kernels/partial_rope.cu (fused_partial_rope_op on "gpu"), forward and transposed, against the generic
    kernel; pe from 2 to the whole head."""
    rng = np.random.default_rng(4)
    generic = _generic("fused_partial_rope_op")
    tol = 1e-6 if dtype == "float32" else 0
    for shape, pe in (((2, 3, 2, 8), 4), ((1, 5, 3, 6), 6), ((2, 2, 1, 10), 2)):
        x = rng.standard_normal(shape).astype(_np(dtype))
        ang = rng.uniform(0, 3, (1, shape[1], 1, pe))
        cos, sin = np.cos(ang).astype(_np(dtype)), np.sin(ang).astype(_np(dtype))
        for transpose in (False, True):
            got = fused.KERNELS["fused_partial_rope_op"](np, x, cos, sin, transpose=transpose)
            want = generic(np, x, cos, sin, transpose=transpose)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                                       err_msg=f"{dtype} {shape} pe={pe} transpose={transpose}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_partial_rope_matches_cpu(dtype):
    _gpu()
    import oarlock.incubate.nn.functional as IF
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 7, 3, 16)).astype(np.float32)
    ang = rng.uniform(0, 3, (1, 7, 1, 8))
    g = rng.standard_normal(x.shape).astype(np.float32)
    results = []
    for place in ("cpu", "gpu"):
        ox = oarlock.to_tensor(x, place=place).astype(dtype)
        ox.stop_gradient = False
        cos, sin = (oarlock.to_tensor(f(ang).astype(np.float32), place=place).astype(dtype) for f in (np.cos, np.sin))
        out = IF.fused_partial_rope(ox, cos, sin)
        (out.astype("float32") * oarlock.to_tensor(g, place=place)).sum().backward()
        results.append([out.astype("float64").numpy(), ox.grad.astype("float64").numpy()])
    tol = 1e-5 if dtype == "float32" else 1e-2
    for i, (c, gpu) in enumerate(zip(*results)):
        np.testing.assert_allclose(gpu, c, rtol=tol, atol=tol, err_msg=f"{dtype} output {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_combine_grad_matches_generic(host, dtype):
    """kernels/moe.cu's moe_combine_bwd (moe_combine_grad_op on "gpu") against the generic kernel; a row named by
    two live slots goes to the generic kernel (bit for bit then)."""
    rng = np.random.default_rng(6)
    generic = _generic("moe_combine_grad_op")
    for n, rows, k, hidden, unique in ((12, 5, 2, 7, True), (40, 16, 2, 300, True), (6, 4, 2, 5, False)):
        x = rng.standard_normal((n, hidden)).astype(_np(dtype))
        w = rng.random((rows, k)).astype(_np(dtype))
        w[0, -1] = 0
        index = (rng.permutation(n)[: rows * k] if unique else rng.integers(0, n, rows * k)).reshape(rows, k)
        if not unique:
            index[1, 0] = index[2, 1] = 0                  # row 0 named by two live slots
        index = index.astype(np.int32)
        g = rng.standard_normal((rows, hidden)).astype(_np(dtype))
        got = fused.KERNELS["moe_combine_grad_op"](np, x, w, index, g)
        want = generic(np, x, w, index, g)
        for i, (a, b) in enumerate(zip(got, want)):
            assert a.shape == b.shape and a.dtype == b.dtype, (dtype, n, i)
            # dx: one product, bit for bit; dw: a tree sum against numpy's (both in float32): a few float32 ulps of
            # the terms, or one rounding step of the 16-bit result
            atol = 0 if i == 0 else 1e-5 * np.abs(g.astype(np.float64)).max() * np.abs(x.astype(np.float64)).max() \
                * hidden
            rtol = 2.0 ** -7 if i == 1 and dtype != "float32" else 0
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol,
                                       err_msg=f"{dtype} n={n} output {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_host_bias_act_matches_generic(host, dtype):
    """kernels/bias_act.cu (fused_bias_act_op on "gpu") against the generic kernel, every act_method, with and
    without bias; float32 to 1e-5 of the terms' size (|x| <= 6 here; the generic gelu's far negative tail is only
    ~2e-4 relative, the kernel's erfcf is closer to float64 there), 16-bit to one rounding step."""
    rng = np.random.default_rng(7)
    generic = _generic("fused_bias_act_op")
    rtol, atol = (1e-5, 1e-5) if dtype == "float32" else (2.0 ** -7, 1e-3)
    for shape in ((3, 8), (2, 5, 66), (1, 2)):
        x = rng.uniform(-6, 6, shape).astype(_np(dtype))
        bias = rng.standard_normal(shape[-1]).astype(_np(dtype))
        for act in ("gelu", "relu", "swiglu", "geglu"):
            for b in (None, bias):
                got = fused.KERNELS["fused_bias_act_op"](np, x, b, act)
                want = generic(np, x, b, act)
                assert got.shape == want.shape and got.dtype == want.dtype, (shape, act)
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                           err_msg=f"{dtype} {shape} {act} bias={b is not None}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_bias_act_matches_cpu(dtype):
    _gpu()
    import oarlock.incubate.nn.functional as IF
    rng = np.random.default_rng(8)
    x, bias = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    tol = 1e-5 if dtype == "float32" else 1e-2
    for act in ("gelu", "relu", "swiglu", "geglu"):
        results = []
        for place in ("cpu", "gpu"):
            ox, ob = (oarlock.to_tensor(a, place=place).astype(dtype) for a in (x, bias))
            ox.stop_gradient = ob.stop_gradient = False
            out = IF.fused_bias_act(ox, ob, act_method=act)
            out.astype("float32").sum().backward()
            results.append([t.astype("float64").numpy() for t in (out, ox.grad, ob.grad)])
        for i, (c, gpu) in enumerate(zip(*results)):
            np.testing.assert_allclose(gpu, c, rtol=tol, atol=tol * (16 if i == 2 else 1), err_msg=f"{act} {i}")
