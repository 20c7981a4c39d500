"""Tensor-parallel layers (fleet.meta_parallel): a real 2-rank job under `oarlock launch` runs
tests/scripts/tensor_parallel_job.py, whose every check compares the layers with one process (plain
Linear / Embedding with the full weights, PyTorch's float64 cross_entropy); one pytest test per check
reports its failures from every rank. The RNG tracker's bookkeeping and the errors raised before fleet
is initialised are checked in-process.
"""

from __future__ import annotations

import numpy as np
import pytest
from parallel_jobs import assert_check_passed, load_job, report_fixture

import oarlock

pytest.importorskip("mpi4py")

job = load_job("tensor_parallel_job")
report = report_fixture("tensor_parallel_job", [2], collective_timeout=120)


@pytest.mark.parametrize("check", list(job.CHECKS))
def test_two_ranks(report, check):
    assert_check_passed(report, check)


def test_tracker_bookkeeping():
    from oarlock.distributed.fleet.meta_parallel import RNGStatesTracker
    tracker = RNGStatesTracker()
    tracker.add("a", 11)
    with pytest.raises(ValueError, match="seed 11 already exists"):
        tracker.add("b", 11)
    with pytest.raises(ValueError, match="state 'a' already exists"):
        tracker.add("a", 12)
    with pytest.raises(ValueError, match="state 'missing' does not exist"):
        with tracker.rng_state("missing"):
            pass
    oarlock.seed(3)
    saved = tracker.get_states_tracker()
    with tracker.rng_state("a"):
        first = oarlock.rand([5]).numpy()
    outside = oarlock.rand([5]).numpy()
    oarlock.seed(3)
    np.testing.assert_array_equal(outside, oarlock.rand([5]).numpy())     # the default state was untouched
    oarlock.seed(11)
    np.testing.assert_array_equal(first, oarlock.rand([5]).numpy())       # 'a' draws from seed 11
    tracker.set_states_tracker(saved)                                      # rewinds 'a'
    with tracker.rng_state("a"):
        np.testing.assert_array_equal(first, oarlock.rand([5]).numpy())
    with pytest.raises(ValueError, match=r"state\(s\) \['zz'\] do not exist"):
        tracker.set_states_tracker({"zz": saved["a"]})
    tracker.reset()
    tracker.add("b", 11)                                                   # reset forgets seeds too


def test_errors_name_the_function():
    from oarlock.distributed.fleet.meta_parallel import ParallelCrossEntropy, RowParallelLinear, get_rng_state_tracker
    with pytest.raises(TypeError, match=r"RNGStatesTracker.add\(\): seed must be an int, got str"):
        get_rng_state_tracker().add("x", "1")
    with pytest.raises(ValueError, match="RowParallelLinear: in_features must be a positive int, got 0"):
        RowParallelLinear(0, 4)
    with pytest.raises(TypeError, match="ParallelCrossEntropy: ignore_index must be an int"):
        ParallelCrossEntropy(mp_group=object(), ignore_index=1.5)
    with pytest.raises(TypeError, match="ParallelCrossEntropy: mp_group must be an oarlock.distributed Group or None, "
                                        "got object"):
        ParallelCrossEntropy(mp_group=object())
