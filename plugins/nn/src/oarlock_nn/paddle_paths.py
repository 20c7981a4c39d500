"""Paddle 3.2's module paths under paddle.nn.layer that model code imports from (PaddleFormers:
`from paddle.nn.layer.layers import in_declarative_mode`, `from paddle.nn.layer.transformer import
_convert_attention_mask`), exported by oarlock_nn.plugin with the objects of oarlock.nn.

`in_declarative_mode()` tells whether code runs while being converted to a static graph; oarlock always runs
eagerly (its jit.to_static keeps eager semantics), so it is False. `_convert_attention_mask(mask, dtype)` is
Paddle's helper: a bool or int mask becomes additive (0 kept, -1e9 masked) in `dtype`, a float mask is cast."""

from __future__ import annotations

LAYERS = "oarlock.nn.layer.layers"
TRANSFORMER = "oarlock.nn.layer.transformer"
TRANSFORMER_NAMES = ("MultiHeadAttention", "TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer",
                     "TransformerDecoder", "Transformer")


def in_declarative_mode() -> bool:
    """False: oarlock never traces a static graph."""
    return False


def register_api(api) -> None:
    from oarlock_nn.layers import attention, base, transformer
    api.namespace("oarlock.nn.layer", doc="Paddle's paddle.nn.layer module paths.")
    api.namespace(LAYERS, doc="Paddle's paddle.nn.layer.layers: Layer and in_declarative_mode.")
    api.export(LAYERS, "Layer", base.Layer)
    api.export(LAYERS, "in_declarative_mode", in_declarative_mode)
    api.namespace(TRANSFORMER, doc="Paddle's paddle.nn.layer.transformer: the Transformer layers and its mask "
                                   "helper.")
    for name in TRANSFORMER_NAMES:
        api.export(TRANSFORMER, name, getattr(transformer, name))
    api.export(TRANSFORMER, "_convert_attention_mask", attention.convert_attention_mask)
