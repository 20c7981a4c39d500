"""The machinery under GroupShardedStage3 (sharding_stage3.py): flat parameter pieces, gathering and
freeing the full parameters, the recompute op that runs a sublayer with its full parameters, and the
global-norm clip of a stage-3 optimizer.

Why recompute: oarlock's autograd keeps the tensors an op used until backward, so a parameter that is
used by a recorded op cannot be freed after forward. Each parameter-owning sublayer's forward therefore
runs inside `_GatheredForward`, a PyLayer whose forward gathers the sublayer's parameters, runs the
sublayer without recording and frees them; its backward gathers them again, re-runs the sublayer with
grad enabled on detached inputs (with the forward's RNG state and buffers, so dropout and running
statistics match), back-propagates, reduce-scatters each full parameter gradient into this rank's piece
(the PyLayer's gradient for the piece, which autograd accumulates into piece.grad) and frees them. A
sublayer's parameters travel together: one all-gather and one reduce-scatter per dtype.

A sublayer that owns parameters and has parameter-owning sublayers (a block with its own gate) recomputes
its whole forward, the children's gathered forwards included; each child then gathers again for its own
backward. Correct, at the price of running those children's forwards once more.

A freed parameter keeps its shape but holds one NaN broadcast to it (no memory): an accidental use
outside its owner shows as NaN, and a gradient reaching it from outside its owner's recompute raises.
"""

from __future__ import annotations

import math
import threading

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock import PyLayer, Tensor
from oarlock.plugin_api import AUTOCAST, array_of, rebind, set_autocast

from oarlock_parallel.clip import HybridParallelClipGrad, _reduced, _sum_squares, wrap_clip
from oarlock_parallel.rng import get_rng_state_tracker


class _Gathered(threading.local):
    """ids of the parameters whose full values a recompute on this thread is using right now."""

    def __init__(self):
        self.ids: set = set()


_GATHERED = _Gathered()


class Partition:
    """One parameter split over a group: each rank keeps `piece`, a flat Parameter of ceil(numel / nranks)
    elements (the last rank's padded with zeros), with the parameter's attributes and name, which the
    optimizer updates in place of the parameter."""

    def __init__(self, param, group, owner: str):
        self.param, self.group, self.owner = param, group, owner
        self.shape, self.numel = list(param.shape), int(param.size)
        self.length = math.ceil(self.numel / group.nranks)
        self.piece = oarlock.nn.Parameter(self.mine(param), attr=param.param_attrs)
        self.piece.name = param.name
        self.piece.stop_gradient = param.stop_gradient
        if not param.stop_gradient:
            param.register_hook(self._outside_owner)

    def _outside_owner(self, grad):
        if id(self.param) not in _GATHERED.ids:
            raise RuntimeError(
                f"GroupShardedStage3: parameter {self.param.name!r} of sublayer {self.owner!r} received a "
                f"gradient from outside that sublayer's forward (a tied or shared weight used by another "
                f"layer?); stage 3 frees it after its owner's forward, so such uses are not supported: put "
                f"its owner in exclude_layer (kept whole) or give the other layer its own parameter")
        return grad

    def chunks(self, value) -> list:
        """`value` (the parameter's shape) flattened, zero-padded and split into one chunk per rank."""
        flat = value.detach().reshape([-1])
        padding = self.length * self.group.nranks - self.numel
        if padding:
            flat = oarlock.concat([flat, oarlock.zeros([padding], dtype=flat.dtype)])
        return list(oarlock.split(flat, self.group.nranks))

    def mine(self, value):
        """This rank's piece of the full `value` (a copy)."""
        return self.chunks(value)[self.group.rank].astype(self.param.dtype).clone()

    def set_full(self, flat):
        """Give the parameter the full values `flat` (padded flat pieces, every rank's in order)."""
        rebind(self.param, array_of(flat[:self.numel].reshape(self.shape)))

    def free(self):
        dtype = array_of(self.param).dtype
        xp = self.param.place.backend.xp
        fill = float("nan") if np.issubdtype(dtype, np.floating) else 0
        rebind(self.param, xp.broadcast_to(xp.full((), fill, dtype=dtype), tuple(self.shape)))


def _by_dtype(partitions) -> list:
    """The partitions in buckets of one dtype (one collective each), in a fixed order."""
    buckets: dict = {}
    for part in partitions:
        buckets.setdefault(part.piece.dtype.name, []).append(part)
    return list(buckets.values())


def gather(partitions):
    """Give every partition's parameter its full values: one all-gather per dtype over the group."""
    for bucket in _by_dtype(partitions):
        group = bucket[0].group
        local = oarlock.concat([part.piece.detach() for part in bucket])
        gathered: list = []
        dist.all_gather(gathered, local, group=group)
        offset = 0
        for part in bucket:
            part.set_full(oarlock.concat([chunk[offset:offset + part.length] for chunk in gathered]))
            offset += part.length


def scatter_grads(partitions, full_grads, dp_group) -> list:
    """Each partition's piece of its full gradient averaged over the group (then over dp_group): one
    reduce-scatter (and all-reduce) per dtype. A None gradient (parameter unused) counts as zeros, so
    every rank joins the same collectives."""
    result = {}
    grads = dict(zip(map(id, partitions), full_grads))
    for bucket in _by_dtype(partitions):
        group = bucket[0].group
        chunks = [part.chunks(grads[id(part)] if grads[id(part)] is not None
                              else oarlock.zeros(part.shape, dtype=part.piece.dtype)) for part in bucket]
        per_rank = [oarlock.concat([c[r] for c in chunks]) for r in range(group.nranks)]
        mine = oarlock.zeros([sum(part.length for part in bucket)], dtype=per_rank[0].dtype)
        dist.reduce_scatter(mine, per_rank, group=group)
        mine = mine / group.nranks
        if dp_group is not None and dp_group.nranks > 1:
            dist.all_reduce(mine, group=dp_group)
            mine = mine / dp_group.nranks
        for part, piece in zip(bucket, oarlock.split(mine, [part.length for part in bucket])):
            result[id(part)] = piece
    return [result[id(part)] for part in partitions]


# -- nested inputs and outputs ----------------------------------------------------------------------------
def flatten(obj, out: list):
    """The Tensors inside obj (nested tuples, lists, dicts) appended to `out`; returns a template."""
    if isinstance(obj, Tensor):
        out.append(obj)
        return _Slot(len(out) - 1)
    if isinstance(obj, (tuple, list)):
        return type(obj)(flatten(o, out) for o in obj)
    if isinstance(obj, dict):
        return {k: flatten(v, out) for k, v in obj.items()}
    return obj


def fill(template, tensors):
    if isinstance(template, _Slot):
        return tensors[template.index]
    if isinstance(template, (tuple, list)):
        return type(template)(fill(t, tensors) for t in template)
    if isinstance(template, dict):
        return {k: fill(v, tensors) for k, v in template.items()}
    return template


class _Slot:
    __slots__ = ("index",)

    def __init__(self, index):
        self.index = index


# -- the recompute op ----------------------------------------------------------------------------------------------
def _replay_state(layer):
    """What a recompute must replay: the generator, the tensor-parallel tracker's states, the buffers and
    the autocast state (backward may run outside the auto_cast block the forward ran in)."""
    return (oarlock.get_rng_state(), get_rng_state_tracker().get_states_tracker(),
            [b.clone() for b in _forward_state(layer)], AUTOCAST.state())


def _forward_state(layer):
    """What a forward writes in place: buffers and the parameters that take no gradient (BatchNorm's running
    statistics are such parameters, as in Paddle)."""
    return list(layer.buffers()) + [p for p in layer.parameters() if p.stop_gradient]


def _restore(layer, state):
    rng, tracked, buffers, autocast = state
    oarlock.set_rng_state(rng)
    get_rng_state_tracker().set_states_tracker(tracked)
    set_autocast(*autocast)
    with oarlock.no_grad():
        for b, saved in zip(_forward_state(layer), buffers):
            b.set_value(saved)


class Plan:
    """What one wrapped sublayer needs to run: its original forward and its partitions."""

    def __init__(self, layer, forward, partitions, dp_group):
        self.layer, self.forward, self.partitions, self.dp_group = layer, forward, partitions, dp_group

    def gather(self):
        with oarlock.no_grad():
            gather(self.partitions)

    def free(self):
        with oarlock.no_grad():
            for part in self.partitions:
                part.free()


class _GatheredForward(PyLayer):
    @staticmethod
    def forward(ctx, plan, template, out_holder, recording, n_inputs, *tensors):
        ctx.plan, ctx.template = plan, template
        if recording:     # what backward's recompute needs (an evaluation without grad keeps nothing)
            ctx.inputs = [t.detach() for t in tensors[:n_inputs]]
            ctx.input_flags = [t.stop_gradient for t in tensors[:n_inputs]]
            ctx.state = _replay_state(plan.layer)
        plan.gather()
        try:
            args, kwargs = fill(template, list(tensors[:n_inputs]))
            outputs = plan.forward(*args, **kwargs)
        finally:
            plan.free()
        flat: list = []
        out_holder.append(flatten(outputs, flat))   # apply() hides ctx: the caller reads the structure here
        if not flat:
            raise RuntimeError(f"GroupShardedStage3: sublayer {type(plan.layer).__name__} returned no Tensor; "
                               f"a sublayer owning sharded parameters must return Tensors")
        return tuple(flat)

    @staticmethod
    def backward(ctx, *grads):
        plan = ctx.plan
        inputs = [t.detach() for t in ctx.inputs]
        for t, stop in zip(inputs, ctx.input_flags):
            t.stop_gradient = stop
        later = _replay_state(plan.layer)
        _restore(plan.layer, ctx.state)
        plan.gather()
        ids = {id(part.param) for part in plan.partitions}
        _GATHERED.ids |= ids
        try:
            with oarlock.enable_grad():
                args, kwargs = fill(ctx.template, inputs)
                flat: list = []
                flatten(plan.forward(*args, **kwargs), flat)
            roots = [(o, g) for o, g in zip(flat, grads) if not o.stop_gradient and o.dtype.is_floating_point]
            if roots:
                oarlock.autograd.backward([o for o, _ in roots], [g for _, g in roots])
            trainable = [part for part in plan.partitions if part.piece.trainable]   # the same on every rank
            full_grads = [part.param.grad for part in trainable]
            for part in plan.partitions:
                part.param.grad = None
            with oarlock.no_grad():
                scattered = dict(zip(map(id, trainable), scatter_grads(trainable, full_grads, plan.dp_group)))
            piece_grads = [scattered.get(id(part)) for part in plan.partitions]
        finally:
            _GATHERED.ids -= ids
            plan.free()
            _restore(plan.layer, later)
        input_grads = [None if stop else t.grad for t, stop in zip(inputs, ctx.input_flags)]
        return (*input_grads, *piece_grads)


def run_gathered(plan, args, kwargs):
    """plan's sublayer called on (args, kwargs) with its full parameters, recorded as one op."""
    inputs: list = []
    template = flatten((args, kwargs), inputs)
    pieces = [part.piece for part in plan.partitions]
    holder: list = []
    recording = oarlock.is_grad_enabled()
    flat = _GatheredForward.apply(plan, template, holder, recording, len(inputs), *inputs, *pieces)
    flat = [flat] if isinstance(flat, Tensor) else list(flat)
    return fill(holder[0], flat)


# -- gradient clipping -----------------------------------------------------------------------------------------
class Stage3ClipGrad(HybridParallelClipGrad):
    """Global-norm clipping of a stage-3 optimizer: the pieces' squares are summed over the sharding group
    (each piece lives on one rank), the replicated (unsliced) parameters' squares are counted once."""

    def __init__(self, clip, group, replicated_ids):
        super().__init__(clip, split_group=None, shard_groups=[group])
        self._group, self._replicated = group, replicated_ids

    def __call__(self, params_grads):
        chosen = [(p, g) for p, g in params_grads
                  if g is not None and (p.param_attrs is None or p.param_attrs.need_clip)]
        with oarlock.no_grad():
            self._clip([g for _, g in chosen], [id(p) in self._replicated for p, _ in chosen])
        return params_grads

    def global_norm(self, grads, replicated) -> Tensor:
        pieces = _reduced(_sum_squares([g for g, r in zip(grads, replicated) if not r]), self._group)
        total = pieces + _sum_squares([g for g, r in zip(grads, replicated) if r])
        return oarlock.sqrt(oarlock.reshape(total, []))


def stage3_clip(clip, group, replicated_ids):
    """`clip` made piece-aware when it is a global-norm clip (others act per tensor: returned unchanged)."""
    wrapped = wrap_clip(clip, split_group=None, shard_groups=[group])
    if not isinstance(wrapped, HybridParallelClipGrad):
        return wrapped
    return Stage3ClipGrad(wrapped._clip_inner, group, replicated_ids)
