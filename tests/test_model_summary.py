"""oarlock.summary and oarlock.flops against Paddle's paddle.summary and paddle.flops on the same
architectures: the printed tables, the returned parameter counts and the FLOPs."""

import contextlib
import io
import warnings

import numpy as np
import pytest

import oarlock


def lenet(nn, flatten):
    class LeNet(nn.Layer):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Conv2D(1, 6, 3, stride=1, padding=1), nn.ReLU(), nn.MaxPool2D(2, 2),
                                          nn.Conv2D(6, 16, 5, stride=1, padding=0), nn.ReLU(), nn.MaxPool2D(2, 2))
            self.fc = nn.Sequential(nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10))

        def forward(self, x):
            return self.fc(flatten(self.features(x), 1))
    return LeNet()


def convnet(nn, flatten):
    """Layer kinds with FLOPs rules: grouped conv with and without bias, pools, dropout."""
    return nn.Sequential(nn.Conv2D(3, 8, 3, padding=1, bias_attr=False), nn.LeakyReLU(),
                         nn.Conv2D(8, 8, 3, groups=4), nn.AvgPool2D(2), nn.AdaptiveAvgPool2D(2), nn.Dropout(0.5),
                         nn.Flatten(), nn.Linear(32, 5))


def bn_net(nn, flatten):
    """Batch norm: Paddle keeps its running mean and variance as (non-trainable) parameters, oarlock as
    buffers, so only the FLOPs are compared."""
    return nn.Sequential(nn.Conv2D(3, 4, 3), nn.BatchNorm2D(4), nn.ReLU())


class TwoInputs:
    @staticmethod
    def build(nn):
        class Net(nn.Layer):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Linear(4, 3), nn.Linear(6, 3)
                self.head = nn.Linear(3, 1)
                self.head.weight.stop_gradient = True     # a frozen parameter: not trainable

            def forward(self, x, y):
                return self.head(self.a(x) + self.b(y))
        return Net()


def _run(fn, *args, **kwargs):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fn(*args, **kwargs)
    return result, out.getvalue()


def _paddle_model(paddle, make):
    with paddle.utils.unique_name.guard():   # fresh layer numbers (conv2d_0, ...), as in a new process
        return make(paddle.nn, paddle.flatten)


@pytest.fixture
def paddle_flops(paddle, monkeypatch):
    """paddle.flops as Paddle 3.2 computes it. Its table code calls int() on one-element 1-d tensors, which
    numpy 2 refuses (paddle.flops raises TypeError here for every model); int() of the element is
    what it meant."""
    tensor_type = type(paddle.zeros([1]))
    monkeypatch.setattr(tensor_type, "__int__", lambda self: int(np.array(self).reshape(-1)[0]))
    return paddle.flops


@pytest.mark.parametrize("make, shape", [(lenet, (1, 1, 28, 28)), (convnet, (2, 3, 12, 12))])
def test_summary_matches_paddle(paddle, make, shape):
    theirs, their_text = _run(paddle.summary, _paddle_model(paddle, make), shape)
    net = make(oarlock.nn, oarlock.flatten)
    ours, our_text = _run(oarlock.summary, net, shape)
    assert ours == {k: int(v) for k, v in theirs.items()}
    assert our_text == their_text
    assert net.training   # put back in train mode


def test_summary_two_inputs_and_frozen_parameters(paddle):
    with paddle.utils.unique_name.guard():
        pnet = TwoInputs.build(paddle.nn)
    theirs, their_text = _run(paddle.summary, pnet, [(2, 4), (2, 6)])
    ours, our_text = _run(oarlock.summary, TwoInputs.build(oarlock.nn), [(2, 4), (2, 6)])
    assert ours == {k: int(v) for k, v in theirs.items()} and ours["total_params"] - ours["trainable_params"] == 3
    assert our_text == their_text
    # input= instead of input_size, and a None batch dimension
    x, y = oarlock.randn([5, 4]), oarlock.randn([5, 6])

    class Pair(oarlock.nn.Layer):
        def __init__(self):
            super().__init__()
            self.inner = TwoInputs.build(oarlock.nn)

        def forward(self, inputs):
            return self.inner(*inputs)
    ours, text = _run(oarlock.summary, Pair(), input=[x, y])
    assert ours["total_params"] == 15 + 21 + 4 and "[[5, 4], [5, 6]]" in text
    ours, text = _run(oarlock.summary, oarlock.nn.Linear(3, 2), (None, 3))
    assert ours == {"total_params": 8, "trainable_params": 8} and "Linear-1" in text and "[[1, 3]]" in text


@pytest.mark.parametrize("make, shape", [(lenet, [1, 1, 28, 28]), (convnet, [2, 3, 12, 12])])
def test_flops_matches_paddle(paddle, paddle_flops, make, shape):
    theirs, their_text = _run(paddle_flops, _paddle_model(paddle, make), shape, print_detail=True)
    net = make(oarlock.nn, oarlock.flatten)
    ours, our_text = _run(oarlock.flops, net, shape, print_detail=True)
    assert ours == theirs and isinstance(ours, int)

    def table(text):   # the per-layer table and the totals; the class names in the notes differ by module
        return [line for line in text.splitlines() if line.startswith(("+", "|", "Total"))]
    assert table(our_text) == table(their_text)
    assert net.training


def test_flops_batch_norm_matches_paddle(paddle, paddle_flops):
    theirs, _ = _run(paddle_flops, _paddle_model(paddle, bn_net), [2, 3, 8, 8])
    ours, _ = _run(oarlock.flops, bn_net(oarlock.nn, oarlock.flatten), [2, 3, 8, 8])
    assert ours == theirs == 2 * 4 * 6 * 6 * (3 * 9 + 1) + 2 * 2 * 4 * 6 * 6


def test_flops_custom_ops(paddle, paddle_flops):
    def count_relu(m, x, y):   # Paddle's convention: add to m.total_ops, return None
        m.total_ops += int(np.prod(x[0].shape))
    theirs, _ = _run(paddle_flops, _paddle_model(paddle, lenet), [1, 1, 28, 28],
                     custom_ops={paddle.nn.ReLU: count_relu})
    ours, text = _run(oarlock.flops, lenet(oarlock.nn, oarlock.flatten), [1, 1, 28, 28],
                      custom_ops={oarlock.nn.ReLU: count_relu})
    assert ours == theirs == 347560 + 6 * 28 * 28 + 16 * 10 * 10
    assert "Customize Function has been applied to" in text
    returned, _ = _run(oarlock.flops, lenet(oarlock.nn, oarlock.flatten), [1, 1, 28, 28],
                       custom_ops={oarlock.nn.ReLU: lambda m, x, y: 1})   # or return the count
    assert returned == 347560 + 2


def test_bad_arguments():
    net = oarlock.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="summary\\(\\): input_size and input cannot be None"):
        oarlock.summary(net)
    with pytest.raises(ValueError, match="only the batch dimension may be None"):
        oarlock.summary(net, (None, None))
    with pytest.raises(TypeError, match="flops\\(\\): net must be an oarlock.nn.Layer, got int"):
        oarlock.flops(3, [1, 2])
    with pytest.raises(ValueError, match="flops\\(\\): input_size must be a list of positive ints"):
        oarlock.flops(net, "1,2")
