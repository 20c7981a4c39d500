"""paddle.incubate's fused GEMM + bias: fused_matmul_bias, fused_linear and the FusedLinear layer.

Paddle fuses the bias add into the GEMM epilogue on GPU; here it is matmul followed by add, which gives the
same values and gradients."""

from __future__ import annotations

import oarlock
import oarlock.nn as nn

FUNCTIONS = ("fused_matmul_bias", "fused_linear")
LAYERS = ("FusedLinear",)


def fused_matmul_bias(x, y, bias=None, transpose_x=False, transpose_y=False, name=None):
    """matmul(x, y) (each optionally transposed on its last two axes) plus bias over the last axis."""
    for arg, value in (("x", x), ("y", y)):
        if not isinstance(value, oarlock.Tensor):
            raise TypeError(f"fused_matmul_bias(): argument '{arg}' must be a Tensor; got {type(value).__name__}")
    out = oarlock.matmul(x, y, transpose_x=bool(transpose_x), transpose_y=bool(transpose_y))
    if bias is None:
        return out
    if not isinstance(bias, oarlock.Tensor) or bias.ndim != 1 or bias.shape[0] != out.shape[-1]:
        got = list(bias.shape) if isinstance(bias, oarlock.Tensor) else type(bias).__name__
        raise ValueError(f"fused_matmul_bias(): argument 'bias' = {got}; accepted: None or a 1-D Tensor of the "
                         f"output's last size {out.shape[-1]}")
    return out + bias


def fused_linear(x, weight, bias=None, transpose_weight=False, name=None):
    """x @ weight + bias; weight is [in, out], or [out, in] with transpose_weight=True."""
    return fused_matmul_bias(x, weight, bias, False, transpose_weight)


class FusedLinear(nn.Layer):
    """Linear layer over fused_linear (Paddle's paddle.incubate.nn.FusedLinear): weight [in, out], or
    [out, in] with transpose_weight=True, and a bias [out]."""

    def __init__(self, in_features, out_features, weight_attr=None, bias_attr=None, transpose_weight=False,
                 name=None):
        super().__init__()
        shape = [out_features, in_features] if transpose_weight else [in_features, out_features]
        dtype = oarlock.get_default_dtype()
        self.weight = self.create_parameter(shape=shape, attr=weight_attr, dtype=dtype, is_bias=False)
        self.bias = self.create_parameter(shape=[out_features], attr=bias_attr, dtype=dtype, is_bias=True)
        self.transpose_weight = transpose_weight
        self.name = name

    def forward(self, input):
        return fused_linear(input, self.weight, self.bias, self.transpose_weight, self.name)
