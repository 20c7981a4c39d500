"""Specs for the optimizer update ops and the clipping list ops.

These ops write into their inputs, so each spec has a custom check: it runs the op on random tensors
and compares every tensor it updates with a float64 numpy reference written in the textbook form of
Paddle's formula (the optimizer tests reuse these references). Cases cover weight decay, the optional
state tensors (amsgrad, centered, momentum), float32/float64/bfloat16, and on the CPU the chunked kernel
(a parameter larger than two chunks) and its whole-array fallback (non-contiguous arrays).
"""

from __future__ import annotations

import math
import zlib

import numpy as np

from op_specs.base import FLOATS, OpSpec

TOL = {"float64": 1e-12, "float32": 2e-5, "bfloat16": 3e-2}


# -- float64 references ----------------------------------------------------------------------------------

def _l2(g, p, weight_decay):
    return g + weight_decay * p


def sgd_ref(param, grad, lr, weight_decay=0.0):
    return {"param": param - lr * _l2(grad, param, weight_decay)}


def momentum_ref(param, grad, velocity, lr, momentum, use_nesterov=False, weight_decay=0.0, rescale_grad=1.0):
    g = _l2(rescale_grad * grad, param, weight_decay)
    velocity = momentum * velocity + g
    step = g + momentum * velocity if use_nesterov else velocity
    return {"param": param - lr * step, "velocity": velocity}


def adam_ref(param, grad, moment1, moment2, moment2_max, lr, beta1, beta2, epsilon, step, weight_decay=0.0,
             decoupled=False):
    if decoupled:
        param = param * (1 - lr * weight_decay)
    else:
        grad = _l2(grad, param, weight_decay)
    moment1 = beta1 * moment1 + (1 - beta1) * grad
    moment2 = beta2 * moment2 + (1 - beta2) * grad * grad
    out = {"moment1": moment1, "moment2": moment2}
    second = moment2
    if moment2_max is not None:
        second = out["moment2_max"] = np.maximum(moment2_max, moment2)
    m_hat, v_hat = moment1 / (1 - beta1 ** step), second / (1 - beta2 ** step)
    out["param"] = param - lr * m_hat / (np.sqrt(v_hat) + epsilon)
    return out


def adagrad_ref(param, grad, moment, lr, epsilon, weight_decay=0.0):
    grad = _l2(grad, param, weight_decay)
    moment = moment + grad * grad
    return {"param": param - lr * grad / (np.sqrt(moment) + epsilon), "moment": moment}


def rmsprop_ref(param, grad, mean_square, mean_grad, velocity, lr, rho, epsilon, momentum=0.0, weight_decay=0.0):
    grad = _l2(grad, param, weight_decay)
    mean_square = rho * mean_square + (1 - rho) * grad * grad
    out = {"mean_square": mean_square}
    variance = mean_square
    if mean_grad is not None:
        mean_grad = out["mean_grad"] = rho * mean_grad + (1 - rho) * grad
        variance = mean_square - mean_grad * mean_grad
    step = lr * grad / np.sqrt(variance + epsilon)
    if velocity is not None:
        step = out["velocity"] = momentum * velocity + step
    out["param"] = param - step
    return out


def lamb_ref(param, grad, moment1, moment2, lr, beta1, beta2, epsilon, step, weight_decay=0.0, always_adapt=False):
    moment1 = beta1 * moment1 + (1 - beta1) * grad
    moment2 = beta2 * moment2 + (1 - beta2) * grad * grad
    m_hat, v_hat = moment1 / (1 - beta1 ** step), moment2 / (1 - beta2 ** step)
    r = m_hat / (np.sqrt(v_hat) + epsilon) + weight_decay * param
    p_norm, r_norm = np.linalg.norm(param), np.linalg.norm(r)
    ratio = p_norm / r_norm if (weight_decay or always_adapt) and p_norm > 0 and r_norm > 0 else 1.0
    return {"param": param - lr * ratio * r, "moment1": moment1, "moment2": moment2}


def global_norm_ref(tensors, norm_type=2.0):
    flat = np.concatenate([np.ravel(t) for t in tensors])
    if norm_type == math.inf:
        return np.max(np.abs(flat))
    if norm_type == 0:
        return float(np.count_nonzero(flat))
    return np.sum(np.abs(flat) ** norm_type) ** (1 / norm_type)


# -- the step-op checker ---------------------------------------------------------------------------------------

# the tensor arguments of each step op, in order; "positive" ones hold running squares (drawn >= 0)
TENSORS = {
    "sgd_step_": ("param", "grad"),
    "momentum_step_": ("param", "grad", "velocity"),
    "adam_step_": ("param", "grad", "moment1", "moment2", "moment2_max"),
    "adagrad_step_": ("param", "grad", "moment"),
    "rmsprop_step_": ("param", "grad", "mean_square", "mean_grad", "velocity"),
    "lamb_step_": ("param", "grad", "moment1", "moment2"),
}
POSITIVE = {"moment2", "moment2_max", "moment", "mean_square"}
REFS = {"sgd_step_": sgd_ref, "momentum_step_": momentum_ref, "adam_step_": adam_ref, "adagrad_step_": adagrad_ref,
        "rmsprop_step_": rmsprop_ref, "lamb_step_": lamb_ref}


def _draw(rng, name, shape):
    if name in POSITIVE:
        return rng.uniform(0.5, 2.0, shape)
    if name == "mean_grad":  # small enough that the centered variance mean_square - mean_grad^2 stays >= 0.2
        return rng.uniform(-0.5, 0.5, shape)
    return rng.uniform(-1.0, 1.0, shape)


def _check_step(oarlock, op, attrs, absent=(), shape=(3, 4), dtypes=FLOATS, layout=None):
    """Run `op` on random tensors (None for the names in `absent`) and compare every tensor it updates, and
    the untouched gradient, with the float64 reference. layout(array) may make an input non-contiguous."""
    names = TENSORS[op]
    for dtype in dtypes:
        rng = np.random.default_rng(zlib.crc32(f"{op}/{sorted(attrs.items())}/{absent}/{dtype}".encode()))
        host = {n: None if n in absent else _draw(rng, n, shape) for n in names}
        cast = {n: None if a is None else a.astype(oarlock.dtypes.convert_dtype(dtype).np) for n, a in host.items()}
        tensors = {n: None if a is None else oarlock.to_tensor(a) for n, a in cast.items()}
        if layout is not None:
            tensors = {n: t if t is None else layout(oarlock, n, t) for n, t in tensors.items()}
        expected = REFS[op](**{n: None if a is None else a.astype(np.float64) for n, a in cast.items()}, **attrs)
        with oarlock.no_grad():
            out = getattr(oarlock, op)(*tensors.values(), **attrs)
        assert out is tensors["param"], f"{op} must return its param tensor"
        expected["grad"] = cast["grad"].astype(np.float64)
        for name, want in expected.items():
            got = tensors[name].numpy().astype(np.float64)
            np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype],
                                       err_msg=f"{op} {attrs} {dtype}: {name}")
        for name in set(names) - set(expected) - set(absent):
            raise AssertionError(f"{op}: the reference does not check {name}")


BIG = (300, 500)  # 150000 elements: more than two CPU chunks


def _transposed(oarlock, name, t):
    """The parameter and first moment as non-contiguous (transposed) views: flattening them would copy, so
    the CPU kernel must fall back to the whole arrays or its writes would be lost."""
    if name not in ("param", "moment1"):
        return t
    return oarlock.Tensor._wrap(np.ascontiguousarray(t.numpy().T).T, t.place)


def _check_sgd(oarlock):
    _check_step(oarlock, "sgd_step_", {"lr": 0.1})
    _check_step(oarlock, "sgd_step_", {"lr": 0.05, "weight_decay": 0.1})
    _check_step(oarlock, "sgd_step_", {"lr": 0.1, "weight_decay": 0.1}, shape=BIG, dtypes=("float32",))


def _check_momentum(oarlock):
    for nesterov in (False, True):
        _check_step(oarlock, "momentum_step_", {"lr": 0.1, "momentum": 0.9, "use_nesterov": nesterov})
    _check_step(oarlock, "momentum_step_", {"lr": 0.1, "momentum": 0.5, "use_nesterov": True, "weight_decay": 0.01,
                                            "rescale_grad": 0.5})
    _check_step(oarlock, "momentum_step_", {"lr": 0.1, "momentum": 0.9, "use_nesterov": True}, shape=BIG,
                dtypes=("float32",))


ADAM = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "step": 3}


def _check_adam(oarlock):
    _check_step(oarlock, "adam_step_", ADAM, absent=("moment2_max",))
    _check_step(oarlock, "adam_step_", {**ADAM, "weight_decay": 0.1}, absent=("moment2_max",))
    _check_step(oarlock, "adam_step_", {**ADAM, "weight_decay": 0.1, "decoupled": True}, absent=("moment2_max",))
    _check_step(oarlock, "adam_step_", {**ADAM, "step": 1, "epsilon": 0.3})  # amsgrad, a large epsilon
    _check_step(oarlock, "adam_step_", {**ADAM, "weight_decay": 0.1, "decoupled": True}, shape=BIG,
                dtypes=("float32",))
    _check_step(oarlock, "adam_step_", {**ADAM, "weight_decay": 0.1, "decoupled": True}, absent=("moment2_max",),
                shape=BIG, dtypes=("float32",), layout=_transposed)


def _check_adagrad(oarlock):
    _check_step(oarlock, "adagrad_step_", {"lr": 0.1, "epsilon": 1e-6})
    _check_step(oarlock, "adagrad_step_", {"lr": 0.1, "epsilon": 0.1, "weight_decay": 0.05})


def _check_rmsprop(oarlock):
    base = {"lr": 0.01, "rho": 0.9, "epsilon": 1e-6}
    _check_step(oarlock, "rmsprop_step_", base, absent=("mean_grad", "velocity"))
    _check_step(oarlock, "rmsprop_step_", {**base, "epsilon": 0.2, "weight_decay": 0.1}, absent=("mean_grad",
                                                                                                 "velocity"))
    _check_step(oarlock, "rmsprop_step_", base, absent=("velocity",))  # centered
    _check_step(oarlock, "rmsprop_step_", {**base, "momentum": 0.8}, absent=("mean_grad",))
    _check_step(oarlock, "rmsprop_step_", {**base, "momentum": 0.8})  # centered with momentum
    _check_step(oarlock, "rmsprop_step_", {**base, "momentum": 0.8}, shape=BIG, dtypes=("float32",))


def _check_lamb(oarlock):
    base = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-6, "step": 2}
    _check_step(oarlock, "lamb_step_", {**base, "weight_decay": 0.01})
    _check_step(oarlock, "lamb_step_", base)  # no decay: no trust ratio
    _check_step(oarlock, "lamb_step_", {**base, "always_adapt": True})
    # a zero parameter: the trust ratio falls back to 1
    with oarlock.no_grad():
        p, g = oarlock.zeros([3]), oarlock.to_tensor(np.array([1.0, -2.0, 0.5], np.float32))
        oarlock.lamb_step_(p, g, oarlock.zeros([3]), oarlock.zeros([3]), 0.1, 0.9, 0.999, 1e-6, 1, 0.01)
    np.testing.assert_allclose(p.numpy(), -0.1 * np.sign(g.numpy()), rtol=1e-5)


# -- the list ops ----------------------------------------------------------------------------------------------

def _tensor_list(oarlock, rng, dtype, shapes=((3, 4), (5,), (), (2, 0))):
    host = [rng.uniform(-2, 2, s).astype(oarlock.dtypes.convert_dtype(dtype).np) for s in shapes]
    return host, [oarlock.to_tensor(h) for h in host]


def _check_global_norm(oarlock):
    rng = np.random.default_rng(1)
    for dtype in FLOATS:
        host, tensors = _tensor_list(oarlock, rng, dtype)
        for norm_type in (2.0, 1.0, 3.0, math.inf, 0.0):
            got = oarlock.global_norm(tensors, norm_type)
            assert got.shape == [] and got.dtype == ("float64" if dtype == "float64" else "float32")
            want = global_norm_ref([h.astype(np.float64) for h in host], norm_type)
            np.testing.assert_allclose(float(got), want, rtol=TOL[dtype] if dtype != "bfloat16" else 1e-5)
    # mixed dtypes accumulate in float64 when any tensor is float64
    got = oarlock.global_norm([oarlock.ones([4], dtype="float32"), oarlock.ones([5], dtype="float64")])
    assert got.dtype == "float64" and float(got) == 3.0


def _check_scale_tensors(oarlock):
    rng = np.random.default_rng(2)
    for dtype in FLOATS:
        host, tensors = _tensor_list(oarlock, rng, dtype)
        with oarlock.no_grad():
            out = oarlock.scale_tensors_(tensors, oarlock.to_tensor(0.25, dtype="float64"))
        assert all(a is b for a, b in zip(out, tensors))
        for h, t in zip(host, tensors):
            assert t.dtype == dtype
            np.testing.assert_allclose(t.numpy().astype(np.float64), h.astype(np.float64) * 0.25, rtol=TOL[dtype])


def _check_clip_by_norm(oarlock):
    rng = np.random.default_rng(3)
    for dtype in FLOATS:
        host, tensors = _tensor_list(oarlock, rng, dtype)
        with oarlock.no_grad():
            oarlock.clip_tensors_by_norm_(tensors, 1.5)
        for h, t in zip(host, tensors):
            h = h.astype(np.float64)
            norm = np.linalg.norm(h)
            want = h * 1.5 / norm if norm > 1.5 else h
            np.testing.assert_allclose(t.numpy().astype(np.float64), want, rtol=TOL[dtype], atol=TOL[dtype])


def _check_clip_by_value(oarlock):
    rng = np.random.default_rng(4)
    for dtype in FLOATS:
        host, tensors = _tensor_list(oarlock, rng, dtype)
        with oarlock.no_grad():
            oarlock.clip_tensors_by_value_(tensors, -0.5, 1.0)
        for h, t in zip(host, tensors):
            np.testing.assert_array_equal(t.numpy(), np.clip(h, -0.5, 1.0))


def _check_zero_tensors(oarlock):
    host, tensors = _tensor_list(oarlock, np.random.default_rng(5), "float32")
    with oarlock.no_grad():
        oarlock.zero_tensors_(tensors)
    assert all(not t.numpy().any() for t in tensors)
    # like setitem_, the in-place list ops refuse (under grad mode) a leaf that requires a gradient
    leaf = oarlock.ones([2])
    leaf.stop_gradient = False
    try:
        oarlock.zero_tensors_([oarlock.ones([2]), leaf])
    except ValueError as exc:
        assert "leaf" in str(exc) and "in-place" in str(exc), exc
    else:
        raise AssertionError("zero_tensors_ modified a leaf that requires a gradient")



def _check_check_finite_and_unscale(oarlock):
    rng = np.random.default_rng(6)
    for dtype in FLOATS:
        host, tensors = _tensor_list(oarlock, rng, dtype)
        found = oarlock.zeros([1], dtype="bool")
        with oarlock.no_grad():
            out = oarlock.check_finite_and_unscale_(tensors, oarlock.to_tensor([8.0]), found)
        assert all(a is b for a, b in zip(out, tensors)) and not found.item()
        for h, t in zip(host, tensors):
            assert t.dtype == dtype
            np.testing.assert_allclose(t.numpy().astype(np.float64), h.astype(np.float64) / 8, rtol=TOL[dtype])
    # an inf or nan in any tensor sets the flag (the tensors are still divided, as in Paddle)
    for bad in (np.inf, -np.inf, np.nan):
        tensors = [oarlock.ones([3]), oarlock.to_tensor([1.0, bad], dtype="bfloat16")]
        found = oarlock.zeros([1], dtype="bool")
        oarlock.check_finite_and_unscale_(tensors, oarlock.to_tensor([2.0]), found)
        assert found.item() and tensors[0].numpy().tolist() == [0.5] * 3

# -- the multi-tensor steps: each parameter as its single-tensor op would update it -------------------------------

MULTI = {"sgd_steps_": "sgd_step_", "momentum_steps_": "momentum_step_", "adam_steps_": "adam_step_"}
MULTI_SHAPES = ((3, 4), (5,), (), (2, 0), BIG)   # BIG: the CPU's chunked kernel inside the list


def _check_multi(op, attrs, absent=()):
    def check(oarlock):
        single = MULTI[op]
        names = TENSORS[single]
        present = [n for n in names if n not in absent]
        for dtype in ("float32", "float64"):
            rng = np.random.default_rng(zlib.crc32(f"{op}/{dtype}/{absent}".encode()))
            host = [{n: _draw(rng, n, shape).astype(dtype) for n in names if n not in absent} for shape in MULTI_SHAPES]
            lists = [[oarlock.to_tensor(h[n]) for h in host] for n in names if n not in absent]
            with oarlock.no_grad():
                out = getattr(oarlock, op)(*lists, **attrs)
            assert all(a is b for a, b in zip(out, lists[0])), f"{op} must return its params list"
            for i, h in enumerate(host):
                want = REFS[single](**{n: None if n in absent else h[n].astype(np.float64) for n in names}, **attrs)
                for name, value in want.items():
                    got = lists[present.index(name)][i].numpy().astype(np.float64)
                    np.testing.assert_allclose(got, value, rtol=TOL[dtype], atol=TOL[dtype],
                                               err_msg=f"{op} {dtype}: {name}[{i}]")
        # lists of different lengths are refused, naming the op
        p = [oarlock.ones([2]), oarlock.ones([3])]
        try:
            getattr(oarlock, op)(p, p[:1], *([p] * (len(present) - 2)), **attrs)
        except ValueError as exc:
            assert op in str(exc) and "one tensor per parameter" in str(exc), exc
        else:
            raise AssertionError(f"{op} accepted lists of different lengths")
    return check


SPECS = [
    OpSpec("sgd_steps_", [], check=_check_multi("sgd_steps_", {"lr": 0.1, "weight_decay": 0.1}), grad=False),
    OpSpec("momentum_steps_", [], check=_check_multi("momentum_steps_", {"lr": 0.1, "momentum": 0.9,
                                                                         "use_nesterov": True}), grad=False),
    OpSpec("adam_steps_", [], check=lambda oarlock: (
        _check_multi("adam_steps_", {**ADAM, "weight_decay": 0.1, "decoupled": True}, absent=("moment2_max",))(oarlock),
        _check_multi("adam_steps_", {**ADAM, "weight_decay": 0.1}, absent=("moment2_max",))(oarlock)), grad=False),
    OpSpec("sgd_step_", [], check=_check_sgd, grad=False),
    OpSpec("check_finite_and_unscale_", [], check=_check_check_finite_and_unscale, grad=False),
    OpSpec("momentum_step_", [], check=_check_momentum, grad=False),
    OpSpec("adam_step_", [], check=_check_adam, grad=False),
    OpSpec("adagrad_step_", [], check=_check_adagrad, grad=False),
    OpSpec("rmsprop_step_", [], check=_check_rmsprop, grad=False),
    OpSpec("lamb_step_", [], check=_check_lamb, grad=False),
    OpSpec("global_norm", [], check=_check_global_norm, grad=False),
    OpSpec("scale_tensors_", [], check=_check_scale_tensors, grad=False),
    OpSpec("clip_tensors_by_norm_", [], check=_check_clip_by_norm, grad=False),
    OpSpec("clip_tensors_by_value_", [], check=_check_clip_by_value, grad=False),
    OpSpec("zero_tensors_", [], check=_check_zero_tensors, grad=False),
]
