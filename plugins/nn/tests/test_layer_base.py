"""nn.Layer, nn.Parameter and the containers: registration, traversal, state dicts, modes, hooks."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.nn as nn


class Net(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.blocks = nn.LayerList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.scale = self.create_parameter([8], default_initializer=nn.initializer.Constant(2.0))
        self.register_buffer("steps", oarlock.zeros([1]))
        self.register_buffer("cache", oarlock.zeros([3]), persistable=False)

    def forward(self, x):
        h = self.act(self.fc1(x))
        for block in self.blocks:
            h = block(h)
        return h * self.scale


def test_parameters_sublayers_and_buffers_are_tracked():
    net = Net()
    names = [name for name, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                     "blocks.1.bias"]
    assert len(net.parameters()) == 7 and all(isinstance(p, nn.Parameter) for p in net.parameters())
    assert not isinstance(oarlock.ones([1]), nn.Parameter)
    assert [n for n, _ in net.named_sublayers()] == ["fc1", "act", "blocks", "blocks.0", "blocks.1"]
    assert [type(c).__name__ for c in net.children()] == ["Linear", "ReLU", "LayerList"]
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert net.scale.tolist() == [2.0] * 8 and not net.scale.stop_gradient


def test_state_dict_keys_follow_attribute_paths_and_skip_non_persistable_buffers():
    keys = list(Net().state_dict())
    assert keys == ["scale", "steps", "fc1.weight", "fc1.bias", "blocks.0.weight", "blocks.0.bias",
                    "blocks.1.weight", "blocks.1.bias"]


def test_state_dict_keys_match_paddle():
    paddle = pytest.importorskip("paddle")

    class PaddleNet(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = paddle.nn.Linear(4, 8)
            self.blocks = paddle.nn.LayerList([paddle.nn.Linear(8, 8), paddle.nn.Linear(8, 8)])
            self.norm = paddle.nn.LayerNorm(8)

    class OurNet(nn.Layer):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(4, 8)
            self.blocks = nn.LayerList([nn.Linear(8, 8), nn.Linear(8, 8)])
            self.norm = nn.LayerNorm(8)

    theirs = {k: list(v.shape) for k, v in PaddleNet().state_dict().items()}
    ours = {k: v.shape for k, v in OurNet().state_dict().items()}
    assert ours == theirs


def test_set_state_dict_round_trip_and_errors():
    src, dst = Net(), Net()
    state = {k: v.numpy() + 1.0 for k, v in src.state_dict().items()}
    missing, unexpected = dst.set_state_dict(state)
    assert missing == [] and unexpected == []
    np.testing.assert_array_equal(dst.fc1.weight.numpy(), state["fc1.weight"])
    bad = dict(state)
    bad["fc1.weight"] = np.zeros((8, 4), np.float32)
    with pytest.raises(ValueError, match=r"Net.set_state_dict\(\): shape mismatches \[fc1.weight: checkpoint "
                                         r"\[8, 4\] vs layer \[4, 8\]\]"):
        dst.set_state_dict(bad)
    partial = {k: v for k, v in state.items() if k != "scale"}
    partial["extra"] = np.zeros(1)
    with pytest.raises(ValueError, match=r"missing keys \['scale'\], unexpected keys \['extra'\]"):
        dst.load_state_dict(partial)
    assert dst.set_state_dict(partial, strict=False) == (["scale"], ["extra"])


def test_state_dict_survives_save_and_load(tmp_path):
    net = Net()
    for suffix in (".pdparams", ".safetensors"):
        path = tmp_path / f"net{suffix}"
        oarlock.save(net.state_dict(), str(path))
        fresh = Net()
        fresh.set_state_dict(oarlock.load(str(path)))
        for (k, a), b in zip(net.state_dict().items(), fresh.state_dict().values()):
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=f"{suffix} {k}")


def test_train_eval_and_dropout():
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    assert net.training and net[1].training
    net.eval()
    assert not net.training and not net[1].training
    x = oarlock.ones([2, 4])
    np.testing.assert_array_equal(net(x).numpy(), net[0](x).numpy())
    net.train()
    assert net[1].training


def test_forward_hooks_can_replace_inputs_and_outputs():
    layer = nn.Linear(2, 2, bias_attr=False)
    layer.weight.set_value(np.eye(2, dtype=np.float32))
    pre = layer.register_forward_pre_hook(lambda lyr, inputs: (inputs[0] * 2,))
    post = layer.register_forward_post_hook(lambda lyr, inputs, out: out + 1)
    assert layer(oarlock.ones([1, 2])).tolist() == [[3.0, 3.0]]
    pre.remove()
    post.remove()
    assert layer(oarlock.ones([1, 2])).tolist() == [[1.0, 1.0]]


def test_apply_to_and_clear_gradients():
    net = Net()
    seen = []
    net.apply(lambda layer: seen.append(type(layer).__name__))
    assert seen[-1] == "Net" and seen.count("Linear") == 3
    net.to(dtype="float64")
    assert all(p.dtype == oarlock.float64 for p in net.parameters())
    out = net(oarlock.ones([1, 4], dtype="float64")).sum()
    out.backward()
    assert net.fc1.weight.grad is not None
    net.clear_gradients()
    assert net.fc1.weight.grad is None or not net.fc1.weight.grad.numpy().any()


def test_gradients_reach_every_parameter_and_match_a_float64_reference():
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)).to(dtype="float64")
    x = np.random.default_rng(0).standard_normal((4, 3))
    loss = (net(oarlock.to_tensor(x)) ** 2).sum()
    loss.backward()
    w1, b1, w2, b2 = (p.numpy() for p in net.parameters())
    h = np.tanh(x @ w1 + b1)
    y = h @ w2 + b2
    gy = 2 * y
    gh = gy @ w2.T * (1 - h ** 2)
    expected = [x.T @ gh, gh.sum(0), h.T @ gy, gy.sum(0)]
    for p, e in zip(net.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), e, rtol=1e-10)


def test_containers():
    seq = nn.Sequential(("a", nn.ReLU()), ("b", nn.Tanh()))
    assert isinstance(seq["a"], nn.ReLU) and len(seq) == 2 and isinstance(seq[1:][0], nn.Tanh)
    layers = nn.LayerList([nn.ReLU()])
    layers.append(nn.Tanh())
    layers.insert(0, nn.Sigmoid())
    assert [type(x).__name__ for x in layers] == ["Sigmoid", "ReLU", "Tanh"]
    d = nn.LayerDict({"x": nn.ReLU()})
    d["y"] = nn.Tanh()
    assert list(d.keys()) == ["x", "y"] and "y" in d
    plist = nn.ParameterList([nn.Parameter(oarlock.ones([2]))])
    assert len(plist) == 1 and isinstance(plist[0], nn.Parameter)
    with pytest.raises(TypeError, match="ParameterList.append"):
        plist.append(oarlock.ones([2]))
    assert nn.Module is nn.Layer and nn.ModuleList is nn.LayerList


def test_container_growth_slicing_and_empty_slots_match_paddle():
    """Sequential.append/extend, a subclass's slice keeping its class, LayerDict.update from another LayerDict,
    an empty (None) sublayer slot, and an out-of-range LayerList index: each against Paddle 3.2."""
    paddle = pytest.importorskip("paddle")

    def observe(lib):
        class Stack(lib.nn.LayerList):
            pass

        seq = lib.nn.Sequential(lib.nn.ReLU()).append(lib.nn.Tanh())
        seq.extend([lib.nn.Sigmoid()])
        stack = Stack([lib.nn.ReLU(), lib.nn.Tanh(), lib.nn.Sigmoid()])
        merged = lib.nn.LayerDict({"a": lib.nn.ReLU()})
        merged.update(lib.nn.LayerDict({"b": lib.nn.Tanh()}))
        holder = lib.nn.Layer()
        holder.add_sublayer("slot", None)
        try:
            stack[3]
            raised = None
        except IndexError:
            raised = "IndexError"
        return ([type(x).__name__ for x in seq], list(seq._sub_layers), type(stack[1:]).__name__, len(stack[1:]),
                type(stack[-1]).__name__, list(merged.keys()), holder.slot, raised)

    assert observe(oarlock) == observe(paddle)
    with pytest.raises(IndexError, match=r"LayerList: index 3 is out of range for 1 layers"):
        nn.LayerList([nn.ReLU()])[3]


def test_parameter_constructor_and_flags():
    p = nn.Parameter(np.ones(3, np.float32))
    assert isinstance(p, nn.Parameter) and not p.stop_gradient and p.persistable and p.trainable
    frozen = nn.Parameter(oarlock.ones([2]), requires_grad=False)
    assert frozen.stop_gradient and not frozen.trainable


def test_layer_assignment_before_init_is_a_clear_error():
    class Broken(nn.Layer):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(RuntimeError, match=r"Broken: call super\(\).__init__\(\) before assigning sublayer 'fc'"):
        Broken()


def test_dropout_with_p_zero_returns_its_input_as_paddle_does():
    x = oarlock.ones([2, 3])
    x.stop_gradient = False
    layer = oarlock.nn.Dropout(0.0)
    assert layer(x) is x   # paddle.nn.Dropout(0.0)(x) is x too (paddle.nn.functional.dropout's fast return)
    assert oarlock.nn.Dropout(0.5)(x) is not x


def test_a_layer_or_parameter_replaces_a_plain_attribute_of_its_name_as_in_paddle():
    """`self.x = None` then `self.x = Linear(...)`: the sublayer must not stay shadowed by the instance attribute;
    and None assigned to a sublayer empties its slot. Checked against Paddle 3.2 doing the same."""
    paddle = pytest.importorskip("paddle")

    def build(lib):
        class Net(lib.nn.Layer):
            def __init__(self):
                super().__init__()
                self.fc = None
                self.fc = lib.nn.Linear(2, 3)
                self.scale = 1.0
                self.scale = self.create_parameter([3])

        return Net()

    def observe(net):
        seen = {"fc": type(net.fc).__name__, "scale": list(net.scale.shape), "in_dict": sorted(
            k for k in ("fc", "scale") if k in net.__dict__), "keys": sorted(net.state_dict())}
        net.fc = None
        seen["emptied"] = (net.fc, list(net._sub_layers), sorted(net.state_dict()))
        return seen

    ours, theirs = observe(build(oarlock)), observe(build(paddle))
    assert ours == theirs
    assert ours["in_dict"] == [] and ours["fc"] == "Linear"
