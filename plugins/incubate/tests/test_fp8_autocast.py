"""FP8 training (oarlock.incubate.fp8): Fp8Linear's forward and both gradients against float64 within the bounds
the formats give (every recipe), DelayedScaling's amax-history update (TE's rule, both amax algorithms, the first
step at scale 1), the block recipe agreeing with fp8_gemm_blockwise, fp8_autocast's scoping, convert_to_fp8
keeping the parameters, a small regression trained in FP8 reaching the float32 run's loss, and bad recipes."""

import os
import sys

import numpy as np
import pytest

import oarlock
import oarlock.incubate.nn.functional as F
import oarlock.nn as nn
from oarlock.incubate.fp8 import (DelayedScaling, Float8BlockScaling, Float8CurrentScaling, Fp8Linear,
                                  convert_to_fp8, fp8_autocast, is_fp8_enabled)

sys.path.insert(0, os.path.dirname(__file__))   # fp8_reference, next to this file
import fp8_reference as ref  # noqa: E402


def _layer(k=256, n=192, seed=0):
    oarlock.seed(seed)
    layer = Fp8Linear(k, n)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal([3, 128, k]).astype(np.float32)
    dy = rng.standard_normal([3, 128, n]).astype(np.float32)
    return layer, x, dy


def _run(layer, x, dy, recipe):
    ox = oarlock.to_tensor(x)
    ox.stop_gradient = False
    with fp8_autocast(recipe=recipe):
        y = layer(ox)
    y.backward(oarlock.to_tensor(dy))
    return y.numpy().astype(np.float64), ox.grad.numpy().astype(np.float64), layer.weight.grad.numpy()


def _per_tensor_bound(a, fmt):
    """Element bound of a per-tensor current-scaled cast of a (scale = max / amax, not a power of two here)."""
    d = np.abs(a).max() / ref.FMT_MAX[fmt]
    return d * ref.cast_error_bound(a / d, fmt) + np.abs(a) * 2.0 ** -22


def _block_bound(a, fmt="e4m3"):
    """Element bound of a 1 x 128 power-of-two cast along a's last axis."""
    m, k = a.shape
    padded = np.pad(np.abs(a), ((0, 0), (0, -(-k // 128) * 128 - k)))
    amax = np.repeat(padded.reshape(m, -1, 128).max(axis=2), 128, axis=1)[:, :k]
    d = 1 / np.vectorize(lambda v: ref.scale(v, 0.0, True, fmt))(amax)
    return d * ref.cast_error_bound(a / d, fmt)


def _tile_bound(a, fmt="e4m3"):
    """Element bound of a 128 x 128-tile power-of-two cast of a (ragged last tiles)."""
    m, k = a.shape
    mb, kb = -(-m // 128), -(-k // 128)
    padded = np.pad(np.abs(a), ((0, mb * 128 - m), (0, kb * 128 - k)))
    amax = padded.reshape(mb, 128, kb, 128).max(axis=(1, 3))
    d = 1 / np.vectorize(lambda v: ref.scale(v, 0.0, True, fmt))(amax)
    d = np.repeat(np.repeat(d, 128, axis=0), 128, axis=1)[:m, :k]
    return d * ref.cast_error_bound(a / d, fmt)


@pytest.mark.parametrize("recipe", [Float8CurrentScaling(), Float8BlockScaling()], ids=["current", "block"])
def test_fp8_linear_forward_and_gradients_within_format_bounds(recipe):
    layer, x, dy = _layer()
    y, gx, gw = _run(layer, x, dy, recipe)
    w = layer.weight.numpy().astype(np.float64)
    b = layer.bias.numpy().astype(np.float64)
    x2, dy2 = x.reshape(-1, 256).astype(np.float64), dy.reshape(-1, 192).astype(np.float64)
    fwd, bwd = recipe.forward_format, recipe.backward_format
    if recipe.per_tensor:
        ex, ew, eg = _per_tensor_bound(x2, fwd), _per_tensor_bound(w, fwd), _per_tensor_bound(dy2, bwd)
        ext, egt = ex.T, eg.T
    else:
        ex, eg = _block_bound(x2, fwd), _block_bound(dy2, bwd)
        ew = _tile_bound(w, fwd)
        ext, egt = _block_bound(x2.T, fwd), _block_bound(dy2.T, bwd)
    acc = 2.0 ** -20
    for got, want, bound in (
            (y.reshape(-1, 192), x2 @ w + b, ex @ np.abs(w) + np.abs(x2) @ ew + ex @ ew + acc * np.abs(x2) @ np.abs(w)),
            (gx.reshape(-1, 256), dy2 @ w.T,
             eg @ np.abs(w.T) + np.abs(dy2) @ ew.T + eg @ ew.T + acc * np.abs(dy2) @ np.abs(w.T)),
            (gw, x2.T @ dy2,
             ext @ np.abs(dy2) + np.abs(x2.T) @ egt.T + ext @ egt.T + acc * np.abs(x2.T) @ np.abs(dy2))):
        err = np.abs(got - want)
        assert np.all(err <= bound), (err / bound).max()
        assert err.max() > 1e-4                      # it really ran in FP8


def test_block_recipe_is_fp8_gemm_blockwise_of_fp8_quant_blockwise():
    layer, x, _ = _layer(seed=1)
    with fp8_autocast(recipe=Float8BlockScaling()):
        y = layer(oarlock.to_tensor(x)).numpy() - layer.bias.numpy()
    qx, sx = F.fp8_quant_blockwise(oarlock.to_tensor(x.reshape(-1, 256)))
    qw, sw = F.fp8_quant_blockwise(oarlock.transpose(layer.weight, [1, 0]), quant_method="128x128")
    want = F.fp8_gemm_blockwise(qx, sx, qw, sw, "float32", is_b_1d_scaled=False).numpy()
    np.testing.assert_allclose(y.reshape(-1, 192), want, rtol=1e-5, atol=1e-5)   # only the summation order differs


@pytest.mark.parametrize("algo", ["max", "most_recent"])
def test_delayed_scaling_follows_the_amax_history(algo):
    recipe = DelayedScaling(amax_history_len=2, amax_compute_algo=algo)
    layer, x, dy = _layer(seed=2)
    amaxes = []
    for step, factor in enumerate((1000.0, 1.0, 2.0)):     # the first step runs at scale 1: 1000 saturates
        xs = x * factor
        y, _, _ = _run(layer, xs, dy, recipe)
        amaxes.append(np.float32(np.abs(xs).max()))
        if step == 0:
            ref_y = xs.reshape(-1, 256).clip(-448, 448) @ layer.weight.numpy()
            assert np.abs(y.reshape(-1, 192) - layer.bias.numpy() - ref_y).max() < 0.1 * np.abs(ref_y).max()
        history = amaxes[-2:]
        amax = max(history) if algo == "max" else history[-1]
        assert layer.fp8_state.scale["x"] == np.float32(np.float32(448.0) / amax)
        np.testing.assert_array_equal(layer.fp8_state.history["x"], history)
    # HYBRID: the gradient's scale is e5m2's
    assert layer.fp8_state.scale["grad"] == np.float32(np.float32(57344.0) / np.float32(np.abs(dy).max()))


def test_autocast_scoping_and_convert_keeps_parameters():
    oarlock.seed(3)
    model = nn.Sequential(nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128, bias_attr=False))
    params = [id(p) for p in model.parameters()]
    keys = list(model.state_dict())
    x = oarlock.randn([128, 128])
    plain = model(x).numpy()
    convert_to_fp8(model)
    assert isinstance(model[0], Fp8Linear) and isinstance(model[2], Fp8Linear)
    assert [id(p) for p in model.parameters()] == params and list(model.state_dict()) == keys
    np.testing.assert_array_equal(model(x).numpy(), plain)            # outside fp8_autocast: the plain Linear
    assert not is_fp8_enabled()
    with fp8_autocast(recipe=Float8BlockScaling()):
        assert is_fp8_enabled()
        with fp8_autocast(enabled=False):
            np.testing.assert_array_equal(model(x).numpy(), plain)
        assert not np.array_equal(model(x).numpy(), plain)
    assert not is_fp8_enabled()
    bound = convert_to_fp8(nn.Linear(128, 128), Float8CurrentScaling())
    assert isinstance(bound, Fp8Linear) and not np.array_equal(bound(x).numpy(), nn.functional.linear(
        x, bound.weight, bound.bias).numpy())


def test_convert_keeps_excluded_linears():
    """exclude= keeps the named Linear layers (named_sublayers paths) in their own precision, e.g. a GPT's output
    head as DeepSeek-V3's recipe does; a name that is not a Linear of the model is a clear error."""
    model = nn.Sequential(nn.Linear(128, 128), nn.Sequential(nn.Linear(128, 64), nn.Linear(64, 128)))
    convert_to_fp8(model, Float8BlockScaling(), exclude=("1.1",))
    assert isinstance(model[0], Fp8Linear) and isinstance(model[1][0], Fp8Linear)
    assert type(model[1][1]) is nn.Linear
    with pytest.raises(ValueError, match=r"argument 'exclude' names \['head'\].*'0', '1.0'"):
        convert_to_fp8(nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Linear(8, 8))), exclude=("head",))


def test_small_regression_trains_in_fp8_like_float32():
    rng = np.random.default_rng(4)
    x = oarlock.to_tensor(rng.standard_normal([256, 128]).astype(np.float32))
    target = oarlock.to_tensor(np.tanh(rng.standard_normal([256, 128]) @ rng.standard_normal([128, 128]) / 11)
                               .astype(np.float32))
    losses = {}
    for name, recipe in (("fp32", None), ("block", Float8BlockScaling()), ("delayed", DelayedScaling())):
        oarlock.seed(5)
        model = convert_to_fp8(nn.Sequential(nn.Linear(128, 256), nn.Tanh(), nn.Linear(256, 128)), recipe)
        opt = oarlock.optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
        for _ in range(40):
            loss = ((model(x) - target) ** 2).mean()
            loss.backward()
            opt.step()
            opt.clear_grad()
        losses[name] = float(loss)
        assert model[0].weight.dtype == oarlock.float32                    # float32 master weights
    first = float((target ** 2).mean())
    assert losses["fp32"] < 0.5 * first                                   # it learned
    for name in ("block", "delayed"):
        assert abs(losses[name] - losses["fp32"]) < 0.05 * losses["fp32"], losses


def test_bad_recipes_are_refused_clearly():
    with pytest.raises(ValueError, match=r"DelayedScaling\(\): argument 'amax_compute_algo' = 'mean'"):
        DelayedScaling(amax_compute_algo="mean")
    with pytest.raises(ValueError, match=r"Float8BlockScaling\(\): argument 'fp8_format' = 'E5M2'"):
        Float8BlockScaling(fp8_format="E5M2")
    with pytest.raises(ValueError, match=r"DelayedScaling\(\): argument 'amax_history_len' = 0"):
        DelayedScaling(amax_history_len=0)
    with pytest.raises(TypeError, match=r"fp8_autocast\(\): argument 'recipe' is a str"):
        with fp8_autocast(recipe="blockwise"):
            pass
    with pytest.raises(TypeError, match=r"convert_to_fp8\(\): argument 'recipe' is a str"):
        convert_to_fp8(nn.Linear(2, 2), "delayed")
