"""Containers: Sequential, LayerList, LayerDict, ParameterList."""

from __future__ import annotations

from collections import OrderedDict

from oarlock_nn.layers.base import Layer, Parameter


class _Numbered(Layer):
    """What Sequential and LayerList share: append/extend (the new sublayer is named by its position), len and
    iteration over the sublayers."""

    def append(self, layer):
        self.add_sublayer(str(len(self._sub_layers)), layer)
        return self

    def extend(self, layers):
        for layer in layers:
            self.append(layer)
        return self

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers.values())


class Sequential(_Numbered):
    """Sequential(l1, l2, ...) or Sequential(("name", l1), ...) or Sequential(OrderedDict)."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], (dict, OrderedDict)):
            layers = tuple(layers[0].items())
        for i, item in enumerate(layers):
            name, layer = item if isinstance(item, tuple) else (str(i), item)
            self.add_sublayer(name, layer)

    def forward(self, x):
        for layer in self._sub_layers.values():
            x = layer(x)
        return x

    def __getitem__(self, index):
        layers = list(self._sub_layers.values())
        if isinstance(index, slice):   # type(self): a subclass (the torch proxy's) slices to its own kind
            return type(self)(*layers[index])
        if isinstance(index, str):
            return self._sub_layers[index]
        return layers[index]


class LayerList(_Numbered):
    def __init__(self, sublayers=None):
        super().__init__()
        for layer in sublayers or ():
            self.append(layer)

    def insert(self, index, layer):
        layers = list(self._sub_layers.values())
        layers.insert(index, layer)
        self._sub_layers.clear()
        self.extend(layers)

    def _key(self, index):
        n = len(self._sub_layers)
        if not -n <= index < n:
            raise IndexError(f"{type(self).__name__}: index {index} is out of range for {n} layers")
        return list(self._sub_layers)[index]

    def __getitem__(self, index):
        if isinstance(index, slice):
            return type(self)(list(self._sub_layers.values())[index])
        return self._sub_layers[self._key(index)]

    def __setitem__(self, index, layer):
        self._sub_layers[self._key(index)] = layer


class LayerDict(Layer):
    def __init__(self, sublayers=None):
        super().__init__()
        if sublayers is not None:
            self.update(sublayers)

    def __getitem__(self, key):
        return self._sub_layers[key]

    def __setitem__(self, key, layer):
        self.add_sublayer(key, layer)

    def __delitem__(self, key):
        del self._sub_layers[key]

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers)

    def __contains__(self, key):
        return key in self._sub_layers

    def keys(self):
        return self._sub_layers.keys()

    def values(self):
        return self._sub_layers.values()

    def items(self):
        return self._sub_layers.items()

    def update(self, sublayers):
        for name, layer in (sublayers.items() if hasattr(sublayers, "items") else sublayers):   # a LayerDict too
            self.add_sublayer(name, layer)

    def pop(self, key):
        return self._sub_layers.pop(key)

    def clear(self):
        self._sub_layers.clear()


class ParameterList(Layer):
    def __init__(self, parameters=None):
        super().__init__()
        for p in parameters or ():
            self.append(p)

    def append(self, parameter):
        if not isinstance(parameter, Parameter):
            raise TypeError(f"ParameterList.append(): expected a Parameter, got {type(parameter).__name__}")
        self.add_parameter(str(len(self._parameters)), parameter)
        return self

    def __getitem__(self, index):
        return list(self._parameters.values())[index]

    def __setitem__(self, index, parameter):
        self._parameters[list(self._parameters)[index]] = parameter

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())
