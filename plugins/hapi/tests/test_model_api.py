"""oarlock.Model's batch methods and options against paddle.Model on the same network and data: what
train_batch / eval_batch / predict_batch return (types, shapes, values), networks with two outputs and two
losses, evaluation without a loss, predict without stacking, DataLoader and generator inputs,
accumulate_grad_batches, num_iters, summary; and the errors for misuse."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import paddle
import pytest

import oarlock

RNG = np.random.RandomState(5)
X = RNG.rand(24, 4).astype("float32")
Y = RNG.randint(0, 3, size=(24, 1)).astype("int64")


def _twin_nets(seed=0):
    paddle.seed(seed)
    ref = paddle.nn.Sequential(paddle.nn.Linear(4, 6), paddle.nn.ReLU(), paddle.nn.Linear(6, 3))
    ours = oarlock.nn.Sequential(oarlock.nn.Linear(4, 6), oarlock.nn.ReLU(), oarlock.nn.Linear(6, 3))
    ours.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in ref.state_dict().items()})
    return ref, ours


def _prepared(framework, net, metrics=True, loss=True, optimizer="adam"):
    model = framework.Model(net)
    opt = (framework.optimizer.Adam(learning_rate=0.01, parameters=net.parameters()) if optimizer == "adam" else
           framework.optimizer.SGD(learning_rate=0.1, parameters=net.parameters()))
    model.prepare(opt, framework.nn.CrossEntropyLoss() if loss else None,
                  framework.metric.Accuracy(topk=(1, 2)) if metrics else None)
    return model


def _same_structure(ours, ref, rtol=1e-5):
    """Same nesting (lists, tuples), same leaf types and shapes, values close."""
    if isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref)
        for a, b in zip(ours, ref):
            _same_structure(a, b, rtol)
    elif isinstance(ref, np.ndarray):
        assert isinstance(ours, np.ndarray) and ours.shape == ref.shape and ours.dtype == ref.dtype
        np.testing.assert_allclose(ours, ref, rtol=rtol, atol=1e-6)
    else:
        assert float(ours) == pytest.approx(float(ref), rel=rtol)


@pytest.mark.parametrize("metrics", [True, False])
def test_batch_methods_return_what_paddle_returns(metrics):
    ref_net, our_net = _twin_nets()
    ref, ours = _prepared(paddle, ref_net, metrics), _prepared(oarlock, our_net, metrics)
    for start in (0, 8):
        batch = ([X[start:start + 8]], [Y[start:start + 8]])
        _same_structure(ours.train_batch(*batch), ref.train_batch(*batch))
    _same_structure(ours.eval_batch([X[16:]], [Y[16:]]), ref.eval_batch([X[16:]], [Y[16:]]))
    _same_structure(ours.predict_batch([X[16:]]), ref.predict_batch([X[16:]]))
    # a Tensor input and a single array (not in a list) are accepted as in Paddle
    _same_structure(ours.predict_batch(oarlock.to_tensor(X[:3])), ref.predict_batch(paddle.to_tensor(X[:3])))


def test_eval_without_loss_returns_metrics_only():
    ref_net, our_net = _twin_nets()
    ref, ours = _prepared(paddle, ref_net, loss=False), _prepared(oarlock, our_net, loss=False)
    _same_structure(ours.eval_batch([X], [Y]), ref.eval_batch([X], [Y]))


class _TwoHeads:
    """A network with two outputs and a loss over both, in either framework."""

    @staticmethod
    def build(framework):
        class Net(framework.nn.Layer):
            def __init__(self):
                super().__init__()
                self.body = framework.nn.Linear(4, 5)
                self.head_a = framework.nn.Linear(5, 3)
                self.head_b = framework.nn.Linear(5, 1)

            def forward(self, x):
                h = framework.nn.functional.relu(self.body(x))
                return self.head_a(h), self.head_b(h)

        return Net()

    @staticmethod
    def loss(framework):
        ce = framework.nn.CrossEntropyLoss()

        def both(out_a, out_b, label):
            return [ce(out_a, label), (out_b ** 2).mean()]
        return both


def test_two_outputs_and_two_losses():
    paddle.seed(1)
    ref_net = _TwoHeads.build(paddle)
    our_net = _TwoHeads.build(oarlock)
    our_net.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in ref_net.state_dict().items()})
    results = []
    for framework, net in ((paddle, ref_net), (oarlock, our_net)):
        model = framework.Model(net)
        model.prepare(framework.optimizer.SGD(learning_rate=0.1, parameters=net.parameters()),
                      _TwoHeads.loss(framework))
        train = [model.train_batch([X[:12]], [Y[:12]]) for _ in range(2)]
        predicted = model.predict_batch([X[12:]])
        results.append((train, predicted))
    _same_structure(results[1], results[0])


def _loader_runs(framework, net, kind):
    model = _prepared(framework, net, optimizer="sgd")
    if kind == "dataloader":
        dataset = framework.io.TensorDataset([framework.to_tensor(X), framework.to_tensor(Y)])
        data = framework.io.DataLoader(dataset, batch_size=5, shuffle=False)
    else:
        data = [(X[i:i + 5], Y[i:i + 5]) for i in range(0, 24, 5)]   # any iterable of (inputs, labels) batches
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        model.fit(data, epochs=2, verbose=0, accumulate_grad_batches=2)
        evaluated = model.evaluate(data, verbose=0)
        predicted = model.predict(data, verbose=0)
    return evaluated, predicted


@pytest.mark.parametrize("kind", ["dataloader", "list_of_batches"])
def test_fit_on_loaders_with_gradient_accumulation(kind):
    ref_net, our_net = _twin_nets(2)
    ref_eval, ref_pred = _loader_runs(paddle, ref_net, kind)
    our_eval, our_pred = _loader_runs(oarlock, our_net, kind)
    assert list(our_eval) == list(ref_eval)
    for key in ref_eval:
        np.testing.assert_allclose(our_eval[key], ref_eval[key], rtol=1e-5)
    # predict without stacking: one entry per output, holding each batch's array
    assert len(our_pred) == len(ref_pred) == 1 and len(our_pred[0]) == len(ref_pred[0]) == 5
    _same_structure(list(our_pred[0]), list(ref_pred[0]))
    for net_a, net_b in ((our_net, ref_net),):
        for (k, a), (_, b) in zip(net_a.state_dict().items(), net_b.state_dict().items()):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


def test_num_iters_stops_training_as_paddle():
    steps = []
    for framework, net in zip((paddle, oarlock), _twin_nets(4)):
        model = _prepared(framework, net, optimizer="sgd")
        class Count(framework.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.seen = []

            def on_train_batch_end(self, step, logs=None):
                self.seen.append(step)

        dataset = framework.io.TensorDataset([framework.to_tensor(X), framework.to_tensor(Y)])
        counter = Count()
        model.fit(dataset, batch_size=5, epochs=10, num_iters=7, shuffle=False, verbose=0, callbacks=[counter])
        steps.append(counter.seen)
    assert steps[1] == steps[0] == [0, 1, 2, 3, 4, 0, 1]


def test_summary_counts_parameters():
    _, our_net = _twin_nets()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        info = oarlock.Model(our_net).summary((1, 4))
    assert info == {"total_params": 4 * 6 + 6 + 6 * 3 + 3, "trainable_params": 4 * 6 + 6 + 6 * 3 + 3}
    assert "Linear" in printed.getvalue()
    with pytest.raises(ValueError, match=r"Model\.summary\(\): 'input_size' or 'self\._input' must be set"):
        oarlock.Model(our_net).summary()


def test_misuse_is_refused_with_clear_errors():
    _, net = _twin_nets()
    with pytest.raises(TypeError, match=r"Model\(\): argument 'network' must be an oarlock\.nn\.Layer, got int"):
        oarlock.Model(3)
    model = oarlock.Model(net)
    with pytest.raises(RuntimeError, match=r"Model\.train_batch\(\): model not ready, please call "
                                           r"`model\.prepare\(\)` first"):
        model.train_batch([X[:2]], [Y[:2]])
    with pytest.raises(TypeError, match=r"Model\.prepare\(\): argument 'metrics' must hold oarlock\.metric\.Metric "
                                        r"instances, got str"):
        model.prepare(metrics="acc")
    with pytest.raises(TypeError, match=r"Model\.prepare\(\): argument 'loss' must be an oarlock\.nn\.Layer or a "
                                        r"callable, got int"):
        model.prepare(loss=3)
    with pytest.raises(ValueError, match=r"amp_configs\['level'\] should be 'O0', 'O1' or 'O2'"):
        model.prepare(amp_configs={"level": "O3"})
    with pytest.raises(ValueError, match=r"the keys of 'amp_configs' must be accepted by mixed precision APIs.*"
                                         r"\('speed',\)"):
        model.prepare(amp_configs={"level": "O1", "speed": 2})
    with pytest.raises(TypeError, match=r"Model\.fit\(\): argument 'train_data' must be an oarlock\.io\.Dataset, a "
                                        r"DataLoader or an iterable of batches, got int"):
        _prepared(oarlock, net).fit(5, verbose=0)
    with pytest.raises(ValueError, match=r"Model\.fit\(\): argument 'eval_freq' must be an int >= 1, got 0"):
        _prepared(oarlock, net).fit([(X, Y)], eval_freq=0, verbose=0)
    with pytest.raises(ValueError, match=r"Model\.fit\(\): batch_size length error"):
        _prepared(oarlock, net).fit([(X, Y)], batch_size=[1, 2, 3], verbose=0)


def test_amp_o1_trains_in_float16_and_keeps_the_scaler(tmp_path):
    """Paddle's CPU build turns AMP off, so this checks the behaviour its GPU build has: the forward (and so the
    loss) in float16 under auto_cast, a GradScaler created on the first step with the configured scale, its state
    saved to .pdscaler and restored by load."""
    _, net = _twin_nets(6)
    model = oarlock.Model(net)
    model.prepare(oarlock.optimizer.Adam(learning_rate=0.01, parameters=net.parameters()),
                  oarlock.nn.CrossEntropyLoss(), amp_configs={"level": "O1", "init_loss_scaling": 1024.0,
                                                              "incr_every_n_steps": 3})
    losses = [model.train_batch([X], [Y])[0] for _ in range(4)]
    assert all(loss.dtype == np.float16 for loss in losses)
    assert float(losses[-1]) < float(losses[0])
    assert net[0].weight.dtype == oarlock.float32   # O1 keeps float32 parameters
    scale = model._scaler.state_dict()["scale"]
    assert float(np.asarray(scale).reshape(-1)[0]) == 2048.0   # doubled after 3 finite steps
    model.save(str(tmp_path / "ck"))
    restored = oarlock.Model(net)
    restored.prepare(oarlock.optimizer.Adam(learning_rate=0.01, parameters=net.parameters()),
                     oarlock.nn.CrossEntropyLoss(), amp_configs="O1")
    restored.train_batch([X], [Y])   # creates the scaler, then load fills it
    restored.load(str(tmp_path / "ck"))
    assert float(np.asarray(restored._scaler.state_dict()["scale"]).reshape(-1)[0]) == 2048.0


def test_input_specs_and_summary_as_paddle():
    """inputs/labels given as InputSpec: the data's first len(inputs) fields feed the network, and summary()
    without input_size describes the network from the specs, as Paddle's does."""
    ref_net, our_net = _twin_nets(8)
    results = []
    for framework, net in ((paddle, ref_net), (oarlock, our_net)):
        spec = framework.static.InputSpec
        model = framework.Model(net, inputs=[spec([None, 4], "float32", "x")],
                                labels=[spec([None, 1], "int64", "label")])
        model.prepare(framework.optimizer.SGD(learning_rate=0.1, parameters=net.parameters()),
                      framework.nn.CrossEntropyLoss())
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            info = model.summary()
            model.fit([(X[i:i + 6], Y[i:i + 6]) for i in range(0, 24, 6)], epochs=1, verbose=0)
        results.append((info, model.predict_batch([X[:4]])))
    assert results[1][0] == results[0][0]
    _same_structure(results[1][1], results[0][1])


class _TwoInputs:
    @staticmethod
    def build(framework):
        class Net(framework.nn.Layer):
            def __init__(self):
                super().__init__()
                self.a = framework.nn.Linear(4, 3)
                self.b = framework.nn.Linear(2, 3)

            def forward(self, first, second):   # two forward arguments: the data's first two fields
                return self.a(first) + self.b(second)

        return Net()


def test_inputs_counted_from_forward_arguments():
    paddle.seed(2)
    ref_net = _TwoInputs.build(paddle)
    our_net = _TwoInputs.build(oarlock)
    our_net.set_state_dict({k: oarlock.to_tensor(v.numpy()) for k, v in ref_net.state_dict().items()})
    second = RNG.rand(24, 2).astype("float32")
    batches = [(X[i:i + 8], second[i:i + 8], Y[i:i + 8]) for i in range(0, 24, 8)]
    results = []
    for framework, net in ((paddle, ref_net), (oarlock, our_net)):
        model = framework.Model(net)
        model.prepare(framework.optimizer.SGD(learning_rate=0.1, parameters=net.parameters()),
                      framework.nn.CrossEntropyLoss(), framework.metric.Accuracy())
        model.fit(batches, epochs=2, verbose=0)
        results.append((model.evaluate(batches, verbose=0), model.predict(batches, stack_outputs=True, verbose=0)))
    assert list(results[1][0]) == list(results[0][0])
    for key in results[0][0]:
        np.testing.assert_allclose(results[1][0][key], results[0][0][key], rtol=1e-5)
    np.testing.assert_allclose(results[1][1][0], results[0][1][0], rtol=1e-5, atol=1e-6)
