"""shard_optimizer and ShardingStage1/2/3 (Paddle 3.2's paddle.distributed.shard_optimizer): the optimizer's
states (moments) are placed by shard_fn(state_name, param, state) when they are created.

The update itself needs nothing special: optimizer steps are in-place ops, which spmd.py runs in the most
sharded layout among the tensors they write and reshards back (see spmd.py). So with ShardingStage1 on mesh dim
"dp", moments are Shard(0) over dp, each rank updates its slice of a replicated parameter and the parameter is
all-gathered: ZeRO stage 1. Stage 2 also keeps the gradients sharded: their sum over dp is taken out of backward
and done as a reduce-scatter at its end, each rank keeping only its shard as .grad (sharded_grads.py); stage 3
also shards the parameters on that mesh dim, so each op gathers them where its rule needs them, and the
gradient goes back through that gather unsummed and is reduce-scattered onto the shards (reshard.gather_unsummed)."""

from __future__ import annotations

from oarlock import Tensor

from oarlock_autoparallel.dtensor import DistTensor
from oarlock_autoparallel.placements import Replicate, Shard


class _ShardingStageBase:
    def __init__(self, sharding_mesh_dim, mesh=None):
        if not isinstance(sharding_mesh_dim, (int, str)) or isinstance(sharding_mesh_dim, bool):
            raise TypeError(f"{type(self).__name__}(): argument 'sharding_mesh_dim' must be a mesh dim index or "
                            f"name, got {sharding_mesh_dim!r}")
        self._sharding_mesh_dim, self._mesh = sharding_mesh_dim, mesh

    def _axis(self, mesh) -> int:
        d = self._sharding_mesh_dim
        if isinstance(d, str):
            if d not in mesh.dim_names:
                raise ValueError(f"{type(self).__name__}: sharding_mesh_dim {d!r} is not a dim of the mesh "
                                 f"(dim_names {mesh.dim_names})")
            return mesh.dim_names.index(d)
        if not 0 <= d < mesh.ndim:
            raise ValueError(f"{type(self).__name__}: sharding_mesh_dim {d} is out of range for a mesh of "
                             f"{mesh.ndim} dims")
        return d

    def sharded_placements(self, param) -> list:
        """param's placements with its first tensor dim that no other mesh dim shards (and at least as large
        as the mesh dim) sharded over the sharding mesh dim; unchanged when there is none."""
        mesh = param.process_mesh
        axis = self._axis(mesh)
        placements = list(param.placements)
        if not placements[axis].is_replicated():
            return placements
        taken = {p.get_dim() for p in placements if p.is_shard()}
        for d, size in enumerate(param.shape):
            if d not in taken and size >= mesh.shape[axis]:
                placements[axis] = Shard(d)
                break
        return placements

    def _place(self, param, tensor, placements):
        from oarlock_autoparallel.reshard import reshard
        if isinstance(tensor, DistTensor):
            return reshard(tensor, param.process_mesh, placements)
        from oarlock_autoparallel.dtensor_api import shard_tensor
        return shard_tensor(tensor, param.process_mesh, placements)

    def __call__(self, key, param, tensor):
        if not isinstance(param, DistTensor) or not isinstance(tensor, Tensor):
            return tensor
        if list(tensor.shape) != list(param.shape):     # beta powers, step counts: replicated
            return self._place(param, tensor, [Replicate()] * param.process_mesh.ndim)
        return self._place(param, tensor, self.sharded_placements(param))


class ShardingStage1(_ShardingStageBase):
    """shard_fn for shard_optimizer: optimizer states sharded over `sharding_mesh_dim` (ZeRO stage 1)."""


class ShardingStage2(ShardingStage1):
    """Stage 1 plus sharded gradients: each rank reduce-scatters the gradients over the sharding mesh dim and
    keeps only its shard (sharded_grads.py), applied when shard_optimizer wraps."""

    def shard_gradients(self, params):
        from oarlock_autoparallel.sharded_grads import ShardedGradients
        return ShardedGradients(params, lambda p: self._axis(p.process_mesh), self.sharded_placements)


class ShardingStage3(_ShardingStageBase):
    """Stage 2 plus parameters sharded over `sharding_mesh_dim` (applied when shard_optimizer wraps)."""

    def shard_parameters(self, params) -> None:
        """Re-lay every distributed parameter sharded over the sharding mesh dim, in place (same object)."""
        import oarlock
        from oarlock_autoparallel.reshard import reshard
        from oarlock_autoparallel.sharded_grads import defer_gradient_sum
        for p in params:
            if not isinstance(p, DistTensor):
                continue
            placements = self.sharded_placements(p)
            if placements == list(p.placements):
                continue
            with oarlock.no_grad():
                moved = reshard(p, p.process_mesh, placements)
            local = moved._local_value().detach()
            stop = p.stop_gradient
            p._local, p._placements = local, placements
            p.stop_gradient = stop
            # ops gather it over the sharding dim with a reduce-scatter as the gradient's way back
            defer_gradient_sum(local, {self._axis(p.process_mesh)})


class _ShardOptimizer:
    """The optimizer with its states placed by shard_fn; everything else is the wrapped optimizer's."""

    def __init__(self, optimizer, shard_fn=None, gradient_accumulation_steps=1):
        self._inner_opt = optimizer
        self._shard_fn = shard_fn
        self.gradient_accumulation_steps = gradient_accumulation_steps
        if shard_fn is None:
            return
        original = optimizer._new_state

        def new_state(param, group):
            state = original(param, group)
            return {k: shard_fn(k, param, v) if isinstance(v, Tensor) else v for k, v in state.items()}
        optimizer._new_state = new_state
        if isinstance(shard_fn, ShardingStage3):
            shard_fn.shard_parameters(optimizer._parameters())
        if isinstance(shard_fn, ShardingStage2):
            self._sharded_grads = shard_fn.shard_gradients(optimizer._parameters())

    def step(self, closure=None):
        return self._inner_opt.step(closure)

    def clear_grad(self, set_to_zero=True):
        sharded = self.__dict__.get("_sharded_grads")
        if sharded is not None:
            sharded.clear()
        return self._inner_opt.clear_grad(set_to_zero)

    def __getattr__(self, name):
        return getattr(self.__dict__["_inner_opt"], name)


def shard_optimizer(optimizer, shard_fn=None, gradient_accumulation_steps=1):
    """Paddle's shard_optimizer: the optimizer whose states shard_fn(state_name, param, state) places
    (ShardingStage1/2/3 or your own); shard_fn None keeps them laid out like their parameters."""
    what = "shard_optimizer()"
    if not hasattr(optimizer, "step") or not hasattr(optimizer, "_new_state"):
        raise TypeError(f"{what}: argument 'optimizer' must be an oarlock optimizer, got {type(optimizer).__name__}")
    if shard_fn is not None and not callable(shard_fn):
        raise TypeError(f"{what}: argument 'shard_fn' must be a function or a ShardingStage, got {shard_fn!r}")
    if not isinstance(gradient_accumulation_steps, int) or gradient_accumulation_steps < 1:
        raise ValueError(f"{what}: argument 'gradient_accumulation_steps' must be a positive int, got "
                         f"{gradient_accumulation_steps!r}")
    return _ShardOptimizer(optimizer, shard_fn, gradient_accumulation_steps)
