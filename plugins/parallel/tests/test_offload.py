"""Activation offload (fleet.utils.offload), recompute's offload_indices and the adaptive memory planner.

Oracles: the same program without offload or recompute (identical values and gradients: the copies are exact),
the device and host memory counters (numpy's allocator, counted in C), and array sizes computed with numpy."""

import gc

import numpy as np
import pytest

import oarlock
from oarlock.distributed.fleet.utils import recompute
from oarlock.distributed.fleet.utils.offload import ActivationOffload, MemoryPlanner, to_host
from oarlock_train.model import GPT, GPTConfig

RNG = np.random.default_rng(7)
X = RNG.standard_normal((256, 32)).astype("float32")


def _mlp():
    oarlock.seed(3)
    return oarlock.nn.Sequential(oarlock.nn.Linear(32, 128), oarlock.nn.GELU(), oarlock.nn.Dropout(0.2),
                                 oarlock.nn.Linear(128, 32))


def _run(model, mode):
    """Forward under `mode`, then the device and host bytes the graph holds, then backward; returns those and
    the gradients. The input h = 2x is dropped by the caller's frame, so only what the graph keeps holds it."""
    oarlock.seed(11)      # the dropout mask
    x = oarlock.to_tensor(X, stop_gradient=False)
    gc.collect()
    device, host = oarlock.device.memory_allocated(), oarlock.device.host_memory_allocated()
    h = x * 2.0
    if mode == "plain":
        y = model(h)
    elif mode == "offload":
        with ActivationOffload(min_bytes=1024) as offload:
            y = model(h)
        assert offload.tensors_offloaded > 0 and offload.seconds_to_host > 0
    elif mode == "recompute":
        y = recompute(model, h)
    else:
        y = recompute(model, h, offload_indices=[0])
    del h
    gc.collect()
    held = (oarlock.device.memory_allocated() - device, oarlock.device.host_memory_allocated() - host)
    y.sum().backward()
    grads = [x.grad.numpy()] + [p.grad.numpy().copy() for p in model.parameters()]
    model.clear_gradients()
    return held, grads


def test_offload_and_recompute_keep_values_and_move_memory():
    model = _mlp()
    plain, plain_grads = _run(model, "plain")
    results = {mode: _run(model, mode) for mode in ("offload", "recompute", "recompute_offload")}
    for mode, (_, grads) in results.items():
        for g, ref in zip(grads, plain_grads):
            np.testing.assert_array_equal(g, ref, err_msg=mode)
    out_bytes = X.nbytes                       # y itself (256 x 32 float32) is held in every mode
    hidden = 256 * 128 * 4
    # plain keeps h, the two hidden activations (linear out, gelu out) and the dropout's kept mask and output
    assert plain[0] >= out_bytes + X.nbytes + 3 * hidden
    off = results["offload"][0]
    assert off[0] <= out_bytes + 1024 and off[1] >= X.nbytes + 3 * hidden   # activations moved to the host pool
    rc, rc_off = results["recompute"][0], results["recompute_offload"][0]
    # only the block's input h (and the saved random states: numpy's is a 2.5 KB array)
    assert out_bytes + X.nbytes <= rc[0] < out_bytes + X.nbytes + 4096 and rc[1] == 0
    assert out_bytes <= rc_off[0] < out_bytes + 4096 and rc_off[1] == X.nbytes   # h now in the host pool


def test_offload_indices_errors_and_host_copy():
    model = _mlp()
    x = oarlock.to_tensor(X, stop_gradient=False)
    with pytest.raises(ValueError, match=r"offload_indices \[3\] name no positional argument; the function gets 1"):
        recompute(model, x, offload_indices=[3])
    with pytest.raises(TypeError, match="offload_indices must be a list of argument positions"):
        recompute(model, x, offload_indices="0")
    with pytest.raises(ValueError, match="should not contain a tuple of tensors"):
        recompute(lambda pair: pair[0] * pair[1], (x, x), offload_indices=[0])
    copy = to_host(x)
    assert copy.nbytes == X.nbytes
    back = copy.to_device()
    np.testing.assert_array_equal(back.numpy(), X)
    assert back.stop_gradient is False and copy.to_device() is back   # one reload serves every reader
    with pytest.raises(ValueError, match="min_bytes must be an int >= 0; got -1"):
        ActivationOffload(min_bytes=-1)


CFG = GPTConfig(vocab_size=256, width=64, layers=4, heads=4, max_seq_len=32)
TOKENS = np.random.default_rng(0).integers(0, 256, (4, 33))


def _train(steps, budget=None, policy=None):
    """AdamW on the GPT; from step 1 on, a MemoryPlanner fitted to `budget` (or every block under `policy`).
    Returns the losses, the peak device memory of steps 1.. and the planner."""
    oarlock.seed(0)
    model = GPT(CFG)
    opt = oarlock.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    x, y = oarlock.to_tensor(TOKENS[:, :-1]), oarlock.to_tensor(TOKENS[:, 1:])

    def forward_backward():
        loss = oarlock.nn.functional.cross_entropy(model(x).reshape([-1, CFG.vocab_size]), y.reshape([-1]))
        loss.backward()
        return loss

    losses, planner, peak = [], None, None
    for step in range(steps):
        if step == 1:
            if budget is not None or policy is not None:
                planner = MemoryPlanner(list(model.blocks), budget or 10**12, optimizer=opt,
                                        parameters=model.parameters())
                planner.fit(forward_backward) if policy is None else planner.apply([policy] * CFG.layers)
            gc.collect()
            oarlock.device.reset_max_memory_allocated()
        losses.append(float(forward_backward()))
        opt.step()
        opt.clear_grad()
        peak = oarlock.device.max_memory_allocated()
    return losses, peak, planner


def test_planner_meets_half_the_peak_with_identical_losses():
    # what the process already holds (arrays cached by earlier tests, e.g. flashmask's scratch) is no part of this
    # GPT's peak: the budget is half of the peak above it
    gc.collect()
    held = oarlock.device.memory_allocated()
    losses, peak, _ = _train(3)
    budget = held + (peak - held) // 2
    planned, planned_peak, planner = _train(3, budget=budget)
    assert planned == losses                      # bit for bit: recompute and offload are exact
    assert planned_peak <= budget < peak
    report = planner.report()
    assert report["unconstrained_peak"] > budget and report["measured_peak"] <= budget
    assert set(report["policies"]) <= {"keep", "recompute", "offload"} and report["policies"] != ["keep"] * 4
    # the planner's measurements are the model's: recompute-everything and offload-everything lower the peak
    profile = planner.profile
    assert profile["recompute"]["peak"] < profile["keep"]["peak"] > profile["offload"]["peak"]
    assert profile["keep"]["peak"] == peak
    with pytest.raises(ValueError, match="cannot be met"):
        MemoryPlanner(list(GPT(CFG).blocks), 1000).plan(10**12, profile)
    planner.remove()


def test_planner_arguments():
    blocks = list(GPT(CFG).blocks)
    with pytest.raises(ValueError, match=r"MemoryPlanner\(\): budget: expected a positive number of bytes .* "
                                         r"got '12 apples'"):
        MemoryPlanner(blocks, "12 apples")
    assert MemoryPlanner(blocks, "1.5MiB").budget == 1572864 and MemoryPlanner(blocks, "200MB").budget == 200 * 10**6
    with pytest.raises(TypeError, match="layers must be a non-empty list of nn.Layer"):
        MemoryPlanner([], 100)
    with pytest.raises(ValueError, match=r"policies must be 4 of \('keep', 'recompute', 'offload'\); got \['fast'"):
        MemoryPlanner(blocks, 100).apply(["fast"] * 4)
