"""The mixture-of-experts GPT of `oarlock train --moe-experts E --moe-top-k K [--ep N]`.

model.GPT with each block's MLP replaced by Paddle's `MoELayer(width, experts, gate={"type": ..., "top_k":
K}, moe_group=...)` (oarlock.incubate.distributed.models.moe): a gate Linear(width, E) routes every token to
K of E experts, each an MLP of model.py's shape (Linear -> SiLU -> Linear; hidden width `expert_hidden`,
by default the dense MLP's 4 x width), and the experts' outputs are summed weighted by the gate's values.
The gate is Paddle's for K: SwitchGate for K = 1, GShardGate for K = 2 (both with a load-balancing aux loss
and a token capacity), NaiveGate (no aux loss) for K > 2 -- Paddle's GShardGate and SwitchGate accept only
those K.

With expert parallel (moe_group of N ranks) each rank holds E / N consecutive experts (rank r: global
experts r*E/N ...), MoELayer sends every token to the rank of its expert by all-to-all and back. Parameter
names are model.GPT's plus `blocks.i.mlp.experts.j.*` and `blocks.i.mlp.gate.gate.*`; a rank's local
expert j is global expert r*E/N + j (`global_name` / `local_name` convert).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import oarlock
from oarlock_train.model import GPT, MLP, Block, GPTConfig, residual_std

# GShardGate asserts top_k == 2 and SwitchGate top_k == 1 in Paddle; other K get the plain top-k gate
GATE_OF_TOP_K = {1: "switch", 2: "gshard"}
DEFAULT_AUX_WEIGHT = 0.01   # the load-balancing loss coefficient of the Switch Transformer and GShard papers
CAPACITY = (1.2, 2.4)       # Paddle's GShardGate / SwitchGate capacity factors (training, evaluation)


@dataclass(frozen=True)
class MoEConfig:
    """experts: E in all (over every expert-parallel rank); top_k: experts per token; expert_hidden: each
    expert's hidden width (None: the dense MLP's mlp_ratio x width)."""

    experts: int
    top_k: int = 2
    expert_hidden: int | None = None

    @property
    def gate_type(self) -> str:
        return GATE_OF_TOP_K.get(self.top_k, "naive")


def check_moe(experts: int, top_k: int | None, ep: int) -> list[str]:
    """The reasons E experts, top_k per token and ep expert-parallel ranks do not fit together (empty when
    they do), in the words of `oarlock train`'s options."""
    problems = [] if experts >= 1 else [f"argument --moe-experts: expected at least 1 expert, got {experts}"]
    if top_k is not None and top_k > experts:
        problems.append(f"argument --moe-top-k: expected at most --moe-experts ({experts}) experts per token, "
                        f"got {top_k}")
    if experts % ep:
        problems.append(f"argument --ep: the {experts} experts (--moe-experts) cannot be split equally over "
                        f"{ep} expert-parallel ranks; --ep must divide --moe-experts")
    return problems


def build_experts(cfg: GPTConfig, moe: MoEConfig, count: int):
    """An nn.LayerList of `count` expert MLPs, initialised as model.py initialises the dense MLP."""
    return oarlock.nn.LayerList([MLP(cfg, residual_std(cfg), hidden=moe.expert_hidden) for _ in range(count)])


class MoEGPT(GPT):
    """model.GPT whose blocks' MLPs are MoELayers (see the module docstring). forward and loss are GPT's
    (loss: the cross entropy only); after a forward, `aux_loss()` is the sum of the gates' aux losses."""

    def __init__(self, cfg: GPTConfig, moe: MoEConfig, moe_group=None, batch_group=None):
        from oarlock.incubate.distributed.models.moe import MoELayer

        ranks = 1 if moe_group is None else moe_group.nranks
        problems = check_moe(moe.experts, moe.top_k, ranks)
        if problems:
            raise ValueError("MoEGPT: " + "; ".join(problems))
        local = moe.experts // ranks

        def block(block_cfg):
            experts = build_experts(block_cfg, moe, local)
            return Block(block_cfg, mlp=MoELayer(block_cfg.width, experts, gate=_gate(block_cfg.width, moe, local,
                                                                                       moe_group, batch_group),
                                                 moe_group=moe_group))

        super().__init__(cfg, make_block=block)
        self.moe, self.ep_ranks, self.local_experts = moe, ranks, local
        self.ep_rank = 0 if moe_group is None else moe_group.rank

    def aux_loss(self):
        """The sum over blocks of the gates' aux losses of the last forward (cleared: BaseGate.get_loss), or
        None when the gate has none (NaiveGate).

        Paddle's GShardGate scales its loss by num_expert ** 2 with num_expert the experts of ONE rank, so
        under --ep N it would be N ** 2 times smaller; it is multiplied back by N ** 2 here, so that it is
        GShard's loss with every expert counted (k = 2 when balanced) whatever the layout. The gates are
        built with global_aux: their statistics are the whole batch's (summed over batch_group), so every
        rank's aux loss is the one process's, not its own tokens' as Paddle's default computes it."""
        losses = [loss for loss in (b.mlp.gate.get_loss() for b in self.blocks) if loss is not None]
        if not losses:
            return None
        scale = self.ep_ranks ** 2 if self.moe.gate_type == "gshard" else 1
        return oarlock.add_n(losses) * scale if scale != 1 else oarlock.add_n(losses)

    def num_parameters(self) -> int:
        """The full model's count: every rank's experts."""
        return sum(int(p.size) * (self.ep_ranks if _EXPERT.search(n) else 1) for n, p in self.named_parameters())

    def active_parameters(self) -> int:
        """Parameters one token's forward uses: all but the experts it is not routed to."""
        expert = sum(int(p.size) for n, p in self.named_parameters() if _EXPERT.search(n))
        per_expert = expert // self.local_experts
        return self.num_parameters() - per_expert * (self.moe.experts - self.moe.top_k)

    def global_name(self, name: str) -> str:
        return _renumber(name, self.ep_rank * self.local_experts)

    def load_full_state_dict(self, full: dict) -> None:
        """Set this rank's experts (and the shared weights) from the full model's state_dict."""
        local = {}
        for name in self.state_dict():
            key = self.global_name(name)
            if key not in full:
                raise KeyError(f"MoEGPT.load_full_state_dict(): the state has no {key!r}")
            local[name] = full[key]
        self.set_state_dict(local)


_EXPERT = re.compile(r"(\.mlp\.experts\.)(\d+)(\.)")


def is_expert(name: str) -> bool:
    """Whether the parameter `name` belongs to an expert (held by one expert-parallel rank)."""
    return _EXPERT.search(name) is not None


def _renumber(name: str, offset: int) -> str:
    return _EXPERT.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + offset}{m.group(3)}", name)


def _gate(width: int, moe: MoEConfig, local: int, moe_group, batch_group):
    """The gate of one MoELayer. Paddle's capacity factors (1.2 in training, 2.4 in eval) multiply the
    tokens of the rank the gate runs on; they are scaled by the expert-parallel ranks here, so an expert takes
    at most 1.2 x the tokens of the whole group, whose tokens it serves -- the same capacity as one process
    holding every expert and all those tokens (which keeps an --ep run's routing equal to one process's).
    batch_group (the ranks holding the shares of each batch, when it is split) and global_aux make the random
    routing numbers and the aux loss those of one process holding the whole batch."""
    from oarlock.incubate.distributed.models.moe import GShardGate, SwitchGate

    if moe.gate_type == "naive":
        return {"type": "naive", "top_k": moe.top_k}
    ranks = 1 if moe_group is None else moe_group.nranks
    capacity = tuple(factor * ranks for factor in CAPACITY)
    kind = GShardGate if moe.gate_type == "gshard" else SwitchGate
    return kind(width, local, ranks, topk=moe.top_k, capacity=capacity, group=moe_group, batch_group=batch_group,
                global_aux=True)


def build_model(cfg: GPTConfig, moe: MoEConfig | None):
    """The dense GPT (moe None) or the MoE GPT holding every expert."""
    return GPT(cfg) if moe is None else MoEGPT(cfg, moe)
