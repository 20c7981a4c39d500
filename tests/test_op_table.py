"""Table-driven op tests: every registered op against float64 numpy, finite differences, and
bad dtypes. The table lives in tests/op_specs/; an op missing from it fails here.

OARLOCK_TEST_DEVICE (default cpu) is the device the table runs on, e.g. `OARLOCK_TEST_DEVICE=gpu` runs every
case on the GPU (as bench/gpu_check.py does) against the same float64 references."""

from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import oarlock
from oarlock.registry import default_registry
from op_specs import FLOATS, In, all_specs

SPECS = all_specs()
TOL = {"float64": (1e-9, 1e-12), "float32": (2e-5, 2e-6), "float16": (5e-3, 5e-3), "bfloat16": (3e-2, 3e-2)}
DEVICE = os.environ.get("OARLOCK_TEST_DEVICE", "cpu")


@pytest.fixture(autouse=True, scope="module")
def _device_under_test():
    """New tensors (the cases' inputs) go to OARLOCK_TEST_DEVICE for the whole module."""
    previous = oarlock.get_device()
    try:
        oarlock.set_device(DEVICE)
    except ValueError as exc:
        pytest.skip(f"OARLOCK_TEST_DEVICE={DEVICE!r} is not usable here: {exc}")
    yield
    oarlock.set_device(previous)


def _rng(*key):
    return np.random.default_rng(zlib.crc32("/".join(map(str, key)).encode()))


def _make(arg, dtype, rng):
    """(oarlock value, float64/int numpy value) for one case argument."""
    if not isinstance(arg, In):
        return arg, arg
    dt = arg.dtype or dtype
    if arg.values is not None:
        host = np.asarray(arg.values)
    elif dt == "bool":
        host = rng.random(arg.shape) < 0.5
    elif oarlock.dtypes.convert_dtype(dt).kind == "int":
        host = rng.integers(*arg.int_range, size=arg.shape)
        if arg.requires_nonzero:
            host[host == 0] = 1
    else:
        host = rng.uniform(*arg.domain, size=arg.shape)
        if arg.requires_nonzero:
            host = np.where(np.abs(host) < 0.1, 0.5, host)
    host = np.asarray(host).astype(oarlock.dtypes.convert_dtype(dt).np)
    tensor = oarlock.to_tensor(host)
    ref = host.astype(np.float64) if host.dtype.kind == "f" or dt in ("bfloat16", "float8_e4m3fn") else host
    return tensor, ref


def _call(spec, args, kwargs):
    fn = spec.call or getattr(oarlock, spec.op)
    return fn(*args, **kwargs)


def _as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _numpy_params():
    for spec in SPECS.values():
        if spec.check is not None:
            continue
        for i, case in enumerate(spec.cases):
            for dt in case.dtypes or spec.dtypes:
                yield pytest.param(spec.op, i, dt, id=f"{spec.op}-{case.name or i}-{dt}")


def _grad_params():
    for spec in SPECS.values():
        if spec.check is not None or not spec.grad:
            continue
        for i, case in enumerate(spec.cases):
            if case.grad:
                yield pytest.param(spec.op, i, id=f"{spec.op}-{case.name or i}")


def test_every_registered_op_has_a_spec():
    registered = set(default_registry().ops)
    missing = sorted(registered - set(SPECS))
    assert not missing, f"ops registered without an entry in tests/op_specs: {missing}"
    unknown = sorted(set(SPECS) - registered)
    assert not unknown, f"specs for ops no plugin registers: {unknown}"


def test_differentiable_ops_are_gradient_checked():
    for name, op in default_registry().ops.items():
        spec = SPECS[name]
        if op.rule is not None and spec.check is None:
            assert spec.grad, f"op {name!r} has an autograd rule but its spec has grad=False"
            assert any(c.grad for c in spec.cases), f"op {name!r}: no case is gradient-checked"


def test_custom_checks():
    for spec in SPECS.values():
        if spec.check is not None:
            spec.check(oarlock)


@pytest.mark.parametrize("op,case_index,dtype", list(_numpy_params()))
def test_matches_float64_numpy(op, case_index, dtype):
    spec = SPECS[op]
    case = spec.cases[case_index]
    rng = _rng(op, case_index, dtype)
    made = [_make(a, dtype, rng) for a in case.args]
    out = _as_list(_call(spec, [m[0] for m in made], case.kwargs))
    ref = _as_list((case.ref or spec.ref)(*[m[1] for m in made], **case.kwargs))
    assert len(out) == len(ref), f"{op}: {len(out)} outputs, reference has {len(ref)}"
    rtol, atol = spec.rtol.get(dtype, TOL.get(dtype, (0, 0)))
    for o, r in zip(out, ref):
        r = np.asarray(r)
        got = o.numpy()
        assert list(got.shape) == list(r.shape), f"{op}: shape {got.shape} != reference {r.shape}"
        if spec.out_dtype is not None:
            expected = spec.out_dtype(dtype, *case.args, **case.kwargs)
            assert o.dtype == expected, f"{op}: {dtype} input gave a {o.dtype} output, expected {expected}"
        elif r.dtype.kind == "f" and dtype in FLOATS + ("float16",):
            assert o.dtype == dtype, f"{op}: {dtype} input gave a {o.dtype} output"
        if r.dtype.kind == "b":
            assert o.dtype == "bool", f"{op}: expected a bool output, got {o.dtype}"
        np.testing.assert_allclose(got.astype(np.float64) if got.dtype.kind not in "biuc" else got,
                                   r, rtol=rtol, atol=atol, err_msg=f"{op} [{case.name}] {dtype}")


@pytest.mark.parametrize("op,case_index", list(_grad_params()))
def test_gradient_matches_finite_differences(op, case_index):
    spec = SPECS[op]
    case = spec.cases[case_index]
    rng = _rng("grad", op, case_index)
    made = [_make(a, "float64", rng) for a in case.args]
    args = [m[0] for m in made]
    wrt = [i for i, a in enumerate(case.args) if isinstance(a, In) and a.grad and args[i].dtype == "float64"]
    assert wrt, f"{op}: case {case.name} has no float input to differentiate"
    for i in wrt:
        args[i].stop_gradient = False
    outs = [o for o in _as_list(_call(spec, args, case.kwargs)) if o.dtype == "float64"]
    weights = [rng.standard_normal(o.shape) for o in outs]
    live = [(o, w) for o, w in zip(outs, weights) if not o.stop_gradient]
    if not live:
        pytest.fail(f"{op}: no output is connected to the inputs")
    oarlock.autograd.backward([o for o, _ in live], [oarlock.to_tensor(w) for _, w in live])

    def objective():
        with oarlock.no_grad():
            res = [o for o in _as_list(_call(spec, args, case.kwargs)) if o.dtype == "float64"]
        return sum(float(np.sum(o.numpy() * w)) for o, w in zip(res, weights))

    eps = 1e-6
    for i in wrt:
        analytic = args[i].grad
        data = args[i]._data
        numeric = np.zeros(data.shape)
        for idx in np.ndindex(data.shape):
            saved = data[idx]
            data[idx] = saved + eps
            up = objective()
            data[idx] = saved - eps
            down = objective()
            data[idx] = saved
            numeric[idx] = (up - down) / (2 * eps)
        got = np.zeros(data.shape) if analytic is None else analytic.numpy()
        assert got.shape == data.shape, f"{op}: grad shape {got.shape} != input shape {data.shape}"
        np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-6,
                                   err_msg=f"{op} [{case.name}] d/d(arg {i})")


def _rejected_params():
    for spec in SPECS.values():
        if spec.check is not None:
            continue
        case = spec.cases[0]
        if not any(isinstance(a, In) and a.dtype is None for a in case.args):
            continue
        for dt in ("float32", "float64", "int32", "int64", "bool"):
            if dt not in (case.dtypes or spec.dtypes):
                yield pytest.param(spec.op, dt, id=f"{spec.op}-{dt}")


@pytest.mark.parametrize("op,dtype", list(_rejected_params()))
def test_unaccepted_dtype_gives_clear_error(op, dtype):
    spec = SPECS[op]
    case = spec.cases[0]
    made = [_make(a, dtype, _rng("bad", op)) for a in case.args]
    with pytest.raises((TypeError, ValueError, NotImplementedError)) as info:
        _call(spec, [m[0] for m in made], case.kwargs)
    assert spec.op in str(info.value) or (spec.call is None and op in str(info.value)), str(info.value)
    assert dtype in str(info.value), f"the error should name the dtype it got: {info.value}"
