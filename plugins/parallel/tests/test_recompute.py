"""fleet's recompute (and fleet.utils.recompute, recompute_sequential, PipelineLayer's recompute_interval):
values and gradients equal those of running the function directly, with dropout drawing the same masks
(the generator states are restored for the second run); against real Paddle 3.2's own recompute with the
same weights (no dropout, whose random streams differ between frameworks)."""

import random

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock.distributed.fleet.meta_parallel import LayerDesc, PipelineLayer, SharedLayerDesc
from oarlock.distributed.fleet.recompute import recompute_sequential
from oarlock.distributed.fleet.recompute.recompute import recompute, switch_rng_state_tracker
from oarlock.distributed.fleet.utils import recompute as utils_recompute


class Block(nn.Layer):
    def __init__(self, width=6, p=0.3):
        super().__init__()
        self.fc1, self.fc2, self.p = nn.Linear(width, width), nn.Linear(width, width), p

    def forward(self, x, scale=1.0, bias=None):
        h = F.dropout(F.gelu(self.fc1(x)), self.p, training=True)
        out = self.fc2(h) * scale
        return out if bias is None else out + bias


def _grads(layer, *tensors):
    return [p.grad.numpy().copy() for p in layer.parameters()] + [t.grad.numpy().copy() for t in tensors]


def _leaf(array):
    t = oarlock.to_tensor(array)
    t.stop_gradient = False
    return t


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_recompute_equals_direct_call_with_dropout(use_reentrant):
    oarlock.seed(0)
    block = Block()
    x = np.random.default_rng(0).standard_normal([4, 6]).astype("float32")
    bias = np.random.default_rng(1).standard_normal([6]).astype("float32")
    results = []

    def fn(x, s, b):
        return block(x, s, bias=b)
    for mode in ("direct", "recompute"):
        block.clear_gradients()
        xs, bs = _leaf(x), _leaf(bias)
        oarlock.seed(7)
        if mode == "direct":
            out = fn(xs, 0.5, bs)
        else:
            out = recompute(fn, xs, 0.5, b=bs, use_reentrant=use_reentrant)
        (out * out).sum().backward()
        results.append((out.numpy(), _grads(block, xs, bs)))
    np.testing.assert_array_equal(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert np.abs(results[1][1][0]).sum() > 0


def test_recompute_keeps_outer_generator_state_and_restores():
    """The backward rerun draws the forward's masks, and leaves the caller's generators where they were."""
    block = Block()
    x = _leaf(np.ones([3, 6], dtype="float32"))
    oarlock.seed(3)
    out = utils_recompute(block, x)
    after_forward = oarlock.rand([4]).numpy()
    oarlock.seed(3)
    block(x)
    np.testing.assert_array_equal(oarlock.rand([4]).numpy(), after_forward)  # forward drew as a direct call
    state, np_state, py_state = oarlock.get_rng_state(), np.random.get_state(), random.getstate()
    expected = oarlock.rand([4]).numpy()
    oarlock.set_rng_state(state)
    out.sum().backward()                                   # reruns the block under the forward's states
    np.testing.assert_array_equal(oarlock.rand([4]).numpy(), expected)
    assert np.random.get_state()[1].tolist() == np_state[1].tolist() and random.getstate() == py_state


def test_recompute_matches_real_paddle_recompute(paddle):
    from paddle.distributed.fleet.utils import recompute as paddle_recompute
    rng = np.random.default_rng(2)
    w1, w2 = rng.standard_normal([6, 6]).astype("float32"), rng.standard_normal([6, 6]).astype("float32")
    x = rng.standard_normal([5, 6]).astype("float32")

    def run(fw, rec):
        l1, l2 = fw.nn.Linear(6, 6), fw.nn.Linear(6, 6)
        for layer, w in ((l1, w1), (l2, w2)):
            layer.weight.set_value(fw.to_tensor(w))
        seq = fw.nn.Sequential(l1, fw.nn.Tanh(), l2)
        xs = fw.to_tensor(x)
        xs.stop_gradient = False
        out = rec(seq, xs)
        (out ** 2).mean().backward()
        return [out.numpy(), xs.grad.numpy()] + [p.grad.numpy() for p in seq.parameters()]

    want, got = run(paddle, paddle_recompute), run(oarlock, recompute)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_recompute_tuple_argument_and_no_grad():
    lin = nn.Linear(3, 3)
    a, b = _leaf(np.ones([2, 3], "float32")), _leaf(np.full([2, 3], 2.0, "float32"))
    out = recompute(lambda pair: lin(pair[0]) * pair[1], (a, b))
    out.sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), lin(a).detach().numpy(), rtol=1e-6)
    with oarlock.no_grad():
        assert recompute(lin, a).stop_gradient     # no graph: a plain call
    with pytest.raises(ValueError, match="mixes tensors and other values"):
        recompute(lambda pair: pair[0], (a, 1))


def test_recompute_reentrant_refuses_keyword_only():
    def fn(x, *, k):
        return x * k
    with pytest.raises(ValueError, match="keyword-only arguments are not supported with use_reentrant=True"):
        recompute(fn, _leaf(np.ones([2], "float32")), k=2.0)
    out = recompute(fn, _leaf(np.ones([2], "float32")), k=2.0, use_reentrant=False)
    assert out.numpy().tolist() == [2.0, 2.0]


def test_recompute_sequential_matches_direct():
    oarlock.seed(0)
    seq = nn.Sequential(*[Block(p=0.0) for _ in range(4)])
    x = np.random.default_rng(3).standard_normal([2, 6]).astype("float32")
    runs = []
    for rec in (False, True):
        seq.clear_gradients()
        xs = _leaf(x)
        out = recompute_sequential({"segments": 2}, seq, xs) if rec else seq(xs)
        out.sum().backward()
        runs.append([out.numpy()] + _grads(seq, xs))
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_switch_rng_state_tracker_restores():
    oarlock.seed(11)
    saved = oarlock.get_rng_state()
    first = oarlock.rand([3]).numpy()
    with switch_rng_state_tracker(saved, {}, np.random.get_state(), random.getstate()):
        np.testing.assert_array_equal(oarlock.rand([3]).numpy(), first)
    second = oarlock.rand([3]).numpy()
    assert not np.array_equal(first, second)


class Embed(nn.Layer):
    def __init__(self):
        super().__init__()
        self.weight = self.create_parameter([10, 6])

    def forward(self, ids):
        return F.embedding(ids, self.weight)


def _head(embed, h):
    return oarlock.matmul(h, embed.weight, transpose_y=True)


@pytest.mark.parametrize("interval", [0, 1])
def test_pipeline_layer_one_stage_shares_and_recomputes(interval):
    descs = [SharedLayerDesc("embed", Embed), LayerDesc(Block, p=0.0), LayerDesc(Block, p=0.0),
             SharedLayerDesc("embed", Embed, forward_func=_head)]
    model = PipelineLayer(descs, num_stages=1, recompute_interval=interval,
                          recompute_ctx={"preserve_rng_state": True} if interval else None)
    assert len(model.parameters()) == 1 + 2 * 4            # the shared embedding counted once
    ids = oarlock.to_tensor([[1, 2, 3], [4, 5, 6]])
    out = model(ids)
    embed, b1, b2 = model.shared_layers["embed"], model.run_function[1], model.run_function[2]
    want = _head(embed, b2(b1(embed(ids))))
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-6)
    out.sum().backward()
    assert embed.weight.grad is not None and np.abs(embed.weight.grad.numpy()).sum() > 0


def test_pipeline_layer_checks_its_stages():
    # several stages without a topology need a world they divide (one process here); the multi-stage runs are
    # the MPI jobs of test_pipeline.py
    with pytest.raises(ValueError, match="num_stages=2 must divide the world size"):
        PipelineLayer([LayerDesc(Block), LayerDesc(Block)], num_stages=2)
    with pytest.raises(TypeError, match="'layer_func' must be a subclass of Layer"):
        LayerDesc(lambda: None)
