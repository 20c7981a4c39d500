"""shard_layer (Paddle 3.2's paddle.distributed.shard_layer) and shard_dataloader: a layer's parameters and
buffers become DistTensors (shard_fn decides, the rest replicated), input_fn / output_fn become forward hooks;
a dataloader's batches become DistTensors sharded on the batch dim."""

from __future__ import annotations

from oarlock import Tensor

from oarlock_autoparallel.dtensor import DistTensor
from oarlock_autoparallel.mesh import ProcessMesh
from oarlock_autoparallel.placements import Replicate, Shard


def check_mesh(mesh, what: str, arg: str = "process_mesh"):
    if not isinstance(mesh, ProcessMesh):
        raise ValueError(f"{what}: argument '{arg}' must be a ProcessMesh, got {type(mesh).__name__}")


def _check_fn(fn, what, arg):
    if fn is not None and not callable(fn):
        raise TypeError(f"{what}: argument '{arg}' must be a function or None, got {type(fn).__name__}")


def replicate_rest(layer, mesh) -> None:
    """Every parameter and buffer of `layer` itself that is not distributed yet becomes replicated on mesh."""
    from oarlock_autoparallel.dtensor_api import shard_tensor
    for key, param in list(layer._parameters.items()):
        if param is not None and not isinstance(param, DistTensor):
            layer.add_parameter(key, shard_tensor(param, mesh, [Replicate()] * mesh.ndim))
    for key, buffer in list(layer._buffers.items()):
        if buffer is not None and not isinstance(buffer, DistTensor):
            layer.register_buffer(key, shard_tensor(buffer, mesh, [Replicate()] * mesh.ndim))


def shard_layer(layer, process_mesh, shard_fn=None, input_fn=None, output_fn=None):
    """Paddle's shard_layer: shard_fn(layer_name, sublayer, mesh) for every sublayer (the layer itself included,
    name ""), then every parameter / buffer left plain is replicated; input_fn(inputs, mesh) and
    output_fn(outputs, mesh) run as forward pre / post hooks. Returns the layer."""
    what = "shard_layer()"
    if process_mesh is None:
        raise ValueError(f"{what}: argument 'process_mesh' must be a ProcessMesh, got None")
    check_mesh(process_mesh, what)
    for arg, fn in (("shard_fn", shard_fn), ("input_fn", input_fn), ("output_fn", output_fn)):
        _check_fn(fn, what, arg)
    for name, sub in layer.named_sublayers(include_self=True):
        if shard_fn is not None:
            shard_fn(name, sub, process_mesh)
        replicate_rest(sub, process_mesh)
    if input_fn is not None:
        layer.register_forward_pre_hook(lambda _, inputs: input_fn(inputs, process_mesh))
    if output_fn is not None:
        layer.register_forward_post_hook(lambda _, inputs, outputs: output_fn(outputs, process_mesh))
    return layer


class ShardDataloader:
    """Batches of `dataloader` as DistTensors: each tensor (the ones named by input_keys for dict batches)
    sharded on its dim 0 over the mesh dim `shard_dims` (a name or index; None: replicated)."""

    def __init__(self, dataloader, mesh, input_keys=None, shard_dims=None, is_dataset_splitted=False):
        self._dataloader, self._mesh, self._keys = dataloader, mesh, input_keys
        self._split = is_dataset_splitted
        self._placements = [Replicate()] * mesh.ndim
        if shard_dims is not None:
            axis = mesh.dim_names.index(shard_dims) if isinstance(shard_dims, str) else int(shard_dims)
            self._placements[axis] = Shard(0)

    def _convert(self, value):
        from oarlock_autoparallel.dtensor_api import dtensor_from_local, shard_tensor
        if isinstance(value, Tensor) and not isinstance(value, DistTensor):
            if self._split:    # each rank's loader already yields its piece
                return dtensor_from_local(value, self._mesh, self._placements)
            return shard_tensor(value, self._mesh, self._placements)
        if isinstance(value, (list, tuple)):
            return type(value)(self._convert(v) for v in value)
        if isinstance(value, dict):
            return {k: self._convert(v) if self._keys is None or k in self._keys else v for k, v in value.items()}
        return value

    def __iter__(self):
        for batch in self._dataloader:
            yield self._convert(batch)

    def __len__(self):
        return len(self._dataloader)

    def __call__(self):
        return iter(self)


def shard_dataloader(dataloader, meshes, input_keys=None, shard_dims=None, is_dataset_splitted=False,
                     dense_tensor_idx=None):
    """Paddle's shard_dataloader for one mesh (a list of meshes: the first one; pipeline stages are not
    supported): every batch's tensors sharded on dim 0 over mesh dim `shard_dims`."""
    what = "shard_dataloader()"
    mesh = meshes[0] if isinstance(meshes, (list, tuple)) and meshes else meshes
    check_mesh(mesh, what, "meshes")
    if isinstance(shard_dims, str) and shard_dims not in mesh.dim_names:
        raise ValueError(f"{what}: argument 'shard_dims' = {shard_dims!r} is not a dim of the mesh "
                         f"(dim_names {mesh.dim_names})")
    if isinstance(shard_dims, int) and not 0 <= shard_dims < mesh.ndim:
        raise ValueError(f"{what}: argument 'shard_dims' = {shard_dims} is out of range for a mesh of "
                         f"{mesh.ndim} dims")
    return ShardDataloader(dataloader, mesh, input_keys, shard_dims, is_dataset_splitted)
