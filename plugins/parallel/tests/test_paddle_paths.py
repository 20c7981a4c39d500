"""The fleet / distributed names oarlock-parallel exports under Paddle 3.2's module paths for model code such as
PaddleFormers: each path resolves through the `paddle` alias to the object of the primary namespace, the stream
collectives and fused_allreduce_gradients_with_group give numpy's values on two ranks, and the private
model-parallel helpers are the identity in one process (Paddle's behaviour without a parallel environment)."""

import subprocess
import sys

import numpy as np
import pytest

import oarlock
from parallel_jobs import SCRIPTS


def test_paddle_paths_resolve_to_the_primary_objects():
    import oarlock.distributed as dist
    import oarlock.distributed.fleet as fleet
    with oarlock.compat.paddle_alias():
        from paddle.distributed.communication.group import Group
        from paddle.distributed.fleet import fleet as fleet_object
        from paddle.distributed.fleet.layers.mpu.mp_layers import ColumnParallelLinear
        from paddle.distributed.fleet.meta_parallel import PipelineLayer, SharedLayerDesc
        from paddle.distributed.fleet.meta_parallel.parallel_layers.random import get_rng_state_tracker
        from paddle.distributed.fleet.recompute.recompute import recompute
        from paddle.distributed.fleet.utils import recompute as utils_recompute
        from paddle.distributed.fleet.utils.hybrid_parallel_util import unwrap_optimizer
    assert Group is dist.Group and recompute is utils_recompute
    assert ColumnParallelLinear is fleet.meta_parallel.ColumnParallelLinear
    assert get_rng_state_tracker is fleet.meta_parallel.get_rng_state_tracker
    assert PipelineLayer.__name__ == "PipelineLayer" and SharedLayerDesc.__name__ == "SharedLayerDesc"
    assert fleet_object.worker_num() == fleet.worker_num()

    class Wrapper:
        def __init__(self, inner):
            self._inner_opt = inner
    opt = object()
    assert unwrap_optimizer(Wrapper(Wrapper(opt)), (Wrapper,)) is opt


def test_private_mp_helpers_are_the_identity_in_one_process():
    from oarlock.distributed.fleet.layers.mpu import mp_ops
    x = oarlock.to_tensor(np.arange(6.0).reshape(2, 3))
    x.stop_gradient = False
    y = mp_ops._mp_allreduce(mp_ops._c_concat(mp_ops._c_split(mp_ops._c_identity(x))))
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    (y * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full([2, 3], 3.0))
    with pytest.raises(ValueError, match=r"_mp_allreduce\(\): argument 'op'"):
        mp_ops._mp_allreduce(x, op=oarlock.distributed.ReduceOp.MAX)


def test_tensor_is_distributed_is_paddles_attribute():
    t = oarlock.ones([2])
    assert t.is_distributed is False
    t.is_distributed = True
    assert t.is_distributed is True


def test_stream_collectives_and_grouped_allreduce_on_two_ranks(tmp_path):
    job = [sys.executable, "-m", "oarlock.cli", "launch", "-n", "2", str(SCRIPTS / "paddle_paths_job.py"),
           str(tmp_path)]
    done = subprocess.run(job, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    base = np.arange(6, dtype="float32").reshape(2, 3)
    want_gathered = np.concatenate([base, base + 10])
    mean_grad = (ranks[0]["local_grad"] + ranks[1]["local_grad"]) / 2
    assert not np.allclose(ranks[0]["local_grad"], ranks[1]["local_grad"])
    for got in ranks:
        assert int(got["world"]) == 2
        np.testing.assert_array_equal(got["gathered"], want_gathered)
        np.testing.assert_array_equal(got["pieces"], np.stack([base, base + 10]))
        np.testing.assert_array_equal(got["scattered"], np.full([1, 3], 3.0))     # 1 + 2 from the two ranks
        np.testing.assert_allclose(got["mean_grad"], mean_grad, rtol=1e-6)
