"""parallelize's pp_config (Paddle 3.2's intermediate pipeline_parallel): the model's sublayers split into
pipeline stages, each stage's parameters on its own sub-mesh of the mesh's "pp" dim, the activation moved to
the next stage's mesh after each split layer (a forward post hook: reshard between meshes of other processes,
which is differentiable, see reshard.py).

pp_config = {"split_spec": ..., "global_spec": ...}:
- split_spec a layer-list prefix ("blocks") or a list of them: the numbered layers under it ("blocks.0",
  "blocks.1", ...) are divided evenly over the pp stages (the first stages take one more when they do not
  divide, as Paddle); a dict {layer name: SplitPoint.END}: the split after each named layer, in order (one
  fewer than the pp size). SplitPoint.BEGINNING is refused, as in Paddle 3.2.
- global_spec is not supported (an error).
Stages follow the order of model.named_sublayers(): every sublayer after a split layer's subtree is in the next
stage. As in Paddle's dynamic mode, every rank runs the whole forward and calls loss.backward(); a rank computes
only its stage (the others hold empty pieces), and the stages run one after the other (no micro-batch schedule).
The batch is placed by the caller: the inputs on the first stage's mesh, the labels on the last's."""

from __future__ import annotations

import re
from enum import Enum


class SplitPoint(Enum):
    """Where a pipeline split falls relative to the named layer (Paddle's dist.SplitPoint)."""
    BEGINNING = 0
    END = 1


def split_points(model, split_spec, pp_size: int) -> list:
    """The names of the layers after which a stage ends (pp_size - 1 of them, in order)."""
    what = "parallelize(): pp_config['split_spec']"
    names = [name for name, _ in model.named_sublayers()]
    if isinstance(split_spec, dict):
        for name, point in split_spec.items():
            if name not in names:
                raise ValueError(f"{what} names layer {name!r}, which the model does not have; its layers: "
                                 f"{', '.join(names[:12])}{', ...' if len(names) > 12 else ''}")
            if point is SplitPoint.BEGINNING:
                raise NotImplementedError(f"{what}: SplitPoint.BEGINNING (layer {name!r}) is not supported, as in "
                                          f"Paddle 3.2; use SplitPoint.END on the layer before")
            if point is not SplitPoint.END:
                raise TypeError(f"{what}: the split point of {name!r} must be SplitPoint.END, got {point!r}")
        points = list(split_spec)
    elif isinstance(split_spec, (str, list, tuple)):
        prefixes = [split_spec] if isinstance(split_spec, str) else list(split_spec)
        if not prefixes or not all(isinstance(p, str) for p in prefixes):
            raise TypeError(f"{what} must be a layer name prefix, a list of them or a dict, got {split_spec!r}")
        matched = [n for n in names if any(re.fullmatch(rf"{re.escape(p)}\.\d+", n) for p in prefixes)]
        if len(matched) < pp_size:
            raise ValueError(f"{what} {split_spec!r} matches {len(matched)} numbered layers ({matched}); the pp dim "
                             f"has {pp_size} stages, each needs at least one")
        base, extra = divmod(len(matched), pp_size)
        ends, index = [], -1
        for stage in range(pp_size - 1):
            index += base + (1 if stage < extra else 0)
            ends.append(matched[index])
        points = ends
    else:
        raise TypeError(f"{what} must be a layer name prefix, a list of them or a dict, got "
                        f"{type(split_spec).__name__}")
    if len(points) != pp_size - 1:
        raise ValueError(f"{what} has {len(points)} split points; the pp dim has {pp_size} stages, so it needs "
                         f"{pp_size - 1}")
    return points


def stage_of_layers(model, points) -> dict:
    """id(sublayer) -> its stage index, the model itself in stage 0."""
    stages, stage, pending = {id(model): 0}, 0, list(points)
    closing = None
    for name, layer in model.named_sublayers():
        if closing is not None and not name.startswith(closing + "."):
            stage, closing = stage + 1, None
        stages[id(layer)] = stage
        if pending and name == pending[0]:
            closing = pending.pop(0)
    if closing is not None or pending:
        raise ValueError(f"parallelize(): pp_config['split_spec']: nothing follows split layer "
                         f"{(closing or pending[0])!r}, so its stage would be the last and the later stages empty")
    return stages


def pipeline(model, mesh, pp_config) -> dict:
    """Split `model` as pp_config says on `mesh` (which has a "pp" dim); returns id(sublayer) -> stage mesh."""
    what = "parallelize()"
    if not isinstance(pp_config, dict):
        raise TypeError(f"{what}: pp_config must be a dict (split_spec, global_spec), got {type(pp_config).__name__}")
    unknown = set(pp_config) - {"split_spec", "global_spec"}
    if unknown:
        raise ValueError(f"{what}: pp_config has unknown keys {sorted(unknown)}; accepted: split_spec, global_spec")
    if pp_config.get("global_spec"):
        raise NotImplementedError(f"{what}: pp_config['global_spec'] is not supported by oarlock (split_spec is)")
    if "pp" not in mesh.dim_names:
        raise ValueError(f"{what}: pp_config needs a mesh dim named 'pp', got dim_names {mesh.dim_names}")
    if pp_config.get("split_spec") is None:
        raise ValueError(f"{what}: pp_config needs 'split_spec' (the layers to split the model at)")
    pp_size = mesh.shape[mesh.dim_names.index("pp")]
    points = split_points(model, pp_config["split_spec"], pp_size)
    stages = stage_of_layers(model, points)
    meshes = [mesh.get_mesh_with_dim("pp", i) for i in range(pp_size)]
    layers = dict(model.named_sublayers())
    for i, name in enumerate(points):
        layers[name].register_forward_post_hook(_to_stage(meshes[i + 1]))
    return {key: meshes[stage] for key, stage in stages.items()}


def _to_stage(mesh):
    """A forward post hook moving a layer's output(s) onto `mesh` with their placements."""
    from oarlock_autoparallel.dtensor import DistTensor
    from oarlock_autoparallel.reshard import reshard

    def move(t):
        if isinstance(t, DistTensor):
            return reshard(t, mesh, t.placements)
        if isinstance(t, (list, tuple)):
            return type(t)(move(x) for x in t)
        if isinstance(t, dict):
            return {k: move(v) for k, v in t.items()}
        return t

    return lambda layer, inputs, output: move(output)
