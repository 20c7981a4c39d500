"""oarlock.Model trains Paddle's own LeNet (paddle/vision/models/lenet.py, loaded unedited with `paddle`
aliased to oarlock) on the small generated MNIST-like set exactly as a real paddle.Model run does from the same
initial weights: every batch loss, every epoch's and evaluation's logs, the learning rate the LRScheduler
callback steps, evaluate's result, predict's outputs, and the printed progress (verbose=2), against Paddle 3.2."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import paddle
import pytest

import mnist_like
import oarlock
from paddle_twin import lenet_module, log_lines, recorder_class

EPOCHS = 3
BATCH = 32


def _optimizer(framework, kind, parameters):
    if kind == "adam":
        return framework.optimizer.Adam(learning_rate=1e-3, parameters=parameters)
    # SGD under a StepDecay schedule: the default LRScheduler callback steps it after every batch
    schedule = framework.optimizer.lr.StepDecay(learning_rate=0.05, step_size=7, gamma=0.5)
    return framework.optimizer.Momentum(learning_rate=schedule, momentum=0.9, parameters=parameters)


def _run(framework, net, kind):
    """fit (3 epochs, evaluating after each), evaluate and predict, recording what the callbacks see."""
    dataset = mnist_like.dataset_class(framework.io.Dataset)
    train, test = dataset(320, 0), dataset(96, 1)
    model = framework.Model(net)
    model.prepare(_optimizer(framework, kind, net.parameters()), framework.nn.CrossEntropyLoss(),
                  framework.metric.Accuracy(topk=(1, 2)))
    recorder = recorder_class(framework.callbacks.Callback)()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.fit(train, test, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=2, log_freq=4,
                  callbacks=[recorder])
        evaluated = model.evaluate(test, batch_size=48, verbose=0)
        predicted = model.predict(test, batch_size=48, stack_outputs=True, verbose=0)
    return {"recorder": recorder, "printed": printed.getvalue(), "evaluate": evaluated, "predict": predicted}


@pytest.fixture(scope="module", params=["adam", "momentum_stepdecay"])
def runs(request):
    paddle.seed(7)
    reference_net = paddle.vision.models.LeNet()
    initial = {k: v.numpy() for k, v in reference_net.state_dict().items()}
    reference = _run(paddle, reference_net, request.param)
    net = lenet_module().LeNet()
    assert sorted(net.state_dict()) == sorted(initial)
    net.set_state_dict({k: oarlock.to_tensor(v) for k, v in initial.items()})
    ours = _run(oarlock, net, request.param)
    return reference, ours


def _close(a, b, rtol=5e-5, atol=5e-6):   # measured: 8e-7 relative on the batch losses
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=rtol, atol=atol)


def test_every_batch_loss_and_learning_rate(runs):
    reference, ours = runs
    ref_batches, our_batches = reference["recorder"].of("train_batch"), ours["recorder"].of("train_batch")
    assert len(our_batches) == len(ref_batches) == EPOCHS * 10
    _close([e[2]["loss"][0] for e in our_batches], [e[2]["loss"][0] for e in ref_batches])
    assert [e[2]["step"] for e in our_batches] == [e[2]["step"] for e in ref_batches]
    assert [e[2]["batch_size"] for e in our_batches] == [e[2]["batch_size"] for e in ref_batches]
    _close(ours["recorder"].lrs, reference["recorder"].lrs, rtol=1e-7, atol=0)


def test_epoch_and_evaluation_logs(runs):
    reference, ours = runs
    for hook in ("epoch", "eval"):
        ref_events, our_events = reference["recorder"].of(hook), ours["recorder"].of(hook)
        assert len(our_events) == len(ref_events) == EPOCHS
        for (_, _, ref_logs), (_, _, our_logs) in zip(ref_events, our_events):
            # Paddle's _run_one_epoch keeps its logs in a mutable default argument, shared by every run in the
            # process, so its dict also holds keys earlier runs (other tests) left; ours starts fresh each pass
            assert sorted(our_logs) == ["acc_top1", "acc_top2", "batch_size", "loss", "step"]
            assert set(our_logs) <= set(ref_logs)
            _close(our_logs["loss"], ref_logs["loss"])
            # accuracies are counts over the pass: the same predictions give the same fraction
            _close([our_logs["acc_top1"], our_logs["acc_top2"]], [ref_logs["acc_top1"], ref_logs["acc_top2"]],
                   rtol=0, atol=1e-12)
    assert ours["recorder"].of("train_end") and reference["recorder"].of("train_end")


def test_evaluate_and_predict(runs):
    reference, ours = runs
    assert list(ours["evaluate"]) == list(reference["evaluate"]) == ["loss", "acc_top1", "acc_top2"]
    assert isinstance(ours["evaluate"]["loss"], list) and len(ours["evaluate"]["loss"]) == 1
    for key in reference["evaluate"]:
        _close(ours["evaluate"][key], reference["evaluate"][key])
    assert len(ours["predict"]) == len(reference["predict"]) == 1
    assert ours["predict"][0].shape == reference["predict"][0].shape == (96, 10)
    _close(ours["predict"][0], reference["predict"][0], rtol=1e-3, atol=1e-4)


def test_progress_output_matches_paddle(runs):
    reference, ours = runs
    ref_lines, our_lines = log_lines(reference["printed"]), log_lines(ours["printed"])
    assert [text for text, _ in our_lines] == [text for text, _ in ref_lines]
    for (_, our_numbers), (_, ref_numbers) in zip(our_lines, ref_lines):
        _close(our_numbers, ref_numbers, rtol=0, atol=1.01e-4)   # printed with 4 decimals
    assert "Epoch 3/3" in ours["printed"] and "step 10/10 - loss:" in ours["printed"]
    assert "Eval samples: 96" in ours["printed"]
