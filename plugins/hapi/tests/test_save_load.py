"""Model.save / Model.load: our own round trip (training resumes bit for bit), a .pdparams/.pdopt pair written by
real Paddle 3.2's Model.save loaded into oarlock (training then continues as Paddle's does: Adam's moments and
step count carried over), our .pdparams loaded by Paddle's Model.load, and Paddle's file rules (no .pdopt for
plain SGD, suffixes, skip_mismatch)."""

from __future__ import annotations

import os

import numpy as np
import paddle
import pytest

import oarlock

RNG = np.random.RandomState(3)
BATCHES = [(RNG.rand(8, 5).astype("float32"), RNG.randint(0, 3, size=(8, 1)).astype("int64")) for _ in range(5)]


def _optimizer(framework, kind, parameters):
    opt = framework.optimizer
    if kind == "adam":
        return opt.Adam(learning_rate=0.01, parameters=parameters)
    if kind == "adamw_schedule":
        schedule = opt.lr.CosineAnnealingDecay(learning_rate=0.02, T_max=5)
        return opt.AdamW(learning_rate=schedule, beta1=0.8, parameters=parameters, weight_decay=0.05)
    if kind == "momentum":
        return opt.Momentum(learning_rate=0.05, momentum=0.9, parameters=parameters)
    if kind == "rmsprop":
        return opt.RMSProp(learning_rate=0.01, centered=True, parameters=parameters)
    if kind == "adagrad":
        return opt.Adagrad(learning_rate=0.05, parameters=parameters)
    return opt.SGD(learning_rate=0.1, parameters=parameters)


def _model(framework, optimizer="adam", hidden=6):
    net = framework.nn.Sequential(framework.nn.Linear(5, hidden), framework.nn.ReLU(), framework.nn.Linear(hidden, 3))
    opt = _optimizer(framework, optimizer, net.parameters())
    model = framework.Model(net)
    model.prepare(opt, framework.nn.CrossEntropyLoss(), framework.metric.Accuracy())
    return model


def _params(model):
    return {k: v.numpy().copy() for k, v in model.network.state_dict().items()}


def _train(model, batches):
    return [float(model.train_batch([x], [y])[0][0]) for x, y in batches]


def test_round_trip_resumes_bit_for_bit(tmp_path):
    oarlock.seed(0)
    original = _model(oarlock)
    _train(original, BATCHES[:3])
    original.save(str(tmp_path / "ck" / "step3"))
    assert sorted(os.listdir(tmp_path / "ck")) == ["step3.pdopt", "step3.pdparams"]
    oarlock.seed(1)
    restored = _model(oarlock)
    restored.load(str(tmp_path / "ck" / "step3"))
    for key, value in _params(original).items():
        np.testing.assert_array_equal(_params(restored)[key], value)
    assert _train(restored, BATCHES[3:]) == _train(original, BATCHES[3:])
    for key, value in _params(original).items():
        np.testing.assert_array_equal(_params(restored)[key], value)


@pytest.mark.parametrize("kind", ["adam", "adamw_schedule", "momentum", "rmsprop", "adagrad"])
def test_paddle_written_checkpoint_loads_and_training_continues_as_in_paddle(tmp_path, kind):
    paddle.seed(5)
    reference = _model(paddle, kind)
    _train(reference, BATCHES[:3])
    reference.save(str(tmp_path / "paddle_ck"))
    oarlock.seed(2)
    ours = _model(oarlock, kind)
    ours.load(str(tmp_path / "paddle_ck.pdparams"))   # the suffix is allowed, as in Paddle
    for key, value in _params(reference).items():
        np.testing.assert_array_equal(_params(ours)[key], value)
    # Adam after 3 steps: a wrong step count changes the bias correction, wrong moments the direction
    np.testing.assert_allclose(_train(ours, BATCHES[3:]), _train(reference, BATCHES[3:]), rtol=1e-5)
    for key, value in _params(reference).items():
        np.testing.assert_allclose(_params(ours)[key], value, rtol=1e-5, atol=1e-6)


def test_our_pdparams_load_in_paddle(tmp_path):
    oarlock.seed(4)
    ours = _model(oarlock, optimizer="sgd")
    _train(ours, BATCHES[:2])
    ours.save(str(tmp_path / "ours"))
    reference = _model(paddle, optimizer="sgd")
    reference.load(str(tmp_path / "ours"))
    for key, value in _params(ours).items():
        np.testing.assert_array_equal(_params(reference)[key], value)


def test_sgd_writes_no_pdopt_as_paddle(tmp_path):
    for framework, name in ((oarlock, "ours"), (paddle, "paddle")):
        model = _model(framework, optimizer="sgd")
        _train(model, BATCHES[:1])
        model.save(str(tmp_path / name / "ck"))
    assert sorted(os.listdir(tmp_path / "ours")) == sorted(os.listdir(tmp_path / "paddle")) == ["ck.pdparams"]


def test_mismatch_is_refused_or_skipped(tmp_path):
    source = _model(oarlock)
    _train(source, BATCHES[:1])
    source.save(str(tmp_path / "ck"))
    wider = _model(oarlock, hidden=9)
    with pytest.raises(ValueError, match=r"Model\.load\(\): 0\.weight receives a shape \[5, 6\], but the expected "
                                         r"shape is \[5, 9\]"):
        wider.load(str(tmp_path / "ck"))
    before = _params(wider)
    with pytest.warns(UserWarning, match=r"Skip loading for 0\.weight"):
        wider.load(str(tmp_path / "ck"), skip_mismatch=True)
    after = _params(wider)
    np.testing.assert_array_equal(after["0.weight"], before["0.weight"])   # skipped
    np.testing.assert_array_equal(after["2.weight"], before["2.weight"])   # skipped: [9, 3] against [6, 3]
    np.testing.assert_array_equal(after["2.bias"], _params(source)["2.bias"])   # loaded
    with pytest.raises(ValueError, match=r"Model\.load\(\): argument 'path' has the unknown suffix '\.bin'"):
        wider.load(str(tmp_path / "ck.bin"))
    with pytest.raises(ValueError, match=r"Failed to load parameters"):
        wider.load(str(tmp_path / "missing"))


def test_reset_optimizer_keeps_fresh_state(tmp_path):
    source = _model(oarlock)
    _train(source, BATCHES[:2])
    source.save(str(tmp_path / "ck"))
    target = _model(oarlock)
    target.load(str(tmp_path / "ck"), reset_optimizer=True)
    assert target._optimizer.state_dict() == {}
