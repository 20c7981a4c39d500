"""A FlexCheckpoint saved under dp2 x mp2 (model.sharded_state_dict() and the optimizer's
sharded_state_dict, AdamW moments and step counts included) loads under mp4, sharding 4 and one process
bit for bit, and training resumes with the losses of an uninterrupted run: a real 4-rank job under
`oarlock launch` (tests/scripts/roundtrip_job.py, mode "parallel"), then one plain process on the same
checkpoint (mode "single"). One pytest test per check reports the failures of every rank.
"""

from __future__ import annotations

import pytest
from parallel_jobs import assert_check_passed, job_report, launch_command, launch_report, load_job

pytest.importorskip("mpi4py")

job = load_job("roundtrip_job")


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("roundtrip")
    parallel = launch_report("roundtrip_job", folder / "parallel.json", "parallel", folder, ranks=4, timeout=400)
    single = ({"failures": {name: ["the 4-rank job saved no checkpoint"] for name in job.CHECKS["single"]}}
              if not (folder / "saved.npz").exists() else
              job_report(launch_command("roundtrip_job", "single", folder, folder / "single.json", ranks=None),
                         folder / "single.json", "the one-process load", timeout=400))
    return {"failures": {**parallel["failures"], **single["failures"]}}


@pytest.mark.parametrize("check", job.CHECKS["parallel"] + job.CHECKS["single"])
def test_roundtrip(reports, check):
    assert_check_passed(reports, check)


def test_optimizer_sharded_state_dict_in_one_process():
    """A fresh optimizer gets a zero state to load into; moments are its own tensors; the linked step
    tensor follows the optimizer's steps, and a value written into it (what an in-place load does) becomes
    the step count; float32 masters of multi_precision are `.w_0`; bad arguments name the function."""
    import numpy as np

    import oarlock
    model = oarlock.nn.Sequential(oarlock.nn.Linear(3, 4), oarlock.nn.Linear(4, 2))
    opt = oarlock.optimizer.AdamW(learning_rate=0.01, parameters=model.parameters())
    msd = model.sharded_state_dict()
    osd = opt.sharded_state_dict(msd)
    assert sorted(osd) == sorted(f"{k}.{s}" for k in msd for s in ("moment1_0", "moment2_0", "step"))
    first = model.parameters()[0]
    assert osd["0.weight.moment1_0"].local_tensor is opt._state[id(first)]["moment1"]
    assert osd["0.weight.moment1_0"].global_shape == msd["0.weight"].global_shape == (3, 4)
    assert osd["0.weight.step"].local_tensor.numpy().tolist() == [0]
    model(oarlock.ones([2, 3])).sum().backward()
    opt.step()
    assert osd["0.weight.step"].local_tensor.numpy().tolist() == [1]     # the linked tensor follows
    osd["0.weight.step"].local_tensor.set_value(oarlock.to_tensor([7], dtype="int64"))   # as a load writes
    steps = {k: v for k, v in opt.state_dict().items() if k.endswith("_step")}
    assert steps["param_0_step"] == 7 and steps["param_1_step"] == 1, steps
    with pytest.raises(KeyError, match=r"AdamW.sharded_state_dict\(\): the parameter 'param_2' \(shape \[4, 2\]\) "
                                       r"is not in model_sharded_state_dict"):
        opt.sharded_state_dict({k: v for k, v in msd.items() if not k.startswith("1.")})
    with pytest.raises(TypeError, match=r"model_sharded_state_dict must be the dict model.sharded_state_dict\(\) "
                                        r"returns, got list"):
        opt.sharded_state_dict([])
    with pytest.raises(TypeError, match=r"model_sharded_state_dict\['x'\] must be a ShardedWeight, got Tensor"):
        opt.sharded_state_dict({"x": oarlock.ones([1])})

    half = oarlock.nn.Linear(2, 2)
    half.astype("float16")
    mixed = oarlock.optimizer.AdamW(learning_rate=0.01, parameters=half.parameters(), multi_precision=True)
    state = mixed.sharded_state_dict(half.sharded_state_dict())
    master = state["weight.w_0"]
    assert master.local_tensor.dtype.name == "float32" and master.global_shape == (2, 2)
    np.testing.assert_array_equal(master.local_tensor.numpy(), half.weight.numpy().astype("float32"))


def test_model_sharded_state_dict_through_wrappers_and_containers():
    """Layer.sharded_state_dict recurses into sublayers (persistable buffers included), and DataParallel
    forwards it without a prefix. (Tensor-parallel layers nested in a plain model giving their own shards:
    hybrid_job's sharded_state_dicts check, on 2 and 4 ranks.)"""
    import oarlock

    class Net(oarlock.nn.Layer):
        def __init__(self):
            super().__init__()
            self.blocks = oarlock.nn.LayerList([oarlock.nn.Linear(2, 4), oarlock.nn.LayerNorm(4)])
            self.register_buffer("scale", oarlock.ones([1]))
            self.register_buffer("scratch", oarlock.ones([1]), persistable=False)

    net = Net()
    state = oarlock.DataParallel(net).sharded_state_dict("m.")
    assert sorted(state) == ["m.blocks.0.bias", "m.blocks.0.weight", "m.blocks.1.bias", "m.blocks.1.weight",
                             "m.scale"]
    assert state["m.blocks.0.weight"].local_tensor is net.blocks[0].weight
    assert state["m.blocks.0.weight"].global_shape == (2, 4)


def test_model_sharded_state_dict_gives_a_shared_sublayer_once():
    """A sublayer reached under two names is given once, under its first name, as state_dict() gives it
    (twice would save the same tensor twice and leave the optimizer's keys to whichever came last)."""
    import oarlock

    class Net(oarlock.nn.Layer):
        def __init__(self):
            super().__init__()
            self.a = oarlock.nn.Linear(2, 2)
            self.b = self.a
            self.deep = oarlock.nn.Sequential(oarlock.nn.Linear(2, 2), self.a)

    net = Net()
    state = net.sharded_state_dict()
    assert sorted(state) == sorted(net.state_dict()) == ["a.bias", "a.weight", "deep.0.bias", "deep.0.weight"]
