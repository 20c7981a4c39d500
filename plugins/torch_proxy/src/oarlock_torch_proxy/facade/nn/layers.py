"""torch.nn's layers as façade Modules: torch's constructor arguments, parameter layouts (Linear.weight is
[out, in]) and initialisation rules, computed by facade.nn.functional."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy.facade.nn import functional as F
from oarlock_torch_proxy.facade.nn import init
from oarlock_torch_proxy.facade.nn.module import Module, Parameter
from oarlock_torch_proxy.missing import not_implemented


def _empty(*shape, dtype=None):
    return oarlock.zeros(list(shape), dtype=dtype or oarlock.get_default_dtype())


def _add_weight_and_bias(module, weight_shape, bias_size, dtype):
    """`module.weight` of weight_shape, `module.bias` of bias_size elements (None: a registered None, as torch's
    bias=False), then torch's default initialisation."""
    module.weight = Parameter(_empty(*weight_shape, dtype=dtype))
    module.register_parameter("bias", None if bias_size is None else Parameter(_empty(bias_size, dtype=dtype)))
    _reset_weight_and_bias(module)


def _reset_weight_and_bias(module):
    """torch's reset_parameters for Linear and the convolutions: Kaiming-uniform weight (a = sqrt(5)), bias
    uniform in +-1/sqrt(fan_in)."""
    init.kaiming_uniform_(module.weight, a=math.sqrt(5))
    if module.bias is not None:
        fan_in, _ = init._calculate_fan_in_and_fan_out(module.weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(module.bias, -bound, bound)


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        _add_weight_and_bias(self, (out_features, in_features), out_features if bias else None, dtype)

    def reset_parameters(self):
        _reset_weight_and_bias(self)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Bilinear(Module):
    def __init__(self, in1_features, in2_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.weight = Parameter(_empty(out_features, in1_features, in2_features, dtype=dtype))
        self.bias = Parameter(_empty(out_features, dtype=dtype)) if bias else None
        bound = 1 / math.sqrt(in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None, dtype=None):
        super().__init__()
        if max_norm is not None or scale_grad_by_freq:
            not_implemented("torch.nn.Embedding", "with max_norm or scale_grad_by_freq")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.weight = Parameter(_empty(num_embeddings, embedding_dim, dtype=dtype) if _weight is None else _weight,
                                requires_grad=not _freeze)
        if _weight is None:
            self.reset_parameters()

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with oarlock.no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, **kwargs):
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze, **kwargs)


class _Norm(Module):
    def _affine(self, shape, affine, bias, dtype):
        if affine:
            self.weight = Parameter(oarlock.ones(list(shape), dtype=dtype or oarlock.get_default_dtype()))
            self.bias = Parameter(oarlock.zeros(list(shape), dtype=dtype or oarlock.get_default_dtype())) \
                if bias else None
            if not bias:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)


class LayerNorm(_Norm):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self._affine(self.normalized_shape, elementwise_affine, bias, dtype)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(_Norm):
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self._affine(self.normalized_shape, elementwise_affine, False, dtype)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)


class GroupNorm(_Norm):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None):
        super().__init__()
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self._affine((num_channels,), affine, True, dtype)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training)


class _BatchNorm(Module):
    """torch's BatchNorm: weight/bias, running_mean/running_var/num_batches_tracked buffers; momentum=None is
    the cumulative average."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
                 dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dt = dtype or oarlock.get_default_dtype()
        if affine:
            self.weight = Parameter(oarlock.ones([num_features], dtype=dt))
            self.bias = Parameter(oarlock.zeros([num_features], dtype=dt))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", oarlock.zeros([num_features], dtype=dt))
            self.register_buffer("running_var", oarlock.ones([num_features], dtype=dt))
            self.register_buffer("num_batches_tracked", oarlock.zeros([], dtype="int64"))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def forward(self, input):
        if input.ndim not in self._ndims:
            raise ValueError(f"{type(self).__name__}: expected a {' or '.join(map(str, self._ndims))}-D input, "
                             f"got {input.ndim}-D")
        momentum = self.momentum
        use_batch = self.training or self.running_mean is None
        if self.training and self.track_running_stats:
            with oarlock.no_grad():
                self.num_batches_tracked.copy_(self.num_batches_tracked + 1)
            if momentum is None:
                momentum = 1.0 / float(self.num_batches_tracked.item())
        return F.batch_norm(input, self.running_mean if self.track_running_stats else None,
                            self.running_var if self.track_running_stats else None, self.weight, self.bias,
                            use_batch, momentum or 0.0, self.eps)


class BatchNorm1d(_BatchNorm):
    _ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    _ndims = (4,)


class _ConvTransposeNd(Module):
    _dims = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1,
                 bias=True, dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            not_implemented(f"torch.nn.ConvTranspose{self._dims}d", f"with padding_mode={padding_mode!r}")
        k = (kernel_size,) * self._dims if isinstance(kernel_size, int) else tuple(kernel_size)
        self.stride, self.padding, self.output_padding = stride, padding, output_padding
        self.groups, self.dilation = groups, dilation
        _add_weight_and_bias(self, (in_channels, out_channels // groups, *k), out_channels if bias else None, dtype)

    def forward(self, input):
        conv = F.conv_transpose1d if self._dims == 1 else F.conv_transpose2d
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.output_padding, self.groups,
                    self.dilation)


class ConvTranspose1d(_ConvTransposeNd):
    _dims = 1


class ConvTranspose2d(_ConvTransposeNd):
    _dims = 2


class MultiheadAttention(Module):
    """torch's MultiheadAttention with one packed in_proj_weight [3E, E] (kdim = vdim = embed_dim), out_proj,
    key_padding_mask / attn_mask (bool: True = masked; float: added), head-averaged weights."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False, device=None, dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn or kdim not in (None, embed_dim) or vdim not in (None, embed_dim):
            not_implemented("torch.nn.MultiheadAttention", "with add_bias_kv, add_zero_attn or kdim/vdim")
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention(): embed_dim {embed_dim} must be divisible by num_heads "
                             f"{num_heads}")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.in_proj_weight = Parameter(_empty(3 * embed_dim, embed_dim, dtype=dtype))
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            self.in_proj_bias = Parameter(oarlock.zeros([3 * embed_dim], dtype=dtype or oarlock.get_default_dtype()))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        if bias:
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        if not self.batch_first:   # [L, N, E] -> [N, L, E]
            query, key, value = (t.transpose([1, 0, 2]) for t in (query, key, value))
        n, lq, e = query.shape
        ls = key.shape[1]
        w_q, w_k, w_v = oarlock.split(self.in_proj_weight, 3, axis=0)
        b_q, b_k, b_v = oarlock.split(self.in_proj_bias, 3, axis=0) if self.in_proj_bias is not None else (None,) * 3
        heads = [F.linear(x, w, b).reshape([n, -1, self.num_heads, self.head_dim]).transpose([0, 2, 1, 3])
                 for x, w, b in ((query, w_q, b_q), (key, w_k, b_k), (value, w_v, b_v))]
        q, k, v = heads
        scores = oarlock.matmul(q, k, transpose_y=True) / math.sqrt(self.head_dim)
        if attn_mask is not None:
            mask = attn_mask.reshape([n, self.num_heads, lq, ls]) if attn_mask.ndim == 3 else attn_mask
            scores = scores.masked_fill(mask, float("-inf")) if mask.dtype == oarlock.bool else scores + mask
        elif is_causal:
            scores = scores.masked_fill(~oarlock.tril(oarlock.ones([lq, ls], dtype="bool")), float("-inf"))
        if key_padding_mask is not None:
            pad = key_padding_mask.reshape([n, 1, 1, ls])
            scores = scores.masked_fill(pad, float("-inf")) if pad.dtype == oarlock.bool else scores + pad
        weights = F.softmax(scores, dim=-1)
        out = oarlock.matmul(F.dropout(weights, self.dropout, self.training), v)
        out = self.out_proj(out.transpose([0, 2, 1, 3]).reshape([n, lq, e]))
        if not self.batch_first:
            out = out.transpose([1, 0, 2])
        if not need_weights:
            return out, None
        return out, (weights.mean(1) if average_attn_weights else weights)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode, self.align_corners = size, scale_factor, mode, align_corners

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners)


class _ConvNd(Module):
    _dims = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        if padding_mode != "zeros":
            not_implemented(f"torch.nn.Conv{self._dims}d", f"with padding_mode={padding_mode!r}")
        k = (kernel_size,) * self._dims if isinstance(kernel_size, int) else tuple(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        _add_weight_and_bias(self, (out_channels, in_channels // groups, *k), out_channels if bias else None, dtype)

    def forward(self, input):
        conv = F.conv1d if self._dims == 1 else F.conv2d
        return conv(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


class Conv1d(_ConvNd):
    _dims = 1


class Conv2d(_ConvNd):
    _dims = 2


def _stateless(name, fn, arg_names=(), defaults=()):
    """A layer that calls F.<fn> with its constructor arguments (activations, softmax, ...)."""

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        values = dict(zip(arg_names, defaults))
        values.update(zip(arg_names, args))
        values.update({k: v for k, v in kwargs.items() if k != "inplace"})
        for key, value in values.items():
            object.__setattr__(self, key, value)

    def forward(self, input):
        return fn(input, **{k: getattr(self, k) for k in arg_names})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__module__": __name__})


ReLU = _stateless("ReLU", F.relu)
GELU = _stateless("GELU", F.gelu, ("approximate",), ("none",))
SiLU = _stateless("SiLU", F.silu)
Mish = _stateless("Mish", F.mish)
Sigmoid = _stateless("Sigmoid", F.sigmoid)
Tanh = _stateless("Tanh", F.tanh)
ReLU6 = _stateless("ReLU6", F.relu6)
Hardswish = _stateless("Hardswish", F.hardswish)
Hardsigmoid = _stateless("Hardsigmoid", F.hardsigmoid)
Hardtanh = _stateless("Hardtanh", F.hardtanh, ("min_val", "max_val"), (-1.0, 1.0))
Softsign = _stateless("Softsign", F.softsign)
SELU = _stateless("SELU", F.selu)
LogSigmoid = _stateless("LogSigmoid", F.logsigmoid)
Softmax = _stateless("Softmax", F.softmax, ("dim",), (None,))
LogSoftmax = _stateless("LogSoftmax", F.log_softmax, ("dim",), (None,))
Softmin = _stateless("Softmin", F.softmin, ("dim",), (None,))
GLU = _stateless("GLU", F.glu, ("dim",), (-1,))
LeakyReLU = _stateless("LeakyReLU", F.leaky_relu, ("negative_slope",), (0.01,))
ELU = _stateless("ELU", F.elu, ("alpha",), (1.0,))
Softplus = _stateless("Softplus", F.softplus, ("beta", "threshold"), (1.0, 20.0))
Threshold = _stateless("Threshold", F.threshold, ("threshold", "value"), (None, None))
PixelShuffle = _stateless("PixelShuffle", F.pixel_shuffle, ("upscale_factor",), (None,))
AdaptiveAvgPool1d = _stateless("AdaptiveAvgPool1d", F.adaptive_avg_pool1d, ("output_size",), (None,))
AdaptiveAvgPool2d = _stateless("AdaptiveAvgPool2d", F.adaptive_avg_pool2d, ("output_size",), (None,))


class _Pool(Module):
    """MaxPool / AvgPool layers: F.<pool> with the constructor's options."""
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, **options):
        super().__init__()
        self.kernel_size, self.stride, self.padding, self.options = kernel_size, stride, padding, options

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding, **self.options)


class MaxPool1d(_Pool):
    _fn = staticmethod(F.max_pool1d)


class MaxPool2d(_Pool):
    _fn = staticmethod(F.max_pool2d)


class AvgPool1d(_Pool):
    _fn = staticmethod(F.avg_pool1d)


class AvgPool2d(_Pool):
    _fn = staticmethod(F.avg_pool2d)


class PReLU(Module):
    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(oarlock.full([num_parameters], init, dtype=dtype or oarlock.get_default_dtype()))

    def forward(self, input):
        w = self.weight if self.num_parameters == 1 else self.weight.reshape([-1] + [1] * (input.ndim - 2))
        return oarlock.where(input >= 0, input, input * w)


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return oarlock.flatten(input, self.start_dim, self.end_dim)


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input):
        dim = self.dim % input.ndim
        return input.reshape([*input.shape[:dim], *self.unflattened_size, *input.shape[dim + 1:]])


def _loss(name, fn, arg_names, defaults):
    """A loss module: its constructor takes the F function's options, forward(input, target)."""

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        values = dict(zip(arg_names, defaults))
        values.update(zip(arg_names, args))
        values.update({k: v for k, v in kwargs.items() if k not in ("size_average", "reduce")})
        for key, value in values.items():
            if isinstance(value, oarlock.Tensor):
                self.register_buffer(key, value)
            else:
                object.__setattr__(self, key, value)

    def forward(self, input, target):
        return fn(input, target, **{k: getattr(self, k) for k in arg_names})

    return type(name, (Module,), {"__init__": __init__, "forward": forward, "__module__": __name__})


CrossEntropyLoss = _loss("CrossEntropyLoss", F.cross_entropy,
                         ("weight", "ignore_index", "reduction", "label_smoothing"), (None, -100, "mean", 0.0))
NLLLoss = _loss("NLLLoss", F.nll_loss, ("weight", "ignore_index", "reduction"), (None, -100, "mean"))
MSELoss = _loss("MSELoss", F.mse_loss, ("reduction",), ("mean",))
L1Loss = _loss("L1Loss", F.l1_loss, ("reduction",), ("mean",))
SmoothL1Loss = _loss("SmoothL1Loss", F.smooth_l1_loss, ("reduction", "beta"), ("mean", 1.0))
HuberLoss = _loss("HuberLoss", F.huber_loss, ("reduction", "delta"), ("mean", 1.0))
BCEWithLogitsLoss = _loss("BCEWithLogitsLoss", F.binary_cross_entropy_with_logits,
                          ("weight", "reduction", "pos_weight"), (None, "mean", None))
BCELoss = _loss("BCELoss", F.binary_cross_entropy, ("weight", "reduction"), (None, "mean"))
KLDivLoss = _loss("KLDivLoss", F.kl_div, ("reduction", "log_target"), ("mean", False))
