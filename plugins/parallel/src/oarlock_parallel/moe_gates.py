"""The gates of Paddle's MoELayer (paddle.incubate.distributed.models.moe.gate): BaseGate, NaiveGate,
GShardGate and SwitchGate, following Paddle 3.2's Python source.

NaiveGate scores the tot_expert = num_expert * world_size experts with one Linear and keeps the top-k raw
logits (no softmax: Paddle combines the experts' outputs with these raw values). GShardGate (top-2) adds
GShard's auxiliary loss from the local counts, a capacity per expert (factor capacity[0] in training,
capacity[1] in eval, times the local token count, rounded up; tokens over it get -1) and random routing
(the second expert of a token is dropped when 2 * its logit < a uniform draw). SwitchGate (top-1) adds
uniform noise in training, softmax, capacity and the Switch Transformer loss.

Paddle's topk(sorted=False) leaves the order of the k slots open; here the slots are sorted (largest
first), so random routing always considers the weaker expert.

Random numbers when the batch is split over ranks: every rank draws the numbers of the whole batch
(from the generator all ranks seed alike) and keeps its own rows (moe_batch.batch_rand). The whole batch
is `batch_group`'s (the ranks holding equal consecutive shares of it, in rank order: with expert and data
parallelism, every data rank), by default the moe group's. One process holding all experts and the
tokens concatenated in rank order therefore draws the same number for every token; Paddle draws only the
local rows, so its numbers depend on the layout.

The aux loss: Paddle's gates compute it from the rank's own tokens, which is the default here too. With
`global_aux=True` the statistics it multiplies -- the per-expert counts, the token count and the sums of
the gate probabilities -- are summed over the batch group first (the probabilities differentiably,
moe_batch.sum_over), so every rank's aux loss is the whole batch's, as one process computes it.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F

from oarlock_parallel.moe_batch import batch_rand, check_batch_group, sum_over, whole_batch_counts
from oarlock_parallel.moe_routing import limit_by_capacity, random_routing

__all__ = ["BaseGate", "NaiveGate", "GShardGate", "SwitchGate"]


def _positive_int(owner: str, argument: str, value) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: {argument} must be a positive int, got {value!r}")
    return int(value)


def _capacity_factors(owner: str, capacity) -> tuple:
    """(train, eval) capacity factors; each must give a capacity of at least one token."""
    if not isinstance(capacity, (tuple, list)) or len(capacity) != 2:
        raise ValueError(f"{owner}: capacity must be a (train, eval) pair of factors, got {capacity!r}")
    for factor in capacity:
        if not isinstance(factor, numbers.Real) or isinstance(factor, bool) or not factor > 0:
            raise ValueError(f"{owner}: capacity factors must be positive numbers (a capacity below 1 token "
                             f"drops every token), got {capacity!r}")
    return tuple(float(f) for f in capacity)


def _moe_group(owner: str, group, world_size: int):
    """`group`, checked: gates of more than one rank exchange counts over it."""
    if world_size > 1 and (group is None or getattr(group, "nranks", None) != world_size):
        got = "None" if group is None else f"a group of {getattr(group, 'nranks', '?')} ranks"
        raise ValueError(f"{owner}: world_size={world_size} needs group, the moe group of {world_size} ranks; "
                         f"got {got}")
    return group


class _BatchAware:
    """The batch-group options of GShardGate and SwitchGate (module docstring)."""

    def _set_batch(self, owner: str, batch_group, global_aux) -> None:
        self.batch_group = check_batch_group(owner, batch_group)
        self.global_aux = bool(global_aux)

    @property
    def tokens_group(self):
        """The ranks whose tokens make up the batch: batch_group, else the moe group (None: this rank alone)."""
        if self.batch_group is not None:
            return self.batch_group
        return self.group if self.world_size > 1 else None

    def _stats_group(self):
        """The group the aux loss statistics are summed over (None: this rank's own, as Paddle's)."""
        return self.tokens_group if self.global_aux else None


class BaseGate(nn.Layer):
    """A gate scoring num_expert * world_size experts; set_loss / get_loss keep its auxiliary loss."""

    def __init__(self, num_expert, world_size):
        super().__init__()
        self.world_size = _positive_int(type(self).__name__ + "()", "world_size", world_size)
        self.num_expert = _positive_int(type(self).__name__ + "()", "num_expert", num_expert)
        self.tot_expert = self.world_size * self.num_expert
        self.loss = None

    def forward(self, x):
        raise NotImplementedError("Please implement the forward function.")

    def set_loss(self, loss):
        self.loss = loss

    def get_loss(self, clear=True):
        loss = self.loss
        if clear:
            self.loss = None
        return loss


class NaiveGate(BaseGate):
    """Linear(d_model, tot_expert) and the top-k raw logits: forward(inp) -> (values, indices)."""

    def __init__(self, d_model, num_expert, world_size, topk=2):
        super().__init__(num_expert, world_size)
        owner = type(self).__name__ + "()"
        self.d_model = _positive_int(owner, "d_model", d_model)
        self.top_k = _positive_int(owner, "topk", topk)
        if self.top_k > self.tot_expert:
            raise ValueError(f"{owner}: topk={self.top_k} is more than the {self.tot_expert} experts "
                             f"(num_expert {self.num_expert} x world_size {self.world_size})")
        self.gate = nn.Linear(self.d_model, self.tot_expert)

    def _check_input(self, inp):
        if inp.ndim != 2 or inp.shape[-1] != self.d_model:
            raise ValueError(f"{type(self).__name__}.forward(): inp must be [tokens, d_model={self.d_model}], "
                             f"got shape {inp.shape}")

    def forward(self, inp, return_all_scores=False):
        self._check_input(inp)
        gate = self.gate(inp)
        gate_top_k_val, gate_top_k_idx = oarlock.topk(gate, k=self.top_k, axis=-1, largest=True, sorted=True)
        if return_all_scores:
            return gate_top_k_val, gate_top_k_idx, gate
        return gate_top_k_val, gate_top_k_idx


def _capacity(factors: tuple, training: bool, tokens: int) -> int:
    return math.ceil(factors[0 if training else 1] * tokens)


class GShardGate(_BatchAware, NaiveGate):
    """Top-2 gate with GShard's auxiliary loss, capacity and random routing (module docstring).

    batch_group: the ranks holding equal consecutive shares of the batch, in rank order (default: the moe
    group); random routing draws the whole batch's numbers. global_aux: the aux loss is the whole batch's
    (counts and mean probabilities summed over batch_group); False (Paddle's): this rank's tokens'."""

    def __init__(self, d_model, num_expert, world_size, topk=2, capacity=(1.2, 2.4), random_routing=True,
                 group=None, batch_group=None, global_aux=False):
        if topk != 2:
            raise ValueError(f"GShardGate(): topk must be 2 (GShard routes every token to two experts), got {topk!r}")
        super().__init__(d_model, num_expert, world_size, topk=topk)
        self.capacity = _capacity_factors("GShardGate()", capacity)
        self.random_routing = bool(random_routing)
        self.group = _moe_group("GShardGate()", group, self.world_size)
        self._set_batch("GShardGate()", batch_group, global_aux)

    def forward(self, x):
        topk_val, topk_idx, gate_score = super().forward(x, return_all_scores=True)
        s = gate_score.shape[0]
        counts = np.bincount(topk_idx.numpy().reshape(-1), minlength=self.tot_expert)
        probs, group = F.softmax(gate_score, axis=1), self._stats_group()
        if group is None:
            c_e, m_e = oarlock.to_tensor((counts / s).astype(np.float32)), oarlock.mean(probs, axis=0)
        else:   # the whole batch's counts and mean probabilities
            total = whole_batch_counts(np.append(counts, s), group)
            c_e = oarlock.to_tensor((total[:-1] / total[-1]).astype(np.float32))
            m_e = sum_over(probs.sum(axis=0), group) / float(total[-1])
        self.set_loss(oarlock.mean(c_e * m_e) * (self.num_expert ** 2))

        capacity = _capacity(self.capacity, self.training, x.shape[0])
        _, _, topk_idx = limit_by_capacity(topk_idx, self.num_expert, self.world_size, capacity, group=self.group)
        if self.random_routing:
            prob = batch_rand([s], self.tokens_group)
            topk_idx = random_routing(topk_idx, topk_val, prob)
        return topk_val, topk_idx


class SwitchGate(_BatchAware, NaiveGate):
    """Top-1 gate of the Switch Transformer: noisy softmax scores, capacity and load-balancing loss.
    batch_group and global_aux as GShardGate's (the noise is drawn for the whole batch)."""

    def __init__(self, d_model, num_expert, world_size, topk=1, switch_eps=0.1, capacity=(1.2, 2.4), group=None,
                 batch_group=None, global_aux=False):
        if topk != 1:
            raise ValueError(f"SwitchGate(): topk must be 1 (a switch routes every token to one expert), "
                             f"got {topk!r}")
        super().__init__(d_model, num_expert, world_size, topk=1)
        self.switch_eps = float(switch_eps)
        self.capacity = _capacity_factors("SwitchGate()", capacity)
        self.group = _moe_group("SwitchGate()", group, self.world_size)
        self._set_batch("SwitchGate()", batch_group, global_aux)

    def forward(self, inp):
        self._check_input(inp)
        score = self.gate(inp)
        if self.training:
            noise = batch_rand(list(score.shape), self.tokens_group)
            score = score + (noise * 2 * self.switch_eps + 1.0 - self.switch_eps)
        score = F.softmax(score, axis=-1)
        top1_score, top1_idx = oarlock.topk(score, k=1, axis=-1, largest=True)

        capacity = _capacity(self.capacity, self.training, inp.shape[0])
        _, _, top1_idx = limit_by_capacity(top1_idx, self.num_expert, self.world_size, capacity, group=self.group)
        valid = top1_idx.numpy().reshape(-1)
        valid = valid[valid > -1]
        counts = np.append(np.bincount(valid, minlength=self.tot_expert), valid.size)
        group = self._stats_group()   # None: this rank's tokens; else the whole batch's (module docstring)
        counts = whole_batch_counts(counts, group)
        kept = max(counts[-1], 1)
        fraction_expert = oarlock.to_tensor((counts[:-1] / kept).astype(np.float32))
        prob_expert = sum_over(score.sum(axis=0), group) / float(kept)
        self.set_loss((fraction_expert * prob_expert).sum() * self.tot_expert)
        return top1_score, top1_idx
