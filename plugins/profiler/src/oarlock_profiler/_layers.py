"""Helpers shared by summary and flops: Paddle-style per-class layer numbers."""

from __future__ import annotations

import collections
import re

_FIRST_CAP = re.compile("(.)([A-Z][a-z]+)")
_ALL_CAP = re.compile("([a-z])([A-Z])")


def snake_name(layer) -> str:
    """Paddle's default name scope of a layer: its class name in snake case (ReLU -> re_lu, MaxPool2D ->
    max_pool2d)."""
    return _ALL_CAP.sub(r"\1_\2", _FIRST_CAP.sub(r"\1_\2", type(layer).__name__)).lower()


def layer_numbers(model) -> dict:
    """id(layer) -> its 0-based number among the layers of its class, model first, then its sublayers in
    definition order: the numbers Paddle's unique names (linear_0, linear_1, ...) give a model built in a
    fresh name scope, where each layer takes the next number of its class when it is constructed."""
    counts, numbers = collections.Counter(), {}
    for layer in [model, *model.sublayers()]:
        if id(layer) not in numbers:
            key = snake_name(layer)
            numbers[id(layer)] = counts[key]
            counts[key] += 1
    return numbers


def check_layer(fn, net):
    import oarlock.nn
    if not isinstance(net, oarlock.nn.Layer):
        raise TypeError(f"{fn}(): net must be an oarlock.nn.Layer, got {type(net).__name__}")
