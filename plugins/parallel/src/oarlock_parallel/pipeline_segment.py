"""How PipelineLayer splits its layer descriptions over pipeline stages (Paddle 3.2's SegmentLayers).

`segment(descs, parts, seg_method)` returns the boundaries [b0=0, b1, ..., b_parts=len(descs)]: part k holds
descs[b_k:b_{k+1}]. With virtual pipeline stages there are num_stages * num_chunks parts and part v is virtual
stage v, held by pipeline stage v % num_stages as its local chunk v // num_stages (Paddle's interleave layout).

seg_method:
- "uniform": Paddle's remainder rule, the extra layers go to the LAST parts (10 layers / 4 stages ->
  [0, 2, 4, 7, 10]);
- "layer:<regex>": the layers whose class name matches (re.search, case-insensitive) are spread evenly, each
  boundary right after the k-th share of them; their count must divide by the number of parts;
- a list of boundaries starting at 0, with or without the final len(descs) (Paddle's explicit form).

Unlike Paddle (which asserts, or silently builds a stage with no layer), every method here refuses a split that
leaves a part empty, naming the stage.
"""

from __future__ import annotations

import math
import re

import oarlock.nn as nn

_WHAT = "PipelineLayer()"


def uniform(num_items: int, num_parts: int) -> list:
    """Paddle's SegmentLayers.uniform: floor(n / parts) each, the remainder one by one on the last parts."""
    result = [0] * (num_parts + 1)
    size, extra = math.floor(num_items / num_parts), num_items % num_parts
    for i in range(1, num_parts):
        result[i] = min(result[i - 1] + size + (1 if i > num_parts - extra else 0), num_items)
    result[num_parts] = num_items
    return result


def _class_name(desc):
    from oarlock_parallel.pipeline_layers import LayerDesc   # the descriptions module imports this one
    if isinstance(desc, nn.Layer):
        return type(desc).__name__
    if isinstance(desc, LayerDesc):
        return desc.layer_func.__name__
    return getattr(desc, "__name__", None)


def _by_layer(descs, num_parts: int, pattern: str) -> list:
    regex = re.compile(pattern, re.IGNORECASE)
    marked = [i for i, d in enumerate(descs) if (name := _class_name(d)) is not None and regex.search(name)]
    if not marked:
        raise ValueError(f"{_WHAT}: seg_method 'layer:{pattern}' matches no layer; layer classes: "
                         f"{[_class_name(d) for d in descs]}")
    if len(marked) % num_parts:
        raise ValueError(f"{_WHAT}: seg_method 'layer:{pattern}' matches {len(marked)} layers, which do not "
                         f"divide into {num_parts} parts (stages x virtual stages)")
    share = len(marked) // num_parts
    result = [0] * (num_parts + 1)
    for k in range(1, num_parts):
        result[k] = marked[k * share - 1] + 1
    result[num_parts] = len(descs)
    return result


def _explicit(num_items: int, num_parts: int, bounds: list) -> list:
    bounds = list(bounds)
    if not bounds or bounds[0] != 0 or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds):
        raise ValueError(f"{_WHAT}: seg_method as a list must hold int boundaries starting at 0; got {bounds}")
    if len(bounds) == num_parts:       # Paddle: the final boundary may be left out
        bounds.append(num_items)
    if len(bounds) != num_parts + 1:
        raise ValueError(f"{_WHAT}: seg_method {bounds} has {len(bounds)} boundaries, but {num_parts} parts "
                         f"need {num_parts + 1} (or {num_parts}, leaving out the final {num_items})")
    if bounds[-1] != num_items or any(b > a for a, b in zip(bounds[1:], bounds)):
        raise ValueError(f"{_WHAT}: seg_method {bounds} must rise from 0 to the number of layers ({num_items})")
    return bounds


def segment(descs, num_parts: int, seg_method="uniform", num_stages: int | None = None) -> list:
    """The part boundaries of `descs` (see the module docstring); `num_stages` (default num_parts) only words
    the error about an empty part."""
    num_items = len(descs)
    if isinstance(seg_method, (list, tuple)):
        bounds = _explicit(num_items, num_parts, seg_method)
    elif isinstance(seg_method, str) and seg_method == "uniform":
        bounds = uniform(num_items, num_parts)
    elif isinstance(seg_method, str) and seg_method.startswith("layer:"):
        bounds = _by_layer(descs, num_parts, seg_method[len("layer:"):])
    else:
        raise ValueError(f"{_WHAT}: seg_method {seg_method!r} is not supported; accepted: 'uniform', "
                         "'layer:<regex of layer class names>' or a list of boundaries")
    num_stages = num_stages or num_parts
    for part, (start, end) in enumerate(zip(bounds, bounds[1:])):
        if end <= start:
            where = f"pipeline stage {part % num_stages}" + (f" (virtual stage {part})" if num_parts > num_stages
                                                             else "")
            raise ValueError(f"{_WHAT}: seg_method {seg_method!r} leaves {where} without a layer: {num_items} "
                             f"layer(s) over {num_parts} part(s), boundaries {bounds}; every stage needs at least "
                             "one layer")
    return bounds
