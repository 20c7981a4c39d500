"""nn.ParameterDict: parameters held by name (Paddle 3.2's container), so they appear in parameters() and
state_dict() under their keys."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from oarlock_nn.layers.base import Layer, Parameter


class ParameterDict(Layer):
    """ParameterDict(parameters=None): from a mapping, another ParameterDict or (key, parameter) pairs."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, parameter):
        if not isinstance(parameter, Parameter):
            raise TypeError(f"ParameterDict: {key!r} must be a Parameter, got {type(parameter).__name__}")
        self.add_parameter(key, parameter)

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key):
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def update(self, parameters):
        """Add (or replace) parameters from a mapping, a ParameterDict or an iterable of (key, parameter) pairs."""
        if isinstance(parameters, (Mapping, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, Iterable):
            pairs = list(parameters)
            for i, pair in enumerate(pairs):
                if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                    raise ValueError(f"ParameterDict.update(): element {i} must be a (key, parameter) pair, "
                                     f"got {pair!r}")
        else:
            raise TypeError(f"ParameterDict.update(): expected a mapping or (key, parameter) pairs, got "
                            f"{type(parameters).__name__}")
        for key, parameter in pairs:
            self[key] = parameter


EXPORTS = {"oarlock.nn": [ParameterDict]}
