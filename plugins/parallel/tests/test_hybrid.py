"""Hybrid parallelism through fleet (TensorParallel, HybridParallelOptimizer, rank-aware global-norm
clipping): real MPI jobs under `oarlock launch` run tests/scripts/hybrid_job.py with dp2 x mp2 on 4 ranks
and mp2 on 2 ranks; every check there compares with one process training the plain model on the full
weights (losses, the clip's global norm, the weights after 5 AdamW steps). One pytest test per check and
mode reports the failures of every rank. The wrappers' errors without a world run in-process.
"""

from __future__ import annotations

import pytest
from parallel_jobs import assert_check_passed, job_outcome, launch_command, load_job

pytest.importorskip("mpi4py")

job = load_job("hybrid_job")
RANKS = {"dp2mp2": 4, "mp2": 2}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return {}, tmp_path_factory.mktemp("hybrid")


@pytest.mark.parametrize("check", list(job.CHECKS))
@pytest.mark.parametrize("mode", list(RANKS))
def test_hybrid(reports, mode, check):
    done, folder = reports
    if mode not in done:   # one job per mode, shared by its checks; a failed one is not launched again
        out = folder / f"{mode}.json"
        done[mode] = job_outcome(launch_command("hybrid_job", mode, out, ranks=RANKS[mode]), out, f"{mode} job")
    report, why = done[mode]
    assert why is None, why
    assert report["size"] == RANKS[mode] and report["mode"] == mode
    assert_check_passed(report, check)


class FakeHcg:
    def get_model_parallel_group(self):
        raise AssertionError("not reached: the arguments are checked first")


def test_wrappers_reject_bad_arguments():
    from oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.hybrid_parallel_optimizer import (
        HybridParallelOptimizer)
    from oarlock.distributed.fleet.meta_parallel import TensorParallel
    import oarlock
    model = oarlock.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"TensorParallel\(\): hcg must be a HybridCommunicateGroup .* got str"):
        TensorParallel(model, "hcg")
    with pytest.raises(TypeError, match=r"TensorParallel\(\): unexpected keyword argument\(s\) \['foo'\]"):
        TensorParallel(model, FakeHcg(), foo=1)
    opt = oarlock.optimizer.SGD(learning_rate=0.1, parameters=model.parameters())
    with pytest.raises(TypeError, match=r"HybridParallelOptimizer\(\): hcg must be a HybridCommunicateGroup"):
        HybridParallelOptimizer(opt, None, None)
    from oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.hybrid_parallel_optimizer import (
        HybridParallelClipGrad)
    with pytest.raises(TypeError, match=r"HybridParallelClipGrad\(\): hcg must be a HybridCommunicateGroup, got "
                                        r"NoneType"):
        HybridParallelClipGrad(oarlock.nn.ClipGradByGlobalNorm(1.0), None)


class ModeHcg:
    """The getters HybridParallelOptimizer reads at construction, for a given parallel mode."""

    def __init__(self, mode, dp=2):
        self.mode, self.dp, self.groups = mode, dp, {"mp": object(), "pp": object(), "sharding": object()}

    def get_parallel_mode(self):
        return self.mode

    def get_sharding_parallel_world_size(self):
        return 2 if self.mode == 3 else 1      # ParallelMode.SHARDING_PARALLEL

    def get_data_parallel_world_size(self):
        return self.dp

    def get_model_parallel_group(self):
        return self.groups["mp"]

    def get_pipe_parallel_group(self):
        return self.groups["pp"]

    def get_sharding_parallel_group(self):
        return self.groups["sharding"]


def test_which_clips_become_rank_aware():
    """Pure data parallelism keeps the optimizer's clip (DataParallel averaged the gradients: every rank
    sees the same norm); any other mode makes each group's global-norm clip rank-aware over the mp group
    and the pipeline group, with sharding the sharding group too; other clips stay."""
    import oarlock
    from oarlock.distributed import ParallelMode
    from oarlock.distributed.fleet.meta_optimizers.dygraph_optimizer.hybrid_parallel_optimizer import (
        HybridParallelClipGrad, HybridParallelOptimizer)
    model = oarlock.nn.Linear(2, 2)
    by_value = oarlock.nn.ClipGradByValue(1.0)

    def fresh():
        return oarlock.optimizer.AdamW(parameters=[{"params": [model.weight]},
                                                   {"params": [model.bias], "grad_clip": by_value}],
                                       grad_clip=oarlock.nn.ClipGradByGlobalNorm(0.5))

    opt = fresh()
    clip = opt._grad_clip
    wrapped = HybridParallelOptimizer(opt, ModeHcg(ParallelMode.DATA_PARALLEL), None)
    assert opt._param_groups[0]["grad_clip"] is clip and not wrapped._dp_enable
    hcg = ModeHcg(ParallelMode.TENSOR_PARALLEL)
    opt = fresh()
    wrapped = HybridParallelOptimizer(opt, hcg, None)
    first, second = (group["grad_clip"] for group in opt._param_groups)
    assert isinstance(first, HybridParallelClipGrad) and first.clip_norm == 0.5 and second is by_value
    assert first.split_group is hcg.groups["mp"] and first.shard_groups == (hcg.groups["pp"],)
    assert isinstance(opt._grad_clip, HybridParallelClipGrad) and wrapped._dp_enable

    class Sharded:   # what HybridParallelOptimizer needs of a DygraphShardingOptimizer
        def __init__(self, inner):
            self._inner_opt = inner

        def reduce_gradients(self, parameters, hcg):
            pass

    opt = fresh()
    sharding = ModeHcg(ParallelMode.SHARDING_PARALLEL)
    HybridParallelOptimizer(Sharded(opt), sharding, None)
    assert opt._param_groups[0]["grad_clip"].shard_groups == (sharding.groups["pp"], sharding.groups["sharding"])
