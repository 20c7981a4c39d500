"""Sharding stage 2 (group_sharded_parallel levels 'os' and 'os_g'): Paddle's GroupShardedOptimizerStage2 and
GroupShardedStage2.

Each parameter has one owner rank of the group (Paddle's stage-2 assignment: in parameter order, each to the
rank with the fewest trainable elements so far). The model wrapper reduces each gradient to its owner during
backward and the other ranks drop it (oarlock_parallel.sharding_reducer), so each rank holds ~1/N of the
gradients; the optimizer keeps state for the owned parameters only (~1/N of it), updates them (the global
norm of a ClipGradByGlobalNorm summed over the group) and broadcasts each parameter from its owner. With a
dp_group, the owned gradients are also averaged over it before the update (stage 2 x data parallel).
"""

from __future__ import annotations

import oarlock
import oarlock.distributed as dist
from oarlock.nn import Layer

from oarlock_parallel import sharding_common as common
from oarlock_parallel.dp_utils import broadcast_tensors, resolve_group
from oarlock_parallel.sharding_reducer import OwnerReducer
from oarlock_parallel.wrapper import WrapperLayer

_OPT = "GroupShardedOptimizerStage2()"
_MODEL = "GroupShardedStage2()"


def _group(group, what: str, argument: str = "group"):
    """`group` checked (a group this rank is in), or the world; None with one process and no world."""
    common.check_member(group, what, argument)
    return resolve_group(group, what)


def _check_offload(offload, params, what: str) -> bool:
    """Paddle's offload keeps the optimizer's (float32 master) state in host memory. oarlock's state lives
    with its parameter: for CPU parameters it is in host memory already, so offload changes nothing; for
    parameters on a device it is not implemented."""
    if not isinstance(offload, bool):
        raise TypeError(f"{what}: offload must be a bool, got {offload!r}")
    if offload:
        elsewhere = sorted({str(p.place) for p in params if not str(p.place).startswith("cpu")})
        if elsewhere:
            raise NotImplementedError(f"{what}: offload=True with parameters on {elsewhere} is not implemented in "
                                      f"oarlock-parallel (CPU parameters keep their optimizer state in host memory "
                                      f"already)")
    return offload


def check_buffer_size(buffer_max_size, what: str) -> None:
    if isinstance(buffer_max_size, bool) or not isinstance(buffer_max_size, int) or buffer_max_size < 0:
        raise ValueError(f"{what}: buffer_max_size must be an int >= 0 (elements), got {buffer_max_size!r}")


class GroupShardedOptimizerStage2(common.OwnedOptimizerState):
    """Paddle's GroupShardedOptimizerStage2(params, optim, group=None, offload=False, device, pretrain_sync_models=True,
    dp_group=None): `optim` keeps state for the parameters this rank owns in `group` (the world when None).
    Used with GroupShardedStage2 (group_sharded_parallel does both), which reduces the gradients to their
    owners. `device` is accepted for Paddle's signature (parameters stay where they are)."""

    _INNER, _NAME = "_optim", "GroupShardedOptimizerStage2"

    def __init__(self, params, optim, group=None, offload=False, device="cpu", pretrain_sync_models=True,
                 dp_group=None, **kw):
        common.check_optimizer(optim, _OPT)
        self._group = _group(group, _OPT)
        common.check_member(dp_group, _OPT, "dp_group")
        self._dp_group = dp_group
        params = [p for item in params for p in (item["params"] if isinstance(item, dict) else [item])]
        known = {id(p) for p in common.parameters_of(optim)}
        if not params or any(id(p) not in known for p in params):
            raise ValueError(f"{_OPT}: params must be the optimizer's parameters (optimizer._parameter_list), got "
                             f"{len(params)} tensor(s) of which {sum(id(p) not in known for p in params)} are not "
                             f"the optimizer's")
        self.offload = _check_offload(offload, params, _OPT)
        self._optim, self._local_params = optim, params
        self._model = None     # the GroupShardedStage2 that reduces the gradients to their owners
        self.world_size = 1 if self._group is None else self._group.nranks
        self._rank = 0 if self._group is None else self._group.rank
        self._owners = common.partition(params, self.world_size, sort_by_size=False)
        self._param2rank = {id(p): r for p, r in zip(params, self._owners)}
        if pretrain_sync_models:
            self._sync_params_and_buffers()
        self._owned = {id(p) for p, r in zip(params, self._owners) if r == self._rank}
        shards = [] if self._group is None else [self._group]
        common.wrap_clips(optim, common.fleet_model_parallel_group(), shards)

    def __getattr__(self, name):
        if name == "_optim":
            raise AttributeError(name)
        return getattr(self._optim, name)

    def _sync_params_and_buffers(self):
        """Every rank starts from the group's first rank's parameters (then the dp group's first rank's); as in
        Paddle, despite the name, buffers are left to sync_buffers."""
        for group in (self._group, self._dp_group):
            broadcast_tensors(self._local_params, group)

    @property
    def local_params(self) -> list:
        """Every parameter this optimizer shards (Paddle's name: the params given, not only the owned)."""
        return self._local_params

    def owner_of(self, param) -> int:
        """The rank (in the group) that owns `param`."""
        return self._param2rank[id(param)]

    @property
    def owned_params(self) -> list:
        return [p for p, r in zip(self._local_params, self._owners) if r == self._rank]

    def step(self):
        """Average the owned gradients over dp_group (if any), update the owned parameters, broadcast every
        parameter from its owner."""
        if self._model is None and self.world_size > 1:
            raise RuntimeError("GroupShardedOptimizerStage2.step(): no GroupShardedStage2 wraps the model, so the "
                               "gradients were not reduced to their owners; wrap both with group_sharded_parallel()")
        if self._dp_group is not None and self._dp_group.nranks > 1:
            with oarlock.no_grad():
                tasks = [dist.all_reduce(p.grad, op=dist.ReduceOp.AVG, group=self._dp_group, sync_op=False)
                         for p in self.owned_params if not p.stop_gradient and p.grad is not None]
                for task in tasks:
                    task.wait()
        common.step_owned(self._optim, self._owned)
        common.broadcast_from_owners(self._local_params, self._owners, self._group)

    def minimize(self, *args, **kwargs):
        raise RuntimeError("GroupShardedOptimizerStage2.minimize(): not supported (as in Paddle); call "
                           "loss.backward() and optimizer.step()")

    def clear_grad(self, set_to_zero=True):
        """Clear the owned gradients (zeroed, or dropped with set_to_zero=False); the others are dropped."""
        with oarlock.no_grad():
            for p, owner in zip(self._local_params, self._owners):
                if p.grad is not None:
                    if set_to_zero and owner == self._rank:
                        oarlock.zero_tensors_([p.grad])
                    else:
                        p.grad = None

    def zero_grad(self, set_to_none=True):
        self.clear_grad(set_to_zero=not set_to_none)

    def get_lr(self):
        return self._optim.get_lr()

    def set_lr(self, lr):
        self._optim.set_lr(lr)


class GroupShardedStage2(WrapperLayer):
    """Paddle's GroupShardedStage2(layer, sharding_optimizer, group=None, sync_buffers=False,
    buffer_max_size=2**23, auto_refresh_trainable=True, device, dp_group=None): runs `layer` and reduces each
    gradient to its owner during backward (buckets of at most buffer_max_size elements). sync_buffers
    broadcasts the buffers from the group's first rank before each forward. state_dict keys carry no wrapper
    prefix. The trainable set is fixed when wrapping (auto_refresh_trainable is accepted, not acted on)."""

    _WRAPPED = "_layer"

    def __init__(self, layer, sharding_optimizer, group=None, sync_buffers=False, buffer_max_size=2**23,
                 auto_refresh_trainable=True, device="cpu", dp_group=None):
        super().__init__()
        if not isinstance(layer, Layer):
            raise TypeError(f"{_MODEL}: layer must be an oarlock.nn.Layer, got {type(layer).__name__}")
        optimizers = sharding_optimizer if isinstance(sharding_optimizer, list) else [sharding_optimizer]
        if len(optimizers) != 1 or not isinstance(optimizers[0], GroupShardedOptimizerStage2):
            raise TypeError(f"{_MODEL}: sharding_optimizer must be one GroupShardedOptimizerStage2, got "
                            f"{type(sharding_optimizer).__name__}")
        check_buffer_size(buffer_max_size, _MODEL)
        optimizer = optimizers[0]
        group = _group(group, _MODEL)
        if (None if group is None else group.ranks) != (None if optimizer._group is None else optimizer._group.ranks):
            raise ValueError(f"{_MODEL}: group {group} differs from the optimizer's group {optimizer._group}")
        self._layer, self._sharding_optimizers = layer, optimizers
        optimizer._model = self
        self._group, self._dp_group = optimizer._group, optimizer._dp_group
        self._sync_buffers = bool(sync_buffers)
        self._reducer = None
        if self._group is not None and self._group.nranks > 1:
            names = {id(p): name for name, p in layer.named_parameters()}
            chosen = [(p, r) for p, r in zip(optimizer.local_params, optimizer._owners) if not p.stop_gradient]
            self._reducer = OwnerReducer([names.get(id(p), f"param_{i}") for i, (p, _) in enumerate(chosen)],
                                         [p for p, _ in chosen], [r for _, r in chosen], self._group,
                                         buffer_max_size)

    def forward(self, *inputs, **kwargs):
        if self._reducer is not None:
            self._reducer.abandon()       # a new forward: any backward before it is over
        if self._sync_buffers:
            for group in (self._group, self._dp_group):
                broadcast_tensors(self._layer.buffers(), group)
        return self._layer(*inputs, **kwargs)


