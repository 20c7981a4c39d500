"""InstanceNorm1D/2D/3D with Paddle 3.2's constructors and parameter names (`scale` and `bias`, both or
neither), and AlphaDropout / FeatureAlphaDropout; each calls its oarlock.nn.functional function."""

from __future__ import annotations

from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer
from oarlock_nn.layers.common import check_input, check_positive, check_probability
from oarlock_nn.layers.initializer import Constant


class _InstanceNorm(Layer):
    ranks = ()

    def __init__(self, num_features, epsilon=1e-5, momentum=0.9, weight_attr=None, bias_attr=None,
                 data_format="NCHW", name=None):
        super().__init__()
        check_positive(self, "num_features", num_features)
        if (weight_attr is False) != (bias_attr is False):
            raise ValueError(f"{type(self).__name__}: weight_attr and bias_attr must be False together (no affine "
                             f"parameters) or neither, got {weight_attr!r} and {bias_attr!r}")
        self._num_features, self._epsilon, self._momentum = num_features, epsilon, momentum
        self._weight_attr, self._bias_attr, self._data_format, self._name = weight_attr, bias_attr, data_format, name
        if weight_attr is False:
            self.scale, self.bias = None, None
        else:
            self.scale = self.create_parameter([num_features], attr=weight_attr, default_initializer=Constant(1.0))
            self.bias = self.create_parameter([num_features], attr=bias_attr, is_bias=True)

    def forward(self, input):  # noqa: A002 (Paddle's argument name)
        check_input(self, input, lambda: " or ".join(f"{r}-D" for r in self.ranks) + " input", ranks=self.ranks,
                    sizes={1: self._num_features})
        return F.instance_norm(input, weight=self.scale, bias=self.bias, momentum=self._momentum, eps=self._epsilon,
                               data_format=self._data_format)

    def extra_repr(self):
        return f"num_features={self._num_features}, epsilon={self._epsilon}"


class InstanceNorm1D(_InstanceNorm):
    """Instance normalisation of [N, C] or [N, C, L] inputs."""

    ranks = (2, 3)

    def __init__(self, num_features, epsilon=1e-5, momentum=0.9, weight_attr=None, bias_attr=None,
                 data_format="NCL", name=None):
        super().__init__(num_features, epsilon, momentum, weight_attr, bias_attr, data_format, name)

    def forward(self, input):  # noqa: A002
        if input.ndim == 2:   # [N, C]: one value per channel, as Paddle's kernel: normalised to 0 (then + bias)
            check_input(self, input, "2-D or 3-D input", ranks=self.ranks, sizes={1: self._num_features})
            return F.instance_norm(input.unsqueeze(-1), weight=self.scale, bias=self.bias,
                                   eps=self._epsilon).squeeze(-1)
        return super().forward(input)


class InstanceNorm2D(_InstanceNorm):
    """Instance normalisation of [N, C, H, W] inputs."""

    ranks = (4,)


class InstanceNorm3D(_InstanceNorm):
    """Instance normalisation of [N, C, D, H, W] inputs."""

    ranks = (5,)

    def __init__(self, num_features, epsilon=1e-5, momentum=0.9, weight_attr=None, bias_attr=None,
                 data_format="NCDHW", name=None):
        super().__init__(num_features, epsilon, momentum, weight_attr, bias_attr, data_format, name)


class AlphaDropout(Layer):
    """Alpha dropout of each element in training (the identity in eval)."""

    function = "alpha_dropout"

    def __init__(self, p=0.5, name=None):
        super().__init__()
        self.p, self.name = check_probability(self, p), name

    def forward(self, input):  # noqa: A002
        return getattr(F, self.function)(input, p=self.p, training=self.training)

    def extra_repr(self):
        return f"p={self.p}"


class FeatureAlphaDropout(AlphaDropout):
    """Alpha dropout of whole channels in training."""

    function = "feature_alpha_dropout"


EXPORTS = {"oarlock.nn": [InstanceNorm1D, InstanceNorm2D, InstanceNorm3D, AlphaDropout, FeatureAlphaDropout]}
