"""GroupShardedStage3 (Paddle's group_sharded_stage3.py, level 'p_g_os'): data parallel over `group` with
parameters, gradients and optimizer states partitioned (ZeRO stage 3).

Every parameter bigger than `segment_size` elements is split into `group.nranks` equal flat pieces (the
last padded); each rank keeps its piece, the piece's gradient and the optimizer's state for it (the
optimizer's parameter groups hold the pieces in place of the parameters). A sublayer owning such
parameters gathers them just before its forward and frees them after; backward gathers them again,
recomputes that sublayer and reduce-scatters the averaged gradient into the pieces (see
sharding_stage3_hooks.py for why and how). Smaller parameters, parameters shared by two sublayers and the
parameters of `exclude_layer` stay whole on every rank ("unsliced"): their gradients are averaged over the
group when the optimizer steps, as Paddle does.

`get_all_parameters()` puts the full weights back into the layer (for saving or evaluation; the next
forward frees them again); `state_dict()` gives the full weights; `set_state_dict()` loads full weights
into the pieces. CPU tensors are allowed (Paddle asserts a GPU).
"""

from __future__ import annotations

import types

import oarlock
import oarlock.distributed as dist
from oarlock.nn import Layer
from oarlock.plugin_api import array_of, wrap

from oarlock_parallel.dp_utils import broadcast_tensors
from oarlock_parallel.sharding_common import check_member
from oarlock_parallel.sharding_stage3_hooks import Partition, Plan, run_gathered, stage3_clip

__all__ = ["GroupShardedStage3"]

_WHERE = "GroupShardedStage3()"


def _check_arguments(layer, optimizer, segment_size, exclude_layer):
    """Every check that needs no communication, so a bad argument fails on every rank before any collective."""
    if not isinstance(layer, Layer):
        raise TypeError(f"{_WHERE}: layer must be an oarlock.nn.Layer, got {type(layer).__name__}")
    if not layer.parameters():
        raise ValueError(f"{_WHERE}: layer {type(layer).__name__} has no parameters; there is nothing to shard")
    if isinstance(optimizer, (list, tuple)) or not hasattr(optimizer, "_param_groups"):
        raise TypeError(f"{_WHERE}: optimizer must be one oarlock optimizer (multiple optimizers are not "
                        f"supported), got {type(optimizer).__name__}")
    if isinstance(segment_size, bool) or not isinstance(segment_size, int) or segment_size < 0:
        raise ValueError(f"{_WHERE}: segment_size must be an int >= 0, got {segment_size!r}")
    if exclude_layer is not None and not isinstance(exclude_layer, (list, tuple)):
        raise TypeError(f"{_WHERE}: exclude_layer must be a list of layer class names or id(layer)s, got "
                        f"{type(exclude_layer).__name__}")
    owned = {id(p) for p in layer.parameters()}
    stray = [p.name for p in optimizer._parameters() if id(p) not in owned]
    if stray:
        raise ValueError(f"{_WHERE}: the optimizer updates parameter(s) {stray[:5]} that are not in the layer; "
                         f"build it with layer.parameters()")


class GroupShardedStage3(Layer):
    """Paddle's GroupShardedStage3(layer, optimizer, group=None, sync_buffers=False, device, segment_size=2**20,
    pretrain_sync_models=True, offload=False, sync_comm=False, dp_group=None, exclude_layer=None).

    offload and sync_comm are accepted for Paddle compatibility: the pieces already live on `device`, and the
    collectives here are synchronous."""

    def __init__(self, layer, optimizer, group=None, sync_buffers=False, device="cpu", segment_size=2**20,
                 pretrain_sync_models=True, offload=False, sync_comm=False, dp_group=None, exclude_layer=None):
        super().__init__()
        _check_arguments(layer, optimizer, segment_size, exclude_layer)
        check_member(group, _WHERE, "group")
        check_member(dp_group, _WHERE, "dp_group")
        self._layer = layer
        self._optim = optimizer
        self._default_device, self._offload, self._sync_comm = device, offload, sync_comm
        self.__sync_buffers = sync_buffers
        self._segment_size = segment_size
        self._exclude_layer = list(exclude_layer or [])
        self._group = dist.new_group(list(range(dist.get_world_size()))) if group is None else group
        self._dp_group = dp_group
        self._rank = self._group.rank
        self._global_root_rank = self._group.ranks[0]
        if pretrain_sync_models:
            self._sync_params_and_buffers()
        self._partitions: dict = {}       # id(param) -> Partition
        self._unslice_params: list = []   # kept whole on every rank, gradients averaged at step
        self._plans: list = []
        self._segment_rank_params()
        self._install_optimizer()

    # -- setting up ------------------------------------------------------------------------------------------
    def _excluded(self, layer) -> bool:
        return id(layer) in self._exclude_layer or type(layer).__name__ in self._exclude_layer

    def _segment_rank_params(self):
        """Partition each big parameter and wrap its owner's forward; the rest stay whole."""
        owners: dict = {}
        for path, sub in self._layer.named_sublayers(include_self=True):
            for p in sub.parameters(include_sublayers=False):
                owners.setdefault(id(p), []).append((path or type(sub).__name__, sub))
        for path, sub in self._layer.named_sublayers(include_self=True):
            parts = []
            for p in sub.parameters(include_sublayers=False):
                shared = len(owners[id(p)]) > 1      # used by two sublayers: cannot be freed after one of them
                # a parameter that takes no gradient (BatchNorm's running statistics) is state the forward
                # writes in place: partitioned, the write would go to a gathered copy and be lost
                if self._excluded(sub) or shared or p.size <= self._segment_size or p.stop_gradient:
                    if p.trainable and all(q is not p for q in self._unslice_params):
                        self._unslice_params.append(p)
                    continue
                part = self._partitions[id(p)] = Partition(p, self._group, path or type(sub).__name__)
                parts.append(part)
            if parts:
                plan = Plan(sub, sub.forward, parts, self._dp_group)
                sub.forward = types.MethodType(lambda _, *args, _plan=plan, **kw: run_gathered(_plan, args, kw),
                                               sub)
                self._plans.append(plan)
                plan.free()

    def _install_optimizer(self):
        """The optimizer updates the pieces in place of the partitioned parameters; its global-norm clip
        counts each piece once; its step first averages the unsliced parameters' gradients."""
        opt = self._optim
        for group in opt._param_groups:
            params = []
            for p in group["params"]:
                part = self._partitions.get(id(p))
                if part is not None:
                    opt._keys[id(part.piece)] = opt._keys.pop(id(p))
                    opt._state.pop(id(p), None)
                    p = part.piece
                params.append(p)
            group["params"] = params
        replicated = {id(p) for p in self._unslice_params}
        opt._grad_clip = stage3_clip(opt._grad_clip, self._group, replicated)
        for group in opt._param_groups:
            group["grad_clip"] = stage3_clip(group.get("grad_clip"), self._group, replicated)
        inner_step = opt.step

        def step(optimizer, closure=None):
            loss = None
            if closure is not None:
                with oarlock.enable_grad():
                    loss = closure()
            self._reduce_unsliced_grads()
            inner_step()
            return loss

        opt.step = types.MethodType(step, opt)

    def _broadcast(self, tensors):
        """The group's first rank's values (then the dp group's first rank's) on every rank."""
        tensors = list(tensors)
        for group in (self._group, self._dp_group):
            broadcast_tensors(tensors, group)

    def _sync_params_and_buffers(self):
        self._broadcast(self._layer.parameters() + self._layer.buffers())

    def _sync_buffers(self):
        self._broadcast(self._layer.buffers())

    @oarlock.no_grad()
    def _reduce_unsliced_grads(self):
        """Average the unsliced parameters' gradients in one all-reduce (with a has-gradient flag each, so
        a parameter no rank used keeps no gradient, as in one process)."""
        params = self._unslice_params
        if not params:
            return
        grads = [p.grad.astype("float32").reshape([-1]) if p.grad is not None
                 else oarlock.zeros([p.size], dtype="float32") for p in params]
        flags = oarlock.to_tensor([float(p.grad is not None) for p in params], dtype="float32")
        flat = oarlock.concat(grads + [flags])
        for group in (self._group, self._dp_group):
            if group is not None and group.nranks > 1:
                dist.all_reduce(flat, group=group)
                flat = flat / group.nranks
        sizes = [p.size for p in params]
        *values, used = oarlock.split(flat, sizes + [len(params)])
        for p, value, flag in zip(params, values, used.numpy()):
            if flag > 0:
                p.grad = value.reshape(p.shape).astype(p.dtype)

    # -- running ----------------------------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if self.__sync_buffers:
            self._sync_buffers()
        return self._layer(*inputs, **kwargs)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_sub_layers"]["_layer"], name)

    # -- full weights -------------------------------------------------------------------------------------------
    def get_all_parameters(self, convert2cpu=False):
        """Gather every partitioned parameter's full values into the layer (a collective: every rank calls it).
        They stay until the next forward, which gathers from the pieces and frees them again."""
        for plan in self._plans:
            plan.gather()
        if convert2cpu:
            with oarlock.no_grad():
                for part in self._partitions.values():
                    if part.param.place.type != "cpu":
                        part.param.set_value(part.param.cpu())

    def state_dict(self, destination=None, include_sublayers=True, structured_name_prefix="", use_hook=True,
                   keep_vars=True):
        """The wrapped layer's state with the full weights (a collective: every rank calls it). The values of
        partitioned parameters are detached full tensors, not the parameters (which are freed again)."""
        self.get_all_parameters()
        state = self._layer.state_dict(destination=destination, include_sublayers=include_sublayers,
                                       structured_name_prefix=structured_name_prefix)
        for key, value in state.items():
            if id(value) in self._partitions:
                state[key] = value.detach()
        for plan in self._plans:
            plan.free()
        return state

    def set_state_dict(self, state_dict, use_structured_name=True, strict=True):
        """Load full weights: each rank keeps its piece of every partitioned parameter."""
        # a freed parameter keeps its shape, so set_value checks it and gives it new storage: the parameters
        # whose storage changed were loaded (strict=False may skip some), and only their pieces are replaced
        freed = {id(part): array_of(part.param) for part in self._partitions.values()}
        try:
            result = self._layer.set_state_dict(state_dict, use_structured_name=use_structured_name, strict=strict)
            with oarlock.no_grad():
                for part in self._partitions.values():
                    if array_of(part.param) is not freed[id(part)]:
                        part.piece.set_value(part.mine(part.param))
        finally:
            for plan in self._plans:
                plan.free()
        return result

    load_dict = set_state_dict

    def set_dict(self, state_dict, use_structured_name=True):
        return self.set_state_dict(state_dict, use_structured_name=use_structured_name)

    def sharded_state_dict(self, structured_name_prefix: str = ""):
        """{name: ShardedWeight} for FlexCheckpoint, no collective: the wrapped layer's own (kept-whole
        parameters and buffers replicated, tensor-parallel slices as their boxes), with each partitioned
        parameter given as this rank's piece: a flattened ShardedWeight (Paddle's is_flattened /
        flattened_range) of the elements [r * len, min((r + 1) * len, numel)) of the parameter's box. Its
        local tensor is the piece itself, or a view of the piece's unpadded part (the optimizer's
        sharded_state_dict recognises it by its address), so a load writes into the piece that the
        optimizer updates and the recompute gathers. A piece that is all padding gives an empty range
        (nothing saved or loaded), so that the optimizer still finds the piece's entry."""
        shard = oarlock.distributed.ShardedWeight
        out = self._layer.sharded_state_dict(structured_name_prefix)
        for key, weight in out.items():
            part = self._partitions.get(id(weight.local_tensor))
            if part is None:
                continue
            start = min(part.group.rank * part.length, part.numel)
            stop = min(start + part.length, part.numel)
            piece = part.piece
            local = piece if stop - start == part.length else wrap(array_of(piece)[:stop - start], piece.place)
            out[key] = shard(weight.key, local, weight.local_shape, weight.global_shape, weight.global_offset,
                             is_flattened=True, flattened_range=slice(start, stop))
        return out

    def pieces(self) -> list:
        """This rank's flat pieces of the partitioned parameters (what its optimizer updates)."""
        return [part.piece for part in self._partitions.values()]
