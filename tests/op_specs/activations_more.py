"""Specs for the activations_more family's ops (log_sigmoid, softsign, tanhshrink, celu, selu, softplus,
softshrink, hardshrink, hardtanh, mish, thresholded_relu): float64 numpy references written from Paddle's
formulas; the comparisons with Paddle itself are in tests/test_nn_functional_extras.py."""

import numpy as np

import oarlock.nn.functional as F
from op_specs.base import Case, In, OpSpec

SELU_SCALE, SELU_ALPHA = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(x * beta > threshold, x, np.logaddexp(0.0, x * beta) / beta)


REFS = {
    "log_sigmoid": lambda x: -np.logaddexp(0.0, -x),
    "softsign": lambda x: x / (1 + np.abs(x)),
    "tanhshrink": lambda x: x - np.tanh(x),
    "celu": lambda x, alpha=1.0: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(np.minimum(x, 0) / alpha)),
    "selu": lambda x, scale=SELU_SCALE, alpha=SELU_ALPHA: scale * np.where(x > 0, x,
                                                                           alpha * np.expm1(np.minimum(x, 0))),
    "softplus": _softplus,
    "softshrink": lambda x, threshold=0.5: np.where(x > threshold, x - threshold,
                                                     np.where(x < -threshold, x + threshold, 0.0)),
    "hardshrink": lambda x, threshold=0.5: np.where(np.abs(x) > threshold, x, 0.0),
    "hardtanh": lambda x, min=-1.0, max=1.0: np.clip(x, min, max),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "thresholded_relu": lambda x, threshold=1.0, value=0.0: np.where(x > threshold, x, value),
}

BASIC = [Case([In((3, 4))], name="2d"), Case([In(())], name="0d"), Case([In((0, 3))], name="empty"),
         Case([In((5,), domain=(-60.0, 60.0))], name="wide")]   # exp would overflow in a naive formula
ATTRIBUTES = {
    "celu": [Case([In((3, 4))], {"alpha": 0.5}, name="alpha")],
    "selu": [Case([In((3, 4))], {"scale": 2.0, "alpha": 0.5}, name="scale_alpha")],
    "softplus": [Case([In((3, 4), domain=(-5.0, 5.0))], {"beta": 2.0, "threshold": 3.0}, name="beta_threshold")],
    "softshrink": [Case([In((3, 4))], {"threshold": 1.0}, name="threshold")],
    "hardshrink": [Case([In((3, 4))], {"threshold": 1.0}, name="threshold")],
    "hardtanh": [Case([In((3, 4))], {"min": -0.5, "max": 1.5}, name="bounds")],
    "thresholded_relu": [Case([In((3, 4))], {"threshold": 0.5, "value": -1.0}, name="value")],
}
TOLERANCES = {"bfloat16": (4e-2, 4e-2)}

SPECS = [OpSpec(name, BASIC + ATTRIBUTES.get(name, []), ref=ref, call=getattr(F, name), rtol=TOLERANCES)
         for name, ref in REFS.items()]
