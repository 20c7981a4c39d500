"""torch.nn.init: in-place initialisers with torch's fan rules (fan_in = size(1) * receptive field) and gains.
Each returns the tensor it filled; the draws come from oarlock's generator."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy.missing import missing_getattr


def calculate_gain(nonlinearity, param=None):
    gains = {"linear": 1, "conv1d": 1, "conv2d": 1, "conv3d": 1, "sigmoid": 1, "tanh": 5.0 / 3,
             "relu": math.sqrt(2.0), "selu": 3.0 / 4}
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in gains:
        raise ValueError(f"calculate_gain(): unsupported nonlinearity {nonlinearity!r}")
    return gains[nonlinearity]


def _calculate_fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than 2 dimensions")
    receptive = 1
    for d in tensor.shape[2:]:
        receptive *= d
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fill(tensor, values):
    with oarlock.no_grad():
        tensor.copy_(values.astype(tensor.dtype))
    return tensor


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    return _fill(tensor, oarlock.uniform(tensor.shape, min=a, max=b, dtype="float32"))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    return _fill(tensor, oarlock.randn(tensor.shape, dtype="float32") * std + mean)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    values = oarlock.randn(tensor.shape, dtype="float32") * std + mean
    bad = (values < a) | (values > b)
    while bool(bad.any()):   # redraw out-of-range values: a truncated normal, not a clipped one
        values = oarlock.where(bad, oarlock.randn(tensor.shape, dtype="float32") * std + mean, values)
        bad = (values < a) | (values > b)
    return _fill(tensor, values)


def constant_(tensor, val):
    return _fill(tensor, oarlock.full(tensor.shape, val, dtype="float32"))


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def eye_(tensor):
    return _fill(tensor, oarlock.eye(tensor.shape[0], tensor.shape[1]))


def dirac_(tensor, groups=1):
    raise NotImplementedError("torch.nn.init.dirac_ is not implemented by oarlock's torch proxy")


def xavier_uniform_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0, generator=None):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity))


def orthogonal_(tensor, gain=1, generator=None):
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = oarlock.randn([rows, cols], dtype="float64")
    if rows < cols:
        flat = flat.t()
    q, r = oarlock.linalg.qr(flat)
    q = q * oarlock.sign(oarlock.diagonal(r))
    if rows < cols:
        q = q.t()
    return _fill(tensor, (q * gain).reshape(tensor.shape))


__getattr__ = missing_getattr("torch.nn.init")
