"""Helpers the model zoo shares (Paddle's vision/models/_utils.py names): make_divisible and
IntermediateLayerGetter."""

from __future__ import annotations

from collections import OrderedDict

import oarlock
import oarlock.nn as nn


def _make_divisible(v, divisor=8, min_value=None):
    """v rounded to the nearest multiple of divisor, at least min_value (divisor), never below 90% of v."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(v + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * v else rounded


make_divisible = _make_divisible


class IntermediateLayerGetter(nn.LayerDict):
    """The model's direct children up to the last one named in return_layers; forward returns an OrderedDict
    {return_layers[name]: output of that child} (4-D inputs are flattened before a Linear, as in Paddle)."""

    def __init__(self, model, return_layers):
        children = [name for name, _ in model.named_children()]
        if not set(return_layers).issubset(children):
            raise ValueError(f"IntermediateLayerGetter: return_layers {sorted(return_layers)} are not all children "
                             f"of the model ({children})")
        wanted = {str(k) for k in return_layers}
        layers = OrderedDict()
        for name, layer in model.named_children():
            layers[name] = layer
            wanted.discard(name)
            if not wanted:
                break
        super().__init__(layers)
        self.return_layers = return_layers

    def forward(self, x):
        out = OrderedDict()
        for name, layer in self.items():
            first = layer.sublayers()[0] if layer.sublayers() else None
            if x.ndim == 4 and (isinstance(layer, nn.Linear) or isinstance(first, nn.Linear)):
                x = oarlock.flatten(x, 1)
            x = layer(x)
            if name in self.return_layers:
                out[self.return_layers[name]] = x
        return out
