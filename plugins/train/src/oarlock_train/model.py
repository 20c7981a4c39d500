"""A small byte-level GPT as an oarlock.nn.Layer (Paddle layouts: Linear weight [in, out]).

token embedding -> N x [x + attn(rmsnorm(x)), x + mlp(rmsnorm(x))] -> rmsnorm -> untied output head,
with a SiLU MLP of 4x the width.
Attention uses a fused qkv Linear, rotary position embeddings on q and k, and
`scaled_dot_product_attention(is_causal=True)` in Paddle's [batch, seq, heads, head_dim] layout.
With the defaults (vocab 256, width 128, 4 layers, 4 heads) it has 857,728 parameters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256
    width: int = 128
    layers: int = 4
    heads: int = 4
    max_seq_len: int = 128
    mlp_ratio: int = 4
    dropout: float = 0.0
    rope_base: float = 10000.0

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"width {self.width} must be divisible by heads {self.heads}")
        if (self.width // self.heads) % 2:
            raise ValueError(f"the head width {self.width // self.heads} must be even for rotary embeddings")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    def to_dict(self) -> dict:
        return asdict(self)


def rotary_arrays(max_seq_len: int, head_dim: int, base: float = 10000.0):
    """cos and signed sin of the rotation angles as float32 numpy arrays [1, max_seq_len, 1, head_dim]
    for the [B, T, H, D] layout.

    Pair i of a head, (x[i], x[i + D/2]) ("rotate half" convention), rotates at frequency base^(-2i/D):
    x[i] -> x[i] cos - x[i + D/2] sin and x[i + D/2] -> x[i + D/2] cos + x[i] sin. The sine table
    carries that sign (-sin on the first half), so apply_rotary needs no negation op.
    Computed once in float64 numpy: they are constants and need no gradient.
    """
    inv_freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    angles = np.outer(np.arange(max_seq_len, dtype=np.float64), inv_freq)
    cos = np.concatenate([np.cos(angles), np.cos(angles)], axis=-1)[None, :, None, :]
    sin = np.concatenate([-np.sin(angles), np.sin(angles)], axis=-1)[None, :, None, :]
    return cos.astype(np.float32), sin.astype(np.float32)


def rotary_tables(max_seq_len: int, head_dim: int, base: float = 10000.0):
    """rotary_arrays as Tensors."""
    cos, sin = rotary_arrays(max_seq_len, head_dim, base)
    return oarlock.to_tensor(cos), oarlock.to_tensor(sin)


def apply_rotary(x, cos, sin):
    """Rotate each (x[..., i], x[..., i + D/2]) pair of x [B, T, H, D] by its position's angle."""
    half = x.shape[-1] // 2
    swapped = oarlock.concat([x[..., half:], x[..., :half]], axis=-1)
    return x * cos + swapped * sin


def _linear(fan_in, fan_out, std, bias=True):
    # GPT-2's init (normal, std 0.02) trains faster in a short run than Paddle's Xavier default.
    return nn.Linear(fan_in, fan_out, weight_attr=nn.ParamAttr(initializer=nn.initializer.Normal(0.0, std)),
                     bias_attr=None if bias else False)


class CausalSelfAttention(nn.Layer):
    def __init__(self, cfg: GPTConfig, out_std: float):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.width // cfg.heads
        self.qkv = _linear(cfg.width, 3 * cfg.width, 0.02)
        self.proj = _linear(cfg.width, cfg.width, out_std)
        self.dropout = cfg.dropout

    def forward(self, x, cos, sin):
        batch, seq, width = x.shape
        # One matmul for q, k and v, and one rotary call for q and k together ([B, T, 2H, D]): on numpy
        # every op call costs, so fewer, larger ones are faster.
        qkv = self.qkv(x).reshape([batch, seq, 3 * self.heads, self.head_dim])
        qk, v = oarlock.split(qkv, [2 * self.heads, self.heads], axis=2)
        q, k = oarlock.split(apply_rotary(qk, cos, sin), 2, axis=2)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout, is_causal=True, training=self.training)
        return self.proj(y.reshape([batch, seq, width]))


class MLP(nn.Layer):
    """Linear 4x -> SiLU -> Linear. SiLU rather than exact GELU: on numpy the erf of exact GELU made the
    activation about 3x slower (the share of a whole training step it took was measurable)."""

    def __init__(self, cfg: GPTConfig, out_std: float):
        super().__init__()
        hidden = cfg.mlp_ratio * cfg.width
        self.fc = _linear(cfg.width, hidden, 0.02)
        self.proj = _linear(hidden, cfg.width, out_std)

    def forward(self, x):
        return self.proj(F.silu(self.fc(x)))


class Block(nn.Layer):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        # GPT-2 scales the init of the layers that write into the residual stream by 1/sqrt(2 * layers),
        # so the residual's variance does not grow with depth.
        out_std = 0.02 / (2 * cfg.layers) ** 0.5
        self.attn_norm = nn.RMSNorm(cfg.width)
        self.attn = CausalSelfAttention(cfg, out_std)
        self.mlp_norm = nn.RMSNorm(cfg.width)
        self.mlp = MLP(cfg, out_std)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin))
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class GPT(nn.Layer):
    """forward(tokens [B, T] int64) -> logits [B, T, vocab_size]."""

    def __init__(self, cfg: GPTConfig | None = None):
        super().__init__()
        self.cfg = cfg = cfg or GPTConfig()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.width,
                                  weight_attr=nn.ParamAttr(initializer=nn.initializer.Normal(0.0, 0.02)))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.LayerList([Block(cfg) for _ in range(cfg.layers)])
        self.norm = nn.RMSNorm(cfg.width)
        self.head = _linear(cfg.width, cfg.vocab_size, 0.02, bias=False)
        cos, sin = rotary_tables(cfg.max_seq_len, cfg.width // cfg.heads, cfg.rope_base)
        # Constants derived from the config: not persistable, so checkpoints hold only learned weights.
        self.register_buffer("rope_cos", cos, persistable=False)
        self.register_buffer("rope_sin", sin, persistable=False)

    def forward(self, tokens):
        seq = tokens.shape[1]
        if seq > self.cfg.max_seq_len:
            raise ValueError(f"GPT: sequence length {seq} exceeds max_seq_len {self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:, :seq], self.rope_sin[:, :seq]
        x = self.drop(self.embed(tokens))
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))

    def num_parameters(self) -> int:
        return sum(int(p.size) for p in self.parameters())

    def loss(self, rows):
        """Mean next-byte cross entropy (nats per byte) of rows [B, T + 1]: inputs rows[:, :-1], targets rows[:, 1:]."""
        logits = self(rows[:, :-1])
        return F.cross_entropy(logits.reshape([-1, self.cfg.vocab_size]), rows[:, 1:].reshape([-1]))
