"""torch.nn.functional over oarlock: torch's signatures and layouts (linear's weight is [out, in], the class
dimension of cross_entropy is 1, pad lists the last dimension first, scaled_dot_product_attention takes
[..., L, E])."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy.missing import missing_getattr, not_implemented

_F = oarlock.nn.functional


def linear(input, weight, bias=None):
    out = oarlock.matmul(input, weight, transpose_y=True)
    return out if bias is None else out + bias


def bilinear(input1, input2, weight, bias=None):
    out = oarlock.einsum("...i,oij,...j->...o", input1, weight, input2)
    return out if bias is None else out + bias


def gelu(input, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu(): approximate must be 'none' or 'tanh', got {approximate!r}")
    return _F.gelu(input, approximate=approximate == "tanh")


def relu(input, inplace=False):
    return _F.relu(input)


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.astype(dtype)
    return _F.softmax(input, axis=-1 if dim is None else dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dtype is not None:
        input = input.astype(dtype)
    return _F.log_softmax(input, axis=-1 if dim is None else dim)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, dtype=dtype)


def glu(input, dim=-1):
    a, b = oarlock.chunk(input, 2, axis=dim)
    return a * oarlock.sigmoid(b)


def dropout(input, p=0.5, training=True, inplace=False):
    if not 0 <= p <= 1:
        raise ValueError(f"dropout(): p must be in [0, 1], got {p}")
    if not training or p == 0:
        return input
    return _F.dropout(input, p=p, training=True)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _F.layer_norm(input, list(normalized_shape) if not isinstance(normalized_shape, int)
                         else [normalized_shape], weight, bias, epsilon=eps)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    if eps is None:
        eps = oarlock.finfo(input.dtype).eps
    dims = tuple(range(-len(normalized_shape) if not isinstance(normalized_shape, int) else -1, 0))
    out = input * oarlock.rsqrt((input * input).mean(dims, keepdim=True) + eps)
    return out if weight is None else out * weight


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _F.group_norm(input, num_groups, epsilon=eps, weight=weight, bias=bias)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    if max_norm is not None or scale_grad_by_freq:
        not_implemented("torch.nn.functional.embedding", "with max_norm or scale_grad_by_freq")
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return _F.embedding(input, weight, padding_idx=padding_idx)


def one_hot(tensor, num_classes=-1):
    if num_classes < 0:
        num_classes = int(tensor.max().item()) + 1
    return _F.one_hot(tensor, num_classes).astype("int64")


def pad(input, pad, mode="constant", value=None):
    """torch's pad: pairs (before, after) from the last dimension backwards."""
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad(): pad must have an even length of at most 2 * input.ndim, got {list(pad)}")
    if mode != "constant":
        return _F.pad(input, list(pad), mode=mode, pad_from_left_axis=False)
    full = [0] * (2 * input.ndim)
    for i in range(len(pad) // 2):
        axis = input.ndim - 1 - i
        full[2 * axis], full[2 * axis + 1] = pad[2 * i], pad[2 * i + 1]
    if any(p < 0 for p in full):   # negative padding crops
        index = tuple(slice(-full[2 * a] if full[2 * a] < 0 else None,
                            full[2 * a + 1] if full[2 * a + 1] < 0 else None) for a in range(input.ndim))
        input = input[index]
        full = [max(p, 0) for p in full]
    return _F.pad(input, full, mode="constant", value=0.0 if value is None else value)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    return _F.normalize(input, p=p, axis=dim, epsilon=eps)


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    return _F.cosine_similarity(x1, x2, axis=dim, eps=eps)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False):
    """softmax(q k^T * scale + mask) v over [..., L, E] inputs, as torch's reference implementation."""
    L, S = query.shape[-2], key.shape[-2]
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(repeat, dim=-3)
        value = value.repeat_interleave(repeat, dim=-3)
    scores = oarlock.matmul(query, key, transpose_y=True) * scale
    if is_causal:
        keep = oarlock.tril(oarlock.ones([L, S], dtype="bool"))
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == oarlock.bool \
            else scores + attn_mask
    weights = _F.softmax(scores, axis=-1)
    if attn_mask is not None or is_causal:   # a fully masked row attends to nothing: zeros, as torch gives
        weights = oarlock.where(oarlock.isnan(weights), oarlock.zeros_like(weights), weights)
    if dropout_p > 0:
        weights = _F.dropout(weights, p=dropout_p, training=True)
    return oarlock.matmul(weights, value)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """torch's batch_norm over dimension 1: batch statistics (biased variance) in training, where the running
    statistics move by `momentum` towards the batch mean and the unbiased batch variance (in place); the running
    statistics otherwise."""
    axes = [0, *range(2, input.ndim)]
    shape = [1, input.shape[1]] + [1] * (input.ndim - 2)
    if training:
        mean = input.mean(axes)
        var = ((input - mean.reshape(shape)) ** 2).mean(axes)
        if running_mean is not None:
            n = input.numel().item() // input.shape[1] if isinstance(input.numel(), oarlock.Tensor) \
                else input.numel() // input.shape[1]
            with oarlock.no_grad():
                running_mean.copy_(running_mean * (1 - momentum) + mean.detach() * momentum)
                running_var.copy_(running_var * (1 - momentum) + var.detach() * (n / max(n - 1, 1)) * momentum)
    else:
        mean, var = running_mean, running_var
    out = (input - mean.reshape(shape)) * oarlock.rsqrt(var.reshape(shape) + eps)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _F.conv1d_transpose(input, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                               groups=groups, dilation=dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    return _F.conv2d_transpose(input, weight, bias, stride=stride, padding=padding, output_padding=output_padding,
                               dilation=dilation, groups=groups)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    diff = (x1 - x2 + eps).abs()
    return (diff ** p).sum(-1, keepdim=keepdim) ** (1.0 / p)


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    var = oarlock.clip(var, min=eps)
    loss = 0.5 * (oarlock.log(var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, "gaussian_nll_loss")


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    gumbels = -oarlock.log(-oarlock.log(oarlock.rand(logits.shape, dtype=logits.dtype) + eps) + eps)
    soft = softmax((logits + gumbels) / tau, dim=dim)
    if not hard:
        return soft
    index = soft.argmax(dim, keepdim=True)
    hard_one = oarlock.put_along_axis(oarlock.zeros_like(soft), index, oarlock.ones_like(index, dtype=soft.dtype),
                                      dim)
    return hard_one - soft.detach() + soft


def _reduce(loss, reduction, name):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{name}(): reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    """Class dimension 1 (torch), moved last for oarlock's cross_entropy; probabilities as targets when
    `target` is floating."""
    if input.ndim > 2:
        input = oarlock.moveaxis(input, 1, -1)
        if target.dtype.is_floating_point:
            target = oarlock.moveaxis(target, 1, -1)
    if target.dtype.is_floating_point:   # class probabilities: differentiable in the target too, as in torch
        # (oarlock's soft_label cross_entropy, like Paddle's, gives the label no gradient: not reusable here)
        classes = input.shape[-1]
        if label_smoothing:
            target = target * (1 - label_smoothing) + label_smoothing / classes
        terms = -target * _F.log_softmax(input, axis=-1)
        if weight is not None:
            terms = terms * weight
        return _reduce(terms.sum(-1), reduction, "cross_entropy")
    if reduction != "mean":
        return _F.cross_entropy(input, target, weight=weight, ignore_index=ignore_index, reduction=reduction,
                                axis=-1, label_smoothing=label_smoothing)
    # torch's mean divides by the (weighted) count of the targets that are not ignored
    losses = _F.cross_entropy(input, target, weight=weight, ignore_index=ignore_index, reduction="none",
                              axis=-1, label_smoothing=label_smoothing)
    kept = (target != ignore_index)
    safe = oarlock.where(kept, target, oarlock.zeros_like(target))
    counts = kept.astype(losses.dtype) if weight is None else oarlock.gather(weight, safe.flatten()).reshape(
        target.shape) * kept.astype(losses.dtype)
    return losses.sum() / counts.sum()


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    return _F.nll_loss(input, target, weight=weight, ignore_index=ignore_index, reduction=reduction)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    return _reduce((input - target) ** 2, reduction, "mse_loss")


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    return _reduce((input - target).abs(), reduction, "l1_loss")


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    diff = (input - target).abs()
    loss = oarlock.where(diff < beta, 0.5 * diff * diff / beta, diff - 0.5 * beta) if beta > 0 else diff
    return _reduce(loss, reduction, "smooth_l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    diff = (input - target).abs()
    return _reduce(oarlock.where(diff < delta, 0.5 * diff * diff, delta * (diff - 0.5 * delta)), reduction,
                   "huber_loss")


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    return _F.binary_cross_entropy_with_logits(input, target, weight=weight, reduction=reduction,
                                               pos_weight=pos_weight)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    return _F.binary_cross_entropy(input, target, weight=weight, reduction=reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    loss = (oarlock.exp(target) * (target - input) if log_target
            else oarlock.xlogy(target, target) - target * input if hasattr(oarlock, "xlogy")
            else oarlock.where(target > 0, target * (oarlock.log(target) - input), oarlock.zeros_like(target)))
    if reduction == "batchmean":
        return loss.sum() / input.shape[0]
    return _reduce(loss, reduction, "kl_div")


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _F.conv1d(input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    return _F.conv2d(input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    if antialias:
        not_implemented("torch.nn.functional.interpolate", "with antialias=True")
    return _F.interpolate(input, size=size, scale_factor=scale_factor, mode=mode,
                          align_corners=bool(align_corners))


def softplus(input, beta=1.0, threshold=20.0):
    return _F.softplus(input, beta=beta, threshold=threshold)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _F.leaky_relu(input, negative_slope=negative_slope)


def elu(input, alpha=1.0, inplace=False):
    return _F.elu(input, alpha=alpha)


def silu(input, inplace=False):
    return _F.silu(input)


def logsigmoid(input):
    return -softplus(-input)


def sigmoid(input):
    return oarlock.sigmoid(input)


def tanh(input):
    return oarlock.tanh(input)


def mish(input, inplace=False):
    return input * oarlock.tanh(softplus(input))


def relu6(input, inplace=False):
    return oarlock.clip(input, 0.0, 6.0)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return oarlock.clip(input, min_val, max_val)


def hardsigmoid(input, inplace=False):
    return oarlock.clip(input / 6.0 + 0.5, 0.0, 1.0)


def hardswish(input, inplace=False):
    return input * hardsigmoid(input)


def softsign(input):
    return input / (1 + input.abs())


def selu(input, inplace=False):
    return 1.0507009873554805 * elu(input, 1.6732632423543772)


def threshold(input, threshold, value, inplace=False):
    return oarlock.where(input > threshold, input, oarlock.full_like(input, value))


def _pool_args(name, stride, padding, ceil_mode, dilation=1):
    if dilation != 1 or ceil_mode:
        not_implemented(f"torch.nn.functional.{name}", "with dilation or ceil_mode")


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    _pool_args("avg_pool1d", stride, padding, ceil_mode)
    return _F.avg_pool1d(input, kernel_size, stride=stride, padding=padding, exclusive=not count_include_pad)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    _pool_args("avg_pool2d", stride, padding, ceil_mode)
    return _F.avg_pool2d(input, kernel_size, stride=stride, padding=padding, exclusive=not count_include_pad)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    _pool_args("max_pool1d", stride, padding, ceil_mode, dilation)
    return _F.max_pool1d(input, kernel_size, stride=stride, padding=padding, return_mask=return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    _pool_args("max_pool2d", stride, padding, ceil_mode, dilation)
    return _F.max_pool2d(input, kernel_size, stride=stride, padding=padding, return_mask=return_indices)


def adaptive_avg_pool1d(input, output_size):
    return _F.adaptive_avg_pool1d(input, output_size)


def adaptive_avg_pool2d(input, output_size):
    return _F.adaptive_avg_pool2d(input, output_size)


def pixel_shuffle(input, upscale_factor):
    return _F.pixel_shuffle(input, upscale_factor)


__getattr__ = missing_getattr("torch.nn.functional")
