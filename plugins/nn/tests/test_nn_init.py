"""oarlock.nn.init: the in-place initializers and calculate_gain.

Random initializers are checked by the moments of a large sample against their formulas (sample mean within
5 standard errors, sample variance within 3%), with the fans of Paddle 3.2's paddle.nn.init (a 2-D tensor is
[in, out]); deterministic ones (eye_, dirac_, orthogonal_'s orthogonality, constants) exactly. Also: the
tensor stays the same object, oarlock.seed makes the draws reproducible, and errors name the function and the
argument. torch and paddle, when installed, supply calculate_gain's values, dirac_'s tensors and the fans.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
from oarlock.nn import init
from errors import raises_naming

SHAPE_2D = (600, 400)          # Paddle's convention: fan_in 600, fan_out 400
SHAPE_4D = (64, 32, 3, 3)      # fan_in 32 * 9 = 288, fan_out 64 * 9 = 576
FANS = {SHAPE_2D: (600, 400), SHAPE_4D: (288, 576)}


def _empty(shape, dtype="float32"):
    return oarlock.to_tensor(np.zeros(shape, dtype=dtype))


def _moments(values, mean, var):
    """Sample mean within 5 standard errors of `mean`, sample variance within 3% of `var`."""
    values = np.asarray(values, dtype=np.float64).ravel()
    assert abs(values.mean() - mean) < 5 * math.sqrt(var / values.size) + 1e-12, (values.mean(), mean)
    np.testing.assert_allclose(values.var(), var, rtol=0.03)


# -- the random initializers: moments against their formulas --------------------------------------------------

@pytest.mark.parametrize("shape", [SHAPE_2D, SHAPE_4D])
@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
@pytest.mark.parametrize("nonlinearity,a", [("leaky_relu", 0), ("leaky_relu", 0.2), ("relu", 0), ("tanh", 0),
                                            ("linear", 0)])
def test_kaiming(shape, mode, nonlinearity, a):
    fan = FANS[shape][0 if mode == "fan_in" else 1]
    std = init.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    t = init.kaiming_normal_(_empty(shape), a=a, mode=mode, nonlinearity=nonlinearity)
    _moments(t.numpy(), 0.0, std ** 2)
    u = init.kaiming_uniform_(_empty(shape), a=a, mode=mode, nonlinearity=nonlinearity)
    _moments(u.numpy(), 0.0, std ** 2)
    assert np.abs(u.numpy()).max() <= math.sqrt(3.0) * std * (1 + 1e-6)


def test_kaiming_defaults_are_leaky_relu_fan_in():
    t = init.kaiming_uniform_(_empty(SHAPE_4D))
    _moments(t.numpy(), 0.0, 2.0 / 288)  # gain sqrt(2 / (1 + a^2)) with a = 0, fan_in 32 * 3 * 3


@pytest.mark.parametrize("shape", [SHAPE_2D, SHAPE_4D])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_xavier(shape, gain):
    fan_in, fan_out = FANS[shape]
    var = gain ** 2 * 2.0 / (fan_in + fan_out)
    _moments(init.xavier_normal_(_empty(shape), gain=gain).numpy(), 0.0, var)
    u = init.xavier_uniform_(_empty(shape), gain=gain).numpy()
    _moments(u, 0.0, var)
    assert np.abs(u).max() <= gain * math.sqrt(6.0 / (fan_in + fan_out)) * (1 + 1e-6)


def test_xavier_given_fans_replace_the_tensors():
    t = init.xavier_uniform_(_empty(SHAPE_2D), fan_in=100, fan_out=50)
    _moments(t.numpy(), 0.0, 2.0 / 150)


def test_uniform_normal_constant():
    u = init.uniform_(_empty(SHAPE_2D), a=-1.0, b=3.0).numpy()
    assert u.min() >= -1.0 and u.max() < 3.0
    _moments(u, 1.0, 16.0 / 12)
    _moments(init.uniform_(_empty(SHAPE_2D)).numpy(), 0.5, 1.0 / 12)  # U(0, 1) by default
    _moments(init.normal_(_empty(SHAPE_2D), mean=2.0, std=0.5).numpy(), 2.0, 0.25)
    _moments(init.normal_(_empty(SHAPE_2D)).numpy(), 0.0, 1.0)
    np.testing.assert_array_equal(init.constant_(_empty((3, 4)), 2.5).numpy(), np.full((3, 4), 2.5))
    np.testing.assert_array_equal(init.ones_(_empty((2, 3))).numpy(), np.ones((2, 3)))
    np.testing.assert_array_equal(init.zeros_(oarlock.ones([2, 3])).numpy(), np.zeros((2, 3)))


def _truncated_moments(mean, std, a, b):
    """Mean and variance of N(mean, std^2) truncated to [a, b] (the closed forms)."""
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = [math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in (alpha, beta)]
    z = 0.5 * (math.erf(beta / math.sqrt(2)) - math.erf(alpha / math.sqrt(2)))
    shift = (pdf[0] - pdf[1]) / z
    var = std ** 2 * (1 + (alpha * pdf[0] - beta * pdf[1]) / z - shift ** 2)
    return mean + std * shift, var


@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (0.0, 3.0, -2.0, 2.0), (1.0, 0.5, 0.0, 3.0),
                                          (0.0, 1.0, 1.0, 3.0), (5.0, 1.0, -2.0, 2.0), (0.0, 0.02, -2.0, 2.0)])
def test_trunc_normal_has_absolute_bounds(mean, std, a, b):
    t = init.trunc_normal_(_empty(SHAPE_2D), mean=mean, std=std, a=a, b=b).numpy()
    assert t.min() >= a and t.max() <= b
    _moments(t, *_truncated_moments(mean, std, a, b))


@pytest.mark.filterwarnings("ignore:mean is more than 2 std")  # torch's caveat about its inverse-CDF sampler
def test_trunc_normal_matches_torch_and_paddle_statistics(torch, paddle):
    """(5, 1) truncated to [-2, 2]: mass piled against b, as torch and paddle give."""
    ours = init.trunc_normal_(_empty([200000]), 5.0, 1.0, -2.0, 2.0).numpy()
    theirs = torch.nn.init.trunc_normal_(torch.zeros(200000), 5.0, 1.0, -2.0, 2.0).numpy()
    p = paddle.zeros([200000])
    paddle.nn.init.trunc_normal_(p, 5.0, 1.0, -2.0, 2.0)
    for other in (theirs, p.numpy()):
        np.testing.assert_allclose(ours.mean(), other.mean(), atol=0.01)
        np.testing.assert_allclose(ours.std(), other.std(), rtol=0.03)


def test_fans_match_paddle_nn_init(paddle):
    """A 2-D tensor is [in, out] for paddle.nn.init (torch would take fan_in = shape[1])."""
    for fn, mode in (("kaiming_uniform_", "fan_in"), ("kaiming_normal_", "fan_out")):
        ours = getattr(init, fn)(_empty((300, 100)), mode=mode).numpy()
        p = paddle.zeros([300, 100])
        getattr(paddle.nn.init, fn)(p, mode=mode)
        np.testing.assert_allclose(ours.var(), p.numpy().var(), rtol=0.05)
    ours = init.xavier_normal_(_empty((300, 100, 3)), gain=2.0).numpy()
    p = paddle.zeros([300, 100, 3])
    paddle.nn.init.xavier_normal_(p, gain=2.0)
    np.testing.assert_allclose(ours.var(), p.numpy().var(), rtol=0.05)


def test_conv_weight_fans_match_torch(torch):
    """From 3 dimensions on the fans are torch's: [out, in/groups, *kernel]."""
    for fn in ("kaiming_normal_", "xavier_uniform_"):
        ours = getattr(init, fn)(_empty(SHAPE_4D)).numpy()
        theirs = getattr(torch.nn.init, fn)(torch.zeros(SHAPE_4D)).numpy()
        np.testing.assert_allclose(ours.var(), theirs.var(), rtol=0.05)


# -- calculate_gain -----------------------------------------------------------------------------------------------

TORCH_NONLINEARITIES = ["linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                        "conv_transpose3d", "sigmoid", "tanh", "relu", "leaky_relu", "selu"]


@pytest.mark.parametrize("nonlinearity", TORCH_NONLINEARITIES)
def test_calculate_gain_matches_torch(torch, nonlinearity):
    assert init.calculate_gain(nonlinearity) == pytest.approx(torch.nn.init.calculate_gain(nonlinearity), rel=1e-15)
    for param in (0.0, 0.2, 1, 3.5):
        assert init.calculate_gain(nonlinearity, param) == pytest.approx(
            torch.nn.init.calculate_gain(nonlinearity, param), rel=1e-15)


def test_calculate_gain_paddle_spellings(paddle):
    for nonlinearity in ("conv1d_transpose", "conv2d_transpose", "conv3d_transpose", "leaky_relu", "tanh"):
        assert init.calculate_gain(nonlinearity) == pytest.approx(paddle.nn.init.calculate_gain(nonlinearity))
    assert nn.initializer.calculate_gain is init.calculate_gain


# -- the deterministic ones ---------------------------------------------------------------------------------------

def test_eye():
    for shape in ((4, 4), (3, 5), (5, 2)):
        np.testing.assert_array_equal(init.eye_(_empty(shape)).numpy(), np.eye(*shape))
    assert init.eye_(_empty((3, 3), "float64")).dtype == "float64"


@pytest.mark.parametrize("shape,groups", [((6, 4, 3), 1), ((6, 4, 3, 3), 2), ((4, 6, 3, 2), 2), ((6, 2, 3, 3, 3), 3),
                                          ((3, 5, 1, 4), 1)])
def test_dirac_matches_torch(torch, shape, groups):
    ours = init.dirac_(oarlock.ones(list(shape)), groups=groups).numpy()
    np.testing.assert_array_equal(ours, torch.nn.init.dirac_(torch.ones(shape), groups=groups).numpy())


def test_dirac_is_the_identity_convolution():
    w = init.dirac_(_empty((4, 4, 3, 3), "float64"))
    x = oarlock.to_tensor(np.random.default_rng(0).standard_normal((2, 4, 6, 5)))
    np.testing.assert_allclose(nn.functional.conv2d(x, w, padding=1).numpy(), x.numpy(), rtol=1e-15)


@pytest.mark.parametrize("shape", [(20, 50), (50, 20), (30, 30), (8, 4, 3, 3), (40, 2, 3)])
@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_orthogonal(shape, gain):
    w = init.orthogonal_(_empty(shape, "float64"), gain=gain).numpy().reshape(shape[0], -1)
    rows, cols = w.shape
    gram = w @ w.T if rows <= cols else w.T @ w
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(min(rows, cols)), atol=1e-12)
    w32 = init.orthogonal_(_empty(shape), gain=gain).numpy().reshape(shape[0], -1).astype(np.float64)
    gram = w32 @ w32.T if rows <= cols else w32.T @ w32
    np.testing.assert_allclose(gram, gain ** 2 * np.eye(min(rows, cols)), atol=2e-6 * gain ** 2)


# -- in place, reproducible, dtypes --------------------------------------------------------------------------------

ALL = [("kaiming_uniform_", ()), ("kaiming_normal_", ()), ("xavier_uniform_", ()), ("xavier_normal_", ()),
       ("uniform_", ()), ("normal_", ()), ("trunc_normal_", ()), ("constant_", (0.5,)), ("ones_", ()),
       ("zeros_", ()), ("orthogonal_", ())]


@pytest.mark.parametrize("name,args", ALL)
def test_fills_a_parameter_in_place(name, args):
    layer = nn.Linear(16, 8)
    weight = layer.weight
    before = weight.numpy().copy()
    assert getattr(init, name)(weight, *args) is weight
    assert layer.weight is weight and isinstance(weight, nn.Parameter) and not weight.stop_gradient
    assert weight.shape == [16, 8] and weight.dtype == "float32"
    if name not in ("ones_", "zeros_", "constant_"):
        assert not np.array_equal(weight.numpy(), before)
    np.testing.assert_array_equal(layer.state_dict()["weight"].numpy(), weight.numpy())
    layer(oarlock.ones([2, 16])).sum().backward()  # still a trainable leaf of the layer
    np.testing.assert_allclose(weight.grad.numpy(), np.full((16, 8), 2.0))


def test_in_place_on_conv_weight_and_identity_ops():
    conv = nn.Conv2D(4, 4, 3, padding=1)
    for fn in (init.dirac_, init.kaiming_normal_):
        assert fn(conv.weight) is conv.weight and conv.weight.shape == [4, 4, 3, 3]
    linear = nn.Linear(3, 3)
    assert init.eye_(linear.weight) is linear.weight and linear.weight.numpy().trace() == 3.0


@pytest.mark.parametrize("name,args", [a for a in ALL if a[0] not in ("ones_", "zeros_", "constant_")])
def test_seed_makes_draws_reproducible(name, args):
    oarlock.seed(123)
    first = getattr(init, name)(_empty((20, 30)), *args).numpy()
    oarlock.seed(123)
    again = getattr(init, name)(_empty((20, 30)), *args).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, getattr(init, name)(_empty((20, 30)), *args).numpy())


@pytest.mark.parametrize("dtype", ["float64", "bfloat16", "float16"])
def test_keeps_the_dtype(dtype):
    t = oarlock.zeros([64, 32], dtype=dtype)
    for fn in (init.kaiming_uniform_, init.xavier_normal_, init.trunc_normal_, init.orthogonal_, init.eye_):
        assert fn(t) is t and t.dtype == dtype


def test_zero_element_tensors_are_left_alone():
    for fn in (init.kaiming_uniform_, init.xavier_normal_, init.orthogonal_, init.trunc_normal_):
        t = _empty((0, 5))
        assert fn(t) is t and t.shape == [0, 5]


# -- errors: the function and the argument ---------------------------------------------------------------------------

def _raises(kind, fn, *fragments):
    raises_naming(fn, kind, *fragments)


def test_errors_name_function_and_argument():
    w = _empty((4, 3))
    _raises(ValueError, lambda: init.kaiming_uniform_(w, mode="fan_avg"), "kaiming_uniform_()", "mode", "'fan_avg'",
            "'fan_out'")
    _raises(ValueError, lambda: init.kaiming_normal_(w, nonlinearity="gelu"), "kaiming_normal_()", "nonlinearity",
            "'gelu'", "'leaky_relu'")
    _raises(ValueError, lambda: init.kaiming_normal_(w, a="x"), "kaiming_normal_()", "a (", "'x'")
    _raises(ValueError, lambda: init.calculate_gain("swish"), "calculate_gain()", "nonlinearity", "'swish'")
    _raises(ValueError, lambda: init.calculate_gain("leaky_relu", "0.1"), "calculate_gain()", "param", "'0.1'")
    _raises(ValueError, lambda: init.eye_(_empty((2, 2, 2))), "eye_()", "2-D", "[2, 2, 2]")
    _raises(ValueError, lambda: init.dirac_(w), "dirac_()", "3-D, 4-D or 5-D", "[4, 3]")
    _raises(ValueError, lambda: init.dirac_(_empty((3, 3, 3)), groups=2), "dirac_()", "groups=2", "[3, 3, 3]")
    _raises(ValueError, lambda: init.dirac_(_empty((4, 4, 3)), groups=0), "dirac_()", "groups", "0")
    _raises(ValueError, lambda: init.orthogonal_(_empty((5,))), "orthogonal_()", "at least 2", "[5]")
    _raises(ValueError, lambda: init.trunc_normal_(w, std=0.0), "trunc_normal_()", "std", "0.0")
    _raises(ValueError, lambda: init.trunc_normal_(w, a=1.0, b=-1.0), "trunc_normal_()", "a < b")
    _raises(ValueError, lambda: init.trunc_normal_(w, mean=50.0, a=-1.0, b=1.0), "trunc_normal_()", "[-1.0, 1.0]")
    _raises(TypeError, lambda: init.normal_(np.zeros(3)), "normal_()", "Tensor", "ndarray")
    # the classes name themselves
    _raises(ValueError, lambda: nn.initializer.KaimingUniform(mode="fan_avg"), "KaimingUniform", "mode")
    _raises(ValueError, lambda: nn.initializer.KaimingNormal(negative_slope="x"), "KaimingNormal", "negative_slope")
    _raises(ValueError, lambda: nn.initializer.Dirac()(w), "Dirac", "3-D")


def test_initializer_classes():
    """nn.initializer gains Dirac and Orthogonal; Kaiming* take mode and compute calculate_gain's gain;
    TruncatedNormal's bounds are absolute."""
    t = nn.initializer.KaimingNormal(nonlinearity="tanh", mode="fan_out")(_empty(SHAPE_4D))
    _moments(t.numpy(), 0.0, (5.0 / 3) ** 2 / 576)
    t = nn.initializer.TruncatedNormal(std=0.02)(_empty(SHAPE_2D))  # [-2, 2] is 100 std: untruncated
    _moments(t.numpy(), 0.0, 0.02 ** 2)
    layer = nn.Conv2D(3, 3, 3, padding=1, weight_attr=nn.ParamAttr(initializer=nn.initializer.Dirac()))
    x = oarlock.randn([1, 3, 5, 5])
    np.testing.assert_allclose(layer(x).numpy(), x.numpy(), rtol=1e-6, atol=1e-6)
    w = nn.initializer.Orthogonal(gain=3.0)(_empty((6, 9), "float64")).numpy()
    np.testing.assert_allclose(w @ w.T, 9.0 * np.eye(6), atol=1e-12)
