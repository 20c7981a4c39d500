"""Optimizers and gradient clipping: 5 training steps of one small model in oarlock (float32), in torch
(float32, where torch computes the same formula) and in float64 numpy (always: manual backward plus the
textbook form of Paddle's formulas from op_specs.optim); then groups, ParamAttr, clipping, state_dict,
clear_grad, the torch-style arguments and the error messages."""

from __future__ import annotations

import math

import numpy as np
import pytest

try:
    import torch
except ImportError:  # an optional oracle: the torch comparisons skip, the float64 references still run
    torch = None

import oarlock
from op_specs import optim as refs

STEPS = 5
SHAPES = {"w1": (4, 8), "b1": (8,), "w2": (8, 3), "b2": (3,)}
RTOL, ATOL = 1e-5, 1e-6


def _weights():
    rng = np.random.default_rng(0)
    return {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in SHAPES.items()}


def _batches():
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32))
            for _ in range(STEPS)]


WEIGHTS, BATCHES = _weights(), _batches()


# -- the three trainers -----------------------------------------------------------------------------------------

def oarlock_params(weights=None, attrs=None):
    attrs = attrs or {}
    return {n: oarlock.nn.Parameter(oarlock.to_tensor(w), attr=attrs.get(n))
            for n, w in (weights or WEIGHTS).items()}


def oarlock_backward(params, x, y):
    h = oarlock.tanh(oarlock.matmul(oarlock.to_tensor(x), params["w1"]) + params["b1"])
    out = oarlock.matmul(h, params["w2"]) + params["b2"]
    loss = ((out - oarlock.to_tensor(y)) ** 2).mean()
    loss.backward()
    return loss


def train_oarlock(make_opt, steps=range(STEPS), params=None, before_step=None, opt=None, after_step=None):
    """make_opt(params dict) -> optimizer; returns (params as numpy, params, optimizer)."""
    params = params or oarlock_params()
    opt = opt if opt is not None else make_opt(params)
    for i in steps:
        oarlock_backward(params, *BATCHES[i])
        if before_step is not None:
            before_step(params)
        opt.step()
        opt.clear_grad()
        if after_step is not None:
            after_step()
    return {n: p.numpy() for n, p in params.items()}, params, opt


def _need_torch():
    if torch is None:
        pytest.skip("torch (an optional oracle) is not installed")


def train_torch(make_opt, before_step=None, after_step=None):
    _need_torch()
    params = {n: torch.nn.Parameter(torch.from_numpy(w.copy())) for n, w in WEIGHTS.items()}
    opt = make_opt(params)
    for x, y in BATCHES:
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        out = torch.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]
        ((out - y) ** 2).mean().backward()
        if before_step is not None:
            before_step(params)
        opt.step()
        opt.zero_grad()
        if after_step is not None:
            after_step()
    return {n: p.detach().numpy() for n, p in params.items()}


def numpy_grads(p, x, y):
    x, y = x.astype(np.float64), y.astype(np.float64)
    h = np.tanh(x @ p["w1"] + p["b1"])
    d_out = 2 * (h @ p["w2"] + p["b2"] - y) / y.size
    dz1 = (d_out @ p["w2"].T) * (1 - h * h)
    return {"w1": x.T @ dz1, "b1": dz1.sum(0), "w2": h.T @ d_out, "b2": d_out.sum(0)}


def train_numpy(update, lr_of_step=None):
    """update(name, param, grad, state, step, lr) -> new param (float64), state a dict it may fill."""
    params = {n: w.astype(np.float64) for n, w in WEIGHTS.items()}
    states = {n: {} for n in params}
    for i, (x, y) in enumerate(BATCHES):
        grads = numpy_grads(params, x, y)
        lr = None if lr_of_step is None else lr_of_step(i)
        for n in params:
            params[n] = update(n, params[n], grads[n], states[n], i + 1, lr)
    return params


def assert_close(got, want, rtol=RTOL, atol=ATOL):
    for n in SHAPES:
        np.testing.assert_allclose(got[n], want[n], rtol=rtol, atol=atol, err_msg=n)


# -- numpy reference updates (state kept between steps) ------------------------------------------------------------

def _stateful(ref, names, init=0.0):
    """A train_numpy update from an op_specs reference with state tensors `names` (None: absent)."""
    def update(p, g, state, **attrs):
        for name in names:
            state.setdefault(name, np.full_like(p, init))
        kwargs = {name: state[name] for name in names if name is not None}
        out = ref(p, g, **kwargs, **attrs)
        state.update({k: v for k, v in out.items() if k != "param"})
        return out["param"]
    return update


def np_sgd(lr, wd=0.0):
    return lambda n, p, g, s, t, _: refs.sgd_ref(p, g, lr, wd)["param"]


def np_momentum(lr, mu, nesterov=False, wd=0.0):
    up = _stateful(refs.momentum_ref, ["velocity"])
    return lambda n, p, g, s, t, _: up(p, g, s, lr=lr, momentum=mu, use_nesterov=nesterov,
                                       weight_decay=wd)


def np_adam(lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False, amsgrad=False, decays=lambda n: True):
    up = _stateful(refs.adam_ref, ["moment1", "moment2", "moment2_max"])

    def update(n, p, g, s, t, sched_lr):
        if not amsgrad:
            s["moment2_max"] = None
        rate = lr if sched_lr is None else sched_lr
        return up(p, g, s, lr=rate, beta1=b1, beta2=b2, epsilon=eps, step=t,
                  weight_decay=wd if decays(n) else 0.0, decoupled=decoupled)
    return update


def np_adagrad(lr, eps, wd=0.0, init=0.0):
    up = _stateful(refs.adagrad_ref, ["moment"], init)
    return lambda n, p, g, s, t, _: up(p, g, s, lr=lr, epsilon=eps, weight_decay=wd)


def np_rmsprop(lr, rho, eps, momentum=0.0, centered=False, wd=0.0):
    up = _stateful(refs.rmsprop_ref, ["mean_square", "mean_grad", "velocity"])

    def update(n, p, g, s, t, _):
        s.setdefault("mean_grad", np.zeros_like(p) if centered else None)
        s.setdefault("velocity", np.zeros_like(p) if momentum else None)
        return up(p, g, s, lr=lr, rho=rho, epsilon=eps, momentum=momentum, weight_decay=wd)
    return update


def np_lamb(lr, wd, b1=0.9, b2=0.999, eps=1e-6, always_adapt=False, decays=lambda n: True):
    up = _stateful(refs.lamb_ref, ["moment1", "moment2"])
    return lambda n, p, g, s, t, _: up(p, g, s, lr=lr, beta1=b1, beta2=b2, epsilon=eps, step=t,
                                       weight_decay=wd if decays(n) else 0.0, always_adapt=always_adapt)


OPT, TOPT = oarlock.optimizer, getattr(torch, "optim", None)


def _ps(params):
    return list(params.values())


# (id, oarlock factory, torch factory or None, numpy update)
CASES = [
    ("sgd", lambda p: OPT.SGD(0.1, parameters=_ps(p)), lambda p: TOPT.SGD(_ps(p), lr=0.1), np_sgd(0.1)),
    ("sgd_l2", lambda p: OPT.SGD(0.1, parameters=_ps(p), weight_decay=0.05),
     lambda p: TOPT.SGD(_ps(p), lr=0.1, weight_decay=0.05), np_sgd(0.1, 0.05)),
    ("momentum", lambda p: OPT.Momentum(0.1, momentum=0.9, parameters=_ps(p)),
     lambda p: TOPT.SGD(_ps(p), lr=0.1, momentum=0.9), np_momentum(0.1, 0.9)),
    ("nesterov_l2", lambda p: OPT.Momentum(0.1, 0.8, _ps(p), use_nesterov=True, weight_decay=0.01),
     lambda p: TOPT.SGD(_ps(p), lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.01),
     np_momentum(0.1, 0.8, True, 0.01)),
    ("adam", lambda p: OPT.Adam(0.01, parameters=_ps(p)), lambda p: TOPT.Adam(_ps(p), lr=0.01), np_adam(0.01)),
    ("adam_l2_betas",
     lambda p: OPT.Adam(0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, parameters=_ps(p), weight_decay=0.1),
     lambda p: TOPT.Adam(_ps(p), lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
     np_adam(0.01, 0.8, 0.99, 1e-6, wd=0.1)),
    ("adam_amsgrad", lambda p: OPT.Adam(0.01, parameters=_ps(p), amsgrad=True),
     lambda p: TOPT.Adam(_ps(p), lr=0.01, amsgrad=True), np_adam(0.01, amsgrad=True)),
    ("adamw", lambda p: OPT.AdamW(0.01, parameters=_ps(p)), lambda p: TOPT.AdamW(_ps(p), lr=0.01),
     np_adam(0.01, wd=0.01, decoupled=True)),
    ("adamw_strong_decay", lambda p: OPT.AdamW(0.05, parameters=_ps(p), weight_decay=0.5, amsgrad=True),
     lambda p: TOPT.AdamW(_ps(p), lr=0.05, weight_decay=0.5, amsgrad=True),
     np_adam(0.05, wd=0.5, decoupled=True, amsgrad=True)),
    ("adagrad", lambda p: OPT.Adagrad(0.1, epsilon=1e-10, parameters=_ps(p)),
     lambda p: TOPT.Adagrad(_ps(p), lr=0.1, eps=1e-10), np_adagrad(0.1, 1e-10)),
    ("adagrad_l2_init", lambda p: OPT.Adagrad(0.1, 1e-6, _ps(p), weight_decay=0.05, initial_accumulator_value=0.1),
     lambda p: TOPT.Adagrad(_ps(p), lr=0.1, eps=1e-6, weight_decay=0.05, initial_accumulator_value=0.1),
     np_adagrad(0.1, 1e-6, 0.05, 0.1)),
    # RMSProp: torch adds epsilon outside the square root; with a tiny epsilon the two coincide
    ("rmsprop", lambda p: OPT.RMSProp(0.01, rho=0.9, epsilon=1e-12, parameters=_ps(p)),
     lambda p: TOPT.RMSprop(_ps(p), lr=0.01, alpha=0.9, eps=1e-12), np_rmsprop(0.01, 0.9, 1e-12)),
    ("rmsprop_centered_momentum_l2",
     lambda p: OPT.RMSProp(0.01, 0.9, 1e-12, momentum=0.7, centered=True, parameters=_ps(p), weight_decay=0.01),
     lambda p: TOPT.RMSprop(_ps(p), lr=0.01, alpha=0.9, eps=1e-12, momentum=0.7, centered=True, weight_decay=0.01),
     np_rmsprop(0.01, 0.9, 1e-12, 0.7, True, 0.01)),
    ("rmsprop_paddle_epsilon", lambda p: OPT.RMSProp(0.01, 0.95, 0.1, momentum=0.5, centered=True, parameters=_ps(p)),
     None, np_rmsprop(0.01, 0.95, 0.1, 0.5, True)),
    ("lamb", lambda p: OPT.Lamb(0.01, parameters=_ps(p)), None, np_lamb(0.01, 0.01)),
    ("lamb_no_decay", lambda p: OPT.Lamb(0.01, lamb_weight_decay=0.0, parameters=_ps(p)), None, np_lamb(0.01, 0.0)),
    ("lamb_always_adapt_exclude",
     lambda p: OPT.Lamb(0.02, 0.1, beta1=0.8, parameters=_ps(p), always_adapt=True,
                      exclude_from_weight_decay_fn=lambda t: t is p["b1"] or t is p["b2"]),
     None, np_lamb(0.02, 0.1, b1=0.8, always_adapt=True, decays=lambda n: n.startswith("w"))),
]


@pytest.mark.parametrize("case", [c for c in CASES if c[2] is not None], ids=lambda c: c[0])
def test_matches_torch(case):
    _, make, make_torch, _ = case
    got, _, _ = train_oarlock(make)
    assert_close(got, train_torch(make_torch))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_matches_float64_reference(case):
    _, make, _, update = case
    got, _, _ = train_oarlock(make)
    assert_close(got, train_numpy(update))


def test_parameters_move():
    """The comparisons above would pass vacuously if nothing moved."""
    got, _, _ = train_oarlock(CASES[0][1])
    assert all(np.abs(got[n] - WEIGHTS[n]).max() > 1e-3 for n in SHAPES)


# -- AdamW's decay selection, lr_ratio, groups and ParamAttr -------------------------------------------------------

def test_adamw_apply_decay_param_fun_matches_torch_groups():
    names = {}

    def make(p):
        for n, t in p.items():
            t.name = f"linear.{n}"
            names[n] = t.name
        return OPT.AdamW(0.01, parameters=_ps(p), weight_decay=0.3, apply_decay_param_fun=lambda name: ".w" in name)

    got, _, _ = train_oarlock(make)
    want = train_torch(lambda p: TOPT.AdamW([{"params": [p["w1"], p["w2"]]}, {"params": [p["b1"], p["b2"]],
                                                                           "weight_decay": 0.0}],
                                         lr=0.01, weight_decay=0.3))
    assert_close(got, want)
    assert names["w1"] == "linear.w1"


def test_adamw_lr_ratio_scales_each_parameter():
    def make(p):
        ratios = {id(p["w1"]): 0.5, id(p["w2"]): 1.0, id(p["b1"]): 0.25, id(p["b2"]): 2.0}
        return OPT.AdamW(0.01, parameters=_ps(p), lr_ratio=lambda t: ratios[id(t)])

    got, _, _ = train_oarlock(make)
    ratio = {"w1": 0.5, "w2": 1.0, "b1": 0.25, "b2": 2.0}
    plain = np_adam(0.01, wd=0.01, decoupled=True)
    want = train_numpy(lambda n, p, g, s, t, _: plain(n, p, g, s, t, 0.01 * ratio[n]))
    assert_close(got, want)


def test_param_groups_and_paramattr_learning_rate():
    """Paddle groups: "learning_rate" multiplies the rate and weight_decay overrides; torch's "lr" in a group is
    absolute; ParamAttr.learning_rate multiplies on top."""
    def torch_groups(p):
        return TOPT.Adam([{"params": [p["w1"]]}, {"params": [p["w2"]], "lr": 0.005, "weight_decay": 0.0},
                       {"params": [p["b1"], p["b2"]], "lr": 0.02}], lr=0.01, weight_decay=0.1)

    want = train_torch(torch_groups)
    paddle_groups = lambda p: OPT.Adam(0.01, parameters=[
        {"params": [p["w1"]]}, {"params": [p["w2"]], "learning_rate": 0.5, "weight_decay": 0.0},
        {"params": [p["b1"], p["b2"]], "lr": 0.02}], weight_decay=0.1)
    assert_close(train_oarlock(paddle_groups)[0], want)
    # the same rates through ParamAttr(learning_rate=...) on the parameters instead
    attrs = {"w2": oarlock.nn.ParamAttr(learning_rate=0.5), "b1": oarlock.nn.ParamAttr(learning_rate=2.0),
             "b2": oarlock.nn.ParamAttr(learning_rate=2.0)}
    params = oarlock_params(attrs=attrs)
    by_attr = lambda p: OPT.Adam(0.01, parameters=[{"params": [p["w1"], p["b1"], p["b2"]]},
                                                 {"params": [p["w2"]], "weight_decay": 0.0}], weight_decay=0.1)
    assert_close(train_oarlock(by_attr, params=params)[0], want)


def test_skips_frozen_parameters_and_missing_grads():
    params = oarlock_params()
    params["b2"].stop_gradient = True
    opt = OPT.Adam(0.01, parameters=_ps(params))
    oarlock_backward(params, *BATCHES[0])
    params["b1"].grad = None
    opt.step()
    np.testing.assert_array_equal(params["b2"].numpy(), WEIGHTS["b2"])
    np.testing.assert_array_equal(params["b1"].numpy(), WEIGHTS["b1"])
    assert not np.array_equal(params["w1"].numpy(), WEIGHTS["w1"])
    assert set(opt.state_dict()) == {f"param_{i}_{k}" for i in (0, 2) for k in ("step", "moment1_0", "moment2_0")}


# -- the learning rate ----------------------------------------------------------------------------------------------

def test_scheduler_drives_the_rate_like_torch():
    sched = OPT.lr.StepDecay(0.1, step_size=2, gamma=0.5)
    got, _, opt = train_oarlock(lambda p: OPT.Momentum(sched, 0.9, _ps(p)), after_step=sched.step)
    holder = {}

    def make(p):
        holder["opt"] = TOPT.SGD(_ps(p), lr=0.1, momentum=0.9)
        holder["sched"] = TOPT.lr_scheduler.StepLR(holder["opt"], step_size=2, gamma=0.5)
        return holder["opt"]

    want = train_torch(make, after_step=lambda: holder["sched"].step())
    assert_close(got, want)
    assert opt.get_lr() == pytest.approx(0.025)
    with pytest.raises(RuntimeError, match="LRScheduler"):
        opt.set_lr(0.1)


def test_set_lr_and_get_lr():
    params = oarlock_params()
    opt = OPT.SGD(learning_rate=0.1, parameters=_ps(params))
    assert opt.get_lr() == 0.1
    opt.set_lr(0.0)
    oarlock_backward(params, *BATCHES[0])
    opt.step()
    np.testing.assert_array_equal(params["w1"].numpy(), WEIGHTS["w1"])
    with pytest.raises(ValueError, match="SGD.set_lr.*'learning_rate'.*-1"):
        opt.set_lr(-1)
    opt.set_lr_scheduler(OPT.lr.ExponentialDecay(0.5, gamma=0.9))
    assert opt.get_lr() == 0.5


# -- gradient clipping --------------------------------------------------------------------------------------------

def _torch_clip_each(max_norm):
    def clip(params):
        for p in params.values():
            torch.nn.utils.clip_grad_norm_([p], max_norm)
    return clip


CLIP_CASES = [
    ("global_norm", lambda: oarlock.nn.ClipGradByGlobalNorm(0.3),
     lambda p: torch.nn.utils.clip_grad_norm_(_ps(p), 0.3)),
    ("norm", lambda: oarlock.nn.ClipGradByNorm(0.2), _torch_clip_each(0.2)),
    ("value", lambda: oarlock.nn.ClipGradByValue(0.05), lambda p: torch.nn.utils.clip_grad_value_(_ps(p), 0.05)),
    ("value_min_max", lambda: oarlock.nn.ClipGradByValue(0.05, min=-0.02),
     lambda p: [q.grad.clamp_(-0.02, 0.05) for q in p.values()]),
]


@pytest.mark.parametrize("case", CLIP_CASES, ids=lambda c: c[0])
def test_grad_clip_matches_torch(case):
    """Paddle's global-norm factor clip / max(norm, clip) and torch's max / (norm + 1e-6) agree to ~1e-6."""
    _, make_clip, torch_clip = case
    got, _, _ = train_oarlock(lambda p: OPT.SGD(0.5, parameters=_ps(p), grad_clip=make_clip()))
    want = train_torch(lambda p: TOPT.SGD(_ps(p), lr=0.5), before_step=torch_clip)
    assert_close(got, want)


def test_clipping_changes_the_gradients_in_place():
    params = oarlock_params()
    opt = OPT.SGD(0.0, parameters=_ps(params), grad_clip=oarlock.nn.ClipGradByGlobalNorm(1e-3))
    oarlock_backward(params, *BATCHES[0])
    grads = [p.grad for p in params.values()]
    opt.step()
    assert all(p.grad is g for p, g in zip(params.values(), grads))
    norm = math.sqrt(sum(float((g.numpy().astype(np.float64) ** 2).sum()) for g in grads))
    assert norm == pytest.approx(1e-3, rel=1e-5)


def test_need_clip_false_is_left_out_of_clipping():
    attrs = {"b1": oarlock.nn.ParamAttr(need_clip=False)}
    params = oarlock_params(attrs=attrs)
    oarlock_backward(params, *BATCHES[0])
    before = {n: p.grad.numpy().astype(np.float64) for n, p in params.items()}
    OPT.SGD(0.0, parameters=_ps(params), grad_clip=oarlock.nn.ClipGradByGlobalNorm(0.01)).step()
    np.testing.assert_array_equal(params["b1"].grad.numpy(), before["b1"])
    others = [n for n in SHAPES if n != "b1"]
    norm = math.sqrt(sum((before[n] ** 2).sum() for n in others))
    for n in others:
        np.testing.assert_allclose(params[n].grad.numpy(), before[n] * 0.01 / norm, rtol=1e-5)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm_matches_torch(norm_type):
    _need_torch()
    params = oarlock_params()
    oarlock_backward(params, *BATCHES[0])
    tparams = {n: torch.nn.Parameter(torch.from_numpy(p.numpy())) for n, p in params.items()}
    for n, p in params.items():
        tparams[n].grad = torch.from_numpy(p.grad.numpy().copy())
    total = oarlock.nn.utils.clip_grad_norm_(params.values(), 0.1, norm_type=norm_type)
    want = torch.nn.utils.clip_grad_norm_(tparams.values(), 0.1, norm_type=norm_type)
    assert float(total) == pytest.approx(float(want), rel=1e-6)
    for n in SHAPES:
        np.testing.assert_allclose(params[n].grad.numpy(), tparams[n].grad.numpy(), rtol=1e-6, atol=1e-9)


def test_clip_grad_value_and_edge_cases():
    params = oarlock_params()
    oarlock_backward(params, *BATCHES[0])
    before = params["w1"].grad.numpy().copy()
    oarlock.nn.utils.clip_grad_value_(params["w1"], 0.01)  # a single Tensor is accepted
    np.testing.assert_array_equal(params["w1"].grad.numpy(), np.clip(before, -0.01, 0.01))
    assert float(oarlock.nn.utils.clip_grad_norm_([oarlock.zeros([2])], 1.0)) == 0.0  # no gradients
    params["w2"].grad = oarlock.full([8, 3], float("nan"))
    with pytest.raises(RuntimeError, match="non-finite"):
        oarlock.nn.utils.clip_grad_norm_(params.values(), 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="clip_norm.*positive"):
        oarlock.nn.ClipGradByGlobalNorm(-1.0)
    with pytest.raises(ValueError, match="'min'.*below 'max'"):
        oarlock.nn.ClipGradByValue(0.1, min=0.5)


# -- state ------------------------------------------------------------------------------------------------------------

def _snapshot(state):
    return {k: (v.clone() if isinstance(v, oarlock.Tensor) else (dict(v) if isinstance(v, dict) else v))
            for k, v in state.items()}


@pytest.mark.parametrize("make", [
    lambda p, s: OPT.AdamW(s, parameters=_ps(p), weight_decay=0.1, amsgrad=True),
    lambda p, s: OPT.RMSProp(s, 0.9, 1e-6, momentum=0.5, centered=True, parameters=_ps(p)),
    lambda p, s: OPT.Momentum(s, 0.9, _ps(p), use_nesterov=True),
    lambda p, s: OPT.Lamb(s, parameters=_ps(p)),
], ids=["adamw", "rmsprop", "momentum", "lamb"])
def test_state_dict_round_trip_resumes_identically(make):
    def scheduler():
        cosine = OPT.lr.CosineAnnealingDecay(0.05, T_max=4)
        return OPT.lr.LinearWarmup(cosine, warmup_steps=2, start_lr=0.0, end_lr=0.05)

    sched = scheduler()
    straight, _, _ = train_oarlock(lambda p: make(p, sched), after_step=sched.step)

    sched = scheduler()
    _, params, opt = train_oarlock(lambda p: make(p, sched), steps=range(3), after_step=sched.step)
    saved = _snapshot(opt.state_dict())
    weights = {n: p.numpy() for n, p in params.items()}
    assert "LR_Scheduler" in saved and saved["param_0_step"] == 3
    oarlock_backward(params, *BATCHES[3])
    opt.step()  # moves on: the snapshot must not follow

    sched = scheduler()
    resumed = oarlock_params(weights)
    opt = make(resumed, sched)
    opt.set_state_dict(saved)
    assert sched.last_epoch == 3
    got, _, _ = train_oarlock(None, steps=range(3, STEPS), params=resumed, opt=opt, after_step=sched.step)
    for n in SHAPES:
        np.testing.assert_array_equal(got[n], straight[n], err_msg=n)


def test_state_dict_keys_use_parameter_names():
    params = oarlock_params()
    params["w1"].name = "linear_0.w_0"
    opt = OPT.Adam(0.01, parameters=_ps(params))
    oarlock_backward(params, *BATCHES[0])
    opt.step()
    state = opt.state_dict()
    assert {"linear_0.w_0_moment1_0", "linear_0.w_0_moment2_0", "linear_0.w_0_step"} <= set(state)
    with pytest.warns(UserWarning, match="match no parameter"):
        OPT.Adam(0.01, parameters=_ps(params)).set_state_dict({**state, "other.w_0_step": 1})
    with pytest.raises(ValueError, match="torch optimizer state"):
        opt.set_state_dict({"state": {}, "param_groups": []})


def test_clear_grad_and_zero_grad():
    params = oarlock_params()
    opt = OPT.SGD(0.1, parameters=_ps(params))
    oarlock_backward(params, *BATCHES[0])
    grad = params["w1"].grad
    opt.clear_grad()  # Paddle's default: zero in place
    assert params["w1"].grad is grad and not grad.numpy().any()
    opt.clear_grad(set_to_zero=False)
    assert all(p.grad is None for p in params.values())
    oarlock_backward(params, *BATCHES[0])
    opt.zero_grad()  # torch's default: drop
    assert all(p.grad is None for p in params.values())
    oarlock_backward(params, *BATCHES[0])
    opt.zero_grad(set_to_none=False)
    assert not params["b1"].grad.numpy().any()


# -- arguments and errors ----------------------------------------------------------------------------------------

def test_torch_style_arguments():
    got, _, _ = train_oarlock(lambda p: OPT.Adam(_ps(p), lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1))
    want, _, _ = train_oarlock(lambda p: OPT.Adam(0.01, 0.8, 0.99, 1e-6, parameters=_ps(p), weight_decay=0.1))
    assert_close(got, want, rtol=0, atol=0)
    params = oarlock_params()
    opt = OPT.SGD(params=iter(_ps(params)), lr=0.3)
    assert opt.get_lr() == 0.3 and len(opt.param_groups[0]["params"]) == 4
    assert OPT.Momentum(params=_ps(params), nesterov=True).param_groups[0]["use_nesterov"] is True


@pytest.mark.parametrize("call,error,pattern", [
    (lambda ps: OPT.Adam(-0.1, parameters=ps), ValueError,
     r"Adam: argument 'learning_rate' must be .*non-negative.*-0.1"),
    (lambda ps: OPT.SGD(0.1, parameters=[]), ValueError, r"SGD: argument 'parameters' is an empty list"),
    (lambda ps: OPT.SGD(0.1), TypeError, r"SGD: argument 'parameters' is required"),
    (lambda ps: OPT.Adam(0.1, parameters=ps, betas=(0.9,)), TypeError, r"Adam: argument 'betas' must be a pair"),
    (lambda ps: OPT.Adam(0.1, parameters=ps, beta1=1.5), ValueError,
     r"Adam: argument 'beta1' must be a float in \[0, 1\)"),
    (lambda ps: OPT.Adam(learning_rate=0.1, lr=0.1, parameters=ps), TypeError,
     r"Adam: got both 'learning_rate' and its torch alias 'lr'"),
    (lambda ps: OPT.Adam(0.1, parameters=ps, eps=1e-8, epsilon=1e-8), TypeError, r"got both 'epsilon'.*'eps'"),
    (lambda ps: OPT.Adam(0.1, parameters=ps, foo=1), TypeError, r"Adam: unexpected argument 'foo'; it accepts "
                                                                r"learning_rate, beta1"),
    (lambda ps: OPT.SGD(0.1, parameters=ps, momentum=0.9), TypeError, r"SGD: unexpected argument 'momentum'.*Momentum"),
    (lambda ps: OPT.SGD(0.1, parameters=ps, grad_clip=1.0), TypeError, r"SGD: argument 'grad_clip' must be"),
    (lambda ps: OPT.SGD(0.1, parameters=[ps[0], ps[0]]), ValueError, r"SGD: a parameter appears twice"),
    (lambda ps: OPT.SGD(0.1, parameters=[ps[0], 3]), TypeError, r"SGD: argument 'parameters' must hold Tensors.*int"),
    (lambda ps: OPT.Adam(0.1, parameters=[{"params": ps, "bogus": 1}]), ValueError,
     r"Adam: unknown parameter-group key\(s\) \['bogus'\]"),
    (lambda ps: OPT.Adam(0.1, parameters=[{"params": ps, "learning_rate": -2.0}]), ValueError,
     r"Adam: argument 'learning_rate' must be a non-negative float, got float -2.0"),
    (lambda ps: OPT.AdamW(0.1, parameters=ps, apply_decay_param_fun=3), TypeError, r"AdamW: argument "
                                                                                  r"'apply_decay_param_fun'"),
    (lambda ps: OPT.Adam(ps, 0.1), TypeError, r"Adam: with the parameters first.*by name"),
    (lambda ps: OPT.SGD("fast", parameters=ps), TypeError, r"SGD: argument 'learning_rate' must be .*str"),
])
def test_errors_name_class_argument_and_value(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(_ps(oarlock_params()))


def test_exports():
    for name in ("SGD", "Momentum", "Adam", "AdamW", "Adagrad", "RMSProp", "Lamb", "Optimizer"):
        assert issubclass(getattr(oarlock.optimizer, name), oarlock.optimizer.Optimizer)
    for name in ("ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"):
        assert callable(getattr(oarlock.nn, name))
    assert callable(oarlock.nn.utils.clip_grad_norm_) and callable(oarlock.nn.utils.clip_grad_value_)


def test_step_closure_and_multi_precision():
    params = oarlock_params()
    opt = OPT.SGD(0.1, parameters=_ps(params))
    loss = opt.step(lambda: oarlock_backward(params, *BATCHES[0]))
    assert float(loss) > 0 and not np.array_equal(params["w1"].numpy(), WEIGHTS["w1"])
    half = oarlock.nn.Parameter(oarlock.ones([2], dtype="bfloat16"))
    assert OPT.AdamW(0.1, parameters=[half], multi_precision=True)._multi_precision


def test_group_grad_clip_is_checked_and_used():
    with pytest.raises(TypeError, match="Adam: argument 'grad_clip' must be"):
        OPT.Adam(0.1, parameters=[{"params": _ps(oarlock_params()), "grad_clip": "norm"}])
    got, _, _ = train_oarlock(lambda p: OPT.SGD(0.5, parameters=[
        {"params": _ps(p), "grad_clip": oarlock.nn.ClipGradByValue(0.05)}]))
    want = train_torch(lambda p: TOPT.SGD(_ps(p), lr=0.5), before_step=lambda p: torch.nn.utils.clip_grad_value_(
        _ps(p), 0.05))
    assert_close(got, want)
