"""oarlock.nn.init: torch-style in-place initializers, as Paddle 3.2's paddle.nn.init provides them.

Each function fills `tensor` in place (its values are replaced; the Tensor object, a layer's
Parameter included, stays the same, so layers and optimizers keep seeing it) and returns it -- Paddle
returns None in dynamic mode, torch the tensor. Random ones draw from oarlock's generator, so
oarlock.seed(n) makes them reproducible. They run through the initializer classes of
oarlock.nn.initializer (KaimingUniform, Orthogonal, ...), and errors name the function.

Fans follow Paddle 3.2's paddle.nn.init, which computes them on the shape as given with Paddle's
convention: a 2-D tensor is [in, out] (Paddle's Linear weight), so fan_in = shape[0] and fan_out =
shape[1]; for 3-D and up ([out, in/groups, *kernel]) fan_in = shape[1] * prod(kernel) and fan_out =
shape[0] * prod(kernel), as torch; a 1-D tensor has fan_in = fan_out = its length and a 0-D one 1
(torch refuses fewer than 2 dimensions). Torch stores a Linear weight as [out, in] and takes fan_in =
shape[1]: both give a Linear layer's in_features, but the same 2-D tensor gets its fans swapped.
"""

from __future__ import annotations

from oarlock_nn.layers import initializer as _init
from oarlock_nn.layers.initializer import calculate_gain


def _fill(name, cls, tensor, *args, **kwargs):
    """Make the initializer (its argument errors naming the function) and fill tensor with it."""
    return cls.for_function(f"oarlock.nn.init.{name}()", *args, **kwargs)(tensor)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He uniform: U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a) and
    fan the fan-in or fan-out (mode)."""
    return _fill("kaiming_uniform_", _init.KaimingUniform, tensor, negative_slope=a, nonlinearity=nonlinearity,
                 mode=mode)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu"):
    """He normal: N(0, std^2), std = gain / sqrt(fan) (gain and fan as kaiming_uniform_)."""
    return _fill("kaiming_normal_", _init.KaimingNormal, tensor, negative_slope=a, nonlinearity=nonlinearity,
                 mode=mode)


def xavier_uniform_(tensor, gain=1.0, fan_in=None, fan_out=None):
    """Glorot uniform: U(-bound, bound), bound = gain * sqrt(6 / (fan_in + fan_out)); fan_in / fan_out
    replace the tensor's when given (Paddle's extension)."""
    return _fill("xavier_uniform_", _init.XavierUniform, tensor, fan_in=fan_in, fan_out=fan_out, gain=gain)


def xavier_normal_(tensor, gain=1.0, fan_in=None, fan_out=None):
    """Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    return _fill("xavier_normal_", _init.XavierNormal, tensor, fan_in=fan_in, fan_out=fan_out, gain=gain)


def uniform_(tensor, a=0.0, b=1.0):
    """U(a, b)."""
    return _fill("uniform_", _init.Uniform, tensor, low=a, high=b)


def normal_(tensor, mean=0.0, std=1.0):
    """N(mean, std^2)."""
    return _fill("normal_", _init.Normal, tensor, mean=mean, std=std)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0):
    """N(mean, std^2) restricted to [a, b] (absolute bounds, not in units of std)."""
    return _fill("trunc_normal_", _init.TruncatedNormal, tensor, mean=mean, std=std, a=a, b=b)


def constant_(tensor, val):
    """Every element val."""
    return _fill("constant_", _init.Constant, tensor, val)


def ones_(tensor):
    return _fill("ones_", _init.Constant, tensor, 1.0)


def zeros_(tensor):
    return _fill("zeros_", _init.Constant, tensor, 0.0)


def eye_(tensor):
    """The identity matrix in a 2-D tensor (ones on the main diagonal, also when not square)."""
    return _fill("eye_", _init.Eye, tensor)


def dirac_(tensor, groups=1):
    """The identity convolution in a 3-D, 4-D or 5-D weight [out, in, *kernel]: in each of `groups` blocks of
    out/groups output channels, channel d copies input channel d (the kernel's centre is 1)."""
    return _fill("dirac_", _init.Dirac, tensor, groups=groups)


def orthogonal_(tensor, gain=1):
    """A (semi-)orthogonal matrix times gain over the tensor viewed as [shape[0], prod(shape[1:])]:
    W W^T = gain^2 I when rows <= columns, W^T W = gain^2 I otherwise."""
    return _fill("orthogonal_", _init.Orthogonal, tensor, gain=gain)


EXPORTS = {"oarlock.nn.init": [kaiming_uniform_, kaiming_normal_, xavier_uniform_, xavier_normal_, uniform_, normal_,
                               trunc_normal_, constant_, ones_, zeros_, eye_, dirac_, orthogonal_, calculate_gain]}
