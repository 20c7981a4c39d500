"""Layers over Paddle 3.2's resampling and rearranging functions: Pad1D/2D/3D, ZeroPad1D/2D/3D, Upsample,
UpsamplingNearest2D, UpsamplingBilinear2D, PixelShuffle, PixelUnshuffle, ChannelShuffle, Unflatten; and
the pairwise ones: CosineSimilarity, PairwiseDistance, Bilinear (weight [out, in1, in2], bias [1, out]),
LocalResponseNorm. Constructors and stored attributes follow Paddle's."""

from __future__ import annotations

import copy
import math
import numbers

import oarlock
from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_positive
from oarlock_nn.layers.initializer import ParamAttr, Uniform


def _pairs(layer, padding, n):
    """Paddle's _npairs: an int pads every side of n axes; a list gives 2n amounts; a Tensor passes through."""
    if isinstance(padding, oarlock.Tensor):
        return padding
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        return [int(padding)] * (2 * n)
    if isinstance(padding, (list, tuple)) and len(padding) == 2 * n:
        return list(padding)
    raise ValueError(f"{type(layer).__name__}: padding must be an int or {2 * n} ints, got {padding!r}")


class _Pad(Layer):
    axes = 0
    default_format = ""

    def __init__(self, padding, mode="constant", value=0.0, data_format=None, name=None):
        super().__init__()
        self._pad = _pairs(self, padding, self.axes)
        self._mode, self._value, self._name = mode, value, name
        self._data_format = data_format or self.default_format

    def forward(self, x):
        return F.pad(x, self._pad, mode=self._mode, value=self._value, data_format=self._data_format)

    def extra_repr(self):
        return f"padding={self._pad}, mode={self._mode}, value={self._value}, data_format={self._data_format}"


class Pad1D(_Pad):
    """Pad1D(padding, mode='constant', value=0.0, data_format='NCL'): padding [left, right]."""

    axes, default_format = 1, "NCL"

    def __init__(self, padding, mode="constant", value=0.0, data_format="NCL", name=None):
        super().__init__(padding, mode, value, data_format, name)


class Pad2D(_Pad):
    """Pad2D(padding, mode='constant', value=0.0, data_format='NCHW'): padding [left, right, top, bottom]."""

    axes, default_format = 2, "NCHW"

    def __init__(self, padding, mode="constant", value=0.0, data_format="NCHW", name=None):
        super().__init__(padding, mode, value, data_format, name)


class Pad3D(_Pad):
    """Pad3D(padding, mode='constant', value=0.0, data_format='NCDHW'): [left, right, top, bottom, front, back]."""

    axes, default_format = 3, "NCDHW"

    def __init__(self, padding, mode="constant", value=0.0, data_format="NCDHW", name=None):
        super().__init__(padding, mode, value, data_format, name)


class ZeroPad1D(Pad1D):
    """Zero padding [left, right]."""

    def __init__(self, padding, data_format="NCL", name=None):
        super().__init__(padding, "constant", 0.0, data_format, name)


class ZeroPad2D(Pad2D):
    """Zero padding [left, right, top, bottom]."""

    def __init__(self, padding, data_format="NCHW", name=None):
        super().__init__(padding, "constant", 0.0, data_format, name)


class ZeroPad3D(Pad3D):
    """Zero padding [left, right, top, bottom, front, back]."""

    def __init__(self, padding, data_format="NCDHW", name=None):
        super().__init__(padding, "constant", 0.0, data_format, name)


class Upsample(Layer):
    """F.interpolate with the layer's arguments."""

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=False, align_mode=0,
                 data_format=None, recompute_scale_factor=None, name=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode.lower()
        self.align_corners, self.align_mode, self.data_format = align_corners, align_mode, data_format
        self.recompute_scale_factor, self.name = recompute_scale_factor, name

    def forward(self, x):
        return F.interpolate(x, size=self.size, scale_factor=self.scale_factor, mode=self.mode,
                             align_corners=self.align_corners, align_mode=self.align_mode,
                             data_format=self.data_format, recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self):
        what = f"scale_factor={self.scale_factor}" if self.scale_factor is not None else f"size={self.size}"
        return f"{what}, mode={self.mode}, align_corners={self.align_corners}, data_format={self.data_format}"


class UpsamplingNearest2D(Upsample):
    """Nearest-neighbour upsampling of a 4-D input."""

    def __init__(self, size=None, scale_factor=None, data_format="NCHW", name=None):
        super().__init__(size, scale_factor, "nearest", False, 0, data_format, None, name)


class UpsamplingBilinear2D(Upsample):
    """Bilinear upsampling of a 4-D input with align_corners=True."""

    def __init__(self, size=None, scale_factor=None, data_format="NCHW", name=None):
        super().__init__(size, scale_factor, "bilinear", True, 0, data_format, None, name)


class _Rearrange(Layer):
    function = ""
    factor = ""

    def __init__(self, factor, data_format="NCHW", name=None):
        super().__init__()
        check_positive(self, self.factor, factor)
        if data_format not in ("NCHW", "NHWC"):
            raise ValueError(f"{type(self).__name__}: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
        self._factor, self._data_format, self._name = factor, data_format, name

    def forward(self, x):
        return getattr(F, self.function)(x, self._factor, self._data_format)

    def extra_repr(self):
        return f"{self.factor}={self._factor}, data_format={self._data_format}"


class PixelShuffle(_Rearrange):
    """[N, C r^2, H, W] -> [N, C, H r, W r]."""

    function, factor = "pixel_shuffle", "upscale_factor"

    def __init__(self, upscale_factor, data_format="NCHW", name=None):
        super().__init__(upscale_factor, data_format, name)


class PixelUnshuffle(_Rearrange):
    """[N, C, H r, W r] -> [N, C r^2, H, W]."""

    function, factor = "pixel_unshuffle", "downscale_factor"

    def __init__(self, downscale_factor, data_format="NCHW", name=None):
        super().__init__(downscale_factor, data_format, name)


class ChannelShuffle(_Rearrange):
    """Interleave `groups` groups of channels."""

    function, factor = "channel_shuffle", "groups"

    def __init__(self, groups, data_format="NCHW", name=None):
        super().__init__(groups, data_format, name)


class Unflatten(Layer):
    """Split axis `axis` into `shape` (one entry may be -1)."""

    def __init__(self, axis, shape, name=None):
        super().__init__()
        self.axis, self.shape, self.name = axis, shape, name

    def forward(self, input):  # noqa: A002 (Paddle's argument name)
        axis = self.axis % input.ndim if -input.ndim <= self.axis < input.ndim else None
        if axis is None:
            raise ValueError(f"Unflatten: axis {self.axis} is out of range for a {input.ndim}-D input")
        shape = self.shape.numpy().tolist() if isinstance(self.shape, oarlock.Tensor) else list(self.shape)
        known = math.prod(s for s in shape if s != -1)
        if (-1 not in shape and known != input.shape[axis]) or (known and input.shape[axis] % known):
            raise ValueError(f"Unflatten: shape {shape} does not multiply to the size {input.shape[axis]} of axis "
                             f"{self.axis}")
        return oarlock.reshape(input, list(input.shape[:axis]) + shape + list(input.shape[axis + 1:]))

    def extra_repr(self):
        return f"axis={self.axis}, shape={self.shape}"


class CosineSimilarity(Layer):
    """Cosine similarity of two inputs along axis."""

    def __init__(self, axis=1, eps=1e-8):
        super().__init__()
        self._axis, self._eps = axis, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, axis=self._axis, eps=self._eps)

    def extra_repr(self):
        return f"axis={self._axis}, eps={self._eps}"


class PairwiseDistance(Layer):
    """||x - y + epsilon||_p over the last axis."""

    def __init__(self, p=2.0, epsilon=1e-6, keepdim=False, name=None):
        super().__init__()
        self.p, self.epsilon, self.keepdim, self.name = p, epsilon, keepdim, name

    def forward(self, x, y):
        return F.pairwise_distance(x, y, self.p, self.epsilon, self.keepdim)

    def extra_repr(self):
        return f"p={self.p}, epsilon={self.epsilon}, keepdim={self.keepdim}"


class Bilinear(Layer):
    """out = x1 @ weight[o] @ x2 + bias; weight [out_features, in1_features, in2_features], bias [1, out].
    Default initialisation: U(-1/sqrt(in1), 1/sqrt(in1)) for both, torch.nn.Bilinear's (a ParamAttr with an
    initializer overrides it)."""

    def __init__(self, in1_features, in2_features, out_features, weight_attr=None, bias_attr=None, name=None):
        super().__init__()
        for arg, value in (("in1_features", in1_features), ("in2_features", in2_features),
                           ("out_features", out_features)):
            check_positive(self, arg, value)
        self._in1_features, self._in2_features, self._out_features = in1_features, in2_features, out_features
        self._weight_attr, self._bias_attr, self._name = weight_attr, bias_attr, name
        bound = 1.0 / math.sqrt(in1_features)
        self.weight = self.create_parameter([out_features, in1_features, in2_features],
                                            attr=self._with_default(weight_attr, bound))
        self.bias = self.create_parameter([1, out_features], attr=self._with_default(bias_attr, bound), is_bias=True)

    @staticmethod
    def _with_default(attr, bound):
        resolved = ParamAttr.resolve(attr)
        if resolved is None or resolved.initializer is not None:
            return resolved
        resolved = copy.copy(resolved)   # the caller's ParamAttr stays as given
        resolved.initializer = Uniform(-bound, bound)
        return resolved

    def forward(self, x1, x2):
        return F.bilinear(x1, x2, self.weight, self.bias)

    def extra_repr(self):
        return (f"in1_features={self._in1_features}, in2_features={self._in2_features}, "
                f"out_features={self._out_features}")


class LocalResponseNorm(Layer):
    """x / (k + alpha * mean of x^2 over `size` neighbouring channels)^beta."""

    def __init__(self, size, alpha=0.0001, beta=0.75, k=1.0, data_format="NCHW", name=None):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k
        self.data_format, self.name = data_format, name

    def forward(self, input):  # noqa: A002 (Paddle's argument name)
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k, self.data_format)

    def extra_repr(self):
        return f"size={self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}, data_format={self.data_format}"


EXPORTS = {"oarlock.nn": [Pad1D, Pad2D, Pad3D, ZeroPad1D, ZeroPad2D, ZeroPad3D, Upsample, UpsamplingNearest2D,
                          UpsamplingBilinear2D, PixelShuffle, PixelUnshuffle, ChannelShuffle, Unflatten,
                          CosineSimilarity, PairwiseDistance, Bilinear, LocalResponseNorm]}
