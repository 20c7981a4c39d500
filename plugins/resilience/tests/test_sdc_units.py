"""SDCMonitor's parts in one process (no MPI; the multi-rank behaviour is test_sdc_mpi.py): fingerprints against
a plain-Python oracle and every single-bit flip, the majority vote, the loss-spike threshold against scipy's MAD,
fault injection (the faulty matmul against float64 numpy, the bit flip against numpy's own bit operations, the
OARLOCK_FAULT_INJECT grammar), and the monitor on a one-process group: training undisturbed bit for bit, a bit
flip and a nan caught, rollback, close(), from_env and the argument errors."""

import pickle

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed.resilience import SDCMonitor, SilentDataCorruptionError, inject_fault
from oarlock_resilience import sdc_fingerprint, sdc_guards, sdc_inject
from oarlock_resilience.sdc_replay import gradient_fingerprints, shared_batch_loss

stats = pytest.importorskip("scipy.stats", reason="scipy's median_abs_deviation is the spike threshold's oracle")


# -- fingerprints and the vote -------------------------------------------------------------------------------------
def python_weighted_words(data: bytes) -> int:
    """The device fingerprint's formula in plain Python integers: sum of little-endian 32-bit words (zero padded)
    times (index mod 2147483629 + 1), modulo 2**63."""
    data = data + b"\0" * (-len(data) % 4)
    total = sum(int.from_bytes(data[i:i + 4], "little") * (i // 4 % 2147483629 + 1) for i in range(0, len(data), 4))
    return total % (1 << 63)


@pytest.mark.parametrize("dtype,shape", [("float32", (3, 5)), ("float16", (7,)), ("float64", (2, 2)), ("int8", (5,))])
def test_device_fingerprint_matches_the_formula(dtype, shape):
    array = (np.random.default_rng(0).standard_normal(shape) * 50).astype(dtype)
    assert sdc_fingerprint.device_fingerprint(array) == python_weighted_words(array.tobytes())


@pytest.mark.parametrize("fingerprint", [sdc_fingerprint.array_fingerprint, sdc_fingerprint.device_fingerprint])
def test_every_single_bit_flip_changes_the_fingerprint(fingerprint):
    array = np.random.default_rng(1).standard_normal(6).astype("float32")
    base = fingerprint(array)
    assert fingerprint(array.copy()) == base and fingerprint(np.stack([array, array])[1]) == base
    assert fingerprint(array[::-1].copy()) != base            # same bytes, other order
    words = array.view(np.uint32)
    for index in range(array.size):
        for bit in range(32):
            flipped = words.copy()
            flipped[index] ^= np.uint32(1 << bit)
            assert fingerprint(flipped.view(np.float32)) != base, (index, bit)


def test_fingerprints_of_tensors_and_none():
    a = oarlock.to_tensor(np.arange(4, dtype="float32"))
    got = sdc_fingerprint.fingerprints([a, None])
    assert got.dtype == np.int64 and got[1] == 0 and got[0] == sdc_fingerprint.array_fingerprint(a.numpy())


@pytest.mark.parametrize("column,odd,strict", [
    ([5, 5, 5], [], True), ([5, 7, 5], [1], True), ([1, 2], [0, 1], False), ([1, 1, 2, 2], [0, 1, 2, 3], False),
    ([1, 2, 3], [0, 1, 2], False), ([4, 4, 9, 8, 4], [2, 3], True)])
def test_odd_ones(column, odd, strict):
    assert sdc_fingerprint.odd_ones(column) == (odd, strict)


# -- numeric guards ----------------------------------------------------------------------------------------------
def test_loss_spike_threshold_is_median_plus_k_mad():
    losses = 2.0 + 0.05 * np.random.default_rng(2).standard_normal(30)
    guard = sdc_guards.LossSpikeGuard(window=20, threshold=6.0, warmup=10)
    for i, loss in enumerate(losses[:9]):
        guard.accept(loss)
        assert guard.limit() is None, i                       # warm-up: nothing is a spike yet
    for loss in losses[9:]:
        guard.accept(loss)
    window = losses[-20:]
    want = np.median(window) + 6.0 * stats.median_abs_deviation(window, scale="normal")
    assert guard.limit() == pytest.approx(want, rel=1e-12)
    assert guard.verdict(want * 0.999) == (None, "")
    assert guard.verdict(want * 1.001)[0] == "loss_spike"
    assert guard.verdict(float("nan"))[0] == "nonfinite_loss" and guard.verdict(float("inf"))[0] == "nonfinite_loss"


def test_first_nonfinite():
    ok, bad = oarlock.ones([3]), oarlock.to_tensor(np.array([1.0, np.inf], "float32"))
    assert sdc_guards.first_nonfinite([ok, None, ok]) == -1
    assert sdc_guards.first_nonfinite([ok, None, bad]) == 2
    assert sdc_guards.first_nonfinite([oarlock.to_tensor(np.array([1, 2]))]) == -1   # integers are never nan
    for dtype in ("bfloat16", "float16", "float64"):
        assert sdc_guards.first_nonfinite([ok, bad.astype(dtype)]) == 1, dtype
        assert sdc_guards.first_nonfinite([ok.astype(dtype)]) == -1, dtype


# -- fault injection ------------------------------------------------------------------------------------------------
def test_faulty_matmul_perturbs_the_first_element_and_is_restored():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    want = a @ b

    def product():
        return oarlock.matmul(oarlock.to_tensor(a), oarlock.to_tensor(b)).numpy()
    np.testing.assert_allclose(product(), want, rtol=1e-12)
    with sdc_inject.FaultyMatmul(0.5):
        got = product()
        linear = F.linear(oarlock.to_tensor(a), oarlock.to_tensor(b)).numpy()
    expected = want.copy()
    expected[0, 0] += 0.5 * (1 + abs(want[0, 0]))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    np.testing.assert_allclose(linear, expected, rtol=1e-12)     # linear's kernel is a matrix product too
    np.testing.assert_allclose(product(), want, rtol=1e-12)


def test_flip_bit_matches_numpy():
    values = np.random.default_rng(4).standard_normal(5).astype("float32")
    t = oarlock.to_tensor(values.copy())
    sdc_inject.flip_bit(t, 23, 2)
    want = values.view(np.uint32).copy()
    want[2] ^= np.uint32(1 << 23)
    assert np.array_equal(t.numpy().view(np.uint32), want)
    with pytest.raises(ValueError, match="bit 40"):
        sdc_inject.flip_bit(t, 40, 0)


def test_fault_grammar():
    faults = sdc_inject.parse("bitflip:rank=1,step=5,param=0.weight,bit=3; matmul:rank=0,step=7,delta=0.5,calls=2")
    assert [(f.kind, f.rank, f.step, f.param, f.bit, f.delta, f.calls) for f in faults] == [
        ("bitflip", 1, 5, "0.weight", 3, 0.01, 0), ("matmul", 0, 7, None, 0, 0.5, 2)]
    for text, part in [("flip:rank=1,step=2", "fault kind"), ("matmul:rank=1", "needs step="),
                       ("bitflip:rank=1,step=2", "param="), ("matmul:rank=1,step=2,param=x", "takes the keys"),
                       ("matmul:rank=x,step=2", "bad value"), ("matmul:rank=1,step", "kind:key=value"),
                       ("matmul:rank=1,step=0", "step >= 1")]:
        with pytest.raises(ValueError, match=part) as info:
            sdc_inject.parse(text)
        assert "OARLOCK_FAULT_INJECT" in str(info.value)


# -- the monitor in one process -----------------------------------------------------------------------------------
def setup(dropout=0.0):
    oarlock.seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 3))
    return model, oarlock.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())


def mse(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def run(model, opt, steps, monitor=None, nan_at=None, first=1):
    oarlock.seed(1)
    for step in range(first, first + steps):
        rng = np.random.default_rng(step)
        x = rng.standard_normal((8, 6)).astype("float32")
        if step == nan_at:
            x[0, 0] = np.nan
        batch = oarlock.to_tensor(x), oarlock.to_tensor(rng.standard_normal((8, 3)).astype("float32"))
        loss = mse(model, batch)
        loss.backward()
        if monitor is not None:
            monitor.record_loss(loss, batch)
        opt.step()
        opt.clear_grad()
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def setup_batchnorm():
    oarlock.seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1D(16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 3))
    return model, oarlock.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())


@pytest.mark.parametrize("make", [lambda: setup(dropout=0.2), setup_batchnorm], ids=["dropout", "batchnorm"])
def test_monitored_training_is_bit_identical_to_unmonitored(make):
    """Replays (shared and own-batch) leave no trace: the dropout stream, BatchNorm's running statistics (moved
    by a train-mode replay, then put back) and the gradients are as without a monitor."""
    model, opt = make()
    monitor = SDCMonitor(model, opt, interval=1, replay_interval=3, loss_fn=mse)
    monitored = run(model, opt, 12, monitor)
    assert monitor.step == 12 and monitor.detections == []
    if make is setup_batchnorm:     # running statistics differ between data-parallel ranks: not compared
        assert "1.weight" in monitor.names and "1._mean" not in monitor.names
    plain = run(*make(), 12)
    assert all(np.array_equal(monitored[k], plain[k]) for k in plain)


def test_replay_leaves_gradients_and_modes_alone():
    model, _ = setup(dropout=0.2)
    model[2].eval()                                  # a sublayer the user put in eval mode stays so
    x = oarlock.to_tensor(np.random.default_rng(5).standard_normal((4, 6)).astype("float32"))
    model(x).sum().backward()
    params = model.parameters()
    grads = [p.grad for p in params]
    first = gradient_fingerprints(model, params, shared_batch_loss(model, (x,)))
    assert np.array_equal(first, gradient_fingerprints(model, params, shared_batch_loss(model, (x,))))
    assert all(p.grad is g for p, g in zip(params, grads))
    assert model.training and model[0].training and not model[2].training
    custom = gradient_fingerprints(model, params, shared_batch_loss(model, (x,), lambda m, inp: m(inp).sum()))
    model.clear_gradients()
    model.eval()
    model(x).sum().backward()
    assert np.array_equal(custom, sdc_fingerprint.fingerprints([p.grad for p in params]))


@pytest.mark.parametrize("with_loss_fn", [True, False])
def test_transient_matmul_fault_in_training_needs_the_own_batch_replay(with_loss_fn):
    """The first matrix product of step 4's training forward is wrong, and nothing after it: only the replay of
    the rank's own micro-batch against its training gradients sees it (the shared replays agree)."""
    model, opt = setup(dropout=0.2)
    with inject_fault("matmul", rank=0, step=4, calls=1):
        monitor = SDCMonitor(model, opt, replay_interval=2, loss_fn=mse if with_loss_fn else None)
    if not with_loss_fn:
        run(model, opt, 6, monitor)
        assert monitor.detections == [] and monitor.step == 6
        return
    with pytest.raises(SilentDataCorruptionError) as info:
        run(model, opt, 6, monitor)
    error = info.value
    assert (error.step, error.ranks, error.kind) == (4, [0], "replay_mismatch")
    assert "training step" in str(error)


def test_faults_from_the_environment(monkeypatch):
    monkeypatch.setenv("OARLOCK_FAULT_INJECT", "bitflip:rank=0,step=2,param=0.weight,bit=31,index=4")
    model, opt = setup()
    monitor = SDCMonitor(model, opt)
    with pytest.raises(SilentDataCorruptionError) as info:
        run(model, opt, 5, monitor)
    assert (info.value.step, info.value.parameter, info.value.kind) == (3, "0.weight", "changed_between_steps")


def test_faulty_matmul_calls_limits_the_products_hit():
    a = oarlock.to_tensor(np.eye(3))
    with sdc_inject.FaultyMatmul(1.0, calls=1):
        hit, spared = oarlock.matmul(a, a).numpy(), oarlock.matmul(a, a).numpy()
    assert hit[0, 0] == 3.0 and np.array_equal(spared, np.eye(3))


def test_bit_flip_in_one_process_is_caught_at_the_next_step():
    model, opt = setup()
    with inject_fault("bitflip", rank=0, step=4, param="3.bias", bit=12, index=1):
        monitor = SDCMonitor(model, opt)
    with pytest.raises(SilentDataCorruptionError) as info:
        run(model, opt, 10, monitor)
    error = info.value
    assert (error.step, error.ranks, error.parameter, error.kind) == (5, [0], "3.bias", "changed_between_steps")
    again = pickle.loads(pickle.dumps(error))
    assert (again.step, again.ranks, again.parameter, again.kind, str(again)) == \
           (error.step, error.ranks, error.parameter, error.kind, str(error))


def test_rollback_restores_the_last_clean_check():
    model, opt = setup()
    monitor = SDCMonitor(model, opt, on_detect="rollback")
    clean = run(model, opt, 4, monitor)
    run(model, opt, 1, monitor, nan_at=5, first=5)        # nan loss at step 5: rolled back to step 4's state
    assert [(e.step, e.ranks, e.kind) for e in monitor.detections] == [(5, [0], "nonfinite_loss")]
    now = {k: v.numpy() for k, v in model.state_dict().items()}
    assert all(np.array_equal(now[k], clean[k]) for k in clean)
    resumed = run(model, opt, 3, monitor, first=6)
    reference_model, reference_opt = setup()
    run(reference_model, reference_opt, 4)
    reference = run(reference_model, reference_opt, 3, first=6)   # the same, without step 5
    assert all(np.array_equal(resumed[k], reference[k]) for k in reference)


def test_on_detect_callable_and_check_on_demand():
    model, opt = setup()
    seen = []
    monitor = SDCMonitor(model, opt, interval=1000, on_detect=seen.append)
    run(model, opt, 2, monitor)
    assert seen == []
    model[0].weight.set_value(oarlock.full(model[0].weight.shape, float("nan")))
    monitor.check()
    assert [(e.kind, e.parameter) for e in seen] == [("nonfinite_param", "0.weight")]


def test_close_unwraps_the_optimizer():
    model, opt = setup()
    monitor = SDCMonitor(model, opt)
    assert "step" in vars(opt)
    monitor.close()
    assert "step" not in vars(opt)
    run(model, opt, 2)
    assert monitor.step == 0


def test_from_env(monkeypatch):
    model, opt = setup()
    monkeypatch.delenv("OARLOCK_SDC_CHECK", raising=False)
    assert SDCMonitor.from_env(model, opt) is None
    monkeypatch.setenv("OARLOCK_SDC_CHECK", "interval=2,replay_interval=50")
    monitor = SDCMonitor.from_env(model, opt)
    assert (monitor.interval, monitor.replay_interval) == (2, 50)
    monitor.close()
    for bad in ("often", "interval=x", "period=3"):
        monkeypatch.setenv("OARLOCK_SDC_CHECK", bad)
        with pytest.raises(ValueError, match="OARLOCK_SDC_CHECK: expected 1 or key=int pairs"):
            SDCMonitor.from_env(model, opt)


@pytest.mark.parametrize("kwargs,error,part", [
    (dict(interval=0), ValueError, "interval must be an int >= 1, got 0"),
    (dict(replay_interval=-1), ValueError, "replay_interval"),
    (dict(on_detect="ignore"), ValueError, "on_detect must be 'raise', 'rollback' or a callable, got 'ignore'"),
    (dict(spike_threshold=0), ValueError, "spike_threshold"),
    (dict(replay_fn=3), TypeError, "replay_fn must be callable"),
    (dict(loss_fn="mse"), TypeError, "loss_fn must be callable(model, batch) -> loss"),
    (dict(group=[0, 1]), TypeError, "group must be a Group"),
])
def test_bad_arguments(kwargs, error, part):
    model, opt = setup()
    with pytest.raises(error, match="SDCMonitor") as info:
        SDCMonitor(model, opt, **kwargs)
    assert part in str(info.value)


def test_bad_model_and_fault_parameter():
    with pytest.raises(TypeError, match=r"SDCMonitor\(\): model must be an oarlock.nn.Layer, got list"):
        SDCMonitor([1])
    model, opt = setup()
    with inject_fault("bitflip", rank=0, step=1, param="nope"), pytest.raises(ValueError, match="'nope'"):
        SDCMonitor(model, opt)


def test_on_detect_can_roll_back_to_a_flexcheckpoint(tmp_path):
    """The documented recipe for a checkpoint on disk: on_detect loads it (real FlexCheckpoint files)."""
    import oarlock.distributed as dist
    model, opt = setup()
    run(model, opt, 3)
    dist.save_state_dict({"model": model.state_dict(), "opt": opt.state_dict()}, str(tmp_path / "ckpt"))
    saved = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    loaded = []

    def reload(error):     # the parameters and the optimizer's moments, which the nan step spoilt too
        state = {"model": model.state_dict(), "opt": opt.state_dict()}
        dist.load_state_dict(state, str(tmp_path / "ckpt"))
        opt.set_state_dict(state["opt"])
        loaded.append(error.kind)
    monitor = SDCMonitor(model, opt, on_detect=reload)
    run(model, opt, 1, monitor, nan_at=4, first=4)
    assert loaded == ["nonfinite_loss"]
    assert all(np.array_equal(v.numpy(), saved[k]) for k, v in model.state_dict().items())
    resumed = run(model, opt, 2, monitor, first=5)  # the next checks start from the reloaded weights
    assert monitor.step == 3 and loaded == ["nonfinite_loss"]
    reference_model, reference_opt = setup()
    run(reference_model, reference_opt, 3)
    reference = run(reference_model, reference_opt, 2, first=5)
    assert all(np.array_equal(resumed[k], reference[k]) for k in reference)
