"""Specs for the conv family: conv1d, conv2d, conv2d_transpose, conv2d_grad_weight, max pooling (with its
index and its gradient), avg_pool2d (and its gradient) and adaptive_avg_pool2d (and its gradient).

The references follow the definitions directly -- a loop over output positions (or, for the
transposed convolution, over input positions scattering into the output) -- so they share no code or
strategy with the im2col kernels. Paddle's semantics (see oarlock_ops/conv.py) are written out here:
'same' padding ignores dilation, ceil_mode keeps windows that start in the padding, divisor_override
scales the average by kh*kw / divisor. Comparisons with torch and paddle live in test_conv_pool.py.
"""

import numpy as np

import oarlock
import oarlock.nn.functional as F
from op_specs.base import Case, In, OpSpec


# -- geometry, written independently of the kernels -------------------------------------------------

def _pair(v):
    return (v, v) if np.isscalar(v) else tuple(v) * (2 // len(v))


def _pads(padding, size, kernel, stride, dilation):
    """((top, bottom), (left, right)) and the dilation Paddle uses."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0)), dilation
        pads = []
        for n, k, s in zip(size, kernel, stride):
            total = max((int(np.ceil(n / s)) - 1) * s + k - n, 0)
            pads.append((total // 2, total - total // 2))
        return tuple(pads), (1, 1)
    if np.isscalar(padding):
        return ((padding, padding),) * 2, dilation
    if isinstance(padding[0], (list, tuple)):
        return tuple(tuple(p) for p in padding[2:]), dilation
    if len(padding) == 2:
        return tuple((p, p) for p in padding), dilation
    return ((padding[0], padding[1]), (padding[2], padding[3])), dilation


def _nchw(x, data_format):
    return x.transpose(0, 3, 1, 2) if data_format == "NHWC" else x


def _back(y, data_format):
    return y.transpose(0, 2, 3, 1) if data_format == "NHWC" else y


def _pad_input(x, pads, extra=((0, 0), (0, 0)), value=0.0):
    (t, b), (le, r) = pads
    return np.pad(x, ((0, 0), (0, 0), (t, b + extra[0][1]), (le, r + extra[1][1])), constant_values=value)


# -- convolution references ----------------------------------------------------------------------------

def conv2d_ref(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW"):
    x = _nchw(x, data_format)
    kernel, stride = weight.shape[2:], _pair(stride)
    pads, dilation = _pads(padding, x.shape[2:], kernel, stride, _pair(dilation))
    xp = _pad_input(x, pads)
    n, c, h, w = xp.shape
    o, cg, og = weight.shape[0], c // groups, weight.shape[0] // groups
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    oh, ow = [(m - r) // s + 1 for m, r, s in zip((h, w), reach, stride)]
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride[0]:i * stride[0] + reach[0]:dilation[0],
                       j * stride[1]:j * stride[1] + reach[1]:dilation[1]]
            for g in range(groups):
                out[:, g * og:(g + 1) * og, i, j] = np.einsum("nckl,ockl->no", patch[:, g * cg:(g + 1) * cg],
                                                              weight[g * og:(g + 1) * og])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return _back(out, data_format)


def conv1d_ref(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCL"):
    """conv2d_ref on a unit height; 1-D padding forms become their 2-D equivalents."""
    last = data_format == "NLC"
    x4 = (x.transpose(0, 2, 1) if last else x)[:, :, None, :]
    pad = _1d_padding(padding)
    out = conv2d_ref(x4, weight[:, :, None, :], bias, (1, _pair(stride)[0]), pad, (1, _pair(dilation)[0]), groups)
    out = out[:, :, 0, :]
    return out.transpose(0, 2, 1) if last else out


def _1d_padding(padding):
    if isinstance(padding, str):
        return padding
    items = [padding] * 2 if np.isscalar(padding) else list(padding)
    items = items * 2 if len(items) == 1 else items
    return [0, 0, items[0], items[1]]


def conv2d_transpose_ref(x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                         output_size=None, data_format="NCHW"):
    """Every input element scatters weight * value into the (padded) output, which is then cropped."""
    x = _nchw(x, data_format)
    n, c, h, w = x.shape
    kernel, stride = weight.shape[2:], _pair(stride)
    pads, dilation = _pads(padding, (h, w), kernel, stride, _pair(dilation))
    cg, og = c // groups, weight.shape[1]
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    natural = [(m - 1) * s - p[0] - p[1] + r for m, s, p, r in zip((h, w), stride, pads, reach)]
    size = list(output_size) if output_size is not None else [m + e for m, e in zip(natural, _pair(output_padding))]
    full = np.zeros((n, og * groups, max(pads[0][0] + size[0], (h - 1) * stride[0] + reach[0]),
                     max(pads[1][0] + size[1], (w - 1) * stride[1] + reach[1])))
    for i in range(h):
        for j in range(w):
            for g in range(groups):
                full[:, g * og:(g + 1) * og, i * stride[0]:i * stride[0] + reach[0]:dilation[0],
                     j * stride[1]:j * stride[1] + reach[1]:dilation[1]] += np.einsum(
                         "nc,cokl->nokl", x[:, g * cg:(g + 1) * cg, i, j], weight[g * cg:(g + 1) * cg])
    out = full[:, :, pads[0][0]:pads[0][0] + size[0], pads[1][0]:pads[1][0] + size[1]]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1)
    return _back(out, data_format)


def conv2d_grad_weight_ref(x, grad, kernel_size, stride=1, padding=0, dilation=1, groups=1, data_format="NCHW"):
    """dw[o, c, i, j] = sum over samples and output positions of grad * the input element it multiplied."""
    x, grad = _nchw(x, data_format), _nchw(grad, data_format)
    kernel, stride = _pair(kernel_size), _pair(stride)
    pads, dilation = _pads(padding, x.shape[2:], kernel, stride, _pair(dilation))
    xp = _pad_input(x, pads)
    c, o = x.shape[1], grad.shape[1]
    cg, og = c // groups, o // groups
    oh, ow = grad.shape[2:]
    dw = np.zeros((o, cg) + kernel)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            window = xp[:, :, i * dilation[0]:i * dilation[0] + (oh - 1) * stride[0] + 1:stride[0],
                        j * dilation[1]:j * dilation[1] + (ow - 1) * stride[1] + 1:stride[1]]
            for g in range(groups):
                dw[g * og:(g + 1) * og, :, i, j] = np.einsum("nohw,nchw->oc", grad[:, g * og:(g + 1) * og],
                                                             window[:, g * cg:(g + 1) * cg])
    return dw


# -- pooling references ------------------------------------------------------------------------------------

def _windows(size, kernel_size, stride, padding, ceil_mode):
    """[(rows, cols)] per output position (row-major): the input ranges each window covers."""
    kernel = _pair(kernel_size)
    stride = kernel if stride is None else _pair(stride)
    pads, _ = _pads(padding, size, kernel, stride, (1, 1))
    counts = []
    for n, (b, a), k, s in zip(size, pads, kernel, stride):
        room = n + b + a - k
        counts.append((-(-room // s) if ceil_mode else room // s) + 1)
    ranges = [[range(max(o * s - b, 0), min(o * s - b + k, n)) for o in range(m)]
              for n, (b, _), k, s, m in zip(size, pads, kernel, stride, counts)]
    return counts, ranges, kernel


def max_pool_ref(x, kernel_size, stride=None, padding=0, ceil_mode=False, data_format="NCHW"):
    x = _nchw(x, data_format)
    (oh, ow), (rows, cols), _ = _windows(x.shape[2:], kernel_size, stride, padding, ceil_mode)
    w = x.shape[3]
    out, mask = np.zeros(x.shape[:2] + (oh, ow)), np.zeros(x.shape[:2] + (oh, ow), dtype=np.int32)
    for i in range(oh):
        for j in range(ow):
            flat = np.array([r * w + c for r in rows[i] for c in cols[j]])
            values = x[:, :, rows[i]][:, :, :, cols[j]].reshape(x.shape[:2] + (-1,))
            arg = np.argmax(values, axis=-1)
            out[:, :, i, j] = np.take_along_axis(values, arg[..., None], -1)[..., 0]
            mask[:, :, i, j] = flat[arg]
    return _back(out, data_format), _back(mask, data_format)


def max_pool_grad_ref(grad, mask, input_size, data_format="NCHW"):
    grad, mask = _nchw(grad, data_format), _nchw(mask, data_format)
    n, c = grad.shape[:2]
    dx = np.zeros((n, c, input_size[0] * input_size[1]))
    for idx in np.ndindex(grad.shape):
        if mask[idx] >= 0:
            dx[idx[0], idx[1], mask[idx]] += grad[idx]
    return _back(dx.reshape(n, c, *input_size), data_format)


def _avg_factors(size, kernel_size, stride, padding, ceil_mode, exclusive, divisor_override):
    (oh, ow), (rows, cols), kernel = _windows(size, kernel_size, stride, padding, ceil_mode)
    area = kernel[0] * kernel[1]
    factor = np.zeros((oh, ow))
    for i in range(oh):
        for j in range(ow):
            count = len(rows[i]) * len(cols[j]) if exclusive else area
            factor[i, j] = (1.0 / count if count else np.nan) * (area / divisor_override if divisor_override else 1)
    return factor, rows, cols


def avg_pool_ref(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                 data_format="NCHW"):
    x = _nchw(x, data_format)
    factor, rows, cols = _avg_factors(x.shape[2:], kernel_size, stride, padding, ceil_mode, exclusive,
                                      divisor_override)
    out = np.zeros(x.shape[:2] + factor.shape)
    for i, j in np.ndindex(factor.shape):
        out[:, :, i, j] = x[:, :, rows[i]][:, :, :, cols[j]].sum(axis=(2, 3)) * factor[i, j]
    return _back(out, data_format)


def avg_pool_grad_ref(grad, input_size, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True,
                      divisor_override=None, data_format="NCHW"):
    grad = _nchw(grad, data_format)
    factor, rows, cols = _avg_factors(input_size, kernel_size, stride, padding, ceil_mode, exclusive,
                                      divisor_override)
    dx = np.zeros(grad.shape[:2] + tuple(input_size))
    for i, j in np.ndindex(factor.shape):
        if np.isfinite(factor[i, j]):
            dx[:, :, rows[i].start:rows[i].stop, cols[j].start:cols[j].stop] += \
                (grad[:, :, i, j] * factor[i, j])[:, :, None, None]
    return _back(dx, data_format)


def _adaptive_windows(n, m):
    return [range(int(np.floor(o * n / m)), int(np.ceil((o + 1) * n / m))) for o in range(m)]


def adaptive_ref(x, output_size, data_format="NCHW"):
    x = _nchw(x, data_format)
    size = [n if o is None else o for o, n in zip(_pair(output_size), x.shape[2:])]
    rows, cols = (_adaptive_windows(n, m) for n, m in zip(x.shape[2:], size))
    out = np.zeros(x.shape[:2] + tuple(size))
    for i, j in np.ndindex(*size):
        out[:, :, i, j] = x[:, :, rows[i]][:, :, :, cols[j]].mean(axis=(2, 3))
    return _back(out, data_format)


def adaptive_grad_ref(grad, input_size, data_format="NCHW"):
    grad = _nchw(grad, data_format)
    rows, cols = (_adaptive_windows(n, m) for n, m in zip(input_size, grad.shape[2:]))
    dx = np.zeros(grad.shape[:2] + tuple(input_size))
    for i, j in np.ndindex(grad.shape[2:]):
        dx[:, :, rows[i].start:rows[i].stop, cols[j].start:cols[j].stop] += \
            (grad[:, :, i, j] / (len(rows[i]) * len(cols[j])))[:, :, None, None]
    return _back(dx, data_format)


# -- fixed inputs that need to be consistent with each other ------------------------------------------------

def _mask_of(shape, data_format="NCHW", **pool):
    """A real max-pooling mask (and its output shape) for max_pool2d_grad's cases."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape)
    out, mask = max_pool_ref(x, data_format=data_format, **pool)
    return In(mask.shape, dtype="int32", values=mask, grad=False), out.shape


def _mask_case(shape, name, data_format="NCHW", **pool):
    mask, out_shape = _mask_of(shape, data_format, **pool)
    size = shape[1:3] if data_format == "NHWC" else shape[2:]
    return Case([In(out_shape), mask], {"input_size": list(size), "data_format": data_format}, name=name)


SPECS = [
    OpSpec("conv2d", [
        Case([In((2, 3, 5, 5)), In((4, 3, 3, 3)), In((4,))], name="basic"),
        Case([In((1, 2, 6, 7)), In((3, 2, 3, 2)), In((3,))], {"stride": 2, "padding": 1}, name="stride_pad"),
        Case([In((1, 4, 7, 6)), In((4, 2, 2, 3)), None], {"dilation": 2, "groups": 2, "padding": [1, 2]},
             name="dilation_groups"),
        Case([In((1, 2, 5, 6)), In((2, 2, 3, 3))], {"padding": [0, 1, 2, 1], "stride": [2, 1]}, name="pads4"),
        Case([In((1, 2, 5, 4)), In((2, 2, 2, 3))], {"padding": [[0, 0], [0, 0], [1, 0], [0, 2]]}, name="pairs"),
        Case([In((1, 2, 7, 6)), In((3, 2, 3, 2))], {"padding": "same", "stride": 2, "dilation": 2},
             name="same_ignores_dilation"),
        Case([In((1, 2, 5, 5)), In((2, 2, 3, 3))], {"padding": "valid", "stride": 2}, name="valid"),
        Case([In((1, 5, 6, 3)), In((4, 3, 3, 3)), In((4,))], {"padding": 1, "data_format": "NHWC"}, name="nhwc"),
        Case([In((2, 3, 4, 4)), In((5, 3, 1, 1)), In((5,))], name="pointwise"),
        Case([In((1, 3, 5, 5)), In((6, 1, 3, 3))], {"groups": 3, "padding": 1}, name="depthwise"),
        Case([In((0, 2, 4, 4)), In((3, 2, 3, 3))], name="empty_batch", grad=False),
    ], ref=conv2d_ref, call=F.conv2d),
    OpSpec("conv1d", [
        Case([In((2, 3, 7)), In((4, 3, 3)), In((4,))], name="basic"),
        Case([In((1, 4, 9)), In((2, 2, 2)), None], {"stride": 2, "padding": [1, 2], "dilation": 2, "groups": 2},
             name="stride_pad_dilation_groups"),
        Case([In((1, 2, 9)), In((3, 2, 4))], {"padding": "same", "stride": 2}, name="same"),
        Case([In((2, 6, 3)), In((2, 3, 3)), In((2,))], {"padding": 1, "data_format": "NLC"}, name="nlc"),
    ], ref=conv1d_ref, call=F.conv1d),
    OpSpec("conv2d_transpose", [
        Case([In((2, 3, 4, 4)), In((3, 2, 3, 3)), In((2,))], name="basic"),
        Case([In((1, 2, 3, 4)), In((2, 3, 3, 2)), In((3,))], {"stride": 2, "padding": 1, "output_padding": 1},
             name="stride_output_padding"),
        Case([In((1, 2, 3, 3)), In((2, 2, 3, 3))], {"stride": 2, "output_size": [8, 7]}, name="output_size"),
        Case([In((1, 4, 3, 3)), In((4, 1, 2, 3))], {"dilation": 2, "groups": 2, "padding": [1, 0, 0, 2]},
             name="dilation_groups_pads4"),
        Case([In((1, 2, 4, 3)), In((2, 2, 3, 3))], {"stride": 2, "padding": "same"}, name="same"),
        Case([In((1, 3, 4, 2)), In((2, 3, 2, 2)), In((3,))], {"stride": [1, 2], "data_format": "NHWC"},
             name="nhwc"),
    ], ref=conv2d_transpose_ref, call=F.conv2d_transpose),
    OpSpec("conv2d_grad_weight", [
        Case([In((2, 3, 5, 5)), In((2, 4, 3, 3)), [3, 3]], name="basic"),
        Case([In((1, 4, 6, 7)), In((1, 2, 4, 3))], {"kernel_size": [2, 3], "stride": 2, "padding": 1, "groups": 2,
                                                     "dilation": [1, 2]}, name="stride_pad_groups_dilation"),
        Case([In((1, 5, 4, 2)), In((1, 5, 4, 3))], {"kernel_size": 2, "padding": [0, 1, 1, 0],
                                                     "data_format": "NHWC"}, name="nhwc"),
    ], ref=conv2d_grad_weight_ref, call=lambda *a, **k: oarlock.conv2d_grad_weight(*a, **k)),
    OpSpec("max_pool2d_with_index", [
        Case([In((2, 3, 4, 6))], {"kernel_size": 2}, name="k2"),
        Case([In((1, 2, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="k3s2p1"),
        Case([In((1, 2, 7, 8))], {"kernel_size": 3, "stride": 2, "ceil_mode": True}, name="ceil"),
        Case([In((1, 2, 5, 7))], {"kernel_size": [2, 3], "stride": [1, 2], "padding": [1, 0]}, name="rect"),
        Case([In((1, 5, 4, 3))], {"kernel_size": 2, "stride": 1, "data_format": "NHWC"}, name="nhwc"),
        Case([In((1, 2, 5, 7))], {"kernel_size": 3, "stride": 2, "padding": "same"}, name="same"),
    ], ref=max_pool_ref, call=lambda *a, **k: oarlock.max_pool2d_with_index(*a, **k)),
    OpSpec("max_pool2d_grad", [
        _mask_case((2, 2, 5, 6), "overlapping", kernel_size=3, stride=2, padding=1),
        _mask_case((1, 3, 4, 4), "tiling", kernel_size=2),
        _mask_case((1, 4, 5, 2), "nhwc", data_format="NHWC", kernel_size=2, stride=1),
    ], ref=max_pool_grad_ref, call=lambda *a, **k: oarlock.max_pool2d_grad(*a, **k)),
    OpSpec("avg_pool2d", [
        Case([In((2, 3, 4, 6))], {"kernel_size": 2}, name="k2"),
        Case([In((1, 2, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="exclusive"),
        Case([In((1, 2, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1, "exclusive": False},
             name="inclusive"),
        Case([In((1, 2, 7, 8))], {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, name="ceil"),
        Case([In((1, 2, 5, 6))], {"kernel_size": 3, "stride": 2, "padding": 1, "divisor_override": 2.0},
             name="divisor_override"),
        Case([In((1, 5, 4, 3))], {"kernel_size": [2, 3], "stride": 1, "padding": [1, 0, 0, 1],
                                  "data_format": "NHWC"}, name="nhwc"),
        Case([In((1, 1, 7, 8))], {"kernel_size": 3, "stride": 3, "padding": 1, "ceil_mode": True},
             name="empty_window_is_nan", grad=False),
    ], ref=avg_pool_ref, call=F.avg_pool2d),
    OpSpec("avg_pool2d_grad", [
        Case([In((2, 3, 2, 3)), [4, 6], 2], name="k2"),
        Case([In((1, 2, 4, 3))], {"input_size": [7, 6], "kernel_size": 3, "stride": 2, "padding": 1},
             name="exclusive"),
        Case([In((1, 2, 4, 3))], {"input_size": [7, 6], "kernel_size": 3, "stride": 2, "padding": 1,
                                  "exclusive": False, "divisor_override": 4.0}, name="inclusive_divisor"),
        Case([In((1, 1, 3, 4))], {"input_size": [7, 8], "kernel_size": 3, "stride": 3, "padding": 1,
                                  "ceil_mode": True}, name="ceil_empty_window"),
        Case([In((1, 2, 2, 3))], {"input_size": [4, 5], "kernel_size": [2, 3], "stride": 2, "data_format": "NHWC"},
             name="nhwc"),
    ], ref=avg_pool_grad_ref, call=lambda *a, **k: oarlock.avg_pool2d_grad(*a, **k)),
    OpSpec("adaptive_avg_pool2d", [
        Case([In((2, 3, 4, 5)), 1], name="global"),
        Case([In((1, 2, 6, 4)), [3, 2]], name="tiling"),
        Case([In((1, 2, 7, 5)), 3], name="overlapping"),
        Case([In((1, 2, 5, 4)), [None, 3]], name="keep_height"),
        Case([In((1, 5, 7, 2)), [2, 3]], {"data_format": "NHWC"}, name="nhwc"),
    ], ref=adaptive_ref, call=F.adaptive_avg_pool2d),
    OpSpec("adaptive_avg_pool2d_grad", [
        Case([In((1, 2, 3, 2)), [6, 4]], name="tiling"),
        Case([In((1, 2, 3, 3)), [7, 5]], name="overlapping"),
        Case([In((1, 4, 2, 3))], {"input_size": [5, 7], "data_format": "NHWC"}, name="nhwc"),
    ], ref=adaptive_grad_ref, call=lambda *a, **k: oarlock.adaptive_avg_pool2d_grad(*a, **k)),
]
