"""oarlock.summary: Paddle's paddle.summary table (layer, input shape, output shape, parameters) for an
nn.Layer, from forward post-hooks over one forward pass of random (or given) input."""

from __future__ import annotations

import numbers
from collections import OrderedDict

import numpy as np

import oarlock
import oarlock.nn as nn

from oarlock_profiler._layers import check_layer, layer_numbers


def summary(net, input_size=None, dtypes=None, input=None):
    """Print a summary of `net` and return {'total_params': ..., 'trainable_params': ...}.

    input_size: the input shape (a tuple; a list of tuples for several inputs; the batch dimension may be
    None or -1, taken as 1); dtypes: their dtypes (default float32); input: real input tensors instead."""
    check_layer("summary", net)
    if input_size is None and input is None:
        raise ValueError("summary(): input_size and input cannot be None at the same time")
    if input_size is None:
        if isinstance(input, oarlock.Tensor):
            input_size = tuple(input.shape)
        elif isinstance(input, (list, tuple)):
            input_size = [tuple(x.shape) for x in input]
        elif isinstance(input, dict):
            input_size = [tuple(v.shape) for v in input.values()]
        else:
            raise ValueError(f"summary(): input must be a Tensor, a list/tuple or a dict of Tensors, got "
                             f"{type(input).__name__}; or give input_size")
    if isinstance(input_size, list):
        items = []
        for item in input_size:
            item = (item,) if isinstance(item, int) else item
            if not isinstance(item, tuple):
                raise TypeError(f"summary(): when input_size is a list, each item must be a tuple (a shape), got "
                                f"{type(item).__name__} {item!r}")
            items.append(item)
        input_size = items
    elif isinstance(input_size, int):
        input_size = (input_size,)
    input_size = _check_input(input_size)
    in_train_mode = net.training
    if in_train_mode:
        net.eval()
    try:
        text, params_info = summary_string(net, input_size, dtypes, input)
    finally:
        if in_train_mode:
            net.train()
    print(text)
    return params_info


def _is_shape(shape):
    return not any(isinstance(item, (list, tuple)) for item in shape)


def _check_shape(shape):
    unknown, new_shape = 0, []
    for item in shape:
        if item is None or item == -1:
            unknown += 1
            if unknown > 1:
                raise ValueError("summary(): in input_size only the batch dimension may be None or -1")
            item = 1
        elif isinstance(item, numbers.Number) and item <= 0:
            raise ValueError(f"summary(): expected every input_size dimension greater than zero, got {item}")
        new_shape.append(item)
    return tuple(new_shape)


def _check_input(input_size):
    if isinstance(input_size, (list, tuple)) and _is_shape(input_size):
        return _check_shape(input_size)
    return [_check_input(i) for i in input_size]


def _all_numbers(items):
    return all(isinstance(item, numbers.Number) for item in items)


def _build_dtypes(input_size, dtype):
    if isinstance(input_size, (list, tuple)) and _all_numbers(input_size):
        return [dtype or "float32"]
    return [_build_dtypes(i, dtype) for i in input_size]


def _shape_of(x):
    if isinstance(x, oarlock.Tensor):
        return list(x.shape)
    if isinstance(x, (list, tuple)):
        return [_shape_of(v) for v in x]
    return None


def _output_shape(output):
    if isinstance(output, (list, tuple)):
        return [_output_shape(o) for o in output]
    return list(output.shape) if hasattr(output, "shape") else []


def _build_input(input_size, dtypes):
    if isinstance(input_size, (list, tuple)) and _all_numbers(input_size):
        dtype = dtypes[0] if isinstance(dtypes, (list, tuple)) else dtypes
        return oarlock.cast(oarlock.rand(list(input_size)), dtype)
    return [_build_input(i, d) for i, d in zip(input_size, dtypes)]


def _collect(model, input_size, dtypes, input):
    """Run one forward pass with post-hooks; {"Class-N": info} in the order the layers finished."""
    numbers_ = layer_numbers(model)
    depth = len(model.sublayers())
    table, hooks = OrderedDict(), []

    def hook(layer, inputs, output):
        key = f"{type(layer).__name__}-{numbers_.get(id(layer), len(table)) + 1}"
        info = table[key] = OrderedDict()
        info["input_shape"] = _shape_of(inputs)
        info["output_shape"] = _output_shape(output)
        params = trainable_params = 0
        trainable = None
        for p in layer._parameters.values():
            if p is None:
                continue
            size = int(np.prod(p.shape))
            params += size
            if getattr(p, "trainable", True) and not p.stop_gradient:
                trainable_params += size
                trainable = True
            elif trainable is None:
                trainable = False
        info["trainable_params"] = trainable_params
        if trainable is not None:
            info["trainable"] = trainable
        info["nb_params"] = params

    for layer in [model, *model.sublayers()]:
        # containers are not rows; the model itself is one only when it has no sublayers (Paddle's rule)
        if not isinstance(layer, (nn.Sequential, nn.LayerList)) and (layer is not model or depth < 1):
            hooks.append(layer.register_forward_post_hook(hook))
    try:
        with oarlock.no_grad():
            if input is not None:
                model(input)
            else:
                model(*_build_input([input_size] if isinstance(input_size, tuple) else input_size, dtypes))
    finally:
        for h in hooks:
            h.remove()
    return table


def summary_string(model, input_size=None, dtypes=None, input=None):
    """The summary text and {'total_params', 'trainable_params'} (what summary prints and returns)."""
    if not isinstance(dtypes, (list, tuple)):
        dtypes = _build_dtypes(input_size, dtypes)
    if isinstance(input_size, tuple):
        input_size = [input_size]
    table = _collect(model, input_size, dtypes, input)
    widths = {"layer": 15, "input": 20, "output": 20, "params": 15, "table": 75}
    for name, info in table.items():
        widths["output"] = max(widths["output"], len(str(info["output_shape"])))
        widths["input"] = max(widths["input"], len(str(info["input_shape"])))
        widths["layer"] = max(widths["layer"], len(name))
        widths["params"] = max(widths["params"], len(str(info["nb_params"])))
    widths["table"] = max(widths["table"], widths["layer"] + widths["input"] + widths["output"] + widths["params"] + 5)

    def line(*cells):
        return " ".join(f"{c:^{w}}" for c, w in zip(cells, (widths["layer"], widths["input"], widths["output"],
                                                              widths["params"])))
    out = ["-" * widths["table"], line("Layer (type)", "Input Shape", "Output Shape", "Param #"), "=" * widths["table"]]
    total_params = total_output = trainable_params = 0
    for name, info in table.items():
        out.append(line(name, str(info["input_shape"]), str(info["output_shape"]), f"{info['nb_params']:,}"))
        total_params += info["nb_params"]
        try:
            total_output += np.sum(np.prod(info["output_shape"], axis=-1))
        except ValueError:   # several outputs of different ranks
            for shape in info["output_shape"]:
                total_output += np.sum(np.prod(shape, axis=-1))
        if info.get("trainable"):
            trainable_params += info["trainable_params"]

    def input_mb(size):
        if isinstance(size, (list, tuple)) and _all_numbers(size):
            return abs(np.prod(size) * 4.0 / 1024 ** 2)
        return sum(input_mb(s) for s in size)
    total_input = input_mb(input_size)
    total_output_mb = abs(2.0 * total_output * 4.0 / 1024 ** 2)   # x2 for gradients
    total_params_mb = abs(total_params * 4.0 / 1024 ** 2)
    out += ["=" * widths["table"], f"Total params: {total_params:,}", f"Trainable params: {trainable_params:,}",
            f"Non-trainable params: {total_params - trainable_params:,}", "-" * widths["table"],
            f"Input size (MB): {total_input:0.2f}", f"Forward/backward pass size (MB): {total_output_mb:0.2f}",
            f"Params size (MB): {total_params_mb:0.2f}",
            f"Estimated Total Size (MB): {total_params_mb + total_output_mb + total_input:0.2f}",
            "-" * widths["table"]]
    return "\n".join(out) + "\n", {"total_params": total_params, "trainable_params": trainable_params}
