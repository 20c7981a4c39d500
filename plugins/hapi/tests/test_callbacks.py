"""oarlock.callbacks against the same runs on real Paddle 3.2 (same data, same initial weights, no shuffle):
the order of every hook call, EarlyStopping's stop and best model, the checkpoint files, the learning rate
LRScheduler (by step and by epoch) and ReduceLROnPlateau give at every batch, the verbose=1 progress bar;
VisualDL's TensorBoard event files read back with tensorboard's own EventAccumulator; WandbCallback's calls into
the wandb package (a recording stand-in, wandb is not installed) against Paddle's WandbCallback's."""

from __future__ import annotations

import contextlib
import io
import os
import sys
import types

import numpy as np
import paddle
import pytest

import oarlock
from paddle_twin import log_lines, recorder_class

RNG = np.random.RandomState(11)
X = RNG.rand(60, 4).astype("float32")
Y = (X[:, :1] + X[:, 1:2] > 1.0).astype("int64")
HOOKS = ["on_train_begin", "on_train_end", "on_eval_begin", "on_eval_end", "on_predict_begin", "on_predict_end",
         "on_epoch_begin", "on_epoch_end", "on_train_batch_begin", "on_train_batch_end", "on_eval_batch_begin",
         "on_eval_batch_end", "on_predict_batch_begin", "on_predict_batch_end"]


def _dataset(framework, rows=slice(None)):
    class Pairs(framework.io.Dataset):
        def __getitem__(self, i):
            return X[rows][i], Y[rows][i]

        def __len__(self):
            return len(X[rows])

    return Pairs()


@pytest.fixture(scope="module")
def initial():
    paddle.seed(3)
    net = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.Tanh(), paddle.nn.Linear(8, 2))
    return {k: v.numpy() for k, v in net.state_dict().items()}


def _model(framework, initial, learning_rate=0.05, optimizer="sgd"):
    net = framework.nn.Sequential(framework.nn.Linear(4, 8), framework.nn.Tanh(), framework.nn.Linear(8, 2))
    net.set_state_dict({k: framework.to_tensor(v) for k, v in initial.items()})
    cls = framework.optimizer.Adam if optimizer == "adam" else framework.optimizer.SGD
    model = framework.Model(net)
    model.prepare(cls(learning_rate=learning_rate, parameters=net.parameters()), framework.nn.CrossEntropyLoss(),
                  framework.metric.Accuracy())
    return model


def _fit(framework, initial, callbacks, learning_rate=0.05, optimizer="sgd", epochs=4, **kwargs):
    model = _model(framework, initial, learning_rate, optimizer)
    recorder = recorder_class(framework.callbacks.Callback)()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.fit(_dataset(framework, slice(0, 40)), _dataset(framework, slice(40, 60)), batch_size=10,
                  epochs=epochs, shuffle=False, callbacks=[*callbacks, recorder], **kwargs)
    return model, recorder, printed.getvalue()


def _tracer(framework):
    class Tracer(framework.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.calls = []

    def hook(name):
        def record(self, *args):
            self.calls.append((name, args[0] if args and not isinstance(args[0], dict) else None))
        return record

    for name in HOOKS:
        setattr(Tracer, name, hook(name))
    return Tracer()


def test_hooks_are_called_in_paddles_order(initial):
    traces = {}
    for framework in (paddle, oarlock):
        tracer = _tracer(framework)
        model, _, _ = _fit(framework, initial, [tracer], epochs=2, eval_freq=1, verbose=0)
        model.evaluate(_dataset(framework), batch_size=25, verbose=0, callbacks=[tracer])
        model.predict(_dataset(framework), batch_size=25, verbose=0, callbacks=[tracer])
        traces[framework.__name__] = tracer.calls
    assert traces["oarlock"] == traces["paddle"]
    assert ("on_train_batch_end", 3) in traces["oarlock"] and ("on_predict_end", None) in traces["oarlock"]


def test_early_stopping_stops_and_saves_the_best_model(initial, tmp_path):
    runs = {}
    for framework in (paddle, oarlock):
        # min_delta 10: only the first evaluation counts as an improvement, so patience 1 stops after the second
        stopper = framework.callbacks.EarlyStopping(monitor="loss", mode="min", patience=1, min_delta=10)
        save_dir = tmp_path / framework.__name__
        model, recorder, printed = _fit(framework, initial, [stopper], epochs=6, verbose=0, save_dir=str(save_dir))
        runs[framework.__name__] = (model, recorder, printed, sorted(os.listdir(save_dir)))
    ours, ref = runs["oarlock"], runs["paddle"]
    assert len(ours[1].of("epoch")) == len(ref[1].of("epoch")) == 2
    assert ours[0].stop_training and ref[0].stop_training
    assert ours[3] == ref[3]
    assert "best_model.pdparams" in ours[3] and "final.pdparams" in ours[3] and "1.pdparams" in ours[3]
    assert "Epoch 2: Early stopping." in ours[2] and "Best checkpoint has been saved at" in ours[2]
    assert [line for line in ours[2].splitlines() if "Early" in line] == \
        [line for line in ref[2].splitlines() if "Early" in line]
    best = oarlock.load(str(tmp_path / "oarlock" / "best_model.pdparams"))
    after_first = oarlock.load(str(tmp_path / "oarlock" / "0.pdparams"))
    for key in after_first:
        np.testing.assert_array_equal(np.asarray(best[key]), np.asarray(after_first[key]))


def test_checkpoint_files_follow_save_freq(initial, tmp_path):
    listings = []
    for framework in (paddle, oarlock):
        _fit(framework, initial, [], epochs=4, verbose=0, save_dir=str(tmp_path / framework.__name__), save_freq=2,
             optimizer="adam")
        listings.append(sorted(os.listdir(tmp_path / framework.__name__)))
    assert listings[0] == listings[1] == ["0.pdopt", "0.pdparams", "2.pdopt", "2.pdparams", "final.pdopt",
                                          "final.pdparams"]


@pytest.mark.parametrize("by", ["step", "epoch"])
def test_lr_scheduler_steps_as_paddle(initial, by):
    lrs = {}
    for framework in (paddle, oarlock):
        model = _model(framework, initial)
        schedule = framework.optimizer.lr.PiecewiseDecay(boundaries=[3, 6, 9], values=[0.1, 0.05, 0.02, 0.01])
        model._optimizer = framework.optimizer.SGD(learning_rate=schedule, parameters=model.parameters())
        recorder = recorder_class(framework.callbacks.Callback)()
        callback = framework.callbacks.LRScheduler(by_step=by == "step", by_epoch=by == "epoch")
        model.fit(_dataset(framework, slice(0, 40)), batch_size=10, epochs=4, shuffle=False, verbose=0,
                  callbacks=[callback, recorder])
        lrs[framework.__name__] = recorder.lrs
    assert lrs["oarlock"] == lrs["paddle"]
    assert len(set(lrs["oarlock"])) > 1   # the rate did move
    with pytest.raises(ValueError, match="by_step option is mutually exclusive with by_epoch"):
        oarlock.callbacks.LRScheduler(by_step=True, by_epoch=True)


def test_reduce_lr_on_plateau_as_paddle(initial):
    runs = {}
    for framework in (paddle, oarlock):
        reducer = framework.callbacks.ReduceLROnPlateau(monitor="loss", factor=0.5, patience=1, min_delta=10,
                                                        cooldown=1)
        _, recorder, printed = _fit(framework, initial, [reducer], epochs=6, verbose=0)
        runs[framework.__name__] = (recorder.lrs, [line for line in printed.splitlines() if "reducing" in line])
    assert runs["oarlock"] == runs["paddle"]
    assert runs["oarlock"][0][-1] < runs["oarlock"][0][0] and runs["oarlock"][1]
    with pytest.raises(ValueError, match=r"ReduceLROnPlateau\(\): argument 'factor' must be < 1\.0"):
        oarlock.callbacks.ReduceLROnPlateau(factor=1.5)


def test_progress_bar_verbose_1_as_paddle(initial):
    outputs = {}
    for framework in (paddle, oarlock):
        _, _, printed = _fit(framework, initial, [], epochs=2, verbose=1, log_freq=2)
        text = printed.replace("\b", "").replace("\r", "\n")
        outputs[framework.__name__] = [(line.rstrip(), numbers) for line, numbers in log_lines(text)
                                       if line.strip()]
    ours, ref = outputs["oarlock"], outputs["paddle"]
    assert [line for line, _ in ours] == [line for line, _ in ref]
    for (line, a), (_, b) in zip(ours, ref):
        if "ETA" not in line:   # the ETA is a time
            np.testing.assert_allclose(a, b, rtol=0, atol=1.01e-4)
    assert any(line.startswith("step 4/4 [====") for line, _ in ours)


def test_visualdl_writes_tensorboard_scalars(initial, tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    log_dir = tmp_path / "vdl"
    _, recorder, _ = _fit(oarlock, initial, [oarlock.callbacks.VisualDL(str(log_dir))], epochs=2, verbose=0)
    reader = accumulator.EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    reader.Reload()
    assert sorted(reader.Tags()["scalars"]) == ["eval/acc", "eval/loss", "train/acc", "train/loss"]
    train_loss = reader.Scalars("train/loss")
    batches = recorder.of("train_batch")
    assert [e.step for e in train_loss] == list(range(1, len(batches) + 1))
    np.testing.assert_allclose([e.value for e in train_loss], [b[2]["loss"][0] for b in batches], rtol=1e-6)
    evals = recorder.of("eval")
    assert [e.step for e in reader.Scalars("eval/acc")] == [0, 1]
    np.testing.assert_allclose([e.value for e in reader.Scalars("eval/acc")], [e[2]["acc"] for e in evals],
                               rtol=1e-6)


def test_bad_callbacks_are_refused(initial):
    model = _model(oarlock, initial)
    with pytest.raises(TypeError, match=r"Model\.fit\(\): argument 'callbacks' must be a Callback or a list of "
                                        r"Callback, got str at position 0"):
        model.fit(_dataset(oarlock), callbacks=["not a callback"], verbose=0)


class _Batches:
    """An iterable of (inputs, labels) batches without a length: the bar counts steps without a total."""

    def __iter__(self):
        return iter([(X[i:i + 10], Y[i:i + 10]) for i in range(0, 40, 10)])


@pytest.mark.parametrize("verbose", [2, 3])
def test_progress_lines_without_a_length_as_paddle(initial, verbose):
    outputs = {}
    for framework in (paddle, oarlock):
        model = _model(framework, initial)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            model.fit(_Batches(), epochs=2, verbose=verbose, log_freq=2)
        text = "\n".join(line.split(" - avg_reader_cost")[0] for line in printed.getvalue().splitlines())
        outputs[framework.__name__] = log_lines(text)
    assert [line for line, _ in outputs["oarlock"]] == [line for line, _ in outputs["paddle"]]
    for (_, a), (_, b) in zip(outputs["oarlock"], outputs["paddle"]):
        np.testing.assert_allclose(a, b, rtol=0, atol=1.01e-4)
    assert any(line.startswith("step   4 - loss: #") for line, _ in outputs["oarlock"])
    if verbose == 3:
        _, _, printed = _fit(oarlock, initial, [], epochs=1, verbose=3, log_freq=2)
        assert " - avg_reader_cost: " in printed and " samples/sec" in printed


class _FakeWandb(types.ModuleType):
    """A stand-in for the wandb package (not installed here) that records what a callback asks of it."""

    def __init__(self):
        super().__init__("wandb")
        self.run = None
        self.calls = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs))
        recorder = self.calls

        class Run:
            def define_metric(self, *args, **kwargs):
                recorder.append(("define_metric", args, kwargs))

            def log(self, values):
                recorder.append(("log", dict(values)))

            def finish(self):
                recorder.append(("finish",))

        return Run()


def test_wandb_callback_logs_what_paddles_logs(initial, monkeypatch):
    calls = {}
    for framework in (paddle, oarlock):
        fake = _FakeWandb()
        monkeypatch.setitem(sys.modules, "wandb", fake)
        callback = framework.callbacks.WandbCallback(project="hapi", mode="offline")
        _fit(framework, initial, [callback], epochs=2, verbose=0)
        calls[framework.__name__] = fake.calls
    ours, ref = calls["oarlock"], calls["paddle"]
    assert [c[0] for c in ours] == [c[0] for c in ref]
    assert ours[0] == ref[0] and ours[0][1]["project"] == "hapi"
    for a, b in zip(ours, ref):
        if a[0] == "log":
            assert sorted(a[1]) == sorted(b[1])
            np.testing.assert_allclose([float(a[1][k]) for k in sorted(a[1])], [float(b[1][k]) for k in sorted(b[1])],
                                       rtol=1e-5)
        else:
            assert a == b
    assert sum(c[0] == "log" for c in ours) == 2 * 4 + 2   # every batch of 2 epochs, and each evaluation


def test_wandb_callback_without_wandb_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)   # makes `import wandb` fail
    with pytest.raises(ImportError, match=r"WandbCallback\(\): .*pip install wandb"):
        oarlock.callbacks.WandbCallback()
