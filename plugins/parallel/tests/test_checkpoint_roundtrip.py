"""A FlexCheckpoint saved under dp2 x mp2 (model.sharded_state_dict() and the optimizer's
sharded_state_dict, AdamW moments and step counts included) loads under mp4, sharding 4 and one process
bit for bit, and training resumes with the losses of an uninterrupted run: a real 4-rank job under
`oarlock launch` (tests/scripts/roundtrip_job.py, mode "parallel"), then one plain process on the same
checkpoint (mode "single"). One pytest test per check reports the failures of every rank.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mpi4py")

SCRIPTS = Path(__file__).parent / "scripts"
JOB = SCRIPTS / "roundtrip_job.py"
sys.path.insert(0, str(SCRIPTS))     # roundtrip_job imports hybrid_job, as it does when run as a script
_spec = importlib.util.spec_from_file_location("roundtrip_job", JOB)
job = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(job)
sys.path.remove(str(SCRIPTS))

ENV = dict(os.environ, OARLOCK_COLLECTIVE_TIMEOUT="60", PYTHONWARNINGS="ignore")


def _run(command: list, out: Path, what: str) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, env=ENV)
    assert done.returncode == 0 and out.exists(), (
        f"{what} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("roundtrip")
    parallel = _run([sys.executable, "-m", "oarlock.cli", "launch", "-n", "4", str(JOB), "parallel", str(folder),
                     str(folder / "parallel.json")], folder / "parallel.json", "the 4-rank job")
    assert parallel["size"] == 4
    single = ({"failures": {name: ["the 4-rank job saved no checkpoint"] for name in job.CHECKS["single"]}}
              if not (folder / "saved.npz").exists() else
              _run([sys.executable, str(JOB), "single", str(folder), str(folder / "single.json")],
                   folder / "single.json", "the one-process load"))
    return {**parallel["failures"], **single["failures"]}


@pytest.mark.parametrize("check", job.CHECKS["parallel"] + job.CHECKS["single"])
def test_roundtrip(reports, check):
    failures = reports[check]
    assert not failures, "\n".join(failures)


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
