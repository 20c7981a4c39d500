"""The GPT of model.py split over the model-parallel group with fleet's tensor-parallel layers.

Same architecture, parameter names and parameter order as model.GPT; each rank holds a slice:

    embed.weight             VocabParallelEmbedding       rows (vocabulary) split
    blocks.i.attn.qkv        ColumnParallelLinear         the heads split: the slice of rank r holds the q,
                                                          k and v columns of heads [r*H/n, (r+1)*H/n)
    blocks.i.attn.proj       RowParallelLinear            rows (the heads' outputs) split, bias whole
    blocks.i.mlp.fc          ColumnParallelLinear         hidden units split
    blocks.i.mlp.proj        RowParallelLinear            rows split, bias whole
    head.weight              ColumnParallelLinear         vocabulary split; ParallelCrossEntropy takes the
                                                          vocabulary-parallel logits without gathering them
    the RMSNorm weights      whole on every rank

`forward` returns this rank's slice of the logits [B, T, V/n]. With sequence_parallel the blocks run in
Paddle's [s, b, h] layout on 1/n of the sequence (ScatterOp after the embedding, Column/RowSequence-
ParallelLinear, GatherOp before the head) and the norm weights' gradients are summed over the group by
register_sequence_parallel_allreduce_hooks.

`shard_state` / `unshard_states` convert between full tensors (model.GPT's state_dict, and optimizer
states of the same shapes) and the slices, so checkpoints hold full weights whatever the layout.
"""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.nn as nn
from oarlock_train.model import Block, GPTConfig, attend, document_mask_of, residual_std, rotary_tables

# how each full weight is split: (axis, groups). groups > 1 splits each of `groups` equal blocks of the
# axis separately (the fused q|k|v columns), so that a slice holds whole heads of q, k and v.
_COLUMNS, _ROWS, _QKV = (-1, 1), (0, 1), (-1, 3)
SPLITS = {"embed.weight": _ROWS, "attn.qkv.weight": _QKV, "attn.qkv.bias": _QKV, "attn.proj.weight": _ROWS,
          "mlp.fc.weight": _COLUMNS, "mlp.fc.bias": _COLUMNS, "mlp.proj.weight": _ROWS, "head.weight": _COLUMNS}


def split_of(name: str):
    """(axis, groups) of the parameter `name` (a state_dict key), or None when it is whole on every rank."""
    for suffix, split in SPLITS.items():
        if name == suffix or name.endswith("." + suffix):
            return split
    return None


def shard(full: np.ndarray, split, rank: int, ranks: int) -> np.ndarray:
    """Rank `rank`'s slice of the full array (a copy)."""
    if split is None:
        return np.array(full)
    axis, groups = split
    blocks = np.split(full, groups, axis=axis)
    return np.concatenate([np.split(b, ranks, axis=axis)[rank] for b in blocks], axis=axis)


def unshard(parts, split) -> np.ndarray:
    """The full array from the slices of every rank, in rank order (the inverse of `shard`)."""
    if split is None:
        return np.array(parts[0])
    axis, groups = split
    per_rank = [np.split(p, groups, axis=axis) for p in parts]
    return np.concatenate([np.concatenate([p[g] for p in per_rank], axis=axis) for g in range(groups)],
                          axis=axis)


def _normal(std):
    return nn.ParamAttr(initializer=nn.initializer.Normal(0.0, std))


def _sequence_parallel_utils():
    """fleet.utils.sequence_parallel_utils, imported only with sequence parallel."""
    from oarlock.distributed.fleet.utils import sequence_parallel_utils
    return sequence_parallel_utils


def _layers(sequence_parallel: bool):
    """(column, row) linear classes: the sequence-parallel ones gather / reduce-scatter the sequence."""
    if sequence_parallel:
        spu = _sequence_parallel_utils()
        return spu.ColumnSequenceParallelLinear, spu.RowSequenceParallelLinear
    from oarlock.distributed.fleet import meta_parallel as mpu
    return mpu.ColumnParallelLinear, mpu.RowParallelLinear


class ParallelAttention(nn.Layer):
    def __init__(self, cfg: GPTConfig, ranks: int, sequence_parallel: bool):
        super().__init__()
        column, row = _layers(sequence_parallel)
        self.heads, self.head_dim = cfg.heads // ranks, cfg.width // cfg.heads
        self.sequence_parallel, self.dropout = sequence_parallel, cfg.dropout
        self.qkv = column(cfg.width, 3 * cfg.width, weight_attr=_normal(0.02), has_bias=True, gather_output=False)
        self.proj = row(cfg.width, cfg.width, weight_attr=_normal(residual_std(cfg)), has_bias=True,
                        input_is_parallel=True)

    def forward(self, x, cos, sin, startend_row_indices=None):
        qkv = self.qkv(x)
        if self.sequence_parallel:   # [s, b, 3h/n] of the whole sequence -> attention's [b, s, ...]
            qkv = qkv.transpose([1, 0, 2])
        if self.dropout and self.training:
            # each rank drops out the weights of its own heads: drawn from the tracker's per-rank stream, as
            # Paddle does inside tensor-parallel regions (the default stream is the same on every mp rank)
            from oarlock.distributed.fleet.meta_parallel import get_rng_state_tracker
            with get_rng_state_tracker().rng_state():
                y = attend(qkv, self.heads, self.head_dim, cos, sin, startend_row_indices, self.dropout, True)
        else:
            y = attend(qkv, self.heads, self.head_dim, cos, sin, startend_row_indices, 0.0, self.training)
        if self.sequence_parallel:
            y = y.transpose([1, 0, 2])
        return self.proj(y)


class ParallelMLP(nn.Layer):
    def __init__(self, cfg: GPTConfig, sequence_parallel: bool):
        super().__init__()
        column, row = _layers(sequence_parallel)
        hidden = cfg.mlp_ratio * cfg.width
        self.fc = column(cfg.width, hidden, weight_attr=_normal(0.02), has_bias=True, gather_output=False)
        self.proj = row(hidden, cfg.width, weight_attr=_normal(residual_std(cfg)), has_bias=True,
                        input_is_parallel=True)

    def forward(self, x):
        return self.proj(nn.functional.silu(self.fc(x)))


class ParallelGPT(nn.Layer):
    """forward(tokens [B, T], startend_row_indices=None) -> this rank's logits [B, T, V/n]; loss(rows,
    document_mask) -> the mean next-byte cross entropy, as model.GPT.loss. Built inside fleet (mp > 1):
    the model-parallel group is fleet's."""

    def __init__(self, cfg: GPTConfig, sequence_parallel: bool = False):
        super().__init__()
        from oarlock.distributed import fleet
        from oarlock.distributed.fleet import meta_parallel as mpu

        hcg = fleet.get_hybrid_communicate_group()
        self.ranks, self.rank = hcg.get_model_parallel_world_size(), hcg.get_model_parallel_rank()
        problems = check_layout(cfg, self.ranks, sequence_parallel)
        if problems:
            raise ValueError("ParallelGPT: " + "; ".join(problems))
        self.cfg, self.sequence_parallel = cfg, sequence_parallel
        self.embed = mpu.VocabParallelEmbedding(cfg.vocab_size, cfg.width, weight_attr=_normal(0.02))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.LayerList([Block(cfg, ParallelAttention(cfg, self.ranks, sequence_parallel),
                                          ParallelMLP(cfg, sequence_parallel)) for _ in range(cfg.layers)])
        self.norm = nn.RMSNorm(cfg.width)
        self.head = mpu.ColumnParallelLinear(cfg.width, cfg.vocab_size, weight_attr=_normal(0.02), has_bias=False,
                                             gather_output=False)
        self.cross_entropy = mpu.ParallelCrossEntropy()
        cos, sin = rotary_tables(cfg.max_seq_len, cfg.width // cfg.heads, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistable=False)
        self.register_buffer("rope_sin", sin, persistable=False)
        if sequence_parallel:
            spu = _sequence_parallel_utils()
            # the norms see 1/n of the sequence on each rank: their gradients are summed over the group
            for name, param in self.named_parameters():
                if name.endswith("norm.weight"):
                    spu.mark_as_sequence_parallel_parameter(param)
            spu.register_sequence_parallel_allreduce_hooks(self, 1, False)

    def forward(self, tokens, startend_row_indices=None):
        seq = tokens.shape[1]
        if seq > self.cfg.max_seq_len:
            raise ValueError(f"ParallelGPT: sequence length {seq} exceeds max_seq_len {self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:, :seq], self.rope_sin[:, :seq]
        x = self.embed(tokens)
        if self.sequence_parallel:
            x = _sequence_parallel_utils().ScatterOp.apply(x.transpose([1, 0, 2]))    # [s/n, b, h]
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, cos, sin, startend_row_indices)
        x = self.norm(x)
        if self.sequence_parallel:
            x = _sequence_parallel_utils().GatherOp.apply(x).transpose([1, 0, 2])  # the head needs it all
        return self.head(x)

    def num_parameters(self) -> int:
        """The full model's count (every rank's slices together)."""
        return sum(int(p.size) * (self.ranks if split_of(n) else 1) for n, p in self.named_parameters())

    def loss(self, rows, document_mask: bool = False, forward=None):
        inputs = rows[:, :-1]
        logits = (forward or self)(inputs, document_mask_of(inputs) if document_mask else None)
        local_vocab = logits.shape[-1]
        per_byte = self.cross_entropy(logits.reshape([-1, local_vocab]), rows[:, 1:].reshape([-1, 1]))
        return per_byte.mean()

    def load_full_state_dict(self, full: dict) -> None:
        """Set this rank's slices from the full weights (model.GPT's state_dict)."""
        local = {}
        for name in self.state_dict():
            if name not in full:
                raise KeyError(f"ParallelGPT.load_full_state_dict(): the state has no {name!r}")
            value = full[name].numpy() if isinstance(full[name], oarlock.Tensor) else np.asarray(full[name])
            local[name] = oarlock.to_tensor(shard(value, split_of(name), self.rank, self.ranks))
        self.set_state_dict(local)


def check_layout(cfg: GPTConfig, ranks: int, sequence_parallel: bool) -> list[str]:
    """The reasons the model cannot be split over `ranks` model-parallel ranks (empty when it can)."""
    problems = [f"{what} ({value}) must be divisible by --mp ({ranks})"
                for what, value in (("the heads", cfg.heads), ("the vocabulary", cfg.vocab_size),
                                    ("the MLP width", cfg.mlp_ratio * cfg.width)) if value % ranks]
    if sequence_parallel and cfg.max_seq_len % ranks:
        problems.append(f"--seq-len ({cfg.max_seq_len}) must be divisible by --mp ({ranks}) with --sp")
    return problems
