"""The base of the layers that wrap a model for a parallel strategy (DataParallel, TensorParallel,
ShardingParallel, GroupShardedStage2): their state is the wrapped model's.

Paddle's wrappers forward state_dict / set_state_dict / sharded_state_dict to the wrapped layers, so the keys
carry no wrapper prefix and a checkpoint saved through a wrapper loads into the plain model (and back).
"""

from __future__ import annotations

from oarlock.nn import Layer


class WrapperLayer(Layer):
    """A Layer around another whose state_dict, set_state_dict (set_dict, load_dict) and sharded_state_dict are
    the wrapped layer's, without a prefix. Subclasses keep the wrapped layer in the attribute named by
    _WRAPPED (Paddle's names: `_layers` for most, `_layer` for GroupShardedStage2)."""

    _WRAPPED = "_layers"

    def _wrapped_layer(self) -> Layer:
        return getattr(self, self._WRAPPED)

    def state_dict(self, *args, **kwargs):
        return self._wrapped_layer().state_dict(*args, **kwargs)

    def set_state_dict(self, state_dict, *args, **kwargs):
        return self._wrapped_layer().set_state_dict(state_dict, *args, **kwargs)

    set_dict = load_dict = set_state_dict

    def sharded_state_dict(self, structured_name_prefix: str = ""):
        return self._wrapped_layer().sharded_state_dict(structured_name_prefix)
