"""Paddle 3.2's remaining nn.functional helpers that are compositions of public ops (so their gradients
come from those ops): normalize, cosine_similarity, pairwise_distance, one_hot, label_smooth,
sequence_mask, pixel_shuffle, pixel_unshuffle, channel_shuffle, bilinear, local_response_norm,
instance_norm, alpha_dropout, feature_alpha_dropout, temporal_shift and gather_tree.
Each follows Paddle's formula (epsilons where Paddle puts them), checked against Paddle in
tests/test_nn_functional_extras.py."""

from __future__ import annotations

import numbers

import numpy as np

import oarlock


def _tensor(function, name, x):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{function}: {name} must be a Tensor, got {type(x).__name__}")


def _axis(function, x, axis):
    if not isinstance(axis, numbers.Integral) or isinstance(axis, bool) or not -x.ndim <= axis < max(x.ndim, 1):
        raise ValueError(f"{function}: axis must be an int in [{-x.ndim}, {x.ndim}) for a {x.ndim}-D input, "
                         f"got {axis!r}")
    return int(axis) % max(x.ndim, 1)


def _positive(function, name, value):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{function}: {name} must be a positive int, got {value!r}")
    return int(value)


def normalize(x, p=2, axis=1, epsilon=1e-12, name=None):
    """x / max(||x||_p along axis, epsilon)."""
    _tensor("normalize", "x", x)
    axis = _axis("normalize", x, axis)
    norm = oarlock.norm(x, p=float(p), axis=axis, keepdim=True)
    return x / oarlock.clip(norm, min=epsilon)


def cosine_similarity(x1, x2, axis=1, eps=1e-8):
    """sum(x1 * x2) / sqrt(max(sum(x1^2) * sum(x2^2), eps^2)) along axis (x1, x2 broadcast)."""
    _tensor("cosine_similarity", "x1", x1)
    _tensor("cosine_similarity", "x2", x2)
    axis = _axis("cosine_similarity", x1, axis)
    w12 = oarlock.sum(x1 * x2, axis=axis)
    n1, n2 = x1.shape[axis], x2.shape[axis]
    # a size-1 axis broadcast against n: its squared norm counts n times, as Paddle does
    w1 = oarlock.sum(x1 * x1, axis=axis) * (max(n1, n2) / n1 if n1 else 1)
    w2 = oarlock.sum(x2 * x2, axis=axis) * (max(n1, n2) / n2 if n2 else 1)
    return w12 / oarlock.sqrt(oarlock.clip(w1 * w2, min=eps * eps))


def pairwise_distance(x, y, p=2.0, epsilon=1e-6, keepdim=False, name=None):
    """||x - y + epsilon||_p over the last axis."""
    _tensor("pairwise_distance", "x", x)
    _tensor("pairwise_distance", "y", y)
    diff = x - y
    if epsilon:
        diff = diff + epsilon
    return oarlock.norm(diff, p=float(p), axis=-1, keepdim=keepdim)


def one_hot(x, num_classes=-1, name=None):
    """float32 one-hot vectors of the integer labels x: shape x.shape + [num_classes] (-1: max(x) + 1)."""
    _tensor("one_hot", "x", x)
    if x.dtype.kind != "int":
        raise TypeError(f"one_hot: x must hold integer labels, got dtype {x.dtype.name}")
    if isinstance(num_classes, oarlock.Tensor):
        num_classes = int(num_classes.item())
    labels = x.numpy()
    if num_classes == -1:
        num_classes = int(labels.max()) + 1 if labels.size else 0
    if not isinstance(num_classes, numbers.Integral) or num_classes < 0:
        raise ValueError(f"one_hot: num_classes must be a non-negative int or -1, got {num_classes!r}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"one_hot: labels must be in [0, {num_classes}), got values from {labels.min()} to "
                         f"{labels.max()}")
    classes = oarlock.arange(num_classes, dtype=x.dtype)
    return oarlock.cast(oarlock.unsqueeze(x, -1) == classes, "float32")


def label_smooth(label, prior_dist=None, epsilon=0.1, name=None):
    """(1 - epsilon) * label + epsilon * prior_dist (uniform over the last axis by default)."""
    _tensor("label_smooth", "label", label)
    if not 0 <= epsilon <= 1:
        raise ValueError(f"label_smooth: epsilon must be in [0, 1], got {epsilon!r}")
    prior = 1.0 / label.shape[-1] if prior_dist is None else prior_dist
    return (1 - epsilon) * label + epsilon * prior


def sequence_mask(x, maxlen=None, dtype="int64", name=None):
    """mask[..., j] = j < x[...] for j < maxlen (default max(x)), of `dtype`."""
    _tensor("sequence_mask", "x", x)
    if isinstance(maxlen, oarlock.Tensor):
        maxlen = int(maxlen.item())
    if maxlen is None:
        maxlen = int(x.numpy().max()) if x.size else 0
    if not isinstance(maxlen, numbers.Integral) or maxlen < 0:
        raise ValueError(f"sequence_mask: maxlen must be a non-negative int, got {maxlen!r}")
    positions = oarlock.arange(maxlen, dtype=x.dtype)
    return oarlock.cast(positions < oarlock.unsqueeze(x, -1), dtype)


def _check_4d(function, x, data_format):
    _tensor(function, "x", x)
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"{function}: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    if x.ndim != 4:
        raise ValueError(f"{function}: x must be 4-D, got shape {x.shape}")
    return data_format == "NHWC"


def _nchw(x, channel_last):
    return oarlock.transpose(x, [0, 3, 1, 2]) if channel_last else x


def _back(x, channel_last):
    return oarlock.transpose(x, [0, 2, 3, 1]) if channel_last else x


def pixel_shuffle(x, upscale_factor, data_format="NCHW", name=None):
    """[N, C r^2, H, W] -> [N, C, H r, W r] (r = upscale_factor)."""
    channel_last = _check_4d("pixel_shuffle", x, data_format)
    r = _positive("pixel_shuffle", "upscale_factor", upscale_factor)
    x = _nchw(x, channel_last)
    n, c, h, w = x.shape
    if c % (r * r):
        raise ValueError(f"pixel_shuffle: the {c} channels must be divisible by upscale_factor^2 = {r * r}")
    x = oarlock.reshape(x, [n, c // (r * r), r, r, h, w])
    x = oarlock.reshape(oarlock.transpose(x, [0, 1, 4, 2, 5, 3]), [n, c // (r * r), h * r, w * r])
    return _back(x, channel_last)


def pixel_unshuffle(x, downscale_factor, data_format="NCHW", name=None):
    """[N, C, H r, W r] -> [N, C r^2, H, W] (r = downscale_factor), pixel_shuffle's inverse."""
    channel_last = _check_4d("pixel_unshuffle", x, data_format)
    r = _positive("pixel_unshuffle", "downscale_factor", downscale_factor)
    x = _nchw(x, channel_last)
    n, c, h, w = x.shape
    if h % r or w % r:
        raise ValueError(f"pixel_unshuffle: height {h} and width {w} must be divisible by downscale_factor {r}")
    x = oarlock.reshape(x, [n, c, h // r, r, w // r, r])
    x = oarlock.reshape(oarlock.transpose(x, [0, 1, 3, 5, 2, 4]), [n, c * r * r, h // r, w // r])
    return _back(x, channel_last)


def channel_shuffle(x, groups, data_format="NCHW", name=None):
    """Split the channels into `groups` groups and interleave them: [N, g, C/g, H, W] -> [N, C/g, g, H, W]."""
    channel_last = _check_4d("channel_shuffle", x, data_format)
    g = _positive("channel_shuffle", "groups", groups)
    x = _nchw(x, channel_last)
    n, c, h, w = x.shape
    if c % g:
        raise ValueError(f"channel_shuffle: the {c} channels must be divisible by groups {g}")
    x = oarlock.reshape(oarlock.transpose(oarlock.reshape(x, [n, g, c // g, h, w]), [0, 2, 1, 3, 4]), [n, c, h, w])
    return _back(x, channel_last)


def bilinear(x1, x2, weight, bias=None, name=None):
    """out[b, o] = x1[b] @ weight[o] @ x2[b] + bias[0, o]: x1 [B, in1], x2 [B, in2], weight [out, in1, in2]."""
    for arg, value in (("x1", x1), ("x2", x2), ("weight", weight)):
        _tensor("bilinear", arg, value)
    if x1.ndim != 2 or x2.ndim != 2 or weight.ndim != 3 or x1.shape[0] != x2.shape[0] or \
            weight.shape[1] != x1.shape[1] or weight.shape[2] != x2.shape[1]:
        raise ValueError(f"bilinear: expected x1 [B, in1], x2 [B, in2] and weight [out, in1, in2], got shapes "
                         f"{x1.shape}, {x2.shape} and {weight.shape}")
    left = oarlock.matmul(oarlock.unsqueeze(x1, 0), weight)                 # [out, B, in2]
    out = oarlock.transpose(oarlock.sum(left * oarlock.unsqueeze(x2, 0), axis=-1), [1, 0])
    return out if bias is None else out + oarlock.reshape(bias, [1, -1])


def local_response_norm(x, size, alpha=0.0001, beta=0.75, k=1.0, data_format="NCHW", name=None):
    """x / (k + alpha * mean of x^2 over a window of `size` channels)^beta; the window covers size // 2
    channels before and (size - 1) // 2 after (zero-padded), as Paddle's average pool does."""
    _tensor("local_response_norm", "x", x)
    if data_format not in ("NCL", "NLC", "NCHW", "NHWC", "NCDHW", "NDHWC"):
        raise ValueError(f"local_response_norm: data_format must be one of NCL, NLC, NCHW, NHWC, NCDHW, NDHWC, "
                         f"got {data_format!r}")
    if x.ndim < 3:
        raise ValueError(f"local_response_norm: x must be at least 3-D, got shape {x.shape}")
    size = _positive("local_response_norm", "size", size)
    axis = x.ndim - 1 if data_format[-1] == "C" else 1
    square = x * x
    pads = [[0, 0] for _ in range(x.ndim)]
    pads[axis] = [size // 2 + 1, (size - 1) // 2]  # one more zero in front: window sums as cumsum differences
    padded = oarlock.nn.functional.pad(square, [p for pair in pads for p in pair], value=0.0)
    total = oarlock.cumsum(padded, axis=axis)
    n = x.shape[axis]
    index = [slice(None)] * x.ndim
    index[axis] = slice(size, size + n)
    upper = total[tuple(index)]
    index[axis] = slice(0, n)
    window = (upper - total[tuple(index)]) / size
    return x / oarlock.pow(window * alpha + k, beta)


def instance_norm(x, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True, momentum=0.9,
                  eps=1e-5, data_format="NCHW", name=None):
    """Normalise each (sample, channel) over its spatial axes (biased variance), then scale and shift per
    channel. As Paddle 3.2's dynamic-graph kernel, the channels are axis 1 whatever data_format says and
    running_mean / running_var / use_input_stats / momentum are accepted and unused."""
    _tensor("instance_norm", "x", x)
    if x.ndim < 3:
        raise ValueError(f"instance_norm: x must be at least 3-D ([N, C, ...]), got shape {x.shape}")
    axes = list(range(2, x.ndim))
    mean = oarlock.mean(x, axis=axes, keepdim=True)
    centered = x - mean
    variance = oarlock.mean(centered * centered, axis=axes, keepdim=True)
    out = centered / oarlock.sqrt(variance + eps)
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
    if weight is not None:
        out = out * oarlock.reshape(weight, shape)
    if bias is not None:
        out = out + oarlock.reshape(bias, shape)
    return out


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _alpha_dropout(function, x, p, training, mask_shape):
    """Paddle's alpha dropout: dropped entries take SELU's negative saturation, then an affine map a y + b
    keeps the mean and variance of a standard normal input."""
    _tensor(function, "x", x)
    if not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise ValueError(f"{function}: p must be a probability in [0, 1], got {p!r}")
    if not training or p == 0:
        return x
    alpha_p = -SELU_ALPHA * SELU_SCALE
    if p == 1:   # everything dropped: the affine map's limit is 0 (Paddle's a is infinite there)
        return x * 0.0
    a = ((1 - p) * (1 + p * alpha_p ** 2)) ** -0.5
    b = -a * alpha_p * p
    keep = oarlock.cast(oarlock.uniform(mask_shape, dtype=x.dtype, min=0.0, max=1.0) >= p, x.dtype)
    return a * (x * keep + alpha_p * (1 - keep)) + b


def alpha_dropout(x, p=0.5, training=True, name=None):
    """Alpha dropout of each element (for SELU networks)."""
    _tensor("alpha_dropout", "x", x)
    return _alpha_dropout("alpha_dropout", x, p, training, list(x.shape))


def feature_alpha_dropout(x, p=0.5, training=True, name=None):
    """Alpha dropout of whole channels: one draw per (sample, channel) of an [N, C, ...] input."""
    _tensor("feature_alpha_dropout", "x", x)
    if x.ndim < 2:
        raise ValueError(f"feature_alpha_dropout: x must be at least 2-D ([N, C, ...]), got shape {x.shape}")
    return _alpha_dropout("feature_alpha_dropout", x, p, training, list(x.shape[:2]) + [1] * (x.ndim - 2))


def temporal_shift(x, seg_num, shift_ratio=0.25, name=None, data_format="NCHW"):
    """TSM's shift of [N*T, C, H, W] (T = seg_num): the first shift_ratio of the channels take the previous
    frame's values, the next shift_ratio the next frame's (zeros at the ends), the rest stay."""
    _tensor("temporal_shift", "x", x)
    if data_format not in ("NCHW", "NHWC"):
        raise ValueError(f"temporal_shift: data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    seg_num = _positive("temporal_shift", "seg_num", seg_num)
    if x.ndim != 4 or x.shape[0] % seg_num:
        raise ValueError(f"temporal_shift: x must be 4-D with a first axis divisible by seg_num={seg_num}, got "
                         f"shape {x.shape}")
    if not 0 <= shift_ratio <= 0.5:
        raise ValueError(f"temporal_shift: shift_ratio must be in [0, 0.5], got {shift_ratio!r}")
    channel_last = data_format == "NHWC"
    x = _nchw(x, channel_last)
    nt, c, h, w = x.shape
    frames = oarlock.reshape(x, [nt // seg_num, seg_num, c, h, w])
    c1, c2 = int(c * shift_ratio), int(c * 2 * shift_ratio)
    zero = oarlock.zeros([nt // seg_num, 1, c, h, w], dtype=x.dtype)
    ahead = oarlock.concat([frames[:, 1:], zero], axis=1)       # frame t takes t + 1
    behind = oarlock.concat([zero, frames[:, :-1]], axis=1)     # frame t takes t - 1
    out = oarlock.concat([behind[:, :, :c1], ahead[:, :, c1:c2], frames[:, :, c2:]], axis=2)
    return _back(oarlock.reshape(out, [nt, c, h, w]), channel_last)


def gather_tree(ids, parents):
    """Backtrace beam search: ids and parents [max_time, batch, beam] (integers); out[t] follows the parent
    pointers back from the last step."""
    for arg, value in (("ids", ids), ("parents", parents)):
        _tensor("gather_tree", arg, value)
        if value.ndim != 3 or value.dtype.kind != "int":
            raise ValueError(f"gather_tree: {arg} must be a 3-D integer Tensor [max_time, batch, beam], got "
                             f"{value.shape} of {value.dtype.name}")
    if ids.shape != parents.shape:
        raise ValueError(f"gather_tree: ids and parents must have the same shape, got {ids.shape} and {parents.shape}")
    step_ids, step_parents = ids.numpy(), parents.numpy()
    steps, batch, beam = step_ids.shape
    out = np.empty_like(step_ids)
    if steps:
        rows = np.arange(batch)[:, None]
        parent = np.tile(np.arange(beam), (batch, 1))
        for t in range(steps - 1, -1, -1):
            out[t] = step_ids[t][rows, parent]
            parent = step_parents[t][rows, parent]
    return oarlock.to_tensor(out)


FUNCTIONS = (temporal_shift, gather_tree, instance_norm, alpha_dropout, feature_alpha_dropout, normalize,
             cosine_similarity, pairwise_distance, one_hot, label_smooth, sequence_mask, pixel_shuffle,
             pixel_unshuffle, channel_shuffle, bilinear, local_response_norm)


def register_api(api):
    for function in FUNCTIONS:
        api.export("oarlock.nn.functional", function.__name__, function)
