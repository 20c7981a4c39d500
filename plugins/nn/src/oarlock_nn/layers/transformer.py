"""nn.Transformer and its parts, with Paddle 3.2's constructors, sublayer names and caches:
TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder, Transformer.

Sublayer names match Paddle's state_dict (self_attn, cross_attn, linear1/2, norm1/2/3, dropout1/2/3), so a
Paddle checkpoint loads as is. normalize_before=True is the pre-norm form (LayerNorm before each sublayer,
the residual added after); False is the post-norm form of the original paper.

Incremental decoding works as in Paddle: `gen_cache` makes, per decoder layer, a growing self-attention
Cache and a StaticCache of the projected memory; calling the decoder with `cache=` returns the output and
the updated caches, so feeding one target position at a time gives the same result as the whole sequence
with a causal mask.

weight_attr / bias_attr may be one attribute (copied to every sublayer, a name getting "_<i>" appended)
or a list: for a layer, [attention, feed-forward] (encoder) or [self-attention, cross-attention,
feed-forward] (decoder); for Transformer, a list of 1, 2 or 3 that is spread over both, as Paddle does.
"""

from __future__ import annotations

import copy
import numbers

import oarlock
import oarlock.nn.functional as F
from oarlock_nn.layers.attention import MultiHeadAttention, convert_attention_mask
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import Dropout, Linear
from oarlock_nn.layers.containers import LayerList
from oarlock_nn.layers.initializer import ParamAttr
from oarlock_nn.layers.norm import LayerNorm


def _param_attrs(owner, what, attr, n):
    """Paddle's _convert_param_attr_to_list: a list of n attributes (False meaning: no parameter)."""
    if isinstance(attr, (list, tuple)):
        if len(attr) != n:
            raise ValueError(f"{owner}: {what} as a list must have {n} entries, got {len(attr)}")
        return [(None if a else False) if isinstance(a, bool) else a for a in attr]
    if isinstance(attr, bool):
        return [None if attr else False] * n
    resolved = ParamAttr.resolve(attr)
    attrs = []
    for i in range(n):
        attr_i = copy.deepcopy(resolved)
        if resolved.name:
            attr_i.name = f"{resolved.name}_{i}"
        attrs.append(attr_i)
    return attrs


def _check_sizes(owner, **sizes):
    for name, value in sizes.items():
        if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")


def _activation(owner, name):
    function = getattr(F, name, None) if isinstance(name, str) else None
    if function is None:
        raise ValueError(f"{owner}: activation must name a function of oarlock.nn.functional (e.g. 'relu', "
                         f"'gelu'), got {name!r}")
    return function


class _TransformerLayer(Layer):
    """What the encoder and decoder layers share: the arguments (kept in _config, as Paddle does, so
    TransformerEncoder/Decoder can build further layers of the same configuration), the feed-forward
    block, and the pre-/post-norm residual step."""

    attentions = ()  # the attention sublayers' names, in Paddle's order (a list weight_attr / bias_attr
    #                  gives one attribute per attention and one for the feed-forward block)

    def _setup(self, config):
        config.pop("self")
        config.pop("__class__", None)
        self._config = config
        owner = type(self).__name__
        _check_sizes(owner, d_model=config["d_model"], nhead=config["nhead"],
                     dim_feedforward=config["dim_feedforward"])
        dropout = config["dropout"]
        attn_dropout = dropout if config["attn_dropout"] is None else config["attn_dropout"]
        act_dropout = dropout if config["act_dropout"] is None else config["act_dropout"]
        self.normalize_before = config["normalize_before"]
        weights = _param_attrs(owner, "weight_attr", config["weight_attr"], len(self.attentions) + 1)
        biases = _param_attrs(owner, "bias_attr", config["bias_attr"], len(self.attentions) + 1)
        d_model, nhead = config["d_model"], config["nhead"]
        for name, weight, bias in zip(self.attentions, weights, biases):   # first: Paddle's state_dict order
            setattr(self, name, MultiHeadAttention(d_model, nhead, dropout=attn_dropout, weight_attr=weight,
                                                   bias_attr=bias))
        self.linear1 = Linear(d_model, config["dim_feedforward"], weights[-1], bias_attr=biases[-1])
        self.dropout = Dropout(act_dropout, mode="upscale_in_train")
        self.linear2 = Linear(config["dim_feedforward"], d_model, weights[-1], bias_attr=biases[-1])
        self.activation = _activation(owner, config["activation"])
        return dropout

    def _residual(self, x, norm, dropout, sublayer):
        """x + dropout(sublayer(x')) where x' is norm(x) (pre-norm) or x; post-norm normalises the sum."""
        out = x + dropout(sublayer(norm(x) if self.normalize_before else x))
        return out if self.normalize_before else norm(out)

    def _feed_forward(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class TransformerEncoderLayer(_TransformerLayer):
    """TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout=0.1, activation='relu',
    attn_dropout=None, act_dropout=None, normalize_before=False, weight_attr=None, bias_attr=None,
    layer_norm_eps=1e-5): self-attention then a feed-forward block, each with a residual and a LayerNorm."""

    attentions = ("self_attn",)

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, activation="relu", attn_dropout=None,
                 act_dropout=None, normalize_before=False, weight_attr=None, bias_attr=None, layer_norm_eps=1e-5):
        config = locals()
        super().__init__()
        dropout = self._setup(config)
        self.norm1 = LayerNorm(d_model, layer_norm_eps)
        self.norm2 = LayerNorm(d_model, layer_norm_eps)
        self.dropout1 = Dropout(dropout, mode="upscale_in_train")
        self.dropout2 = Dropout(dropout, mode="upscale_in_train")

    def forward(self, src, src_mask=None, cache=None):
        src_mask = convert_attention_mask(src_mask, src.dtype)
        new_cache = []

        def attend(x):
            if cache is None:
                return self.self_attn(x, x, x, src_mask)
            out, updated = self.self_attn(x, x, x, src_mask, cache)
            new_cache.append(updated)
            return out

        src = self._residual(src, self.norm1, self.dropout1, attend)
        src = self._residual(src, self.norm2, self.dropout2, self._feed_forward)
        return src if cache is None else (src, new_cache[0])

    def gen_cache(self, src):
        """An empty self-attention Cache for `src`'s batch (for forward(..., cache=))."""
        return self.self_attn.gen_cache(src, type=self.self_attn.Cache)


class TransformerDecoderLayer(_TransformerLayer):
    """TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout=0.1, activation='relu',
    attn_dropout=None, act_dropout=None, normalize_before=False, weight_attr=None, bias_attr=None,
    layer_norm_eps=1e-5): self-attention, attention over the encoder's memory, then a feed-forward block."""

    attentions = ("self_attn", "cross_attn")

    def __init__(self, d_model, nhead, dim_feedforward, dropout=0.1, activation="relu", attn_dropout=None,
                 act_dropout=None, normalize_before=False, weight_attr=None, bias_attr=None, layer_norm_eps=1e-5):
        config = locals()
        super().__init__()
        dropout = self._setup(config)
        self.norm1 = LayerNorm(d_model, layer_norm_eps)
        self.norm2 = LayerNorm(d_model, layer_norm_eps)
        self.norm3 = LayerNorm(d_model, layer_norm_eps)
        self.dropout1 = Dropout(dropout, mode="upscale_in_train")
        self.dropout2 = Dropout(dropout, mode="upscale_in_train")
        self.dropout3 = Dropout(dropout, mode="upscale_in_train")

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, cache=None):
        tgt_mask = convert_attention_mask(tgt_mask, tgt.dtype)
        memory_mask = convert_attention_mask(memory_mask, memory.dtype)
        if cache is not None and (not isinstance(cache, (list, tuple)) or len(cache) != 2):
            raise TypeError(f"TransformerDecoderLayer.forward(): cache must be the (Cache, StaticCache) pair "
                            f"gen_cache returns, got {type(cache).__name__}")
        new_cache = []

        def attend(attention, key, mask, index):
            def sublayer(x):
                k = x if key is None else key
                if cache is None:
                    return attention(x, k, k, mask, None)
                out, updated = attention(x, k, k, mask, cache[index])
                new_cache.append(updated)
                return out
            return sublayer

        tgt = self._residual(tgt, self.norm1, self.dropout1, attend(self.self_attn, None, tgt_mask, 0))
        tgt = self._residual(tgt, self.norm2, self.dropout2, attend(self.cross_attn, memory, memory_mask, 1))
        tgt = self._residual(tgt, self.norm3, self.dropout3, self._feed_forward)
        return tgt if cache is None else (tgt, tuple(new_cache))

    def gen_cache(self, memory):
        """(an empty self-attention Cache, a StaticCache of the projected memory)."""
        return (self.self_attn.gen_cache(memory, type=self.self_attn.Cache),
                self.cross_attn.gen_cache(memory, memory, type=self.cross_attn.StaticCache))


class _Stack(Layer):
    """num_layers copies of a layer (the given one first, then fresh ones of its configuration, so
    each has its own parameters) and an optional final norm."""

    def __init__(self, layer, num_layers, norm, kind):
        super().__init__()
        if not isinstance(layer, kind):
            raise TypeError(f"{type(self).__name__}: expected a {kind.__name__}, got {type(layer).__name__}")
        _check_sizes(type(self).__name__, num_layers=num_layers)
        self.layers = LayerList([layer if i == 0 else type(layer)(**layer._config) for i in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def _run(self, output, cache, call):
        if cache is not None and len(cache) != self.num_layers:
            raise ValueError(f"{type(self).__name__}.forward(): cache must have one entry per layer "
                             f"({self.num_layers}), got {len(cache)}")
        new_caches = []
        for i, layer in enumerate(self.layers):
            if cache is None:
                output = call(layer, output, None)
            else:
                output, updated = call(layer, output, cache[i])
                new_caches.append(updated)
        if self.norm is not None:
            output = self.norm(output)
        return output if cache is None else (output, new_caches)


class TransformerEncoder(_Stack):
    """TransformerEncoder(encoder_layer, num_layers, norm=None)."""

    def __init__(self, encoder_layer, num_layers, norm=None):
        super().__init__(encoder_layer, num_layers, norm, TransformerEncoderLayer)

    def forward(self, src, src_mask=None, cache=None):
        src_mask = convert_attention_mask(src_mask, src.dtype)
        return self._run(src, cache, lambda layer, x, c: layer(x, src_mask=src_mask, cache=c))

    def gen_cache(self, src):
        """One empty self-attention Cache per layer."""
        return [layer.gen_cache(src) for layer in self.layers]


class TransformerDecoder(_Stack):
    """TransformerDecoder(decoder_layer, num_layers, norm=None)."""

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__(decoder_layer, num_layers, norm, TransformerDecoderLayer)

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, cache=None):
        tgt_mask = convert_attention_mask(tgt_mask, tgt.dtype)
        memory_mask = convert_attention_mask(memory_mask, memory.dtype)
        return self._run(tgt, cache, lambda layer, x, c: layer(x, memory, tgt_mask=tgt_mask,
                                                              memory_mask=memory_mask, cache=c))

    def gen_cache(self, memory, do_zip=False):
        """Per layer, (Cache, StaticCache); do_zip=True regroups them as [all Caches, all StaticCaches]."""
        cache = [layer.gen_cache(memory) for layer in self.layers]
        return list(zip(*cache)) if do_zip else cache


def _spread(owner, what, attr):
    """Transformer's weight_attr / bias_attr: one value for both, or a list of 1, 2 or 3 spread as Paddle
    does; returns (encoder's, decoder's)."""
    if not isinstance(attr, (list, tuple)):
        return attr, attr
    if len(attr) == 1:
        return [attr[0]] * 2, [attr[0]] * 3
    if len(attr) == 2:
        return list(attr), [attr[0], attr[0], attr[-1]]
    if len(attr) == 3:
        return [attr[0], attr[-1]], list(attr)
    raise ValueError(f"{owner}: {what} as a list must have 1, 2 or 3 entries, got {len(attr)}")


class Transformer(Layer):
    """Transformer(d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
    dropout=0.1, activation='relu', attn_dropout=None, act_dropout=None, normalize_before=False,
    weight_attr=None, bias_attr=None, custom_encoder=None, custom_decoder=None): an encoder-decoder
    (both with a final LayerNorm) as in "Attention Is All You Need"."""

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048,
                 dropout=0.1, activation="relu", attn_dropout=None, act_dropout=None, normalize_before=False,
                 weight_attr=None, bias_attr=None, custom_encoder=None, custom_decoder=None):
        super().__init__()
        _check_sizes("Transformer", d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward)
        encoder_weights, decoder_weights = _spread("Transformer", "weight_attr", weight_attr)
        encoder_biases, decoder_biases = _spread("Transformer", "bias_attr", bias_attr)
        common = (d_model, nhead, dim_feedforward, dropout, activation, attn_dropout, act_dropout, normalize_before)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(*common, encoder_weights, encoder_biases)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, LayerNorm(d_model))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(*common, decoder_weights, decoder_biases)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, LayerNorm(d_model))
        self.d_model = d_model
        self.nhead = nhead

    def forward(self, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None):
        src_mask = convert_attention_mask(src_mask, src.dtype)
        memory = self.encoder(src, src_mask=src_mask)
        tgt_mask = convert_attention_mask(tgt_mask, tgt.dtype)
        memory_mask = convert_attention_mask(memory_mask, memory.dtype)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask)

    def generate_square_subsequent_mask(self, length):
        """A [length, length] float mask of the default dtype: 0 on and below the diagonal, -inf above."""
        if isinstance(length, oarlock.Tensor):
            length = int(length.item())
        _check_sizes("Transformer.generate_square_subsequent_mask", length=length)
        return oarlock.triu(oarlock.full([length, length], float("-inf"), dtype=oarlock.get_default_dtype()), 1)


EXPORTS = {"oarlock.nn": [Transformer, TransformerEncoder, TransformerEncoderLayer, TransformerDecoder,
                          TransformerDecoderLayer]}
