"""Sequence parallelism (fleet.utils.sequence_parallel_utils): a real 2-rank job under `oarlock launch` runs
tests/scripts/sequence_parallel_job.py, whose every check compares with numpy (the ops) or with the plain
block on one process (the layers, the hooks, SGD steps); one pytest test per check reports its failures
from every rank. The namespace, the marks and the single-process behaviour are checked in-process.
"""

from __future__ import annotations

import numpy as np
import pytest
from parallel_jobs import assert_check_passed, load_job, report_fixture

import oarlock

pytest.importorskip("mpi4py")

job = load_job("sequence_parallel_job")

# the public names Paddle 3.2's paddle/distributed/fleet/utils/sequence_parallel_utils.py defines
PADDLE_NAMES = {"scatter", "all_gather", "reduce_scatter", "ScatterOp", "GatherOp", "AllGatherOp", "ReduceScatterOp",
                "mark_as_sequence_parallel_parameter", "is_sequence_parallel_parameter",
                "create_fused_allreduce_gradient_hook", "create_non_fused_allreduce_gradient_hook",
                "register_sequence_parallel_allreduce_hooks", "is_fused_matmul_bias_supported",
                "is_fused_linear_param_grad_add_supported", "SPInnerOverlapLinear", "ColumnSequenceParallelLinear",
                "MPScale", "RowSequenceParallelLinear"}


report = report_fixture("sequence_parallel_job", [2], collective_timeout=120)


@pytest.mark.parametrize("check", list(job.CHECKS))
def test_two_ranks(report, check):
    assert_check_passed(report, check)


def test_namespace_has_paddles_public_names():
    from oarlock.distributed.fleet.utils import sequence_parallel_utils as spu
    assert PADDLE_NAMES <= set(dir(spu))
    assert "[s, b, h]" in spu.__doc__


def test_marks():
    from oarlock.distributed.fleet.utils.sequence_parallel_utils import (is_sequence_parallel_parameter,
                                                                         mark_as_sequence_parallel_parameter)
    from oarlock_parallel import marks
    layer = oarlock.nn.LayerNorm(4)
    mark_as_sequence_parallel_parameter(layer.weight)
    assert is_sequence_parallel_parameter(layer.weight) and not is_sequence_parallel_parameter(layer.bias)
    assert marks.get(layer.weight, "sequence_parallel") is True


def test_no_fused_kernels():
    from oarlock.distributed.fleet.utils import sequence_parallel_utils as spu
    assert spu.is_fused_matmul_bias_supported() is False
    assert spu.is_fused_linear_param_grad_add_supported() is False


def test_mp_scale():
    from oarlock.distributed.fleet.utils.sequence_parallel_utils import MPScale
    x = oarlock.to_tensor(np.array([2.0, 4.0], dtype="float32"))
    x.stop_gradient = False
    y = MPScale.apply(x, 4)
    y.sum().backward()
    np.testing.assert_allclose(y.numpy(), [0.5, 1.0])
    np.testing.assert_allclose(x.grad.numpy(), [1.0, 1.0])      # the gradient passes unscaled, as Paddle's


def test_errors_in_one_process(monkeypatch):
    """Bad x is named before the group is needed; group=None without fleet names fleet.init; a bad
    group is named; the hooks are Paddle's no-op without a parallel environment."""
    from oarlock.distributed.fleet.utils import sequence_parallel_utils as spu
    from oarlock_parallel import fleet
    monkeypatch.setitem(fleet._state, "hcg", None)
    with pytest.raises(TypeError, match=r"scatter\(\): x must be a Tensor of layout \[s, b, h\], got list"):
        spu.scatter([1, 2])
    with pytest.raises(RuntimeError, match=r"GatherOp.apply\(\) with group=None: needs fleet.*fleet.init"):
        spu.GatherOp.apply(oarlock.zeros([2, 3]))
    with pytest.raises(TypeError, match=r"reduce_scatter\(\): group must be an oarlock.distributed Group or None, "
                                        r"got object"):
        spu.reduce_scatter(oarlock.zeros([2, 3]), group=object())
    with pytest.raises(RuntimeError, match="ColumnSequenceParallelLinear with mp_group=None: needs fleet"):
        spu.ColumnSequenceParallelLinear(4, 4, gather_output=False)
    assert spu.register_sequence_parallel_allreduce_hooks(oarlock.nn.Linear(2, 2), 0, False) is None
    monkeypatch.setattr(oarlock.distributed, "is_initialized", lambda: False)
    assert spu.register_sequence_parallel_allreduce_hooks(oarlock.nn.Linear(2, 2), 1, False) is None
