"""nn.MultiHeadAttention with Paddle's constructor, parameters, forward and cache.

Parameters match Paddle's state_dict: q_proj/k_proj/v_proj/out_proj are nn.Linear layers (weight
[in, out], bias [out]). Inputs are [batch, seq_len, features]; the projections reshape straight into the
[batch, seq_len, num_heads, head_dim] layout of the fused scaled_dot_product_attention, so the usual call
(need_weights=False) transposes nothing.

Masks are converted as Paddle does: a bool or integer mask becomes (mask - 1) * 1e9 (False/0 = masked), a
float mask is added as is; the result broadcasts to [batch, num_heads, seq_len_q, seq_len_k]. So a query row
whose keys are all masked gets Paddle's (near-uniform) weights, not zeros.

Caches (inference): Cache(k, v) grows by the new keys and values on every call (decoder self-attention) and
StaticCache(k, v) replaces key and value (encoder-decoder attention); both hold [batch, num_heads, seq_len,
head_dim] tensors, Paddle's layout.
"""

from __future__ import annotations

import collections

import oarlock
import oarlock.nn.functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import Linear, check_input, check_positive


def convert_attention_mask(attn_mask, dtype):
    """Paddle's conversion: bool/int masks become additive (0 keep, -1e9 masked), float masks take `dtype`."""
    if attn_mask is None or attn_mask.dtype == dtype:
        return attn_mask
    if attn_mask.dtype == oarlock.bool or attn_mask.dtype.kind == "int":
        return (oarlock.cast(attn_mask, dtype) - 1.0) * 1e9
    return oarlock.cast(attn_mask, dtype)


class MultiHeadAttention(Layer):
    """MultiHeadAttention(embed_dim, num_heads, dropout=0.0, kdim=None, vdim=None, need_weights=False,
    weight_attr=None, bias_attr=None): attention over num_heads subspaces of embed_dim features."""

    Cache = collections.namedtuple("Cache", ["k", "v"])
    StaticCache = collections.namedtuple("StaticCache", ["k", "v"])

    def __init__(self, embed_dim, num_heads, dropout=0.0, kdim=None, vdim=None, need_weights=False,
                 weight_attr=None, bias_attr=None):
        super().__init__()
        check_positive(self, "embed_dim", embed_dim)
        check_positive(self, "num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(f"MultiHeadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        for name, value in (("kdim", kdim), ("vdim", vdim)):
            if value is not None:
                check_positive(self, name, value)
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"MultiHeadAttention: dropout must be in [0, 1], got {dropout!r}")
        self.embed_dim = embed_dim
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        self.need_weights = need_weights
        self.q_proj = Linear(embed_dim, embed_dim, weight_attr, bias_attr)
        self.k_proj = Linear(self.kdim, embed_dim, weight_attr, bias_attr)
        self.v_proj = Linear(self.vdim, embed_dim, weight_attr, bias_attr)
        self.out_proj = Linear(embed_dim, embed_dim, weight_attr, bias_attr)

    # -- projections ------------------------------------------------------------------------------
    def _check_input(self, name, x, features):
        what = "embed_dim" if name == "query" else f"{name[0]}dim"
        check_input(self, x, f"{name} of shape [batch, seq_len, {features}] ({what}={features})", ranks=(3,),
                    sizes={-1: features})

    def _split_heads(self, x):
        """[batch, seq_len, embed_dim] -> [batch, seq_len, num_heads, head_dim]."""
        return oarlock.reshape(x, [x.shape[0], x.shape[1], self.num_heads, self.head_dim])

    def compute_kv(self, key, value):
        """The projected key and value, split into heads: two [batch, num_heads, seq_len, head_dim] tensors."""
        k, v = self._project_kv(key, value)
        return oarlock.transpose(k, [0, 2, 1, 3]), oarlock.transpose(v, [0, 2, 1, 3])

    def _project_kv(self, key, value):
        self._check_input("key", key, self.kdim)
        self._check_input("value", value, self.vdim)
        return self._split_heads(self.k_proj(key)), self._split_heads(self.v_proj(value))

    def gen_cache(self, key, value=None, type=Cache):  # `type` shadows the builtin: Paddle names it so
        """A Cache or StaticCache for `forward` (see the module docstring): StaticCache projects key and value;
        Cache with value=None starts empty ([batch, num_heads, 0, head_dim]); Cache(key, value) otherwise."""
        if type is MultiHeadAttention.StaticCache:
            return self.StaticCache(*self.compute_kv(key, value))
        if value is None:
            shape = [key.shape[0], self.num_heads, 0, self.head_dim]
            return self.Cache(oarlock.zeros(shape, dtype=key.dtype), oarlock.zeros(shape, dtype=key.dtype))
        return self.Cache(key, value)

    def _keys_values(self, key, value, cache):
        """(k, v) in [batch, seq_len, num_heads, head_dim] and the cache to return (or None)."""
        if cache is not None and not isinstance(cache, (self.Cache, self.StaticCache)):
            raise TypeError(f"MultiHeadAttention.forward(): cache must be a MultiHeadAttention.Cache or "
                            f"StaticCache, got {type(cache).__name__}")
        if isinstance(cache, self.StaticCache):
            k, v = cache.k, cache.v
        else:
            k, v = self._project_kv(key, value)
            if cache is None:
                return k, v, None
            k = oarlock.concat([cache.k, oarlock.transpose(k, [0, 2, 1, 3])], axis=2)
            v = oarlock.concat([cache.v, oarlock.transpose(v, [0, 2, 1, 3])], axis=2)
            cache = self.Cache(k, v)
        return oarlock.transpose(k, [0, 2, 1, 3]), oarlock.transpose(v, [0, 2, 1, 3]), cache

    # -- attention --------------------------------------------------------------------------------
    def _attention_with_weights(self, q, k, v, mask):
        """The composed path that also returns the weights [batch, num_heads, seq_q, seq_k] (need_weights)."""
        q, k, v = (oarlock.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))
        product = oarlock.matmul(q * (self.head_dim ** -0.5), k, transpose_y=True)
        if mask is not None:
            product = product + mask
        weights = F.softmax(product)
        if self.dropout:
            weights = F.dropout(weights, self.dropout, training=self.training, mode="upscale_in_train")
        return oarlock.transpose(oarlock.matmul(weights, v), [0, 2, 1, 3]), weights

    def forward(self, query, key=None, value=None, attn_mask=None, cache=None):
        self._check_input("query", query, self.embed_dim)
        key = query if key is None else key
        value = query if value is None else value
        q = self._split_heads(self.q_proj(query))
        k, v, cache = self._keys_values(key, value, cache)
        mask = convert_attention_mask(attn_mask, q.dtype)
        weights = None
        if self.need_weights:
            out, weights = self._attention_with_weights(q, k, v, mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout,
                                                 training=self.training)
        out = self.out_proj(oarlock.reshape(out, [out.shape[0], out.shape[1], self.embed_dim]))
        outs = [out] + ([weights] if self.need_weights else []) + ([cache] if cache is not None else [])
        return out if len(outs) == 1 else tuple(outs)

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, dropout={self.dropout}, kdim={self.kdim}, "
                f"vdim={self.vdim}, need_weights={self.need_weights}")


EXPORTS = {"oarlock.nn": [MultiHeadAttention]}
