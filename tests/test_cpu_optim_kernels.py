"""oarlock-cpu's fused Adam and SGD kernels (oarlock_cpu._optim) against the generic numpy kernel of oarlock-ops.

The C loops use the generic kernel's operations, order and scalars, so on the same inputs they must
give the same bits (no tolerance): parameter, both moments and the amsgrad maximum, for Adam's coupled
L2 and AdamW's decoupled decay, float32 and float64, contiguous and strided arrays, through the op the
optimizers call (adam_step_ / adam_steps_ on the "cpu" device) and through the kernel directly.
"""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
from oarlock.registry import default_registry
from oarlock_ops.optimizer_update import _adam_kernel, _sgd_kernel

_optim = pytest.importorskip("oarlock_cpu._optim", reason="oarlock-cpu's C extension _optim is not built")
from oarlock_cpu import optim_kernels  # noqa: E402

SETTINGS = [dict(weight_decay=0.01, decoupled=True), dict(weight_decay=0.1, decoupled=False),
            dict(weight_decay=0.0, decoupled=False), dict(weight_decay=0.0, decoupled=True)]


def _arrays(rng, dtype, shape, amsgrad):
    out = [rng.standard_normal(shape) for _ in range(3)] + [rng.uniform(0, 2, shape)]
    out.append(rng.uniform(0, 2, shape) if amsgrad else None)
    return [None if a is None else a.astype(dtype) for a in out]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: f"wd{s['weight_decay']}-{'W' if s['decoupled'] else 'L2'}")
def test_kernel_matches_the_generic_kernel_bit_for_bit(dtype, amsgrad, setting):
    rng = np.random.default_rng(7)
    attrs = dict(lr=3e-3, beta1=0.9, beta2=0.95, epsilon=1e-8, step=5, **setting)
    for shape in [(1001,), (7, 33), (0,), ()]:
        ref = _arrays(rng, dtype, shape, amsgrad)
        got = [None if a is None else a.copy() for a in ref]
        _adam_kernel(np, *ref, **attrs)
        optim_kernels.adam(np, *got, **attrs)
        for name, a, b in zip(("param", "grad", "moment1", "moment2", "moment2_max"), ref, got):
            if a is not None:
                np.testing.assert_array_equal(b, a, err_msg=f"{name} {shape}")


def test_strided_arrays_are_updated_in_place():
    rng = np.random.default_rng(8)
    attrs = dict(lr=1e-2, beta1=0.9, beta2=0.999, epsilon=1e-8, step=2, weight_decay=0.1, decoupled=False)
    base = [rng.standard_normal((40, 30)).astype(np.float32) for _ in range(4)]
    base[3] = np.abs(base[3])
    ref = [a.T.copy() for a in base]
    views = [a.T for a in base]   # transposed views: not contiguous
    _adam_kernel(np, *ref, None, **attrs)
    optim_kernels.adam(np, *views, None, **attrs)
    for a, b in zip(ref, views):
        np.testing.assert_array_equal(b, a)


def test_the_cpu_device_uses_the_fused_kernels_and_the_optimizer_matches_torch():
    registry = default_registry()
    f32 = oarlock.dtypes.convert_dtype("float32")
    assert registry.find_kernel("adam_step_", "cpu", f32) is optim_kernels.adam
    assert registry.find_kernel("adam_steps_", "cpu", f32) is optim_kernels.adam_many
    bf16 = oarlock.dtypes.convert_dtype("bfloat16")   # not a C loop: the generic kernel stays
    assert registry.find_kernel("adam_step_", "cpu", bf16) is not optim_kernels.adam
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    init = [rng.standard_normal(s).astype(np.float32) for s in ((5, 3), (3,), (4, 4))]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in init] for _ in range(4)]
    ours = [oarlock.to_tensor(a, stop_gradient=False) for a in init]
    theirs = [torch.tensor(a, requires_grad=True) for a in init]
    opt = oarlock.optimizer.AdamW(learning_rate=0.01, parameters=ours, weight_decay=0.05)
    topt = torch.optim.AdamW(theirs, lr=0.01, weight_decay=0.05)
    for step in grads:
        for p, t, g in zip(ours, theirs, step):
            p.grad = oarlock.to_tensor(g)
            t.grad = torch.tensor(g)
        opt.step()
        topt.step()
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_sgd_matches_the_generic_kernel_bit_for_bit(dtype, weight_decay):
    """SGD's one pass (p - (g + p wd) lr) against the generic kernel's two passes: the same bits, for
    contiguous, strided (transposed) and empty parameters, directly and through sgd_steps_ on the device."""
    rng = np.random.default_rng(10)
    attrs = dict(lr=0.1, weight_decay=weight_decay)
    for shape in [(1001,), (7, 33), (0,), ()]:
        param, grad = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
        ref = param.copy()
        _sgd_kernel(np, ref, grad, **attrs)
        optim_kernels.sgd(np, param, grad, **attrs)
        np.testing.assert_array_equal(param, ref, err_msg=str(shape))
    base = rng.standard_normal((40, 30)).astype(dtype)
    grad = rng.standard_normal((30, 40)).astype(dtype)
    ref = base.T.copy()
    _sgd_kernel(np, ref, grad, **attrs)
    optim_kernels.sgd(np, base.T, grad, **attrs)
    np.testing.assert_array_equal(base.T, ref)
    f32 = oarlock.dtypes.convert_dtype(dtype)
    assert default_registry().find_kernel("sgd_steps_", "cpu", f32) is optim_kernels.sgd_many
    p = oarlock.to_tensor(rng.standard_normal((6, 5)).astype(dtype), stop_gradient=False)
    expected = p.numpy().copy()
    g = rng.standard_normal((6, 5)).astype(dtype)
    _sgd_kernel(np, expected, g, **attrs)
    p.grad = oarlock.to_tensor(g)
    oarlock.optimizer.SGD(learning_rate=0.1, parameters=[p], weight_decay=weight_decay or None).step()
    np.testing.assert_array_equal(p.numpy(), expected)


def test_zero_tensors_on_the_pool_and_for_views():
    """clear_grad's zero_tensors_: large contiguous arrays by pieces of one memset (1 and 2 threads), views and
    other layouts as the generic kernel does it."""
    import oarlock
    from oarlock_cpu import blas, parallel
    rng = np.random.default_rng(0)
    for threads in (1, 2):
        previous = blas.set_policy(blas.ThreadPolicy(forced=threads))
        parallel.sync_threads()
        try:
            big = oarlock.to_tensor(rng.standard_normal((513, 777)).astype(np.float32))
            small = oarlock.to_tensor(rng.standard_normal(5))
            base = oarlock.to_tensor(rng.standard_normal((6, 8)).astype(np.float32))
            view = base[:, :3]
            oarlock.zero_tensors_([big, small, view])
            assert not big.numpy().any() and not small.numpy().any() and not view.numpy().any()
            assert base.numpy()[:, 3:].all()   # only the view's elements were written
        finally:
            blas.set_policy(previous)
            parallel.sync_threads()
