"""oarlock.amp: auto_cast (O1 policies, custom lists, nesting, O2/OD), decorate (low-precision parameters,
float32 norms, master weights), GradScaler (skipped steps, Paddle's scale rule checked against torch's
GradScaler where they agree) and the error messages. Values are checked against float64 numpy on the
bfloat16-rounded inputs; Paddle's CPU build turns AMP off, so Paddle serves only for the names."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import oarlock
from oarlock import dispatch
from oarlock_nn.amp.autocast import LAST

amp = oarlock.amp
F = oarlock.nn.functional
BF16_EPS = 2.0 ** -8  # bfloat16 keeps 8 significant bits: one rounding is within half of this, relatively


@pytest.fixture(autouse=True)
def _fresh_amp_state():
    """GradScaler reads the dtype of the last auto_cast block (global, as in Paddle): isolate the tests."""
    saved = LAST.dtype
    LAST.dtype = None
    yield
    LAST.dtype = saved
    assert not dispatch.AUTOCAST.enabled, "a test left autocast on"


def bf(a):
    """a rounded to bfloat16, as float64."""
    return np.asarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def f64(t):
    return t.numpy().astype(np.float64)


def _linear(seed=0, n_in=16, n_out=8):
    oarlock.seed(seed)
    return oarlock.nn.Linear(n_in, n_out)


def _x(shape=(5, 16), seed=1):
    return oarlock.to_tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# -- O1 ------------------------------------------------------------------------------------------------------------

def test_o1_bfloat16_linear_computes_in_bfloat16_and_softmax_in_float32():
    lin, x = _linear(), _x()
    with amp.auto_cast(dtype="bfloat16"):
        y = lin(x)
        p = F.softmax(y, axis=-1)
    assert y.dtype == oarlock.bfloat16 and p.dtype == oarlock.float32
    xb, wb, bb = bf(x.numpy()), bf(lin.weight.numpy()), bf(lin.bias.numpy())
    ref = xb @ wb + bb
    # two roundings to bfloat16 (the float32-accumulated product, then the bias add)
    bound = BF16_EPS * (np.abs(xb) @ np.abs(wb) + np.abs(bb))
    assert np.all(np.abs(f64(y) - ref) <= bound)
    e = np.exp(f64(y) - f64(y).max(-1, keepdims=True))
    np.testing.assert_allclose(f64(p), e / e.sum(-1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_o1_gradients_reach_float32_parameters_in_float32():
    lin, x = _linear(), _x()
    c = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    with amp.auto_cast(dtype="bfloat16"):
        y = lin(x)
        loss = (y * oarlock.to_tensor(c)).sum()  # bfloat16 * float32 promotes to float32
    assert loss.dtype == oarlock.float32
    loss.backward()
    assert lin.weight.dtype == lin.weight.grad.dtype == oarlock.float32
    assert lin.bias.grad.dtype == oarlock.float32
    xb, cb = bf(x.numpy()), bf(c)  # the output gradient reaches the bfloat16 linear as bfloat16
    ref_w = xb.T @ cb
    assert np.all(np.abs(f64(lin.weight.grad) - ref_w) <= BF16_EPS * (np.abs(xb).T @ np.abs(cb)))
    ref_b = cb.sum(0)
    assert np.all(np.abs(f64(lin.bias.grad) - ref_b) <= 2 * BF16_EPS * np.abs(cb).sum(0))


def test_o1_matches_torch_cpu_autocast_for_linear():
    torch = pytest.importorskip("torch")
    lin, x = _linear(), _x()
    with amp.auto_cast(dtype="bfloat16"):
        ours = lin(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        theirs = torch.nn.functional.linear(torch.tensor(x.numpy()), torch.tensor(lin.weight.numpy().T),
                                            torch.tensor(lin.bias.numpy()))
    assert theirs.dtype == torch.bfloat16 and ours.dtype == oarlock.bfloat16
    np.testing.assert_allclose(f64(ours), theirs.double().numpy(), rtol=2 * BF16_EPS, atol=1e-2)


def test_custom_lists_override_the_op_policies():
    lin, x = _linear(), _x()
    with amp.auto_cast(dtype="bfloat16", custom_black_list=["linear"]):
        assert lin(x).dtype == oarlock.float32
    with amp.auto_cast(dtype="bfloat16", custom_white_list=["nn.functional.softmax"]):
        assert F.softmax(x).dtype == oarlock.bfloat16
    with amp.auto_cast(dtype="float16", custom_white_list={"oarlock.nn.functional.softmax"}):
        assert F.softmax(x).dtype == oarlock.float16
    w = oarlock.to_tensor(np.ones((16, 4), np.float32))
    with amp.auto_cast(dtype="bfloat16", custom_black_list={"matmul_v2"}):  # Paddle's operator name
        assert oarlock.matmul(x, w).dtype == oarlock.float32
    with amp.auto_cast(dtype="bfloat16", custom_white_list=["elementwise_add"]):
        assert (x + x).dtype == oarlock.bfloat16


def test_o2_and_od_levels():
    x = _x()
    half = x.astype("bfloat16")
    with amp.auto_cast(level="O2", dtype="bfloat16"):  # use_promote: float32 wins in ops outside the lists
        assert (half + x).dtype == oarlock.float32
        assert (half + half).dtype == oarlock.bfloat16
    with amp.auto_cast(level="O2", dtype="bfloat16", use_promote=False):
        assert (half + x).dtype == oarlock.bfloat16
        assert F.softmax(x).dtype == oarlock.float32  # black stays float32
    lin = _linear()
    with amp.auto_cast(level="od", dtype="bfloat16"):
        y = lin(x)
        assert y.dtype == oarlock.bfloat16 and F.relu(y).dtype == oarlock.float32


def test_nested_blocks_restore_the_outer_state_also_on_exceptions():
    lin, x = _linear(), _x()
    assert not oarlock.is_autocast_enabled() and oarlock.get_autocast_gpu_dtype() == "float16"
    with amp.auto_cast(dtype="bfloat16"):
        assert oarlock.is_autocast_enabled() and amp.get_autocast_dtype() == "bfloat16"
        with amp.auto_cast(enable=False):
            assert not oarlock.is_autocast_enabled() and lin(x).dtype == oarlock.float32
        assert lin(x).dtype == oarlock.bfloat16
        with pytest.raises(KeyError):
            with amp.auto_cast(dtype="float16", custom_black_list=["linear"]):
                assert oarlock.get_autocast_dtype() == "float16" and lin(x).dtype == oarlock.float32
                raise KeyError("inside")
        assert oarlock.get_autocast_cpu_dtype() == "bfloat16" and lin(x).dtype == oarlock.bfloat16
    assert not oarlock.is_autocast_enabled() and lin(x).dtype == oarlock.float32


def test_decorator_and_torch_spellings():
    lin, x = _linear(), _x()

    @amp.auto_cast(dtype="bfloat16")
    def forward(depth):
        return forward(depth - 1) if depth else (lin(x).dtype, oarlock.is_autocast_enabled())

    assert forward(2) == (oarlock.bfloat16, True)
    assert not oarlock.is_autocast_enabled()
    with oarlock.autocast("cpu"):  # torch's default for the CPU
        assert lin(x).dtype == oarlock.bfloat16
    with amp.autocast("cuda"):
        assert lin(x).dtype == oarlock.float16
    with amp.autocast("cuda", enabled=False):
        assert lin(x).dtype == oarlock.float32
    with amp.amp_guard(dtype="bfloat16"):
        assert oarlock.is_autocast_enabled()


def test_autocast_off_costs_nothing_per_op(monkeypatch):
    """With autocast off no autocast code runs on the call path, and the fast path serves again."""
    with amp.auto_cast(dtype="bfloat16"):
        pass

    def boom(*args):
        raise AssertionError("autocast ran with autocast off")

    monkeypatch.setattr(dispatch, "_autocast", boom)
    a, b = _x(), _x(seed=3)
    oarlock.add(a, b)
    oarlock.add(a, b)
    assert oarlock.add.opdef.fast, "the fast path was not refilled after the auto_cast block"
    _linear()(a)


def test_op_lists_and_namespaces():
    assert "matmul" in amp.white_list()["bfloat16"]["O1"]
    assert "layer_norm" in amp.black_list()["float16"]["O1"] and not amp.black_list()["float16"]["OD"]
    assert amp.is_bfloat16_supported() and amp.is_float16_supported("cpu")
    paddle = pytest.importorskip("paddle")
    missing = [n for n in paddle.amp.__all__ if not hasattr(amp, n)]
    assert not missing, missing
    top = ["is_autocast_enabled", "get_autocast_dtype", "get_autocast_cpu_dtype", "get_autocast_gpu_dtype"]
    assert all(hasattr(paddle, n) and hasattr(oarlock, n) for n in top)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"level": "O3"}, ValueError, r"auto_cast\(\): level must be one of 'O0', 'O1', 'O2', 'OD'.*got 'O3'"),
    ({"dtype": "float32"}, ValueError, r"auto_cast\(\): dtype must be 'float16' or 'bfloat16'.*got 'float32'"),
    ({"enable": "yes"}, TypeError, r"argument 'enable' must be a bool, got str 'yes'"),
    ({"custom_white_list": ["not_an_op"]}, ValueError, r"unknown op name 'not_an_op'.*registry name"),
    ({"custom_black_list": ["softmx"]}, ValueError, r"did you mean 'softmax'"),
    ({"custom_white_list": "matmul"}, TypeError, r"must be a list or set of op names, got the str 'matmul'"),
    ({"custom_white_list": ["cast"]}, ValueError, r"op 'cast' cannot be listed"),
    ({"custom_white_list": ["matmul"], "custom_black_list": ["matmul"]}, ValueError, r"in both"),
])
def test_auto_cast_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        amp.auto_cast(**kwargs)
    assert not oarlock.is_autocast_enabled()


# -- decorate / O2 ---------------------------------------------------------------------------------------------

def _model(seed=0):
    oarlock.seed(seed)
    nn = oarlock.nn
    return nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1D(32), nn.ReLU(), nn.Linear(32, 32), nn.LayerNorm(32),
                         nn.ReLU(), nn.Linear(32, 4))


def _data(seed=5):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((8, 4))).astype(np.float32)
    return oarlock.to_tensor(x), oarlock.to_tensor(y)


def test_decorate_o2_keeps_norms_float32_and_trains_with_master_weights():
    model = _model()
    opt = oarlock.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())
    model, opt = amp.decorate(model, opt, level="O2", dtype="bfloat16")
    dtypes = {name: t.dtype.name for name, t in model.state_dict().items()}
    assert {dtypes[f"{i}.{p}"] for i in (0, 3, 6) for p in ("weight", "bias")} == {"bfloat16"}
    assert {dtypes[k] for k in ("1.weight", "1.bias", "1._mean", "1._variance", "4.weight", "4.bias")} == {"float32"}
    assert opt._multi_precision
    x, y = _data()
    losses = []
    for _ in range(40):
        with amp.auto_cast(level="O2", dtype="bfloat16"):
            loss = F.mse_loss(model(x), y)
        assert loss.dtype == oarlock.float32
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0], losses
    state = opt.state_dict()
    first = model[0].weight
    master = state["master_weights"][opt._keys[id(first)]]
    assert first.dtype == oarlock.bfloat16 and master.dtype == oarlock.float32
    assert state[f"{opt._keys[id(first)]}_moment1_0"].dtype == oarlock.float32
    np.testing.assert_array_equal(first.numpy(), master.numpy().astype(ml_dtypes.bfloat16))
    assert model[1].weight.dtype == oarlock.float32  # float32 parameters get no master
    assert opt._keys[id(model[1].weight)] not in state["master_weights"]


def test_decorate_o2_float16_with_grad_scaler_trains():
    model = _model(seed=1)
    opt = oarlock.optimizer.Adam(learning_rate=0.01, parameters=model.parameters())
    model, opt = amp.decorate(models=model, optimizers=opt, level="O2")
    scaler = amp.GradScaler(init_loss_scaling=1024)
    x, y = _data()
    losses = []
    for _ in range(40):
        with amp.auto_cast(level="O2"):
            loss = F.mse_loss(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(opt, scaled)
        opt.clear_grad()
        losses.append(loss.item())
    assert scaler.is_enable() and model[0].weight.dtype == oarlock.float16
    assert losses[-1] < 0.3 * losses[0], losses


def test_master_weights_keep_updates_that_bfloat16_would_round_away():
    def run(multi_precision):
        p = oarlock.nn.Parameter(oarlock.ones([4], dtype="bfloat16"))
        opt = oarlock.optimizer.SGD(learning_rate=1.0, parameters=[p], multi_precision=multi_precision)
        for _ in range(10):
            p.grad = oarlock.full([4], 1e-3, dtype="bfloat16")
            opt.step()
        return p, opt

    p, opt = run(False)
    np.testing.assert_array_equal(f64(p), 1.0)  # 1 - 0.001 rounds back to 1 in bfloat16
    p, opt = run(True)
    master = opt.state_dict()["master_weights"][opt._keys[id(p)]]
    grad = np.float32(np.float32(1e-3).astype(ml_dtypes.bfloat16))
    expected = np.float32(1.0)
    for _ in range(10):
        expected = np.float32(expected - grad)
    np.testing.assert_array_equal(master.numpy(), expected)
    np.testing.assert_array_equal(p.numpy(), expected.astype(ml_dtypes.bfloat16))
    # the masters travel with the optimizer's state
    q = oarlock.nn.Parameter(oarlock.ones([4], dtype="bfloat16"))
    q.name = p.name
    fresh = oarlock.optimizer.SGD(learning_rate=1.0, parameters=[q], multi_precision=True)
    fresh.set_state_dict(opt.state_dict())
    np.testing.assert_array_equal(fresh.state_dict()["master_weights"][fresh._keys[id(q)]].numpy(), expected)


def test_decorate_options():
    model = _model()
    assert amp.decorate(model, level="O1") is model
    kept = amp.decorate([model], level="O2", dtype="bfloat16", excluded_layers=[model[3]])
    assert kept == [model]
    assert model[0].weight.dtype == oarlock.bfloat16 and model[3].weight.dtype == oarlock.float32
    model = _model()
    amp.decorate(model, level="O2", dtype="float16", excluded_layers=oarlock.nn.Linear, save_dtype="float32")
    assert model[0].weight.dtype == oarlock.float32
    model = _model()
    amp.decorate(model, level="O2", save_dtype="float32")
    assert model[0].weight.dtype == oarlock.float16
    assert {t.dtype.name for t in model.state_dict().values()} == {"float32"}
    assert model.state_dict(use_hook=False)["0.weight"].dtype == oarlock.float16
    opt = oarlock.optimizer.SGD(0.1, parameters=model.parameters())
    assert amp.decorate(model, [opt], level="O2", master_weight=False)[1] == [opt] and not opt._multi_precision


@pytest.mark.parametrize("kwargs, error, match", [
    ({"level": "O3"}, ValueError, r"decorate\(\): level must be 'O1'.*or 'O2'.*got 'O3'"),
    ({"level": "O2", "dtype": "int8"}, ValueError, r"decorate\(\): dtype must be 'float16' or 'bfloat16'"),
    ({"level": "O2", "models": "net"}, TypeError, r"argument 'models' must be an oarlock.nn.Layer.*got str"),
    ({"level": "O2", "optimizers": 3}, TypeError, r"argument 'optimizers' must be an oarlock.optimizer.Optimizer"),
    ({"level": "O2", "save_dtype": "int32"}, ValueError, r"save_dtype must be None or one of"),
    ({"level": "O2", "excluded_layers": [3]}, TypeError, r"excluded_layers' must be a Layer"),
])
def test_decorate_errors(kwargs, error, match):
    kwargs = {"models": _model(), **kwargs}
    with pytest.raises(error, match=match):
        amp.decorate(**kwargs)


# -- GradScaler ----------------------------------------------------------------------------------------------------

X = np.random.default_rng(7).standard_normal((6, 3)).astype(np.float32)


def _scaled_backward(lin, scaler, inf=False):
    loss = lin(oarlock.to_tensor(X)).sum()
    scaler.scale(loss).backward()
    if inf:
        g = lin.weight.grad.numpy().copy()
        g[0, 0] = np.inf
        lin.weight.grad.set_value(g)


def test_grad_scaler_skips_the_step_on_inf_and_halves_the_scale():
    lin = _linear(n_in=3, n_out=2)
    opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=lin.parameters())
    scaler = amp.GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=2)
    before = [p.numpy().copy() for p in lin.parameters()]
    _scaled_backward(lin, scaler, inf=True)
    assert scaler.step(opt) is None
    scaler.update()
    for p, b in zip(lin.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), b)
    assert scaler.get_scale() == 512.0 and scaler.get_loss_scaling().shape == [1]
    opt.clear_grad()
    # a good step uses the unscaled gradient: d sum(x W + b) / dW = x^T 1
    _scaled_backward(lin, scaler)
    scaler.step(opt)
    scaler.update()
    np.testing.assert_allclose(lin.weight.numpy(), before[0] - 0.1 * X.T @ np.ones((6, 2)), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(lin.bias.numpy(), before[1] - 0.1 * 6, rtol=1e-6)
    assert scaler.get_scale() == 512.0
    opt.clear_grad()
    _scaled_backward(lin, scaler)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1024.0  # raised after incr_every_n_steps = 2 good steps


def _paddle_rule(pattern, scale, incr_ratio, decr_ratio, incr_every, decr_every):
    """The scale after each step under Paddle's AmpScaler._update (see grad_scaler's module notes)."""
    good = bad = 0
    out = []
    for found_inf in pattern:
        if found_inf:
            good, bad = 0, bad + 1
            if bad == decr_every:
                scale, bad = scale * decr_ratio, 0
        else:
            good, bad = good + 1, 0
            if good == incr_every:
                scale, good = scale * incr_ratio, 0
        out.append(scale)
    return out


PATTERN = [False, False, True, False, False, False, True, True, False, True, False, False]


def _our_scales(pattern, **kwargs):
    lin = _linear(n_in=3, n_out=2)
    opt = oarlock.optimizer.SGD(learning_rate=0.01, parameters=lin.parameters())
    scaler = amp.GradScaler(init_loss_scaling=256.0, **kwargs)
    scales = []
    for found_inf in pattern:
        _scaled_backward(lin, scaler, inf=found_inf)
        scaler.step(opt)
        scaler.update()
        opt.clear_grad()
        scales.append(scaler.get_scale())
    return scales


def test_scale_sequence_matches_paddle_rule_and_torch():
    torch = pytest.importorskip("torch")
    ours = _our_scales(PATTERN, incr_ratio=3.0, decr_ratio=0.25, incr_every_n_steps=2)
    assert ours == _paddle_rule(PATTERN, 256.0, 3.0, 0.25, 2, 1)
    w = torch.nn.Parameter(torch.ones(3, 2))
    opt = torch.optim.SGD([w], lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_factor=3.0, backoff_factor=0.25, growth_interval=2)
    theirs = []
    for found_inf in PATTERN:
        scaler.scale((torch.tensor(X) @ w).sum()).backward()
        if found_inf:
            with torch.no_grad():
                w.grad[0, 0] = float("inf")
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        theirs.append(scaler.get_scale())
    assert ours == theirs


def test_decrease_every_n_nan_or_inf_follows_paddle():
    ours = _our_scales(PATTERN, incr_every_n_steps=3, decr_every_n_nan_or_inf=2)
    assert ours == _paddle_rule(PATTERN, 256.0, 2.0, 0.5, 3, 2)


def test_unscale_then_clip_and_the_call_order_errors():
    lin = _linear(n_in=3, n_out=2)
    opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=lin.parameters())
    scaler = amp.GradScaler(init_loss_scaling=64.0)
    _scaled_backward(lin, scaler)
    scaler.unscale_(opt)
    np.testing.assert_allclose(lin.weight.grad.numpy(), X.T @ np.ones((6, 2)), rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"unscale_\(\): already called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"step\(\): already called"):
        scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"unscale_\(\): called after step\(\)"):
        scaler.unscale_(opt)
    scaler.update()
    scaler.update(new_scale=8.0)
    assert scaler.get_scale() == 8.0


def test_scaler_state_dict_paddle_and_torch_layouts():
    scaler = amp.GradScaler(init_loss_scaling=128.0, incr_every_n_steps=5)
    state = scaler.state_dict()
    assert set(state) == {"scale", "incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf",
                          "incr_count", "decr_count", "use_dynamic_loss_scaling"}
    assert state["scale"].dtype == np.float32 and state["scale"].tolist() == [128.0]
    other = amp.GradScaler()
    other.load_state_dict(state)
    assert other.get_scale() == 128.0 and other.get_incr_every_n_steps() == 5
    other.load_state_dict({"scale": 32.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 7,
                           "_growth_tracker": 3})
    assert (other.get_scale(), other.get_incr_ratio(), other.get_decr_ratio(), other.get_incr_every_n_steps(),
            other._incr_count) == (32.0, 4.0, 0.25, 7, 3)
    off = amp.GradScaler(enable=False)
    assert off.state_dict() == {} and not off.is_enable()
    loss = oarlock.to_tensor(2.0)
    assert off.scale(loss) is loss


def test_scaler_turns_off_after_bfloat16_autocast_as_paddle():
    scaler = amp.GradScaler()
    lin = _linear(n_in=3, n_out=2)
    with amp.auto_cast(dtype="bfloat16"):
        loss = lin(oarlock.to_tensor(X)).sum()
    with pytest.warns(UserWarning, match="not needed for bfloat16"):
        assert scaler.scale(loss) is loss
    assert not scaler.is_enable() and scaler.get_scale() == 1.0


@pytest.mark.parametrize("kwargs, match", [
    ({"incr_ratio": 0.5}, r"GradScaler: argument 'incr_ratio' must be a float > 1, got float 0.5"),
    ({"decr_ratio": 1.5}, r"argument 'decr_ratio' must be a float in \(0, 1\)"),
    ({"incr_every_n_steps": 0}, r"argument 'incr_every_n_steps' must be a positive int, got int 0"),
    ({"init_loss_scaling": -1.0}, r"argument 'init_loss_scaling' must be a positive finite float"),
])
def test_grad_scaler_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        amp.GradScaler(**kwargs)
