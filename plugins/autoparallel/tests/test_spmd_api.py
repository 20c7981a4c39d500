"""shard_layer / shard_optimizer / ShardingStage / shard_dataloader / parallelize / local_map in one process (a
one-rank mesh: the layouts and the bookkeeping, not the communication, which test_auto_train covers), and their
clear errors on bad input."""

import numpy as np
import pytest

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn

MESH = dist.ProcessMesh([[0]], dim_names=["dp", "mp"])
R, S0, S1 = dist.Replicate(), dist.Shard(0), dist.Shard(1)


class MLP(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x))


def test_shard_layer_defaults_replicate_and_hooks_run():
    seen = []
    layer = dist.shard_layer(MLP(), MESH, input_fn=lambda inputs, mesh: seen.append("in") or inputs,
                             output_fn=lambda outputs, mesh: seen.append("out") or outputs)
    assert all(p.is_dist() and p.placements == [R, R] for p in layer.parameters())
    out = layer(oarlock.ones([2, 4]))
    assert seen == ["in", "out"] and out.is_dist()


def test_shard_layer_shard_fn_keeps_its_layout():
    def shard_fn(name, layer, mesh):
        if name == "fc1":
            layer.weight = dist.shard_tensor(layer.weight, mesh, [R, S1])
    layer = dist.shard_layer(MLP(), MESH, shard_fn)
    assert layer.fc1.weight.placements == [R, S1] and layer.fc2.weight.placements == [R, R]


def test_shard_layer_bad_input():
    with pytest.raises(ValueError, match="shard_layer.*process_mesh"):
        dist.shard_layer(MLP(), None)
    with pytest.raises(ValueError, match="shard_layer.*ProcessMesh"):
        dist.shard_layer(MLP(), [[0]])
    with pytest.raises(TypeError, match="shard_layer.*shard_fn"):
        dist.shard_layer(MLP(), MESH, shard_fn=3)


def test_shard_optimizer_stage1_places_states_and_steps():
    layer = dist.shard_layer(MLP(), MESH)
    opt = dist.shard_optimizer(oarlock.optimizer.AdamW(parameters=layer.parameters()), dist.ShardingStage1("dp"))
    oarlock.mean(layer(oarlock.ones([2, 4]))).backward()
    before = layer.fc1.weight.numpy().copy()
    opt.step()
    opt.clear_grad()
    state = opt._inner_opt._state[id(layer.fc1.weight)]
    assert state["moment1"].placements == [S0, R]
    assert not np.allclose(layer.fc1.weight.numpy(), before)


def test_sharding_stage_placements_and_errors():
    w = dist.shard_tensor(oarlock.ones([4, 8]), MESH, [S0, R])
    assert dist.ShardingStage1("mp").sharded_placements(w) == [S0, S1]    # dim 0 taken by dp: the next dim
    with pytest.raises(ValueError, match="sharding_mesh_dim 'pp'"):
        dist.ShardingStage1("pp").sharded_placements(w)
    with pytest.raises(TypeError, match="sharding_mesh_dim"):
        dist.ShardingStage2(1.5)
    with pytest.raises(TypeError, match="shard_optimizer.*optimizer"):
        dist.shard_optimizer(object())
    opt = oarlock.optimizer.SGD(parameters=[w])
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        dist.shard_optimizer(opt, gradient_accumulation_steps=0)


def test_stage3_shards_parameters_in_place():
    layer = dist.shard_layer(MLP(), MESH)
    w = layer.fc1.weight
    dist.shard_optimizer(oarlock.optimizer.AdamW(parameters=layer.parameters()), dist.ShardingStage3("dp"))
    assert layer.fc1.weight is w and w.placements == [S0, R] and not w.stop_gradient


def test_shard_dataloader():
    batches = [(oarlock.ones([4, 3]), oarlock.zeros([4]))] * 2
    loader = dist.shard_dataloader(batches, [MESH], shard_dims="dp")
    got = list(loader)
    assert len(got) == 2 and got[0][0].placements == [S0, R] and got[0][1].placements == [S0, R]
    with pytest.raises(ValueError, match="shard_dataloader.*'x'"):
        dist.shard_dataloader(batches, MESH, shard_dims="x")


def test_parallelize_plans_and_optimizer_rebinding():
    model = MLP()
    opt = oarlock.optimizer.AdamW(parameters=model.parameters())
    model, opt = dist.parallelize(model, opt, mesh=MESH, config={
        "mp_config": {"parallelize_plan": {"fc1": dist.ColWiseParallel(), "fc2": dist.RowWiseParallel()}},
        "dp_config": {"sharding_level": 1}})
    assert model.fc1.weight.placements == [R, S1] and model.fc1.bias.placements == [R, S0]
    assert model.fc2.weight.placements == [R, S0] and model.fc2.bias.placements == [R, R]
    assert {id(p) for p in opt._inner_opt.param_groups[0]["params"]} == {id(p) for p in model.parameters()}
    assert dist.auto_parallel.get_mesh() is MESH


def test_parallelize_bad_input():
    with pytest.raises(NotImplementedError, match="cp_config"):      # pp_config's are in test_pipeline.py
        dist.parallelize(MLP(), None, MESH, {"cp_config": {"parallelize_plan": {}}})
    with pytest.raises(ValueError, match="unknown keys"):
        dist.parallelize(MLP(), None, MESH, {"tp": {}})
    with pytest.raises(TypeError, match="ColWiseParallel"):
        dist.parallelize(MLP(), None, MESH, {"mp_config": {"parallelize_plan": {"fc1": "col"}}})
    with pytest.raises(ValueError, match="'mp' dim"):
        dist.parallelize(MLP(), None, dist.ProcessMesh([0], dim_names=["x"]),
                         {"mp_config": {"parallelize_plan": {"fc1": dist.ColWiseParallel()}}})
    with pytest.warns(UserWarning):
        assert dist.parallelize("m", "o") == ("m", "o")


def test_local_map():
    t = dist.shard_tensor(oarlock.to_tensor(np.arange(24, dtype=np.float32).reshape(4, 6)), MESH, [S0, S1])
    fn = dist.local_map(lambda a: a.sum(axis=0), [[dist.Partial(), S0]])
    out = fn(t)
    assert out.placements == [dist.Partial(), S0]
    np.testing.assert_allclose(dist.unshard_dtensor(out).numpy(), np.arange(24).reshape(4, 6).sum(0))
    strict = dist.local_map(lambda a: a, [[R, R]], in_placements=[[R, R]])
    with pytest.raises(ValueError, match="reshard_inputs"):
        strict(t)
    assert dist.local_map(lambda a: a, [[R, R]], in_placements=[[R, R]], reshard_inputs=True)(t).placements == [R, R]
    with pytest.raises(TypeError, match="local_map.*func"):
        dist.local_map(3, [[R, R]])


def test_ops_on_two_meshes_fail_clearly():
    a = dist.shard_tensor(oarlock.ones([2, 2]), MESH, [R, R])
    b = dist.shard_tensor(oarlock.ones([2, 2]), dist.ProcessMesh([0], dim_names=["x"]), [R])
    with pytest.raises(ValueError, match=r"oarlock\.add\(\): its distributed inputs live on different meshes"):
        oarlock.add(a, b)


def test_plain_tensor_with_dist_tensor_is_replicated():
    a = dist.shard_tensor(oarlock.ones([2, 3]), MESH, [S0, S1])
    out = a + oarlock.full([3], 2.0)
    assert out.placements == [S0, S1]
    np.testing.assert_allclose(dist.unshard_dtensor(out).numpy(), np.full((2, 3), 3.0))
