"""LR schedulers: the float sequences of oarlock.optimizer.lr against paddle.optimizer.lr, state_dict
round trips, step(epoch), and the error messages."""

from __future__ import annotations

import math

import pytest

import oarlock

LR = oarlock.optimizer.lr
N = 40


@pytest.fixture(scope="module")
def paddle_lr():
    paddle = pytest.importorskip("paddle")
    return paddle.optimizer.lr


def _sequence(scheduler, n=N):
    out = [scheduler.last_lr]
    for _ in range(n):
        scheduler.step()
        out.append(scheduler.last_lr)
    return out


def _inner(name, *args, **kwargs):
    """A scheduler argument built in each framework (LinearWarmup wrapping another scheduler)."""
    return lambda lr: getattr(lr, name)(*args, **kwargs)


CASES = [
    ("NoamDecay", (), {"d_model": 64, "warmup_steps": 10}),
    ("NoamDecay", (), {"d_model": 16, "warmup_steps": 4, "learning_rate": 2.0}),
    ("PiecewiseDecay", (), {"boundaries": [3, 9], "values": [0.1, 0.05, 0.01]}),
    ("NaturalExpDecay", (0.5,), {"gamma": 0.1}),
    ("InverseTimeDecay", (0.5,), {"gamma": 0.2}),
    ("PolynomialDecay", (0.5,), {"decay_steps": 10}),
    ("PolynomialDecay", (0.5,), {"decay_steps": 7, "end_lr": 0.01, "power": 2.0, "cycle": True}),
    ("LinearWarmup", (0.5,), {"warmup_steps": 10, "start_lr": 0.0, "end_lr": 0.5}),
    ("LinearWarmup", (_inner("CosineAnnealingDecay", 0.3, T_max=15),), {"warmup_steps": 5, "start_lr": 0.01,
                                                                          "end_lr": 0.3}),
    ("ExponentialDecay", (0.5,), {"gamma": 0.9}),
    ("MultiStepDecay", (0.5,), {"milestones": [5, 12, 30]}),
    ("MultiStepDecay", (0.5,), {"milestones": (2, 4), "gamma": 0.5}),
    ("StepDecay", (0.5,), {"step_size": 7}),
    ("StepDecay", (0.5,), {"step_size": 3, "gamma": 0.3}),
    ("LambdaDecay", (0.5,), {"lr_lambda": lambda epoch: 0.95 ** epoch}),
    ("MultiplicativeDecay", (0.5,), {"lr_lambda": lambda epoch: 0.9}),
    ("CosineAnnealingDecay", (0.5,), {"T_max": 10}),
    ("CosineAnnealingDecay", (0.5,), {"T_max": 7, "eta_min": 0.05}),
    ("LinearLR", (0.5,), {"total_steps": 10}),
    ("LinearLR", (0.5,), {"total_steps": 20, "start_factor": 0.5, "end_factor": 0.1}),
    ("OneCycleLR", (), {"max_learning_rate": 0.1, "total_steps": N}),
    ("OneCycleLR", (), {"max_learning_rate": 1.0, "total_steps": N, "divide_factor": 10.0, "end_learning_rate": 0.001,
                        "phase_pct": 0.4, "anneal_strategy": "linear"}),
    ("OneCycleLR", (), {"max_learning_rate": 0.1, "total_steps": N, "three_phase": True}),
    ("OneCycleLR", (), {"max_learning_rate": 0.1, "total_steps": N, "phase_pct": 0.25, "three_phase": True,
                        "anneal_strategy": "linear"}),
]


def _build(lr_module, name, args, kwargs):
    args = [a(lr_module) if callable(a) else a for a in args]
    return getattr(lr_module, name)(*args, **kwargs)


@pytest.mark.parametrize("name,args,kwargs", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_sequence_matches_paddle(paddle_lr, name, args, kwargs):
    ours, theirs = _build(LR, name, args, kwargs), _build(paddle_lr, name, args, kwargs)
    got, want = _sequence(ours), _sequence(theirs)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert ours() == ours.last_lr and ours.last_epoch == theirs.last_epoch == N


@pytest.mark.parametrize("name,args,kwargs", [c for c in CASES if c[0] != "LinearWarmup"],
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES) if c[0] != "LinearWarmup"])
def test_state_dict_matches_paddle_and_resumes(paddle_lr, name, args, kwargs):
    ours, theirs = _build(LR, name, args, kwargs), _build(paddle_lr, name, args, kwargs)
    for _ in range(7):
        ours.step()
        theirs.step()
    state = ours.state_dict()
    assert state == pytest.approx(theirs.state_dict(), rel=1e-12)
    resumed = _build(LR, name, args, kwargs)
    resumed.set_state_dict(dict(state))
    assert _sequence(resumed, 10) == _sequence(ours, 10)


def test_linear_warmup_saves_the_inner_scheduler(paddle_lr):
    def build(lr):
        return lr.LinearWarmup(lr.CosineAnnealingDecay(0.3, T_max=10), warmup_steps=3, start_lr=0.0, end_lr=0.3)

    ours, theirs = build(LR), build(paddle_lr)
    for _ in range(6):
        ours.step()
        theirs.step()
    state = ours.state_dict()
    assert set(state) == set(theirs.state_dict()) == {"last_epoch", "last_lr", "LinearWarmup_LR"}
    resumed = build(LR)
    resumed.set_state_dict(state)
    assert _sequence(resumed, 10) == _sequence(ours, 10)


def test_step_with_epoch_uses_the_closed_form(paddle_lr):
    ours, theirs = LR.CosineAnnealingDecay(0.5, T_max=10, eta_min=0.01), paddle_lr.CosineAnnealingDecay(0.5, 10, 0.01)
    for epoch in (3, 17, 5, 0, 25):
        ours.step(epoch)
        theirs.step(epoch)
        assert ours.last_lr == pytest.approx(theirs.last_lr, rel=1e-12) and ours.last_epoch == epoch
    step = LR.StepDecay(1.0, step_size=2)
    step.step(5)
    assert step.last_lr == pytest.approx(0.01)


def test_reduce_on_plateau_matches_paddle(paddle_lr):
    metrics = [5.0, 4.0, 4.0, 4.0, 3.99999, 4.1, 4.2, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 1.0]
    for kwargs in ({"patience": 2}, {"patience": 1, "cooldown": 2, "factor": 0.5, "min_lr": 0.02},
                   {"mode": "max", "patience": 1, "threshold_mode": "abs", "threshold": 0.5}):
        ours, theirs = LR.ReduceOnPlateau(0.1, **kwargs), paddle_lr.ReduceOnPlateau(0.1, **kwargs)
        got, want = [], []
        for m in metrics:
            ours.step(m)
            theirs.step(m)
            got.append(ours.last_lr)
            want.append(theirs.last_lr)
        assert got == pytest.approx(want, rel=1e-12)
        assert ours.state_dict() == theirs.state_dict()
    plateau = LR.ReduceOnPlateau(0.1)
    plateau.step(oarlock.to_tensor([3.0]))
    assert plateau.best == 3.0


def test_custom_scheduler_and_base_behaviour():
    class Halving(LR.LRScheduler):
        def get_lr(self):
            return self.base_lr * 0.5 ** self.last_epoch

    s = Halving(learning_rate=1.0)
    assert (s.last_epoch, s(), s.get_last_lr()) == (0, 1.0, [1.0])
    s.step()
    assert s() == 0.5
    with pytest.raises(NotImplementedError, match="LRScheduler must define get_lr"):
        LR.LRScheduler(0.1)
    with pytest.raises(KeyError, match="Halving.set_state_dict.*last_lr"):
        s.set_state_dict({"last_epoch": 3})
    with pytest.warns(UserWarning, match="unused keys"):
        s.set_state_dict({"last_epoch": 3, "last_lr": 0.1, "extra": 1})


@pytest.mark.parametrize("call,error,pattern", [
    (lambda: LR.StepDecay(-0.1, step_size=2), ValueError,
     r"StepDecay: argument 'learning_rate' must be a non-negative"),
    (lambda: LR.StepDecay(0.1, step_size=0), ValueError, r"StepDecay: argument 'step_size' must be a positive int"),
    (lambda: LR.StepDecay(0.1, step_size=2.5), TypeError, r"StepDecay: argument 'step_size' must be an int"),
    (lambda: LR.StepDecay(0.1, step_size=2, gamma=1.5), ValueError, r"'gamma' must be a float below 1"),
    (lambda: LR.CosineAnnealingDecay(0.1, T_max=0), ValueError, r"CosineAnnealingDecay: argument 'T_max'"),
    (lambda: LR.MultiStepDecay(0.1, milestones=[5, 3]), ValueError, r"'milestones' must be increasing"),
    (lambda: LR.MultiStepDecay(0.1, milestones=5), TypeError, r"'milestones' must be a list or tuple"),
    (lambda: LR.ExponentialDecay(0.1, gamma=1.0), ValueError, r"ExponentialDecay: argument 'gamma'"),
    (lambda: LR.LinearWarmup("x", 5, 0.0, 0.1), TypeError, r"LinearWarmup: argument 'learning_rate' must be a float "
                                                           r"or an LRScheduler, got str"),
    (lambda: LR.LinearWarmup(0.1, 5, 0.2, 0.1), ValueError, r"'end_lr' must be greater than start_lr"),
    (lambda: LR.OneCycleLR(0.1, 10, phase_pct=0.6, three_phase=True), ValueError, r"'phase_pct' must be in \[0, 0.5\)"),
    (lambda: LR.OneCycleLR(0.1, 10, anneal_strategy="exp"), ValueError, r"'anneal_strategy' must be 'cos' or 'linear'"),
    (lambda: LR.LambdaDecay(0.1, lr_lambda=3), TypeError, r"LambdaDecay: argument 'lr_lambda' must be a function"),
    (lambda: LR.PolynomialDecay(0.1, decay_steps=10, power=0), ValueError, r"PolynomialDecay: argument 'power'"),
])
def test_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_one_cycle_refuses_to_run_past_total_steps():
    s = LR.OneCycleLR(0.1, total_steps=3)
    for _ in range(3):
        s.step()
    with pytest.raises(ValueError, match="beyond total_steps=3"):
        s.step()


def test_exports():
    for name in ("LRScheduler", "LinearWarmup", "CosineAnnealingDecay", "StepDecay", "MultiStepDecay",
                 "ExponentialDecay", "PolynomialDecay", "LambdaDecay", "OneCycleLR"):
        assert issubclass(getattr(LR, name), LR.LRScheduler)
    assert math.isclose(LR.CosineAnnealingDecay(1.0, 4)(), 1.0)
