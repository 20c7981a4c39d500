"""MoE gates, routing kernels, MoELayer and ClipGradForMOEByGlobalNorm in one process, against float64
numpy transcriptions of Paddle 3.2's gate code (incubate/distributed/models/moe/gate/*.py, utils.py), the
examples in the docstrings of Paddle's routing kernels, and finite differences. Paddle's routing kernels
are CUDA-only, so Paddle itself is no oracle here."""

from __future__ import annotations

import math

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.incubate.distributed.models.moe import (ClipGradForMOEByGlobalNorm, GShardGate, MoELayer, NaiveGate,
                                                     SwitchGate)
from oarlock_parallel import moe_routing

D, E = 6, 4


# -- numpy transcriptions of Paddle's gate code ---------------------------------------------------------

def np_top(scores: np.ndarray, k: int) -> tuple:
    idx = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, idx, axis=1), idx


def np_prune(idx: np.ndarray, capacity: int, experts: int) -> np.ndarray:
    """limit_by_capacity with one worker: each expert keeps its first `capacity` slots in flat order."""
    out, taken = idx.copy().reshape(-1), np.zeros(experts, dtype=int)
    for i, e in enumerate(out):
        if e >= 0:
            taken[e] += 1
            if taken[e] > capacity:
                out[i] = -1
    return out.reshape(idx.shape)


def np_softmax(a: np.ndarray) -> np.ndarray:
    z = np.exp(a - a.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def gate_weights(gate) -> tuple:
    return gate.gate.weight.numpy().astype(np.float64), gate.gate.bias.numpy().astype(np.float64)


def tokens(n: int, seed: int = 0, skew: float = 0.0):
    x = np.random.default_rng(seed).standard_normal((n, D)).astype("float32")
    x[:, 0] += skew                    # pushes most tokens to the same experts: capacity binds
    return x


def replayed_rand(seed: int, shape: list) -> np.ndarray:
    """The numbers the gate drew after oarlock.seed(seed)."""
    oarlock.seed(seed)
    return oarlock.rand(shape, dtype="float32").numpy().astype(np.float64)


# -- routing kernels: the examples of Paddle's docstrings -------------------------------------------------

def test_routing_kernels_match_paddle_docstrings():
    numbers = oarlock.to_tensor([[0, 2], [0, 2]], dtype="int64")
    assert moe_routing.number_count(numbers, 6).tolist() == [2, 0, 2, 0, 0, 0]
    cum = np.cumsum([2, 0, 2, 0])
    assert moe_routing.assign_pos(numbers, cum).tolist() == [2, 0, 3, 1]
    limited = moe_routing.limit_by_capacity_kernel([1, 2, 2, 8, 3, 6], [5, 5, 5], 2)
    assert limited.tolist() == [1, 2, 2, 4, 3, 3]


def test_prune_and_random_routing_semantics():
    idx = np.random.default_rng(3).integers(0, E, size=(12, 2))
    counts = np.array([2, 5, 0, 3])
    pruned = moe_routing.prune_gate_by_capacity(idx, counts, E, 1).numpy()
    for e in range(E):               # each expert keeps exactly its first min(count, capacity) slots
        slots = np.flatnonzero(idx.reshape(-1) == e)
        kept = slots[: min(counts[e], slots.size)]
        assert np.array_equal(np.flatnonzero(pruned.reshape(-1) == e), kept)
    assert ((pruned == idx) | (pruned == -1)).all()
    value = oarlock.to_tensor(np.array([[0.9, 0.3], [0.8, 0.1], [0.5, 0.45]], dtype="float32"))
    prob = oarlock.to_tensor(np.array([0.5, 0.5, 0.95], dtype="float32"))
    routed = moe_routing.random_routing(np.array([[1, 2], [3, 0], [2, 1]]), value, prob).tolist()
    assert routed == [[1, 2], [3, -1], [2, -1]]     # dropped when 2 * value[:, 1] < prob


# -- gates ---------------------------------------------------------------------------------------------------

def test_naive_gate_matches_numpy():
    gate = NaiveGate(D, 2, 2, topk=3)
    x = tokens(9)
    val, idx, scores = gate(oarlock.to_tensor(x), return_all_scores=True)
    w, b = gate_weights(gate)
    want_val, want_idx = np_top(x @ w + b, 3)
    np.testing.assert_allclose(scores.numpy(), x @ w + b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(idx.numpy(), want_idx)
    np.testing.assert_allclose(val.numpy(), want_val, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("training", [True, False])
def test_gshard_gate_matches_numpy(training):
    gate = GShardGate(D, E, 1, capacity=(0.3, 0.45))
    gate.train() if training else gate.eval()
    x = tokens(10, seed=1, skew=2.0)
    oarlock.seed(11)
    val, idx = gate(oarlock.to_tensor(x))
    w, b = gate_weights(gate)
    scores = x @ w + b
    want_val, want_idx = np_top(scores, 2)
    c_e = np.bincount(want_idx.reshape(-1), minlength=E) / x.shape[0]
    m_e = np_softmax(scores).mean(axis=0)
    np.testing.assert_allclose(float(gate.get_loss()), np.mean(c_e * m_e) * E ** 2, rtol=1e-5)
    assert gate.get_loss() is None                       # get_loss(clear=True) cleared it
    capacity = math.ceil((0.3 if training else 0.45) * x.shape[0])
    want_idx = np_prune(want_idx, capacity, E)
    prob = replayed_rand(11, [x.shape[0]])
    want_idx[2 * want_val[:, 1] < prob, 1] = -1
    np.testing.assert_array_equal(idx.numpy(), want_idx)
    np.testing.assert_allclose(val.numpy(), want_val, rtol=1e-5, atol=1e-6)
    assert (idx.numpy() == -1).sum() > 0


def test_gshard_aux_loss_gradient_matches_finite_differences():
    gate = GShardGate(D, E, 1, random_routing=False)
    x = tokens(8, seed=2)
    gate(oarlock.to_tensor(x))
    gate.get_loss().backward()
    w, b = gate_weights(gate)
    c_e = np.bincount(np_top(x @ w + b, 2)[1].reshape(-1), minlength=E) / x.shape[0]   # constant, as Paddle's

    def aux(wv):
        return np.mean(c_e * np_softmax(x @ wv + b).mean(axis=0)) * E ** 2
    numeric = np.zeros_like(w)
    for i in np.ndindex(*w.shape):
        step = np.zeros_like(w)
        step[i] = 1e-6
        numeric[i] = (aux(w + step) - aux(w - step)) / 2e-6
    np.testing.assert_allclose(gate.gate.weight.grad.numpy(), numeric, rtol=1e-3, atol=1e-6)


def test_switch_gate_matches_numpy():
    gate = SwitchGate(D, E, 1, switch_eps=0.1, capacity=(0.4, 0.8))
    x = tokens(10, seed=3, skew=1.5)
    oarlock.seed(5)
    score, idx = gate(oarlock.to_tensor(x))
    w, b = gate_weights(gate)
    noise = replayed_rand(5, [10, E]) * 2 * 0.1 + 1.0 - 0.1
    prob = np_softmax(x @ w + b + noise)
    want_score, want_idx = np_top(prob, 1)
    want_idx = np_prune(want_idx, math.ceil(0.4 * 10), E)
    np.testing.assert_array_equal(idx.numpy(), want_idx)
    np.testing.assert_allclose(score.numpy(), want_score, rtol=1e-5, atol=1e-6)
    valid = want_idx[want_idx > -1]
    fraction = np.bincount(valid, minlength=E) / valid.size
    want_loss = (fraction * prob.sum(axis=0) / valid.size).sum() * E
    np.testing.assert_allclose(float(gate.get_loss()), want_loss, rtol=1e-5)


# -- MoELayer ------------------------------------------------------------------------------------------------

class Expert(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(D, 5), nn.Linear(5, D)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def np_expert(expert, x):
    w1, b1, w2, b2 = (p.numpy().astype(np.float64) for p in (expert.fc1.weight, expert.fc1.bias,
                                                              expert.fc2.weight, expert.fc2.bias))
    return np.maximum(x @ w1 + b1, 0) @ w2 + b2


def np_moe(layer, x, idx):
    """Paddle's combine: sum over the kept slots of the raw gate value times the expert's output."""
    w, b = gate_weights(layer.gate)
    val = np.take_along_axis(x @ w + b, np.maximum(idx, 0), axis=1)
    out = np.zeros_like(x)
    for slot in range(idx.shape[1]):
        for e, expert in enumerate(layer.experts):
            rows = idx[:, slot] == e
            out[rows] += val[rows, slot:slot + 1] * np_expert(expert, x[rows])
    return out


@pytest.mark.parametrize("gate", [{"type": "naive", "top_k": 2}, {"type": "gshard", "top_k": 2}])
def test_moe_layer_matches_numpy_and_finite_differences(gate):
    layer = MoELayer(D, nn.LayerList([Expert() for _ in range(E)]), gate=gate)
    decisions = []
    layer.gate.register_forward_post_hook(lambda _, inputs, output: decisions.append(output[1].numpy()))
    x = tokens(12, seed=4, skew=1.0).reshape(3, 4, D)
    xt = oarlock.to_tensor(x)
    xt.stop_gradient = False
    coef = np.random.default_rng(9).standard_normal(x.shape)
    out = layer(xt)
    (out * oarlock.to_tensor(coef.astype("float32"))).sum().backward()
    idx, flat = decisions[0], x.reshape(-1, D).astype(np.float64)
    np.testing.assert_allclose(out.numpy().reshape(-1, D), np_moe(layer, flat, idx), rtol=1e-4, atol=1e-5)
    numeric = np.zeros_like(flat)          # d sum(out * coef) / dx, routing held fixed
    for i in np.ndindex(*flat.shape):
        step = np.zeros_like(flat)
        step[i] = 1e-6
        numeric[i] = ((np_moe(layer, flat + step, idx) - np_moe(layer, flat - step, idx)) * coef.reshape(-1, D)
                      ).sum() / 2e-6
    np.testing.assert_allclose(xt.grad.numpy().reshape(-1, D), numeric, rtol=1e-3, atol=1e-4)
    if gate["type"] == "gshard":
        assert layer.gate.get_loss() is not None


def test_moe_layer_recompute_gives_the_same_gradients():
    grads = []
    for interval in (0, 1):
        oarlock.seed(3)
        experts = nn.LayerList([Expert() for _ in range(E)])
        layer = MoELayer(D, experts, gate={"type": "naive"}, recompute_interval=interval)
        xt = oarlock.to_tensor(tokens(8, seed=6).reshape(2, 4, D))
        xt.stop_gradient = False
        layer(xt).sum().backward()
        grads.append([xt.grad.numpy()] + [p.grad.numpy() for p in experts.parameters() if p.grad is not None])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# -- clip ------------------------------------------------------------------------------------------------------

def test_clip_without_moe_group_is_the_global_norm_clip():
    params = [nn.Linear(3, 2).weight, nn.Linear(2, 4).weight]
    grads = [np.random.default_rng(i).standard_normal(p.shape) for i, p in enumerate(params)]
    pairs = [(p, oarlock.to_tensor(g.astype("float32"))) for p, g in zip(params, grads)]
    ClipGradForMOEByGlobalNorm(1.5)(pairs)
    norm = math.sqrt(sum((g ** 2).sum() for g in grads))
    for (_, got), g in zip(pairs, grads):
        np.testing.assert_allclose(got.numpy(), g * 1.5 / max(norm, 1.5), rtol=1e-5)


# -- bad input -------------------------------------------------------------------------------------------------

class TwoRanks:
    """Stands for a moe group of two ranks in the checks that raise before any communication."""
    nranks, rank = 2, 0


@pytest.mark.parametrize("make, kind, parts", [
    (lambda: MoELayer(D, [Expert()]), TypeError, ["MoELayer()", "nn.LayerList", "list"]),
    (lambda: MoELayer(D, nn.LayerList([Expert()]), gate={"type": "naive", "top_k": 3}), ValueError,
     ["topk=3", "1 experts"]),
    (lambda: MoELayer(D, nn.LayerList([Expert()]), gate={"type": "top"}), ValueError, ["gate type", "'top'"]),
    (lambda: MoELayer(D, nn.LayerList([Expert()]), gate=NaiveGate(D + 1, 1, 1, topk=1)), ValueError,
     ["d_model=7", f"d_model={D}"]),
    (lambda: MoELayer(D, nn.LayerList([Expert()]), gate=NaiveGate(D, 2, 1)), ValueError,
     ["2 experts x 1 ranks", "1 experts x 1 ranks"]),
    (lambda: MoELayer(0, nn.LayerList([Expert()])), ValueError, ["d_model", "0"]),
    (lambda: GShardGate(D, E, 1, capacity=(0.0, 1.0)), ValueError, ["GShardGate()", "capacity", "0.0"]),
    (lambda: GShardGate(D, E, 1, capacity=(1.2,)), ValueError, ["GShardGate()", "(train, eval)"]),
    (lambda: SwitchGate(D, E, 1, capacity=(-1, 1)), ValueError, ["SwitchGate()", "capacity"]),
    (lambda: GShardGate(D, E, 1, topk=3), ValueError, ["GShardGate()", "topk must be 2", "3"]),
    (lambda: GShardGate(D, 1, 1), ValueError, ["topk=2", "1 experts"]),
    (lambda: ClipGradForMOEByGlobalNorm(1.0, moe_group=TwoRanks()), ValueError, ["is_expert_param_func", "2 ranks"]),
    (lambda: GShardGate(D, E, 2), ValueError, ["GShardGate()", "world_size=2 needs group", "None"]),
    (lambda: SwitchGate(D, E, 4, group=TwoRanks()), ValueError, ["SwitchGate()", "a group of 2 ranks"]),
    (lambda: MoELayer(D, nn.LayerList([Expert()]), gate={"type": "switch", "top_k": 1, "batch_group": "all"}),
     TypeError, ["SwitchGate()", "batch_group must be an oarlock.distributed Group", "got str"]),
])
def test_bad_input_errors(make, kind, parts):
    with pytest.raises(kind) as error:
        make()
    for part in parts:
        assert part in str(error.value)


@pytest.mark.parametrize("kind, k", [("gshard", 2), ("switch", 1)])
def test_moe_layer_passes_the_whole_batch_options_to_its_gate(kind, k):
    """gate={..., "global_aux": True} reaches the gate; in one process (no group) the whole batch is the
    process's, so the aux loss is the one Paddle's local gate computes."""
    losses = []
    for global_aux in (False, True):
        oarlock.seed(5)
        layer = MoELayer(D, nn.LayerList([Expert() for _ in range(E)]),
                         gate={"type": kind, "top_k": k, "global_aux": global_aux})
        assert layer.gate.global_aux is global_aux and layer.gate.tokens_group is None
        oarlock.seed(6)
        layer(oarlock.to_tensor(tokens(12, seed=2).reshape(2, 6, D)))
        losses.append(float(layer.gate.get_loss()))
    assert losses[0] == losses[1] > 0


def test_bad_forward_input_errors():
    layer = MoELayer(D, nn.LayerList([Expert(), Expert()]))
    with pytest.raises(ValueError, match=r"MoELayer.forward\(\).*d_model=6.*\[2, 4, 5\]"):
        layer(oarlock.zeros([2, 4, 5]))
    with pytest.raises(ValueError, match=r"MoELayer.forward\(\).*\[8, 6\]"):
        layer(oarlock.zeros([8, D]))
    with pytest.raises(ValueError, match=r"GShardGate.forward\(\).*d_model=6.*\[3, 2\]"):
        layer.gate(oarlock.zeros([3, 2]))


def test_fleet_leaves_the_moe_clip_as_it_is():
    """wrap_clip (used by fleet.distributed_optimizer and sharding) would turn a global-norm clip into
    HybridParallelClipGrad, dropping the moe-group sum of the expert norms: the MoE clip is kept."""
    from oarlock.incubate.distributed.models.moe import ClipGradForMOEByGlobalNorm
    from oarlock_parallel.clip import HybridParallelClipGrad, wrap_clip
    moe_clip = ClipGradForMOEByGlobalNorm(1.0)
    assert wrap_clip(moe_clip) is moe_clip
    assert isinstance(wrap_clip(oarlock.nn.ClipGradByGlobalNorm(1.0)), HybridParallelClipGrad)
