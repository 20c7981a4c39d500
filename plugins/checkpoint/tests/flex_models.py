"""Models and layouts shared by the FlexCheckpoint tests and their MPI job script.

SeparateQKV / FusedQKV are the same grouped-query attention block written two
ways: with q, k and v projections, and with one fused qkv projection laid out
as Paddle's fused_qkv does it (for each key/value head g: the query heads of
group g, then k_g, then v_g). Weights are [in, out] as in Paddle.
"""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.distributed as dist
from oarlock import nn

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, LAYERS = 48, 32, 4, 2, 8, 2
GROUP = HEADS // KV_HEADS


def _attend(q, k, v):
    """q [b, s, HEADS, d]; k, v [b, s, KV_HEADS, d]; query head h uses key/value head h // GROUP."""
    b, s = q.shape[0], q.shape[1]
    k = k.repeat_interleave(GROUP, axis=2)
    v = v.repeat_interleave(GROUP, axis=2)
    q, k, v = (t.transpose([0, 2, 1, 3]) for t in (q, k, v))
    weights = oarlock.nn.functional.softmax(oarlock.matmul(q, k, transpose_y=True) / HEAD_DIM ** 0.5, axis=-1)
    return oarlock.matmul(weights, v).transpose([0, 2, 1, 3]).reshape([b, s, HEADS * HEAD_DIM])


class SeparateAttention(nn.Layer):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(HIDDEN, HEADS * HEAD_DIM)
        self.k = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM)
        self.v = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM)
        self.o = nn.Linear(HEADS * HEAD_DIM, HIDDEN)

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        return self.o(_attend(self.q(x).reshape([b, s, HEADS, HEAD_DIM]), self.k(x).reshape([b, s, KV_HEADS, HEAD_DIM]),
                              self.v(x).reshape([b, s, KV_HEADS, HEAD_DIM])))


class FusedAttention(nn.Layer):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM)
        self.o = nn.Linear(HEADS * HEAD_DIM, HIDDEN)

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        y = self.qkv(x).reshape([b, s, KV_HEADS, GROUP + 2, HEAD_DIM])
        q = y[:, :, :, :GROUP, :].reshape([b, s, HEADS, HEAD_DIM])
        return self.o(_attend(q, y[:, :, :, GROUP, :], y[:, :, :, GROUP + 1, :]))


class Block(nn.Layer):
    def __init__(self, fused: bool):
        super().__init__()
        self.attn = FusedAttention() if fused else SeparateAttention()
        self.norm = nn.LayerNorm(HIDDEN)
        self.up = nn.Linear(HIDDEN, 2 * HIDDEN)
        self.down = nn.Linear(2 * HIDDEN, HIDDEN)

    def forward(self, x):
        x = x + self.attn(self.norm(x))
        return x + self.down(nn.functional.gelu(self.up(x)))


class Model(nn.Layer):
    def __init__(self, fused: bool = False):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.LayerList([Block(fused) for _ in range(LAYERS)])
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def tokens(seed: int = 1):
    return oarlock.to_tensor(np.random.default_rng(seed).integers(0, VOCAB, size=(2, 6)), dtype="int64")


def trained(steps: int = 2):
    """A separate-QKV model after `steps` AdamW steps, and its optimizer (the same on every rank)."""
    oarlock.seed(7)
    model = Model(fused=False)
    opt = oarlock.optimizer.AdamW(learning_rate=1e-2, parameters=model.parameters())
    for step in range(steps):
        loss = model(tokens(step)).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
    return model, opt


def fuse_qkv(q, k, v):
    """numpy: separate [in, out] q, k, v (or 1-d biases) -> the fused layout, by reshaping heads."""
    lead = q.shape[:-1]
    qh = q.reshape(*lead, KV_HEADS, GROUP, HEAD_DIM)
    kh = k.reshape(*lead, KV_HEADS, 1, HEAD_DIM)
    vh = v.reshape(*lead, KV_HEADS, 1, HEAD_DIM)
    return np.concatenate([qh, kh, vh], axis=-2).reshape(*lead, (HEADS + 2 * KV_HEADS) * HEAD_DIM)


def fused_state(separate: dict) -> dict:
    """numpy: a separate model's state dict in the fused model's keys and layout."""
    out = {}
    for key, value in separate.items():
        if ".attn.q." in key:
            kind = key.rsplit(".", 1)[1]
            base = key.split(".attn.")[0] + ".attn."
            out[f"{base}qkv.{kind}"] = fuse_qkv(value, separate[f"{base}k.{kind}"], separate[f"{base}v.{kind}"])
        elif ".attn.k." not in key and ".attn.v." not in key:
            out[key] = value
    return out


FUSE = [f"layers.$LAYER_ID.attn.q.{kind}, layers.$LAYER_ID.attn.k.{kind}, layers.$LAYER_ID.attn.v.{kind} -> "
        f"layers.$LAYER_ID.attn.qkv.{kind}, fused_qkv, num_heads={HEADS}, num_key_value_groups={KV_HEADS}"
        for kind in ("weight", "bias")]
SPLIT = [f"layers.$LAYER_ID.attn.qkv.{kind} -> layers.$LAYER_ID.attn.q.{kind}, layers.$LAYER_ID.attn.k.{kind}, "
         f"layers.$LAYER_ID.attn.v.{kind}, fused_qkv, num_heads={HEADS}, num_key_value_groups={KV_HEADS}"
         for kind in ("weight", "bias")]


def shard(key: str, tensor, layout: str, group=None):
    """This rank's part of a whole tensor over `group` (the world when None): "rows" splits axis 0, "cols"
    the last axis, "whole" keeps it whole (a plain Tensor, replicated on every rank)."""
    if layout == "whole" or tensor.ndim == 0:
        return tensor
    return dist.shard_full_weight(key, tensor, 0 if layout == "rows" else tensor.ndim - 1, group)


def sharded(state: dict, layout: str, prefix: str, group=None) -> dict:
    return {key: shard(f"{prefix}.{key}", value, layout, group) if isinstance(value, oarlock.Tensor) else value
            for key, value in state.items()}
