"""State dicts move between oarlock and the installed Paddle 3.2 both ways, bit for bit.

Paddle -> oarlock -> Paddle: a file paddle.save wrote, loaded by oarlock.load and saved again by
oarlock.save, is the same file byte for byte (model and AdamW state dicts with an LR scheduler and
master weights, nested containers; pickle protocols 2 to 4). oarlock -> Paddle: paddle.load of what
oarlock.save wrote for an oarlock model's and AdamW's state dicts gives what paddle.load gives for
paddle.save of the same values (same keys, types, names, dtypes and bits)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import oarlock
from same_structure import assert_same

paddle = pytest.importorskip("paddle")

PROTOCOLS = [2, 3, 4]


def _paddle_adamw_state(linear):
    """Paddle's AdamW state dict after a step with a StepDecay scheduler, plus master weights in the
    layout Optimizer.state_dict gives them (Paddle's CPU build has no float16/bfloat16 AdamW kernel to
    make them itself): {parameter name: float32 Tensor named "<name>_fp32_master_0"}."""
    scheduler = paddle.optimizer.lr.StepDecay(0.1, step_size=2)
    adamw = paddle.optimizer.AdamW(learning_rate=scheduler, parameters=linear.parameters())
    linear(paddle.randn([2, 3])).sum().backward()
    adamw.step()
    scheduler.step()
    state = adamw.state_dict()
    masters = {}
    for param in linear.parameters():
        master = param.astype("float32")
        master.name = f"{param.name}_fp32_master_0"
        masters[param.name] = master
    return state, {**state, "master_weights": masters}


@pytest.fixture(scope="module")
def paddle_objects():
    paddle.seed(0)
    linear = paddle.nn.Linear(3, 4)
    bn = paddle.nn.BatchNorm2D(3)
    bn(paddle.randn([2, 3, 4, 4]))
    adamw, with_masters = _paddle_adamw_state(linear)
    bf16 = paddle.to_tensor([1.0, -2.5, 3.0e38], dtype="bfloat16")
    bf16.name = "bf16_w"
    return {"linear.pdparams": linear.state_dict(), "bn.pdparams": bn.state_dict(), "adamw.pdopt": adamw,
            "adamw_masters.pdopt": with_masters,
            "nested.pkl": {"model": linear.state_dict(), "opt": adamw, "epoch": 3,
                           "extra": [bf16, ("tag", linear.weight), None, 2.5]},
            "tensor.pdtensor": bf16}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", ["linear.pdparams", "bn.pdparams", "adamw.pdopt", "adamw_masters.pdopt", "nested.pkl",
                                  "tensor.pdtensor"])
def test_paddle_files_saved_again_by_oarlock_are_the_same_bytes(tmp_path, paddle_objects, name, protocol):
    theirs, ours = tmp_path / f"paddle-{name}", tmp_path / f"oarlock-{name}"
    paddle.save(paddle_objects[name], str(theirs), protocol=protocol)
    oarlock.save(oarlock.load(theirs), ours, protocol=protocol)
    if name == "nested.pkl":
        # pickle writes an object met before as a reference to it: Paddle's object holds linear.weight
        # twice, what paddle.load (and oarlock.load) gives holds two equal Tensors. Compare what Paddle loads.
        _assert_same_paddle(paddle.load(str(ours)), paddle.load(str(theirs)), name)
    else:
        assert ours.read_bytes() == theirs.read_bytes()


def _paddle_tensors_same(ours, theirs, where):
    if isinstance(theirs, paddle.Tensor):
        assert isinstance(ours, paddle.Tensor), f"{where}: {type(ours).__name__}"
        assert (ours.dtype, ours.shape, ours.name) == (theirs.dtype, theirs.shape, theirs.name), where
        assert ours.numpy().tobytes() == theirs.numpy().tobytes(), where
        return True
    return False


def _assert_same_paddle(ours, theirs, where=""):
    assert_same(ours, theirs, where, _paddle_tensors_same)


def _to_paddle(obj):
    """The same values as Paddle objects: Tensors (named as ours, bfloat16 kept), containers rebuilt."""
    if isinstance(obj, oarlock.Tensor):
        array = obj.numpy()
        tensor = paddle.to_tensor(array.view(np.uint16) if obj.dtype == oarlock.bfloat16 else array)
        tensor.name = obj.name
        return tensor
    if isinstance(obj, dict):
        return type(obj)((key, _to_paddle(value)) for key, value in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_paddle(value) for value in obj)
    return obj


def _oarlock_training_state():
    """An oarlock model and AdamW (with a scheduler) after one step; every Tensor named, as Paddle names
    parameters and optimizer states."""
    oarlock.seed(0)
    linear = oarlock.nn.Linear(3, 4)
    scheduler = oarlock.optimizer.lr.StepDecay(0.1, step_size=2)
    adamw = oarlock.optimizer.AdamW(learning_rate=scheduler, parameters=linear.parameters())
    linear(oarlock.randn([2, 3])).sum().backward()
    adamw.step()
    scheduler.step()
    model, opt = linear.state_dict(), adamw.state_dict()
    for i, (key, tensor) in enumerate(list(model.items()) + [(k, v) for k, v in opt.items()
                                                             if isinstance(v, oarlock.Tensor)]):
        tensor.name = tensor.name or f"oarlock_{i}.{key}"
    model["half"] = oarlock.to_tensor([1.5, -3.25], dtype="bfloat16")
    model["half"].name = "half_0"
    return model, opt


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_oarlock_state_dicts_load_in_paddle_as_paddles_own_files(tmp_path, protocol):
    model, opt = _oarlock_training_state()
    for name, obj in {"model.pdparams": model, "opt.pdopt": opt, "both.pkl": {"model": model, "opt": opt},
                      "list.pkl": [model["weight"], model["half"], 7]}.items():
        ours, theirs = tmp_path / f"oarlock-{name}", tmp_path / f"paddle-{name}"
        oarlock.save(obj, ours, protocol=protocol)
        paddle.save(_to_paddle(obj), str(theirs), protocol=protocol)
        for options in ({}, {"return_numpy": True}, {"keep_name_table": True}):
            _assert_same_paddle(paddle.load(str(ours), **options), paddle.load(str(theirs), **options), name)
        assert ours.read_bytes() == theirs.read_bytes(), name


def test_an_oarlock_model_round_trips_through_paddle(tmp_path):
    """oarlock -> Paddle -> oarlock: the weights Paddle loads and saves again come back bit for bit, and
    the Paddle layer computes what the oarlock one does."""
    model, _ = _oarlock_training_state()
    del model["half"]
    oarlock.save(model, tmp_path / "a.pdparams")
    theirs = paddle.nn.Linear(3, 4)
    theirs.set_state_dict(paddle.load(str(tmp_path / "a.pdparams")))
    paddle.save(theirs.state_dict(), str(tmp_path / "b.pdparams"))
    back = oarlock.load(tmp_path / "b.pdparams")
    for key in model:
        assert back[key].numpy().tobytes() == model[key].numpy().tobytes()
    x = np.random.default_rng(0).standard_normal([5, 3], dtype=np.float32)
    ours = oarlock.nn.Linear(3, 4)
    ours.set_state_dict(back)
    np.testing.assert_allclose(ours(oarlock.to_tensor(x)).numpy(), theirs(paddle.to_tensor(x)).numpy(), rtol=1e-6)


def test_float8_values_keep_their_dtype_in_oarlock_layout_with_a_warning(tmp_path):
    """Paddle's layout stores float8 Tensors as int8 (paddle.load gives int8): by default such objects are
    written in oarlock's record layout, with a warning; layout="paddle" asks for Paddle's int8 form."""
    f8 = oarlock.to_tensor([0.5, -448.0]).astype("float8_e4m3fn")
    with pytest.warns(UserWarning, match="holds float8 values, which Paddle's file layout cannot hold"):
        oarlock.save({"f8": f8}, tmp_path / "a.pdparams")
    assert oarlock.load(tmp_path / "a.pdparams")["f8"].dtype == oarlock.float8_e4m3fn
    with pytest.raises(ValueError, match="`paddle.load` can not parse the file"):
        paddle.load(str(tmp_path / "a.pdparams"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        oarlock.save({"f8": f8}, tmp_path / "b.pdparams", layout="paddle")
        oarlock.save({"f8": f8}, tmp_path / "c.pdparams", layout="oarlock")
    paddle.save({"f8": paddle.to_tensor([0.5, -448.0]).astype("float8_e4m3fn")}, str(tmp_path / "p.pdparams"))
    ours, theirs = paddle.load(str(tmp_path / "b.pdparams")), paddle.load(str(tmp_path / "p.pdparams"))
    assert ours["f8"].dtype == theirs["f8"].dtype == paddle.int8
    assert ours["f8"].numpy().tobytes() == theirs["f8"].numpy().tobytes()
    assert oarlock.load(tmp_path / "b.pdparams")["f8"].dtype == oarlock.int8   # as paddle.load
    assert oarlock.load(tmp_path / "c.pdparams")["f8"].dtype == oarlock.float8_e4m3fn


def test_a_self_containing_object_saves_and_loads(tmp_path):
    looped = [1]
    looped.append(looped)
    oarlock.save({"loop": looped, "t": oarlock.ones([2])}, tmp_path / "c.pkl")
    back = oarlock.load(tmp_path / "c.pkl")
    assert back["loop"][1] is back["loop"] and back["t"].tolist() == [1.0, 1.0]


def test_bad_layout_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"save\(\): layout must be one of \['paddle', 'oarlock'\] or None .*"
                                         r"got 'torch'"):
        oarlock.save({}, tmp_path / "x.pdparams", layout="torch")


def test_safetensors_option_exchanges_state_dicts_with_paddle(tmp_path):
    """paddle.save / paddle.load's safetensors=True: a state dict as a safetensors file, both ways."""
    model, _ = _oarlock_training_state()
    oarlock.save(model, tmp_path / "ours.pdparams", safetensors=True)
    theirs = paddle.load(str(tmp_path / "ours.pdparams"), safetensors=True)
    assert sorted(theirs) == sorted(model)   # a safetensors file's order is its writer's (by dtype, then name)
    for key, tensor in model.items():
        got = theirs[key].numpy()
        assert str(theirs[key].dtype) == f"paddle.{tensor.dtype.name}", key
        assert (got.view(np.uint16) if tensor.dtype == oarlock.bfloat16 else got).tobytes() == \
            tensor.numpy().tobytes(), key
    paddle.save(_to_paddle(model), str(tmp_path / "theirs.pdparams"), safetensors=True)
    back = oarlock.load(tmp_path / "theirs.pdparams", safetensors=True)
    assert sorted(back) == sorted(model)
    oarlock.save(model, tmp_path / "m.safetensors", safetensors=True)   # the flag and the suffix agree
    assert sorted(oarlock.load(tmp_path / "m.safetensors", safetensors=True)) == sorted(model)
    with pytest.raises(ValueError, match="safetensors=False for a path the safetensors format handles"):
        oarlock.load(tmp_path / "m.safetensors", safetensors=False)
    for key, tensor in model.items():
        assert back[key].dtype == tensor.dtype and back[key].numpy().tobytes() == tensor.numpy().tobytes(), key


def test_paddles_other_save_options(tmp_path):
    with pytest.warns(DeprecationWarning, match="'pickle_protocol' is a deprecated argument"):
        oarlock.save({"w": oarlock.ones([2])}, tmp_path / "a.pdparams", pickle_protocol=2)
    assert (tmp_path / "a.pdparams").read_bytes()[:2] == b"\x80\x02"
    with pytest.raises(NotImplementedError, match=r"save\(\): use_binary_format=True writes Paddle's C\+\+ format"):
        oarlock.save(oarlock.ones([2]), tmp_path / "b.pdtensor", use_binary_format=True)
