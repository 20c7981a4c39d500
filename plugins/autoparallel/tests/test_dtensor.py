"""DistTensor in one process (meshes of process 0 only; the multi-rank behaviour is test_reshard.py's job):
what it reports (global shape, placements, mesh, local piece), what forwards to the local piece (storage,
stop_gradient, grad, backward), Parameters staying Parameters and training with an optimizer, the plain
tensor's answers, the data API (shard_tensor, dtensor_from_fn, dtensor_from_local / _to_local,
unshard_dtensor) and bad input."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
from oarlock_autoparallel.dtensor import DistTensor

MESH = dist.ProcessMesh([0], dim_names=["x"])
MESH2 = dist.ProcessMesh([[0]], dim_names=["x", "y"])


def whole():
    return np.arange(12, dtype=np.float32).reshape(3, 4)


def test_a_distributed_tensor_reports_its_layout():
    x = dist.shard_tensor(whole(), MESH2, [dist.Shard(0), dist.Partial()])
    assert isinstance(x, DistTensor) and isinstance(x, oarlock.Tensor) and x.is_dist()
    assert x.shape == [3, 4] and x.ndim == 2 and x.size == 12 and len(x) == 3
    assert x.placements == [dist.Shard(0), dist.Partial()] and x.process_mesh == MESH2
    np.testing.assert_array_equal(x._local_value().numpy(), whole())
    np.testing.assert_array_equal(x.numpy(), whole())          # .numpy() is the local piece
    assert x.dtype == oarlock.float32 and x.stop_gradient
    assert "placements=[Shard(dim=0), Partial(reduce_type=SUM)]" in repr(x)


def test_make_keeps_the_local_piece_and_its_history():
    leaf = oarlock.to_tensor(whole(), stop_gradient=False)
    local = leaf * 2
    x = DistTensor.make(local, MESH, [dist.Replicate()], [3, 4])
    assert x._local_value() is local and not x.stop_gradient and x._node is local._node
    x.backward(oarlock.ones([3, 4]))          # backward runs on the local piece
    np.testing.assert_array_equal(leaf.grad.numpy(), np.full((3, 4), 2.0))
    with pytest.raises(TypeError, match="plain oarlock.Tensor"):
        DistTensor.make(x, MESH, [dist.Replicate()], [3, 4])
    with pytest.raises(TypeError, match="shard_tensor"):
        DistTensor(whole())


def test_ops_on_a_distributed_tensor_reach_the_spmd_rules(monkeypatch):
    from oarlock_autoparallel import spmd
    seen = []
    monkeypatch.setattr(spmd, "dispatch", lambda op, args, attrs: seen.append((op.name, args)) or "handled")
    x = dist.shard_tensor(whole(), MESH, [dist.Shard(0)])
    assert oarlock.add(oarlock.ones([3, 4]), x) == "handled" and seen[0][0] == "add" and seen[0][1][1] is x


def test_plain_tensors_answer_the_distributed_queries():
    t = oarlock.to_tensor(whole())
    assert t.is_dist() is False and t.placements is None and t.process_mesh is None


def test_shard_tensor_is_a_new_leaf_with_the_datas_stop_gradient():
    source = oarlock.to_tensor(whole(), stop_gradient=False)
    x = dist.shard_tensor(source, MESH, [dist.Replicate()])
    assert not x.stop_gradient and x._local_value() is not source and x._local_value()._node is None
    y = dist.shard_tensor(whole().tolist(), MESH, [dist.Shard(1)], dtype="float64", stop_gradient=False)
    assert y.dtype == oarlock.float64 and not y.stop_gradient
    z = dist.dtensor_from_fn(oarlock.ones, MESH, [dist.Replicate()], shape=[2, 5])
    assert z.shape == [2, 5] and z.is_dist()


def test_a_sharded_parameter_stays_a_parameter_and_trains():
    layer = nn.Linear(4, 3)
    weight = dist.shard_tensor(layer.weight, MESH, [dist.Shard(1)])
    assert isinstance(weight, nn.Parameter) and weight.persistable and not weight.stop_gradient
    layer.weight = weight
    assert layer.weight is weight and layer.state_dict()["weight"] is weight
    (weight._local_value() * 3).sum().backward()
    np.testing.assert_array_equal(weight.grad.numpy(), np.full((4, 3), 3.0))
    before = weight.numpy().copy()
    oarlock.optimizer.SGD(learning_rate=0.5, parameters=[weight]).step()
    np.testing.assert_allclose(weight.numpy(), before - 1.5, rtol=1e-6)
    full = dist.unshard_dtensor(weight)
    assert not full.is_dist() and isinstance(full, nn.Parameter)
    np.testing.assert_array_equal(full.numpy(), weight.numpy())


def test_from_local_and_to_local_are_differentiable():
    local = oarlock.to_tensor(whole(), stop_gradient=False)
    x = dist.dtensor_from_local(local, MESH, [dist.Shard(0)])
    assert x.shape == [3, 4] and dist.dtensor_to_local(x, MESH, [dist.Shard(0)]) is local
    assert dist.dtensor_from_local(local, MESH, [dist.Shard(1)], shape=[3, 4]).shape == [3, 4]
    (dist.dtensor_to_local(x) * 5).sum().backward()
    np.testing.assert_array_equal(local.grad.numpy(), np.full((3, 4), 5.0))


def test_reshard_on_one_process_changes_only_the_layout():
    x = dist.shard_tensor(whole(), MESH2, [dist.Shard(0), dist.Shard(1)])
    y = dist.reshard(x, MESH2, [dist.Replicate(), dist.Partial()])
    assert y.placements == [dist.Replicate(), dist.Partial()]
    np.testing.assert_array_equal(dist.unshard_dtensor(y).numpy(), whole())


@pytest.mark.parametrize("call, error, parts", [
    (lambda: dist.shard_tensor(whole(), MESH, [dist.Shard(0), dist.Shard(1)]), ValueError,
     ["shard_tensor()", "'placements' has 2 entries", "1 dimensions"]),
    (lambda: dist.shard_tensor(whole(), MESH, [dist.Shard(2)]), ValueError,
     ["shard_tensor()", "Shard(dim=2)", "2 dimensions"]),
    (lambda: dist.shard_tensor(whole(), [0], [dist.Shard(0)]), TypeError, ["shard_tensor()", "ProcessMesh"]),
    (lambda: dist.shard_tensor(whole(), MESH, ["S0"]), TypeError, ["shard_tensor()", "Shard / Replicate"]),
    (lambda: dist.reshard(oarlock.ones([2]), MESH, [dist.Replicate()]), TypeError,
     ["reshard()", "distributed tensor"]),
    (lambda: dist.unshard_dtensor(oarlock.ones([2])), ValueError, ["unshard_dtensor()", "distributed tensor"]),
    (lambda: dist.dtensor_to_local(oarlock.ones([2])), ValueError, ["dtensor_to_local()", "distributed"]),
    (lambda: dist.dtensor_from_local(dist.shard_tensor(whole(), MESH, [dist.Replicate()]), MESH,
                                     [dist.Replicate()]), ValueError, ["dtensor_from_local()", "local"]),
    (lambda: dist.dtensor_from_local(oarlock.ones([2]), MESH, [dist.Replicate()], shape=[2, 2]), ValueError,
     ["dtensor_from_local()", "'shape'"]),
])
def test_bad_input(call, error, parts):
    with pytest.raises(error) as info:
        call()
    for part in parts:
        assert part in str(info.value)


def test_a_plain_tensors_local_value_is_none_as_in_paddle():
    assert oarlock.to_tensor(whole())._local_value() is None
    paddle = pytest.importorskip("paddle")
    assert paddle.to_tensor(whole())._local_value() is None


@pytest.mark.parametrize("make", [oarlock.zeros_like, oarlock.ones_like, oarlock.empty_like, oarlock.randn_like,
                                  oarlock.rand_like, lambda x, **kw: oarlock.full_like(x, 7.0, **kw)])
def test_like_functions_keep_the_mesh_and_placements(make):
    x = dist.shard_tensor(whole(), MESH2, [dist.Shard(1), dist.Replicate()])
    y = make(x, dtype="float64")
    assert isinstance(y, DistTensor) and y.process_mesh == MESH2 and y.shape == [3, 4]
    assert y.placements == [dist.Shard(1), dist.Replicate()] and y.dtype == oarlock.float64
    assert y._local_value().shape == [3, 4] and y.stop_gradient
    assert not make(x, requires_grad=True).stop_gradient


def test_like_of_a_partial_tensor_is_replicated_with_the_fill():
    x = dist.shard_tensor(whole(), MESH2, [dist.Partial(), dist.Shard(0)])
    y = oarlock.full_like(x, 2.5)
    assert y.placements == [dist.Replicate(), dist.Shard(0)]
    np.testing.assert_array_equal(dist.unshard_dtensor(y).numpy(), np.full((3, 4), 2.5, np.float32))
