"""Sharding stage 1 (fleet's sharding_degree) and group_sharded stage 2 ('os', 'os_g'): real 2- and 4-rank jobs
under `oarlock launch` run tests/scripts/sharding_job.py, whose every check compares a sharded run with one
process training the plain model on the whole batches (AdamW, a global-norm clip that bites); one pytest test
per check and world size reports the failures of every rank. The one-process behaviour (everything owned,
no collectives) and the argument errors are checked in-process.
"""

from __future__ import annotations

import numpy as np
import pytest
from parallel_jobs import assert_check_passed, load_job, report_fixture

import oarlock
import oarlock.nn as nn

pytest.importorskip("mpi4py")

job = load_job("sharding_job")
report = report_fixture("sharding_job", [2, 4], timeout=600, collective_timeout=120)


@pytest.mark.parametrize("check", list(job.CHECKS))
def test_sharded_job(report, check):
    assert_check_passed(report, check)


def _plain():
    oarlock.seed(3)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    return model, oarlock.optimizer.AdamW(learning_rate=0.1, parameters=model.parameters(),
                                          grad_clip=nn.ClipGradByGlobalNorm(0.01))


@pytest.mark.parametrize("level", ["os", "os_g"])
def test_one_process_is_the_plain_optimizer(level):
    """With one process the rank owns everything: the same steps as the optimizer alone."""
    from oarlock.distributed.sharding import group_sharded_parallel
    (ref, ref_opt), (model, opt) = _plain(), _plain()
    model, opt, scaler = group_sharded_parallel(model, opt, level)
    x = oarlock.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
    for m, o in ((ref, ref_opt), (model, opt)):
        for _ in range(3):
            (m(x) ** 2).mean().backward()
            o.step()
            o.clear_grad()
    assert scaler is None
    for a, b in zip(ref.parameters(), model.parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert sorted(opt.state_dict()) == sorted(ref_opt.state_dict())


def test_save_one_process(tmp_path):
    from oarlock.distributed.sharding import group_sharded_parallel, save_group_sharded_model
    model, opt = _plain()
    model, opt, _ = group_sharded_parallel(model, opt, "os_g")
    (model(oarlock.ones([2, 3])) ** 2).mean().backward()
    opt.step()
    save_group_sharded_model(model, tmp_path / "out", opt)
    params = oarlock.load(tmp_path / "out" / "model.pdmodel")
    assert sorted(params) == sorted(model.state_dict())
    assert sorted(oarlock.load(tmp_path / "out" / "model.pdopt")) == sorted(opt.state_dict())
    with pytest.raises(ValueError, match=r"save_group_sharded_model\(\): model must be the layer"):
        save_group_sharded_model(model._layer, tmp_path / "other")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="should be a directory, not a file"):
        save_group_sharded_model(model, tmp_path / "file")


def test_errors_name_the_function_and_argument():
    from oarlock.distributed.fleet.meta_parallel.sharding.group_sharded_stage2 import GroupShardedStage2
    from oarlock.distributed.sharding import group_sharded_parallel
    model, opt = _plain()
    with pytest.raises(ValueError, match=r"level must be one of 'os', 'os_g', 'p_g_os'.*got 'stage2'"):
        group_sharded_parallel(model, opt, "stage2")
    with pytest.raises(TypeError, match=r"group_sharded_parallel\(\): optimizer must be an oarlock.optimizer"):
        group_sharded_parallel(model, [opt], "os")
    with pytest.raises(TypeError, match=r"group_sharded_parallel\(\): group must be a process group"):
        group_sharded_parallel(model, opt, "os", group="world")
    with pytest.raises(ValueError, match=r"group_sharded_parallel\(\): buffer_max_size must be an int >= 0"):
        group_sharded_parallel(model, opt, "os_g", buffer_max_size=-1)
    with pytest.raises(TypeError, match=r"group_sharded_parallel\(\): scaler must be an oarlock.amp.GradScaler"):
        group_sharded_parallel(model, opt, "os_g", scaler=1.0)
    with pytest.raises(TypeError, match=r"GroupShardedOptimizerStage2\(\): offload must be a bool"):
        group_sharded_parallel(model, opt, "os", offload="yes")
    with pytest.raises(TypeError, match=r"GroupShardedStage2\(\): sharding_optimizer must be one "
                                        r"GroupShardedOptimizerStage2, got AdamW"):
        GroupShardedStage2(model, opt)


def test_offload_on_cpu_keeps_state_in_host_memory():
    """Paddle's offload moves the optimizer state to host memory: CPU parameters already have it there."""
    from oarlock.distributed.sharding import group_sharded_parallel
    model, opt = _plain()
    _, opt, _ = group_sharded_parallel(model, opt, "os", offload=True)
    assert opt.offload is True


def test_registered_names():
    import oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer as dygraph_optimizer
    import oarlock.distributed.fleet.meta_parallel as meta_parallel
    import oarlock.distributed.sharding as sharding
    from oarlock_parallel import group_sharded, sharding_stage1
    assert sharding.group_sharded_parallel is group_sharded.group_sharded_parallel
    assert sharding.save_group_sharded_model is group_sharded.save_group_sharded_model
    assert dygraph_optimizer.DygraphShardingOptimizer is sharding_stage1.DygraphShardingOptimizer
    assert meta_parallel.ShardingParallel is sharding_stage1.ShardingParallel
