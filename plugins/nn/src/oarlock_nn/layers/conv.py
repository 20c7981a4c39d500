"""Convolution, pooling and sliding-block layers: Conv1D, Conv2D, Conv3D (torch-style aliases Conv1d, Conv2d,
Conv3d: the same classes), Conv1DTranspose, Conv2DTranspose and Conv3DTranspose (aliases ConvTranspose2d/3d),
MaxPool1D/2D/3D, AvgPool1D/2D/3D, AdaptiveAvgPool1D/2D/3D (alias AdaptiveAvgPool2d), AdaptiveMaxPool1D/2D/3D,
Unfold and Fold, and compat.Unfold (torch's argument names), with Paddle's constructor signatures, weight
layouts and default initialisation:

- Conv1D/2D/3D: weight [out_channels, in_channels/groups, *kernel] drawn from
  Normal(0, sqrt(2 / (in_channels * prod(kernel)))) -- Paddle's fan-in counts all input channels,
  not in_channels/groups; bias [out_channels] zeros. As in Paddle 3.2 they also take the keywords
  bias (False: no bias, whatever bias_attr says), dtype and device. (3.2 makes everything after groups
  keyword-only; the earlier positional order -- padding_mode, weight_attr, bias_attr, data_format --
  still works here.)
- Conv1DTranspose/Conv2DTranspose/Conv3DTranspose: weight [in_channels, out_channels/groups, *kernel],
  Xavier-uniform over the weight's own fans (Paddle leaves it to create_parameter's default); bias zeros.

padding_mode 'reflect', 'replicate' or 'circular' pads the input first (index_select with a
precomputed index per spatial axis, so the gradient flows back through it) and then convolves without
padding, as Paddle does. The argument checks and padding rules are those of the conv family
(oarlock_ops.conv), so a layer refuses what its functional op refuses, with the same message.
"""

from __future__ import annotations

import math

import numpy as np

import oarlock
from oarlock.nn import functional as F
from oarlock_ops.conv import LAYOUTS, int_args, layout_text, resolve_padding
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_input, check_positive
from oarlock_nn.layers.initializer import Normal

PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _pad_index(mode, n, before, after):
    """The input positions that make up one padded axis of size `n`."""
    positions = np.arange(-before, n + after)
    if mode == "replicate":
        return np.clip(positions, 0, n - 1)
    if mode == "circular":
        return positions % n
    return np.abs(positions) - 2 * np.maximum(positions - (n - 1), 0)  # reflect, the edge not repeated


def _check_rank(layer, x, nd, last, channels=None):
    """A (nd + 2)-D input in the layer's data_format, with `channels` channels when given."""
    fmt = LAYOUTS[nd][last]
    expected = f"a {nd + 2}-D input {layout_text(nd, last)} (data_format={fmt!r})"
    sizes = None
    if channels is not None:
        expected += f" with {channels} channels"
        sizes = {-1 if last else 1: channels}
    check_input(layer, x, expected, ranks={nd + 2}, sizes=sizes)


def _data_format(layer, data_format, nd):
    if data_format not in LAYOUTS[nd]:
        raise ValueError(f"{type(layer).__name__}: data_format must be {' or '.join(map(repr, LAYOUTS[nd]))}, "
                         f"got {data_format!r}")
    return data_format == LAYOUTS[nd][1]


class _ConvNd(Layer):
    """What the convolution layers share: argument checks, parameters, padding modes."""

    _nd = 2
    _transpose = False

    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                 weight_attr, bias_attr, data_format, output_padding=0, bias=True, dtype=None, device=None):
        super().__init__(dtype=dtype or oarlock.get_default_dtype())
        nd, name = self._nd, type(self).__name__
        self._in_channels = check_positive(self, "in_channels", in_channels)
        self._out_channels = check_positive(self, "out_channels", out_channels)
        self._groups = check_positive(self, "groups", groups)
        for what, channels in (("in_channels", in_channels), ("out_channels", out_channels)):
            if channels % groups:
                raise ValueError(f"{name}: {what}={channels} is not divisible by groups={groups}")
        self._data_format = data_format
        self._channel_last = _data_format(self, data_format, nd)
        ones = (1,) * nd
        self._kernel_size = list(self._checked(lambda: int_args("kernel_size", kernel_size, nd, 1)))
        pads = self._checked(lambda: (int_args("stride", stride, nd, 1), int_args("dilation", dilation, nd, 1),
                                      int_args("output_padding", output_padding, nd, 0),
                                      resolve_padding(padding, ones, ones, ones, ones, self._channel_last)[0]))[-1]
        self._stride, self._padding, self._dilation = stride, padding, dilation
        self._output_padding = output_padding
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"{name}: padding_mode must be one of {', '.join(map(repr, PADDING_MODES))}, "
                             f"got {padding_mode!r}")
        self._padding_mode = padding_mode
        self._mode_pads = None
        if padding_mode != "zeros":  # Paddle: explicit padding amounts only, applied by the padding mode
            if isinstance(padding, str):
                raise ValueError(f"{name}: padding_mode={padding_mode!r} needs numeric padding, got {padding!r}")
            self._mode_pads = pads
        shape = [in_channels, out_channels // groups] if self._transpose else [out_channels, in_channels // groups]
        shape += self._kernel_size
        default = None if self._transpose else Normal(0.0, math.sqrt(2.0 / (in_channels * math.prod(shape[2:]))))
        self.weight = self.create_parameter(shape, attr=weight_attr, default_initializer=default)
        self.bias = self.create_parameter([out_channels], attr=bias_attr if bias else False, is_bias=True)
        if device is not None:
            self.to(device=device)

    def _checked(self, fn):
        try:
            return fn()
        except ValueError as exc:
            raise ValueError(f"{type(self).__name__}: {exc}") from None

    def _pad_input(self, x):
        """Apply a non-zero padding_mode (reflect / replicate / circular) to the spatial axes of x."""
        first = 1 if self._channel_last else 2
        for axis, (before, after) in enumerate(self._mode_pads, start=first):
            n = x.shape[axis]
            if self._padding_mode != "replicate" and max(before, after) > (n - 1 if self._padding_mode == "reflect"
                                                                           else n):
                raise ValueError(f"{type(self).__name__}: padding {[before, after]} is too large for "
                                 f"padding_mode={self._padding_mode!r} along an axis of size {n}")
            if before or after:
                index = oarlock.to_tensor(_pad_index(self._padding_mode, n, before, after), place=x.place)
                x = oarlock.index_select(x, index, axis=axis)
        return x

    def _prepare(self, x):
        """Check x and apply the padding mode; returns (x, padding for the functional call)."""
        _check_rank(self, x, self._nd, self._channel_last, self._in_channels)
        if self._mode_pads is None:
            return x, self._padding
        return self._pad_input(x), 0

    def extra_repr(self):
        text = (f"{self._in_channels}, {self._out_channels}, kernel_size={self._kernel_size}, stride={self._stride}, "
                f"padding={self._padding}")
        for name, value, default in (("dilation", self._dilation, 1), ("groups", self._groups, 1),
                                     ("padding_mode", self._padding_mode, "zeros"),
                                     ("data_format", self._data_format, LAYOUTS[self._nd][0])):
            if value != default:
                text += f", {name}={value!r}" if isinstance(value, str) else f", {name}={value}"
        return text


class Conv1D(_ConvNd):
    """1-D convolution over [N, C, L] (data_format='NCL') or [N, L, C] ('NLC') inputs."""

    _nd = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 padding_mode="zeros", weight_attr=None, bias_attr=None, data_format="NCL", *, bias=True,
                 dtype=None, device=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                         weight_attr, bias_attr, data_format, bias=bias, dtype=dtype, device=device)

    def forward(self, x):
        x, padding = self._prepare(x)
        return F.conv1d(x, self.weight, self.bias, self._stride, padding, self._dilation, self._groups,
                        self._data_format)


class Conv2D(_ConvNd):
    """2-D convolution over [N, C, H, W] (data_format='NCHW') or [N, H, W, C] ('NHWC') inputs."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 padding_mode="zeros", weight_attr=None, bias_attr=None, data_format="NCHW", *, bias=True,
                 dtype=None, device=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                         weight_attr, bias_attr, data_format, bias=bias, dtype=dtype, device=device)

    def forward(self, x):
        x, padding = self._prepare(x)
        return F.conv2d(x, self.weight, self.bias, self._stride, padding, self._dilation, self._groups,
                        self._data_format)


class Conv3D(_ConvNd):
    """3-D convolution over [N, C, D, H, W] (data_format='NCDHW') or [N, D, H, W, C] ('NDHWC') inputs."""

    _nd = 3

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 padding_mode="zeros", weight_attr=None, bias_attr=None, data_format="NCDHW", *, bias=True,
                 dtype=None, device=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, padding_mode,
                         weight_attr, bias_attr, data_format, bias=bias, dtype=dtype, device=device)

    def forward(self, x):
        x, padding = self._prepare(x)
        return F.conv3d(x, self.weight, self.bias, self._stride, padding, self._dilation, self._groups,
                        self._data_format)


class _ConvTransposeNd(_ConvNd):
    """forward(x, output_size=None) picks among the output sizes the stride allows (output_padding and
    output_size are mutually exclusive)."""

    _transpose = True

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, dilation=1,
                 groups=1, weight_attr=None, bias_attr=None, data_format=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, "zeros",
                         weight_attr, bias_attr, data_format or LAYOUTS[self._nd][0], output_padding=output_padding)

    def forward(self, x, output_size=None):
        _check_rank(self, x, self._nd, self._channel_last, self._in_channels)
        output_padding = 0 if output_size is not None else self._output_padding
        return getattr(F, f"conv{self._nd}d_transpose")(
            x, self.weight, self.bias, stride=self._stride, padding=self._padding, output_padding=output_padding,
            dilation=self._dilation, groups=self._groups, output_size=output_size, data_format=self._data_format)


class Conv1DTranspose(_ConvTransposeNd):
    """1-D transposed convolution over [N, C, L] ('NCL') or [N, L, C] ('NLC') inputs (Paddle's argument order:
    groups before dilation)."""

    _nd = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 dilation=1, weight_attr=None, bias_attr=None, data_format="NCL"):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, output_padding, dilation, groups,
                         weight_attr, bias_attr, data_format)


class Conv2DTranspose(_ConvTransposeNd):
    """2-D transposed convolution over [N, C, H, W] ('NCHW') or [N, H, W, C] ('NHWC') inputs."""

    _nd = 2


class Conv3DTranspose(_ConvTransposeNd):
    """3-D transposed convolution over [N, C, D, H, W] ('NCDHW') or [N, D, H, W, C] ('NDHWC') inputs."""

    _nd = 3


# -- sliding blocks -------------------------------------------------------------------------------------

class Unfold(Layer):
    """F.unfold as a layer: the sliding kh x kw blocks of [N, C, H, W] inputs as columns [N, C*kh*kw, L]."""

    def __init__(self, kernel_sizes, dilations=1, paddings=0, strides=1, name=None):
        super().__init__()
        self.kernel_sizes, self.dilations, self.paddings, self.strides, self.name = (
            kernel_sizes, dilations, paddings, strides, name)

    def forward(self, x):
        check_input(self, x, "a 4-D input [N, C, H, W]", ranks={4})
        return F.unfold(x, self.kernel_sizes, self.strides, self.paddings, self.dilations)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_sizes}, dilation={self.dilations}, padding={self.paddings}, "
                f"stride={self.strides}")


class Fold(Layer):
    """F.fold as a layer: sums the blocks [N, C*kh*kw, L] back into [N, C, *output_sizes] (col2im)."""

    def __init__(self, output_sizes, kernel_sizes, dilations=1, paddings=0, strides=1, name=None):
        super().__init__()
        self.output_sizes, self.kernel_sizes, self.dilations, self.paddings, self.strides, self.name = (
            output_sizes, kernel_sizes, dilations, paddings, strides, name)

    def forward(self, x):
        check_input(self, x, "a 3-D input [N, C*kh*kw, L]", ranks={3})
        return F.fold(x, self.output_sizes, self.kernel_sizes, self.strides, self.paddings, self.dilations)

    def extra_repr(self):
        return (f"output_size={self.output_sizes}, kernel_size={self.kernel_sizes}, dilation={self.dilations}, "
                f"padding={self.paddings}, stride={self.strides}")


class CompatUnfold(Unfold):
    """compat.Unfold(kernel_size, dilation=1, padding=0, stride=1): nn.Unfold with torch's argument names;
    padding is an int or [padding_h, padding_w] (nn.Unfold also takes four), and the arguments may be
    Tensors. Paddle's plural names are refused, pointing at nn.Unfold."""

    _PLURALS = ("kernel_sizes", "dilations", "paddings", "strides")

    def __init__(self, kernel_size=None, dilation=1, padding=0, stride=1, **kwargs):
        # kernel_size defaults to None only so that Unfold(kernel_sizes=...) gets the message below
        plural = [k for k in kwargs if k in self._PLURALS]
        if kwargs:
            hint = f"; {', '.join(plural)} {'is' if len(plural) == 1 else 'are'} nn.Unfold's spelling" if plural \
                else ""
            raise TypeError(f"compat.Unfold: unexpected keyword argument(s) {', '.join(kwargs)}; it accepts "
                            f"kernel_size, dilation, padding, stride{hint}")
        if kernel_size is None:
            raise TypeError("compat.Unfold: kernel_size is required (an int or [kh, kw])")
        kernel_size, dilation, padding, stride = (
            v.tolist() if isinstance(v, oarlock.Tensor) else v for v in (kernel_size, dilation, padding, stride))
        if isinstance(padding, (list, tuple)) and len(padding) > 2:
            raise ValueError(f"compat.Unfold: padding must be an int or [padding_h, padding_w], got {padding!r} "
                             f"(nn.Unfold takes [top, left, bottom, right])")
        super().__init__(kernel_size, dilation, padding, stride)


CompatUnfold.__name__ = "Unfold"  # Paddle's class name, which messages and repr show


class _Pool(Layer):
    """What the pooling layers share: the data_format check and the input's rank."""

    _nd = 2

    def __init__(self, data_format, name):
        super().__init__()
        data_format = data_format or LAYOUTS[self._nd][0]
        self._channel_last = _data_format(self, data_format, self._nd)
        self._data_format, self._name = data_format, name

    def _check(self, x):
        _check_rank(self, x, self._nd, self._channel_last)

    def _layout_args(self):
        """The data_format argument of the functional call (the 1-D functions take none, as in Paddle)."""
        return () if self._nd == 1 else (self._data_format,)


class _MaxPoolNd(_Pool):
    """Max pooling; return_mask=True also returns each maximum's index in its input plane."""

    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format=None,
                 name=None):
        super().__init__(data_format, name)
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.return_mask, self.ceil_mode = return_mask, ceil_mode

    def forward(self, x):
        self._check(x)
        return getattr(F, f"max_pool{self._nd}d")(x, self.ksize, self.stride, self.padding, self.return_mask,
                                                  self.ceil_mode, *self._layout_args())

    def extra_repr(self):
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class MaxPool1D(_MaxPoolNd):
    """Max pooling over [N, C, L]; return_mask=True also returns each maximum's position along L."""

    _nd = 1

    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, name=None):
        super().__init__(kernel_size, stride, padding, return_mask, ceil_mode, None, name)


class MaxPool2D(_MaxPoolNd):
    """Max pooling; return_mask=True also returns each maximum's index h * W + w in its input plane."""

    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
                 name=None):
        super().__init__(kernel_size, stride, padding, return_mask, ceil_mode, data_format, name)


class MaxPool3D(_MaxPoolNd):
    """Max pooling over [N, C, D, H, W]; return_mask=True also returns each maximum's index
    d * H * W + h * W + w in its input plane."""

    _nd = 3

    def __init__(self, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCDHW",
                 name=None):
        super().__init__(kernel_size, stride, padding, return_mask, ceil_mode, data_format, name)


class _AvgPoolNd(_Pool):
    """Average pooling; exclusive=True (default) leaves padding out of each window's count."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format=None, name=None):
        super().__init__(data_format, name)
        self.ksize, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.exclusive, self.divisor = ceil_mode, exclusive, divisor_override

    def forward(self, x):
        self._check(x)
        if self._nd == 1:  # Paddle's avg_pool1d: exclusive before ceil_mode, no divisor_override
            return F.avg_pool1d(x, self.ksize, self.stride, self.padding, self.exclusive, self.ceil_mode)
        return getattr(F, f"avg_pool{self._nd}d")(x, self.ksize, self.stride, self.padding, self.ceil_mode,
                                                  self.exclusive, self.divisor, self._data_format)

    def extra_repr(self):
        return f"kernel_size={self.ksize}, stride={self.stride}, padding={self.padding}"


class AvgPool1D(_AvgPoolNd):
    """Average pooling over [N, C, L]; exclusive=True (default) leaves padding out of each window's count."""

    _nd = 1

    def __init__(self, kernel_size, stride=None, padding=0, exclusive=True, ceil_mode=False, name=None):
        super().__init__(kernel_size, stride, padding, ceil_mode, exclusive, None, None, name)


class AvgPool2D(_AvgPoolNd):
    """Average pooling; exclusive=True (default) leaves padding out of each window's count."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format="NCHW", name=None):
        super().__init__(kernel_size, stride, padding, ceil_mode, exclusive, divisor_override, data_format, name)


class AvgPool3D(_AvgPoolNd):
    """Average pooling over [N, C, D, H, W]; exclusive=True (default) leaves padding out of each window's count."""

    _nd = 3

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format="NCDHW", name=None):
        super().__init__(kernel_size, stride, padding, ceil_mode, exclusive, divisor_override, data_format, name)


class _AdaptiveAvgPoolNd(_Pool):
    """Average pooling to a fixed output_size (an int, or one size per spatial axis, None keeping that size)."""

    def __init__(self, output_size, data_format=None, name=None):
        super().__init__(data_format, name)
        self._output_size = output_size

    def forward(self, x):
        self._check(x)
        return getattr(F, f"adaptive_avg_pool{self._nd}d")(x, self._output_size, *self._layout_args())

    def extra_repr(self):
        return f"output_size={self._output_size}"


class AdaptiveAvgPool1D(_AdaptiveAvgPoolNd):
    """Average pooling of [N, C, L] to output_size windows."""

    _nd = 1

    def __init__(self, output_size, name=None):
        super().__init__(output_size, None, name)


class AdaptiveAvgPool2D(_AdaptiveAvgPoolNd):
    """Average pooling to a fixed output_size (an int, or [OH, OW] with None keeping that input size)."""

    def __init__(self, output_size, data_format="NCHW", name=None):
        super().__init__(output_size, data_format, name)


class AdaptiveAvgPool3D(_AdaptiveAvgPoolNd):
    """Average pooling of [N, C, D, H, W] to a fixed output_size (an int, or [OD, OH, OW], None keeping that
    input size)."""

    _nd = 3

    def __init__(self, output_size, data_format="NCDHW", name=None):
        super().__init__(output_size, data_format, name)


class _AdaptiveMaxPoolNd(_Pool):
    """Max pooling to a fixed output_size; return_mask=True also returns each maximum's index in its input
    plane. Channel-first inputs only, as in Paddle."""

    def __init__(self, output_size, return_mask=False, name=None):
        super().__init__(None, name)
        self._output_size, self._return_mask = output_size, return_mask

    def forward(self, x):
        self._check(x)
        return getattr(F, f"adaptive_max_pool{self._nd}d")(x, self._output_size, self._return_mask)

    def extra_repr(self):
        return f"output_size={self._output_size}, return_mask={self._return_mask}"


class AdaptiveMaxPool1D(_AdaptiveMaxPoolNd):
    """Max pooling of [N, C, L] to output_size windows."""

    _nd = 1


class AdaptiveMaxPool2D(_AdaptiveMaxPoolNd):
    """Max pooling of [N, C, H, W] to output_size windows (an int or [OH, OW], None keeping that size)."""


class AdaptiveMaxPool3D(_AdaptiveMaxPoolNd):
    """Max pooling of [N, C, D, H, W] to output_size windows (an int or [OD, OH, OW], None keeping that size)."""

    _nd = 3


EXPORTS = {
    "oarlock.nn": [Conv1D, Conv2D, Conv3D, Conv1DTranspose, Conv2DTranspose, Conv3DTranspose,
                   MaxPool1D, MaxPool2D, MaxPool3D, AvgPool1D, AvgPool2D, AvgPool3D,
                   AdaptiveAvgPool1D, AdaptiveAvgPool2D, AdaptiveAvgPool3D,
                   AdaptiveMaxPool1D, AdaptiveMaxPool2D, AdaptiveMaxPool3D, Unfold, Fold,
                   ("Conv1d", Conv1D), ("Conv2d", Conv2D), ("Conv3d", Conv3D), ("ConvTranspose2d", Conv2DTranspose),
                   ("ConvTranspose3d", Conv3DTranspose), ("AdaptiveAvgPool2d", AdaptiveAvgPool2D)],
    "oarlock.compat": [("Unfold", CompatUnfold)],
}
