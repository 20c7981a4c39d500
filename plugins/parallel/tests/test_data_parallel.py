"""oarlock.DataParallel and the data-parallel gradient utilities.

The multi-rank behaviour runs in one real 2-rank job (scripts/dp_job.py under `oarlock launch`):
per-step losses and final weights against a one-process replica on the whole batch (SGD, AdamW
with several buckets, no_sync accumulation, find_unused_parameters), the broadcast at wrap time,
buckets in flight while backward still runs, the error for a missing gradient, a backward that
fails half-way, fleet.distributed_model with dp_degree 2, and broadcast_dp_parameters /
fused_allreduce_gradients. One process: the
wrapper is the plain model.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from parallel_jobs import launch_command

import oarlock
import oarlock.nn as nn
from oarlock_parallel import buckets

pytest.importorskip("mpi4py")

SCENARIOS = ["sgd", "adamw-buckets", "no_sync", "find_unused", "missing", "utilities", "failed_backward",
             "fleet"]


def test_two_ranks_match_one_process():
    done = subprocess.run(launch_command("dp_job", ranks=2), capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    for rank in (0, 1):
        for scenario in SCENARIOS:
            assert f"[rank {rank}] ok {scenario}" in done.stdout, done.stdout
        assert f"[rank {rank}] buckets 3, in flight before the first layer's backward 2" in done.stdout


def _mlp():
    oarlock.seed(3)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_one_process_is_the_plain_model():
    plain, model = _mlp(), oarlock.DataParallel(_mlp())
    assert list(model.state_dict()) == list(plain.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = oarlock.to_tensor(np.random.default_rng(0).standard_normal((5, 4)).astype("float32"))
    np.testing.assert_array_equal(model(x).numpy(), plain(x).numpy())
    with model.no_sync():
        model(x).sum().backward()
    model(x).sum().backward()
    plain(x).sum().backward()
    for p, q in zip(model.parameters(), plain.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), 2 * q.grad.numpy(), rtol=1e-6)
    assert model.bucket_count == 0 and model.scale_loss(x) is x
    model.set_state_dict({k: oarlock.zeros_like(v) for k, v in plain.state_dict().items()})
    assert all(not p.numpy().any() for p in model.parameters())


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match=r"DataParallel\(\): layers must be an oarlock.nn.Layer, got list"):
        oarlock.DataParallel([_mlp()])
    with pytest.raises(ValueError, match=r"DataParallel\(\): comm_buffer_size must be a positive number of MB, "
                                         r"got -1"):
        oarlock.DataParallel(_mlp(), comm_buffer_size=-1)
    with pytest.raises(ValueError, match="last_comm_buffer_size .* got '1'"):
        oarlock.DataParallel(_mlp(), last_comm_buffer_size="1")
    with pytest.raises(TypeError, match="find_unused_parameters must be a bool, got 1"):
        oarlock.DataParallel(_mlp(), find_unused_parameters=1)
    with pytest.raises(TypeError, match="group must be a process group"):
        oarlock.DataParallel(_mlp(), group="world")


def test_utilities_with_one_process():
    """With one process (hcg None) the utilities leave gradients and weights as they are; a wrong
    hcg is named."""
    from oarlock.distributed.fleet.utils.hybrid_parallel_util import (broadcast_dp_parameters,
                                                                      fused_allreduce_gradients)
    model = _mlp()
    model(oarlock.ones([2, 4])).sum().backward()
    before = [(p.numpy().copy(), p.grad.numpy().copy()) for p in model.parameters()]
    broadcast_dp_parameters(model, None)
    fused_allreduce_gradients(list(model.parameters()), None)
    for p, (value, grad) in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), value)
        np.testing.assert_array_equal(p.grad.numpy(), grad)
    with pytest.raises(TypeError, match=r"fused_allreduce_gradients\(\): hcg must be a HybridCommunicateGroup or "
                                        r"None, got str"):
        fused_allreduce_gradients(list(model.parameters()), "dp")


def test_buckets_follow_paddles_sizes():
    """Reverse registration order, the first bucket under its own limit, one dtype per bucket,
    and a bucket closes once it reaches its limit."""
    params = [oarlock.zeros([256]), oarlock.zeros([256]), oarlock.zeros([64], dtype="float64"),
              oarlock.zeros([128]), oarlock.zeros([16])]          # float32: 1 KiB, 1 KiB, -, 512 B, 64 B
    kib = 1024 / buckets.MB
    assert buckets.assign(params, [0.5 * kib, 1.5 * kib]) == [[4, 3], [2], [1, 0]]
    assert buckets.assign(params, [100.0]) == [[4, 3, 1, 0], [2]]
    flat = buckets.flatten([oarlock.ones([2, 3]), oarlock.zeros([4])])
    assert [list(t.shape) for t in buckets.unflatten(flat, [oarlock.ones([2, 3]), oarlock.zeros([4])])] == [[2, 3],
                                                                                                               [4]]
