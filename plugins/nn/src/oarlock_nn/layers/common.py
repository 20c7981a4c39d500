"""Common layers: Linear, Embedding, Dropout, Dropout1D/2D/3D, Flatten, Identity (Paddle's constructor
signatures, weight layouts and default initialisers), and the input checks the layer families share.

A layer checks the rank and the size of the axes its parameters fix before calling its functional
op, so a wrong input is reported in the layer's terms (its name, what it expects, what it got)
rather than by the op underneath.
"""

from __future__ import annotations

import numbers

import oarlock
from oarlock import Tensor
from oarlock.nn import functional as F
from oarlock_nn.layers.base import Layer, Parameter


# -- input checks --------------------------------------------------------------------------------------

def _describe(x):
    return f"a {x.ndim}-D input of shape {x.shape}" if isinstance(x, Tensor) else f"a {type(x).__name__}"


def check_input(layer, x, expected, ranks=None, sizes=None, min_rank=0):
    """Raise a ValueError (a TypeError for a non-Tensor) naming the layer unless x is a Tensor whose
    rank is in `ranks` (None: any) and at least min_rank, and whose shape has sizes[axis] == n for each
    (axis, n) in `sizes`. `expected` describes the accepted input for the message: a string, or a
    function returning one (called only to raise, so a forward that passes builds no text)."""
    if isinstance(x, Tensor):
        shape = x.shape
        if (ranks is None or len(shape) in ranks) and len(shape) >= min_rank and all(
                -len(shape) <= axis < len(shape) and shape[axis] == n for axis, n in (sizes or {}).items()):
            return
    name, text = type(layer).__name__, expected() if callable(expected) else expected
    if not isinstance(x, Tensor):
        raise TypeError(f"{name}: expected a Tensor input ({text}), got {_describe(x)}")
    raise ValueError(f"{name}: expected {text}, got {_describe(x)}")


def rank_text(ranks):
    return " or ".join(f"{r}-D" for r in ranks)


def check_probability(layer, p):
    if not isinstance(p, numbers.Real) or isinstance(p, bool) or not 0 <= p <= 1:
        raise ValueError(f"{type(layer).__name__}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


def check_positive(layer, name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{type(layer).__name__}: {name} must be a positive int, got {value!r}")
    return int(value)


# -- layers -------------------------------------------------------------------------------------------

class Linear(Layer):
    """y = x @ weight + bias, weight stored as [in_features, out_features] (Paddle's layout), Xavier-uniform
    initialised; bias zeros (bias_attr=False: no bias)."""

    def __init__(self, in_features, out_features, weight_attr=None, bias_attr=None, name=None):
        super().__init__()
        self.in_features = check_positive(self, "in_features", in_features)
        self.out_features = check_positive(self, "out_features", out_features)
        self._weight_attr, self._bias_attr, self.name = weight_attr, bias_attr, name
        self.weight = self.create_parameter([in_features, out_features], attr=weight_attr)
        self.bias = self.create_parameter([out_features], attr=bias_attr, is_bias=True)

    def forward(self, x):
        if not (x.__class__ is Tensor and x.ndim and x.shape[-1] == self.in_features):   # else: say what is wrong
            check_input(self, x, lambda: f"an input of shape [*, {self.in_features}] (in_features="
                                         f"{self.in_features})", sizes={-1: self.in_features})
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self._dtype.name}"


class Embedding(Layer):
    """A [num_embeddings, embedding_dim] lookup table (Xavier-uniform initialised; the padding_idx row
    starts at zero, and that id always looks up zeros and sends no gradient). sparse is accepted and
    ignored (dense gradients).

    Paddle 3.2's signature: max_norm and norm_type follow padding_idx positionally, the rest are
    keywords. _weight supplies the table (its values are copied into a new parameter; the padding_idx
    row is zeroed, as Paddle does) and _freeze=True makes it untrainable; dtype and device place the
    table."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0, *,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None,
                 weight_attr=None, name=None):
        super().__init__(dtype=dtype or oarlock.get_default_dtype())
        self._num_embeddings = check_positive(self, "num_embeddings", num_embeddings)
        self._embedding_dim = check_positive(self, "embedding_dim", embedding_dim)
        if padding_idx is not None and (not isinstance(padding_idx, numbers.Integral)
                                        or not -num_embeddings <= padding_idx < num_embeddings):
            raise ValueError(f"Embedding: padding_idx must be None or an int in [{-num_embeddings}, "
                             f"{num_embeddings}), got {padding_idx!r}")
        self._padding_idx, self._sparse, self._scale_grad_by_freq = padding_idx, sparse, scale_grad_by_freq
        self._max_norm, self._norm_type, self._weight_attr, self._name = max_norm, norm_type, weight_attr, name
        if _weight is None:
            self.weight = self.create_parameter([num_embeddings, embedding_dim], attr=weight_attr)
        else:
            if not isinstance(_weight, Tensor) or _weight.shape != [num_embeddings, embedding_dim]:
                got = f"shape {_weight.shape}" if isinstance(_weight, Tensor) else type(_weight).__name__
                raise ValueError(f"Embedding: _weight must be a Tensor of shape [{num_embeddings}, {embedding_dim}] "
                                 f"(num_embeddings, embedding_dim), got {got}")
            self.weight = Parameter(_weight.astype(self._dtype))
        if weight_attr is None or _weight is not None:  # (a weight_attr's trainable flag wins, as in Paddle)
            self.weight.stop_gradient = bool(_freeze)
        if padding_idx is not None:
            with oarlock.no_grad():
                self.weight[padding_idx] = 0.0
        if device is not None:
            self.to(device=device)

    def forward(self, x):
        if not isinstance(x, Tensor) or x.dtype not in ("int32", "int64"):
            kind = f"dtype {x.dtype.name}, shape {x.shape}" if isinstance(x, Tensor) else type(x).__name__
            raise TypeError(f"Embedding: expected a Tensor of integer ids (int32 or int64, any shape), got {kind}")
        return F.embedding(x, self.weight, padding_idx=self._padding_idx, sparse=self._sparse,
                           max_norm=self._max_norm, norm_type=self._norm_type,
                           scale_grad_by_freq=self._scale_grad_by_freq)

    def extra_repr(self):
        return (f"{self._num_embeddings}, {self._embedding_dim}, padding_idx={self._padding_idx}, "
                f"sparse={self._sparse}, scale_grad_by_freq={self._scale_grad_by_freq}")


class Dropout(Layer):
    """F.dropout in training mode, the identity in eval mode ('upscale_in_train'); `axis` restricts
    the draws to those axes (whole slices are dropped together)."""

    def __init__(self, p=0.5, axis=None, mode="upscale_in_train", name=None):
        super().__init__()
        self.p, self.axis, self.mode, self.name = check_probability(self, p), axis, mode, name
        if mode not in ("upscale_in_train", "downscale_in_infer"):
            raise ValueError(f"Dropout: mode must be 'upscale_in_train' or 'downscale_in_infer', got {mode!r}")

    def forward(self, x):
        if self.p == 0:   # Paddle's dropout returns x itself for p == 0: no mask drawn, no op recorded
            return x
        return F.dropout(x, p=self.p, axis=self.axis, training=self.training, mode=self.mode)

    def extra_repr(self):
        return f"p={self.p}, axis={self.axis}, mode={self.mode}"


class _ChannelDropout(Layer):
    """Dropout of whole channels: subclasses name their functional op, default format and layouts."""

    formats: dict = {}  # data_format -> the input ranks it accepts
    function = ""

    def __init__(self, p=0.5, data_format=None, name=None):
        super().__init__()
        data_format = data_format or next(iter(self.formats))
        if data_format not in self.formats:
            raise ValueError(f"{type(self).__name__}: data_format must be one of "
                             f"{', '.join(map(repr, self.formats))}, got {data_format!r}")
        self.p, self.data_format, self.name = check_probability(self, p), data_format, name

    def forward(self, x):
        ranks = self.formats[self.data_format]
        check_input(self, x, lambda: f"a {rank_text(ranks)} {self.data_format} input", ranks=ranks)
        return getattr(F, self.function)(x, p=self.p, training=self.training, data_format=self.data_format)

    def extra_repr(self):
        return f"p={self.p}, data_format={self.data_format}"


class Dropout1D(_ChannelDropout):
    """Zero whole channels of [N, C, L] (or unbatched [C, L]) inputs with probability p in training."""

    formats = {"NCL": (2, 3), "NLC": (2, 3)}
    function = "dropout1d"


class Dropout2D(_ChannelDropout):
    """Zero whole channels of [N, C, H, W] inputs with probability p in training."""

    formats = {"NCHW": (4,), "NHWC": (4,)}
    function = "dropout2d"


class Dropout3D(_ChannelDropout):
    """Zero whole channels of [N, C, D, H, W] inputs with probability p in training."""

    formats = {"NCDHW": (5,), "NDHWC": (5,)}
    function = "dropout3d"


class Flatten(Layer):
    """Merge the axes start_axis..stop_axis into one."""

    def __init__(self, start_axis=1, stop_axis=-1):
        super().__init__()
        self.start_axis, self.stop_axis = start_axis, stop_axis

    def forward(self, x):
        # a 0-d tensor flattens like a 1-element vector (the op's rule)
        need = max(axis + 1 if axis >= 0 else -axis for axis in (self.start_axis, self.stop_axis))
        if need > 1:
            check_input(self, x, lambda: f"an input of at least {need} dimensions (start_axis={self.start_axis}, "
                                         f"stop_axis={self.stop_axis})", min_rank=need)
        return oarlock.flatten(x, start_axis=self.start_axis, stop_axis=self.stop_axis)

    def extra_repr(self):
        return f"start_axis={self.start_axis}, stop_axis={self.stop_axis}"


class Identity(Layer):
    """Returns its input; its arguments are accepted and ignored (a placeholder layer)."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


EXPORTS = {"oarlock.nn": [Linear, Embedding, Dropout, Dropout1D, Dropout2D, Dropout3D, Flatten, Identity]}
