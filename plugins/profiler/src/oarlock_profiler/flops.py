"""oarlock.flops: Paddle's paddle.flops for an nn.Layer, counted by forward post-hooks on its leaf layers
with Paddle's per-layer rules (dynamic_flops.py): one multiply-add counts once."""

from __future__ import annotations

import numpy as np

import oarlock
import oarlock.nn as nn

from oarlock_profiler._layers import check_layer, layer_numbers, snake_name


def _numel(t):
    return int(np.prod(t.shape))


def count_convNd(m, x, y):
    kernel_ops = int(np.prod(m.weight.shape[2:]))
    bias_ops = 1 if getattr(m, "bias", None) is not None else 0
    groups = getattr(m, "_groups", None) or getattr(m, "groups", 1)
    return abs(int(_numel(y) * (x[0].shape[1] / groups * kernel_ops + bias_ops)))


def count_leaky_relu(m, x, y):
    return _numel(x[0])


def count_bn(m, x, y):
    return 0 if m.training else abs(2 * _numel(x[0]))   # eval mode: scale and shift


def count_linear(m, x, y):
    return abs(m.weight.shape[0] * _numel(y))


def count_avgpool(m, x, y):
    return _numel(y)


def count_adap_avgpool(m, x, y):
    kernel = np.array(x[0].shape[2:]) // np.array(y.shape[2:])
    return abs(int((np.prod(kernel) + 1) * _numel(y)))


def count_zero_ops(m, x, y):
    return 0


_RULES = {"Conv1D": count_convNd, "Conv2D": count_convNd, "Conv3D": count_convNd, "Conv1DTranspose": count_convNd,
          "Conv2DTranspose": count_convNd, "Conv3DTranspose": count_convNd, "BatchNorm2D": count_bn,
          "BatchNorm": count_bn, "ReLU": count_zero_ops, "ReLU6": count_zero_ops, "LeakyReLU": count_leaky_relu,
          "Linear": count_linear, "Dropout": count_zero_ops, "AvgPool1D": count_avgpool, "AvgPool2D": count_avgpool,
          "AvgPool3D": count_avgpool, "AdaptiveAvgPool1D": count_adap_avgpool,
          "AdaptiveAvgPool2D": count_adap_avgpool, "AdaptiveAvgPool3D": count_adap_avgpool}
# the layer classes of those names that oarlock.nn has
REGISTER_HOOKS = {getattr(nn, name): rule for name, rule in _RULES.items() if hasattr(nn, name)}


def _table(heads, rows):
    """Paddle's static_flops.Table: | centred cells | between +---+ shelves."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h)) for i, h in enumerate(heads)]
    shelf = "".join("+" + "-" * (w + 2) for w in widths) + "+"

    def row(cells):
        return "".join("|" + str(c).center(w + 2) for c, w in zip(cells, widths)) + "|"
    return "\n".join([shelf, row(heads), shelf, *(row(r) for r in rows), shelf])


def flops(net, input_size, custom_ops=None, print_detail=False):
    """The FLOPs of one forward pass of `net` on a random input of shape `input_size` (printed with the
    parameter count). custom_ops: {LayerClass: fn(layer, inputs, output)} for layers without a built-in rule
    (fn returns the FLOPs, or adds them to layer.total_ops and returns None, as Paddle's do); other layers
    count as zero, with a note. print_detail: print the per-layer table."""
    check_layer("flops", net)
    if not isinstance(input_size, (list, tuple)) or not all(isinstance(d, int) and d > 0 for d in input_size):
        raise ValueError(f"flops(): input_size must be a list of positive ints (an input shape), got {input_size!r}")
    if custom_ops is not None and not isinstance(custom_ops, dict):
        raise TypeError(f"flops(): custom_ops must be a dict {{layer class: counting function}}, got "
                        f"{type(custom_ops).__name__}")
    custom_ops = custom_ops or {}
    counts, handles, seen = {}, [], set()
    numbers_ = layer_numbers(net)

    def add_hooks(m):
        if list(m.children()):
            return
        m_type = type(m)
        rule = custom_ops.get(m_type) or REGISTER_HOOKS.get(m_type)
        if m_type not in seen:
            if m_type in custom_ops:
                print(f"Customize Function has been applied to {m_type}")
            elif rule is not None:
                print(f"{m_type}'s flops has been counted")
            else:
                print(f"Cannot find suitable count function for {m_type}. Treat it as zero FLOPs.")
        seen.add(m_type)

        def hook(layer, inputs, output):
            entry = counts.setdefault(id(layer), {"ops": 0})
            if rule is not None:
                # a rule returns its count, or adds it to layer.total_ops as Paddle's custom functions do
                layer.total_ops = 0
                try:
                    result = rule(layer, inputs, output)
                    counted = layer.total_ops if result is None else result
                finally:
                    del layer.total_ops
                entry["ops"] += abs(int(np.asarray(counted.numpy() if hasattr(counted, "numpy") else counted).sum()))
            entry["params"] = sum(_numel(p) for p in layer.parameters())
            entry["input_shape"] = list(inputs[0].shape)
            first = output[0] if isinstance(output, (list, tuple)) else output
            entry["output_shape"] = list(first.shape)
        handles.append(m.register_forward_post_hook(hook))

    training = net.training
    net.eval()
    for layer in [net, *net.sublayers()]:
        add_hooks(layer)
    try:
        with oarlock.no_grad():
            net(oarlock.randn(list(input_size)))
    finally:
        for h in handles:
            h.remove()
        if training:
            net.train()
    total_ops = total_params = 0
    rows = []
    # like Paddle, the leaves among the sublayers count (a model with no sublayers counts nothing)
    for m in net.sublayers():
        entry = counts.get(id(m))
        if list(m.children()) or entry is None or "params" not in entry:
            continue
        total_ops += entry["ops"]
        total_params += entry["params"]
        rows.append([f"{snake_name(m)}_{numbers_[id(m)]}", entry["input_shape"], entry["output_shape"],
                     entry["params"], entry["ops"]])
    if print_detail:
        print(_table(["Layer Name", "Input Shape", "Output Shape", "Params", "Flops"], rows))
    print(f"Total Flops: {int(total_ops)}     Total Params: {int(total_params)}")
    return int(total_ops)
