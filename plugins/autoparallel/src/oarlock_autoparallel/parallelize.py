"""parallelize (Paddle 3.2's intermediate API, paddle.distributed.parallelize) with its tensor-parallel plans
ColWiseParallel / RowWiseParallel, and set_mesh / get_mesh (the global mesh parallelize uses when given none).

config = {"dp_config": {"sharding_level": 0|1|2|3}, "mp_config": {"parallelize_plan": {name: plan}},
"pp_config": {"split_spec": ...}}; a plan key is a sublayer name or a regular expression matching whole names
("blocks.*.fc1"), or a parameter name ending in its attribute ("head.weight"). The mesh must name its
tensor-parallel dim "mp", its data-parallel dim "dp" and its pipeline dim "pp" (Paddle's convention). With
pp_config (pipeline.py) each sublayer's parameters live on its stage's sub-mesh, where the mp plans and dp apply.
Context parallel (cp_config: Paddle 3.2 merges its plans, PrepareContextParallel ..., into the mp plans) is not
supported: a clear error."""

from __future__ import annotations

import re
import warnings

from oarlock_autoparallel.api_layer import check_mesh, replicate_rest
from oarlock_autoparallel.dtensor import DistTensor
from oarlock_autoparallel.placements import Replicate, Shard

_GLOBAL = {"mesh": None}


def set_mesh(mesh) -> None:
    """The global mesh (Paddle's dist.auto_parallel.set_mesh)."""
    check_mesh(mesh, "set_mesh()", "mesh")
    _GLOBAL["mesh"] = mesh


def get_mesh():
    """The global mesh set by set_mesh (or parallelize), or None."""
    return _GLOBAL["mesh"]


class PlanBase:
    """A tensor-parallel plan: apply(layer, mesh, param_names) shards the layer's parameters."""

    def _mp_axis(self, mesh) -> int:
        if "mp" not in mesh.dim_names:
            raise ValueError(f"{type(self).__name__}: the mesh has no 'mp' dim (dim_names {mesh.dim_names}); "
                             f"tensor-parallel plans shard over the mesh dim named 'mp'")
        return mesh.dim_names.index("mp")

    def _shard(self, layer, name, mesh, placements):
        from oarlock_autoparallel.dtensor_api import shard_tensor
        param = getattr(layer, name, None)
        if param is None or isinstance(param, DistTensor):
            return
        setattr(layer, name, shard_tensor(param, mesh, placements))


class ColWiseParallel(PlanBase):
    """Column parallel: weight [in, out] (Linear) or [vocab, hidden] (Embedding) Shard(1) over mp, bias Shard(0);
    gather_output=True all-gathers the output's last dim."""

    def __init__(self, gather_output: bool = False):
        self.gather_output = bool(gather_output)

    def apply(self, layer, mesh, param_names):
        axis = self._mp_axis(mesh)
        for name in param_names or ("weight", "bias"):
            param = getattr(layer, name, None)
            if param is None:
                continue
            if param.ndim not in (1, 2):
                raise ValueError(f"ColWiseParallel: parameter {name!r} has {param.ndim} dims; accepted: 1 or 2")
            placements = [Replicate()] * mesh.ndim
            placements[axis] = Shard(param.ndim - 1)
            self._shard(layer, name, mesh, placements)
        if self.gather_output:
            layer.register_forward_post_hook(lambda _, inputs, out: _replicate_on(out, mesh, axis))


class RowWiseParallel(PlanBase):
    """Row parallel: weight [in, out] Shard(0) over mp (the bias stays replicated: the output is Partial and
    the bias is added once). is_input_parallel=False: the input's last dim is split over mp first."""

    def __init__(self, is_input_parallel: bool = True):
        self.is_input_parallel = bool(is_input_parallel)

    def apply(self, layer, mesh, param_names):
        axis = self._mp_axis(mesh)
        for name in [n for n in (param_names or ("weight",)) if n != "bias"]:
            param = getattr(layer, name, None)
            if param is None:
                continue
            if param.ndim != 2:
                raise ValueError(f"RowWiseParallel: parameter {name!r} has {param.ndim} dims; accepted: 2")
            placements = [Replicate()] * mesh.ndim
            placements[axis] = Shard(0)
            self._shard(layer, name, mesh, placements)
        if not self.is_input_parallel:
            layer.register_forward_pre_hook(lambda _, inputs: tuple(_split_last(x, mesh, axis) for x in inputs))


def _replicate_on(t, mesh, axis):
    from oarlock_autoparallel.reshard import reshard
    if not isinstance(t, DistTensor):
        return t
    placements = list(t.placements)
    placements[axis] = Replicate()
    return reshard(t, mesh, placements)


def _split_last(t, mesh, axis):
    from oarlock_autoparallel.dtensor_api import shard_tensor
    from oarlock_autoparallel.reshard import reshard
    if isinstance(t, DistTensor):
        placements = list(t.placements)
        placements[axis] = Shard(t.ndim - 1)
        return reshard(t, mesh, placements)
    placements = [Replicate()] * mesh.ndim
    placements[axis] = Shard(t.ndim - 1)
    return shard_tensor(t, mesh, placements) if hasattr(t, "shape") else t


def _match(plan_key, layer, name):
    """The parameter names a plan key selects in sublayer `name` (empty: its weight and bias), or None."""
    attr = plan_key.split(".")[-1]
    params = []
    key = plan_key
    if "." in plan_key and getattr(layer, attr, None) is not None and attr in layer._parameters:
        key = plan_key[:-len(attr) - 1]
        params.append(attr)
    if key == name or re.fullmatch(key, name):
        return params
    return None


def _tensor_parallel(model, mesh_of, plan: dict):
    if not isinstance(plan, dict):
        raise TypeError(f"parallelize(): mp_config['parallelize_plan'] must be a dict of layer name -> plan, got "
                        f"{type(plan).__name__}")
    for key, plans in plan.items():
        for p in plans if isinstance(plans, list) else [plans]:
            if not isinstance(p, PlanBase):
                raise TypeError(f"parallelize(): the plan of {key!r} must be ColWiseParallel / RowWiseParallel "
                                f"(or a list of them), got {p!r}")
    for name, layer in model.named_sublayers():
        for key, plans in plan.items():
            params = _match(key, layer, name)
            if params is None:
                continue
            for p in plans if isinstance(plans, list) else [plans]:
                p.apply(layer, mesh_of(layer), params)


def _param_slots(model) -> dict:
    """(sublayer id, attribute) -> parameter, over the whole model."""
    return {(id(layer), key): p for _, layer in model.named_sublayers(include_self=True)
            for key, p in layer._parameters.items() if p is not None}


def _rebind(optimizer, mapping: dict) -> None:
    """The optimizer's parameter groups (and their state_dict keys) with each parameter replaced by its
    distributed version."""
    inner = getattr(optimizer, "_inner_opt", optimizer)
    for group in inner.param_groups:
        group["params"] = [mapping.get(id(p), p) for p in group["params"]]
    keys = getattr(inner, "_keys", None)
    if isinstance(keys, dict):
        for old, new in mapping.items():
            if old in keys:
                keys[id(new)] = keys.pop(old)


def parallelize(model, optimizer=None, mesh=None, config=None):
    """Paddle's parallelize: pipeline stages (pp_config), tensor-parallel plans (mp_config), then data parallel
    (dp_config: the parameters replicated over dp; sharding_level 1/2/3 wraps the optimizer with
    shard_optimizer(ShardingStage1/2/3("dp"))). Every parameter left plain is replicated (on its stage's mesh
    with pp_config). Returns (model, optimizer). The batch must be sharded over "dp" by the caller
    (shard_dataloader / shard_tensor), as in Paddle; with pp_config the inputs go on the first stage's mesh and
    the labels on the last's."""
    what = "parallelize()"
    if config is None:
        warnings.warn("parallelize(): config is None: the model and optimizer are returned unchanged", stacklevel=2)
        return model, optimizer
    if not isinstance(config, dict):
        raise TypeError(f"{what}: argument 'config' must be a dict (dp_config / mp_config), got "
                        f"{type(config).__name__}")
    unknown = set(config) - {"dp_config", "mp_config", "pp_config", "cp_config"}
    if unknown:
        raise ValueError(f"{what}: config has unknown keys {sorted(unknown)}; accepted: dp_config, mp_config, "
                         f"pp_config (cp_config is refused)")
    if config.get("cp_config") is not None:
        raise NotImplementedError(f"{what}: cp_config (context parallel) is not supported by oarlock (dp_config, "
                                  f"mp_config and pp_config are)")
    if mesh is not None:
        set_mesh(mesh)
    mesh = get_mesh()
    if mesh is None:
        raise ValueError(f"{what}: no mesh: pass mesh= or call set_mesh first")
    before = _param_slots(model)
    stage_mesh = {}
    if config.get("pp_config") is not None:
        from oarlock_autoparallel.pipeline import pipeline
        stage_mesh = pipeline(model, mesh, config["pp_config"])

    def mesh_of(layer):
        return stage_mesh.get(id(layer), mesh)
    mp = config.get("mp_config")
    if mp is not None:
        _tensor_parallel(model, mesh_of, mp.get("parallelize_plan", {}))
    for _, layer in model.named_sublayers(include_self=True):
        replicate_rest(layer, mesh_of(layer))
    if optimizer is not None:      # it was built on the plain parameters: point it at the distributed ones
        after = _param_slots(model)
        _rebind(optimizer, {id(p): after[slot] for slot, p in before.items() if after.get(slot) is not p})
    dp = config.get("dp_config")
    if dp is not None and optimizer is not None:
        level = dp.get("sharding_level", 0)
        if level not in (0, 1, 2, 3):
            raise ValueError(f"{what}: dp_config['sharding_level'] must be 0, 1, 2 or 3, got {level!r}")
        if level:
            from oarlock_autoparallel.api_optimizer import (ShardingStage1, ShardingStage2, ShardingStage3,
                                                            shard_optimizer)
            stage = {1: ShardingStage1, 2: ShardingStage2, 3: ShardingStage3}[level]("dp")
            optimizer = shard_optimizer(optimizer, stage)
    return model, optimizer
