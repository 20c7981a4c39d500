"""Paddle's MoELayer (paddle.incubate.distributed.models.moe.moe_layer), following Paddle 3.2's source.

forward(inp [b, s, d_model]): the gate picks top-k experts per token (-1: dropped by capacity or random
routing); the token rows are ordered by global expert, exchanged over `moe_group` to the ranks holding
the experts (global_scatter), run through this rank's experts (a contiguous block of rows each), sent
back (global_gather) and combined: out[token] = sum over its k slots of gate value * expert output (a
dropped slot contributes 0). With mp_group, each model-parallel rank routes its slice of the tokens and
the results are all-gathered.

One deliberate difference: Paddle's MoEScatter backward writes the input gradient with an overwriting
scatter, so a token sent to two experts keeps only one expert's gradient; here index_select's own
backward sums both (the gradient of the function forward computes).
"""

from __future__ import annotations

import numbers

import oarlock
import oarlock.distributed as dist
import oarlock.nn as nn
from oarlock import PyLayer

from oarlock_parallel.moe_exchange import global_gather, global_scatter
from oarlock_parallel.moe_gates import BaseGate, GShardGate, NaiveGate, SwitchGate
from oarlock_parallel.moe_routing import count_by_gate

__all__ = ["MoELayer"]

_GATES = {"naive": NaiveGate, None: NaiveGate, "gshard": GShardGate, "switch": SwitchGate}


def _local_gather(x, pos, rows: int):
    """Rows of x placed at `pos` of a [rows, d] zero buffer (the slots nobody filled stay 0)."""
    if pos.shape[0] == 0:
        # still a function of x (of no rows): its backward, an all-to-all under expert parallelism, must run
        # on this rank too when every token here was dropped, or the other ranks wait for it
        return oarlock.zeros([rows, x.shape[-1]], dtype=x.dtype) + x.sum()
    return oarlock.scatter(oarlock.zeros([rows, x.shape[-1]], dtype=x.dtype), pos, x, overwrite=True)


class _Slice(PyLayer):
    """This model-parallel rank's equal share of the rows; backward all-gathers the gradient."""

    @staticmethod
    def forward(ctx, inp, rank, world_size, group):
        ctx.group = group
        rows = inp.shape[0] // world_size
        return inp[rows * rank:rows * (rank + 1)].clone()

    @staticmethod
    def backward(ctx, grad):
        pieces: list = []
        dist.all_gather(pieces, grad, group=ctx.group)
        return oarlock.concat(pieces, axis=0)


class _AllGather(PyLayer):
    """Every model-parallel rank's rows, in rank order; backward keeps this rank's rows."""

    @staticmethod
    def forward(ctx, inp, rank, world_size, group):
        ctx.rows, ctx.rank = inp.shape[0], rank
        pieces: list = []
        dist.all_gather(pieces, inp, group=group)
        return oarlock.concat(pieces, axis=0)

    @staticmethod
    def backward(ctx, grad):
        return grad[ctx.rows * ctx.rank:ctx.rows * (ctx.rank + 1)].clone()


def _experts_forward(x, fwd_expert_count, experts):
    """Each expert on its contiguous block of rows (experts with no rows are skipped, as Paddle)."""
    if x.shape[0] == 0:
        return x
    outputs, start = [], 0
    for expert, count in zip(experts, fwd_expert_count):
        if count > 0:
            outputs.append(expert(x[start:start + int(count)]))
            start += int(count)
    return oarlock.concat(outputs, axis=0)


class MoELayer(nn.Layer):
    """Mixture of experts: MoELayer(d_model, experts, gate=None, moe_group=None, mp_group=None,
    recompute_interval=0, recompute_ctx=None).

    experts: nn.LayerList of this rank's experts (num_expert = len(experts); moe_group.nranks ranks hold
    num_expert each). gate: a BaseGate (NaiveGate and its subclasses), or a dict {"type": "naive" |
    "gshard" | "switch" (default "gshard"), "top_k": k (default 2), and for the GShard and Switch gates
    optionally "batch_group" and "global_aux" (their keywords: the whole batch's random numbers and aux
    loss when the batch is split over more ranks than the moe group's)}. After forward, gate.get_loss() is
    the auxiliary loss (GShard / Switch gates). recompute_interval > 0 recomputes the experts in backward
    (oarlock's recompute; recompute_ctx, Paddle's options of recompute_hybrid, is kept but not read)."""

    def __init__(self, d_model, experts, gate=None, moe_group=None, mp_group=None, recompute_interval=0,
                 recompute_ctx=None):
        super().__init__()
        if not isinstance(d_model, numbers.Integral) or isinstance(d_model, bool) or d_model < 1:
            raise ValueError(f"MoELayer(): d_model must be a positive int, got {d_model!r}")
        if not isinstance(experts, nn.LayerList):
            raise TypeError(f"MoELayer(): experts must be an nn.LayerList of this rank's experts, got "
                            f"{type(experts).__name__}")
        if len(experts) == 0:
            raise ValueError("MoELayer(): experts is empty; each rank needs at least one expert")
        if gate is None:
            gate = {}
        if not isinstance(gate, (dict, BaseGate)):
            raise TypeError(f"MoELayer(): gate must be a dict or a BaseGate, got {type(gate).__name__}")
        self.recompute_ctx, self.recompute_interval = recompute_ctx, recompute_interval
        self.group, self.mp_group = moe_group, mp_group
        self.world_size = moe_group.nranks if moe_group is not None else 1
        self.num_expert = len(experts)
        self.experts = experts
        self.d_model = int(d_model)
        if isinstance(gate, dict):
            self.top_k = gate.get("top_k", 2)
            kind = gate.get("type", "gshard")
            if kind not in _GATES:
                raise ValueError(f"MoELayer(): gate type must be 'naive', 'gshard' or 'switch', got {kind!r}")
            extra = {} if _GATES[kind] is NaiveGate else {"group": self.group, **{
                key: gate[key] for key in ("batch_group", "global_aux") if key in gate}}
            gate = _GATES[kind](self.d_model, num_expert=self.num_expert, world_size=self.world_size,
                                topk=self.top_k, **extra)
        elif isinstance(gate, NaiveGate):
            self.top_k = gate.top_k
        else:
            raise TypeError(f"MoELayer(): unimplemented gate type {type(gate).__name__} (a NaiveGate, GShardGate "
                            f"or SwitchGate, or a dict)")
        if gate.num_expert != self.num_expert or gate.world_size != self.world_size:
            raise ValueError(f"MoELayer(): the gate routes to {gate.num_expert} experts x {gate.world_size} ranks, "
                             f"but the layer has {self.num_expert} experts x {self.world_size} ranks (moe_group)")
        if gate.d_model != self.d_model:
            raise ValueError(f"MoELayer(): the gate takes d_model={gate.d_model}, the layer d_model={self.d_model}")
        self.gate = gate

    def forward(self, inp):
        if inp.ndim != 3 or inp.shape[-1] != self.d_model:
            raise ValueError(f"MoELayer.forward(): inp must be [batch, seq, d_model={self.d_model}], got shape "
                             f"{inp.shape}")
        origin_shape = inp.shape
        inp = inp.reshape([-1, origin_shape[2]])
        mp_rank, mp_size = (self.mp_group.rank, self.mp_group.nranks) if self.mp_group is not None else (0, 1)
        if mp_size > 1:
            inp = _Slice.apply(inp, mp_rank, mp_size, self.mp_group)
        value, gate = self.gate(inp)

        pos, local_count, global_count = count_by_gate(gate, self.num_expert, self.world_size, group=self.group)
        fwd_expert_count = global_count.numpy().reshape(self.world_size, self.num_expert).sum(axis=0)
        topk = gate.shape[1] if gate.ndim == 2 else 1
        token_pos = oarlock.to_tensor(pos.numpy() // topk)

        x = oarlock.index_select(inp, token_pos, 0) if token_pos.shape[0] else inp[:0]
        if self.world_size > 1:
            x = global_scatter(x, local_count, global_count, group=self.group)
        if self.recompute_interval <= 0 or x.shape[0] == 0:
            x = _experts_forward(x, fwd_expert_count, self.experts)
        else:
            from oarlock_parallel.recompute import recompute
            x = recompute(_experts_forward, x, fwd_expert_count, self.experts)
        if self.world_size > 1:
            x = global_gather(x, local_count, global_count, group=self.group)
        x = _local_gather(x, pos, inp.shape[0] * topk)

        x = x.reshape([-1, self.top_k, self.d_model])
        value = value.reshape([x.shape[0], 1, self.top_k])
        x = oarlock.bmm(value, x).reshape([-1, self.d_model])
        if mp_size > 1:
            x = _AllGather.apply(x, mp_rank, mp_size, self.mp_group)
        return x.reshape(origin_shape)

