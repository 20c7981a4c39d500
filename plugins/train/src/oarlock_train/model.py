"""A small byte-level GPT as an oarlock.nn.Layer (Paddle layouts: Linear weight [in, out]).

token embedding -> N x [x + attn(rmsnorm(x)), x + mlp(rmsnorm(x))] -> rmsnorm -> untied output head,
with a SiLU MLP of 4x the width.
Attention uses a fused qkv Linear, rotary position embeddings on q and k, and
`scaled_dot_product_attention(is_causal=True)` in Paddle's [batch, seq, heads, head_dim] layout; given
`startend_row_indices` (a FlashMask mask, e.g. the causal-document mask of `document_mask_of`), it calls
`flashmask_attention(..., causal=True)` instead, so packed documents do not attend to each other.
With the defaults (vocab 256, width 128, 4 layers, 4 heads) it has 857,728 parameters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

import oarlock
import oarlock.nn as nn
import oarlock.nn.functional as F
from oarlock_train.corpus import SEPARATOR


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
    """Rotate each (x[..., i], x[..., i + D/2]) pair of x [B, T, H, D] by its position's angle: x * cos +
    rotate_half(x) * sin in one op (fused_rotary_embedding; one kernel on the GPU), the same numbers as
    that composite."""
    return F.fused_rotary_embedding(x, cos, sin)


def segment_ids(tokens: np.ndarray) -> np.ndarray:
    """Document index of every position of tokens [B, T] (int32): each SEPARATOR starts a new document.

    The separator belongs to the document it starts: as an input it predicts that document's first byte.
    """
    return np.cumsum(np.asarray(tokens) == SEPARATOR, axis=1, dtype=np.int32)


def document_mask_of(tokens):
    """The causal-document FlashMask startend_row_indices [B, 1, T, 1] (int32) of tokens [B, T] (a Tensor or
    array): position i attends to position j <= i only when no separator lies in (j, i]."""
    ids = segment_ids(tokens.numpy() if hasattr(tokens, "numpy") else tokens)
    startend_row_indices, causal = oarlock.nn.attention.causal_document_mask(segment_ids=ids)
    assert causal, "causal_document_mask returns a mask for causal=True"
    return startend_row_indices


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

    def forward(self, x, cos, sin, startend_row_indices=None):
        y = attend(self.qkv(x), self.heads, self.head_dim, cos, sin, startend_row_indices, self.dropout,
                   self.training)
        return self.proj(y)


def attend(qkv, heads, head_dim, cos, sin, startend_row_indices=None, dropout=0.0, training=True):
    """Causal attention of the fused projection qkv [B, T, 3 * heads * head_dim] (columns: the q of every
    head, then the k's, then the v's) -> [B, T, heads * head_dim]. The tensor-parallel model
    (parallel_model) calls it with the heads of one rank."""
    batch, seq = qkv.shape[0], qkv.shape[1]
    # One matmul for q, k and v, and one rotary call for q and k together ([B, T, 2H, D]): on numpy
    # every op call costs, so fewer, larger ones are faster.
    qkv = qkv.reshape([batch, seq, 3 * heads, head_dim])
    qk, v = oarlock.split(qkv, [2 * heads, heads], axis=2)
    q, k = oarlock.split(apply_rotary(qk, cos, sin), 2, axis=2)
    if startend_row_indices is None:
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, training=training)
    else:
        y = F.flashmask_attention(q, k, v, startend_row_indices, dropout=dropout, causal=True, training=training)
    return y.reshape([batch, seq, heads * head_dim])


class MLP(nn.Layer):
    """Linear 4x -> SiLU -> Linear. SiLU rather than exact GELU: on numpy the erf of exact GELU made the
    activation about 3x slower (the share of a whole training step it took was measurable)."""

    def __init__(self, cfg: GPTConfig, out_std: float, hidden: int | None = None):
        super().__init__()
        hidden = hidden or cfg.mlp_ratio * cfg.width   # a mixture-of-experts expert may be narrower
        self.fc = _linear(cfg.width, hidden, 0.02)
        self.proj = _linear(hidden, cfg.width, out_std)

    def forward(self, x):
        return self.proj(F.silu(self.fc(x)))


def residual_std(cfg: GPTConfig) -> float:
    """GPT-2 scales the init of the layers that write into the residual stream by 1/sqrt(2 * layers),
    so the residual's variance does not grow with depth."""
    return 0.02 / (2 * cfg.layers) ** 0.5


class Block(nn.Layer):
    """x + attn(rmsnorm(x)), then + mlp(rmsnorm(x)). `attn` and `mlp` default to this module's; the
    tensor-parallel model passes its own (same parameter names and order)."""

    def __init__(self, cfg: GPTConfig, attn: nn.Layer | None = None, mlp: nn.Layer | None = None):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.width)
        self.attn = attn if attn is not None else CausalSelfAttention(cfg, residual_std(cfg))
        self.mlp_norm = nn.RMSNorm(cfg.width)
        self.mlp = mlp if mlp is not None else MLP(cfg, residual_std(cfg))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin, startend_row_indices=None):
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin, startend_row_indices))
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class GPT(nn.Layer):
    """forward(tokens [B, T] int64, startend_row_indices=None) -> logits [B, T, vocab_size].

    startend_row_indices: None for plain causal attention, or an int32 FlashMask mask [B, 1, T, 1]
    (causal encoding, as `document_mask_of` returns) applied on top of the causal mask in every layer.
    make_block(cfg) -> Block builds each block (default Block(cfg); moe_model's GPT passes blocks whose MLP
    is a mixture of experts).
    """

    def __init__(self, cfg: GPTConfig | None = None, make_block=Block):
        super().__init__()
        self.cfg = cfg = cfg or GPTConfig()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.width,
                                  weight_attr=nn.ParamAttr(initializer=nn.initializer.Normal(0.0, 0.02)))
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.LayerList([make_block(cfg) for _ in range(cfg.layers)])
        self.norm = nn.RMSNorm(cfg.width)
        self.head = _linear(cfg.width, cfg.vocab_size, 0.02, bias=False)
        cos, sin = rotary_tables(cfg.max_seq_len, cfg.width // cfg.heads, cfg.rope_base)
        # Constants derived from the config: not persistable, so checkpoints hold only learned weights.
        self.register_buffer("rope_cos", cos, persistable=False)
        self.register_buffer("rope_sin", sin, persistable=False)

    def forward(self, tokens, startend_row_indices=None):
        seq = tokens.shape[1]
        if seq > self.cfg.max_seq_len:
            raise ValueError(f"GPT: sequence length {seq} exceeds max_seq_len {self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:, :seq], self.rope_sin[:, :seq]
        x = self.drop(self.embed(tokens))
        for block in self.blocks:
            x = block(x, cos, sin, startend_row_indices)
        return self.head(self.norm(x))

    def num_parameters(self) -> int:
        return sum(int(p.size) for p in self.parameters())

    def loss(self, rows, document_mask: bool = False, forward=None):
        """Mean next-byte cross entropy (nats per byte) of rows [B, T + 1]: inputs rows[:, :-1], targets rows[:, 1:].

        With document_mask, attention does not cross the document separators of the inputs (see `document_mask_of`).
        forward: what runs the model (a wrapper of it such as DataParallel; default the model itself).
        """
        inputs = rows[:, :-1]
        logits = (forward or self)(inputs, document_mask_of(inputs) if document_mask else None)
        return F.cross_entropy(logits.reshape([-1, self.cfg.vocab_size]), rows[:, 1:].reshape([-1]))
