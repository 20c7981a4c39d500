"""Specs for the conv family: conv1d, conv2d, conv3d, conv2d/3d_transpose, conv2d/3d_grad_weight, unfold and
fold, max pooling (with its index and its gradient), avg_pool2d (and its gradient) and adaptive_avg_pool2d
(and its gradient).

The references follow the definitions directly -- a loop over output positions (or, for the
transposed convolution, over input positions scattering into the output) -- so they share no code or
strategy with the im2col kernels. Paddle's semantics (see oarlock_ops/conv.py) are written out here:
'same' padding ignores dilation, divisor_override scales the average by kh*kw / divisor; pooling windows
follow torch's rule (ceil_mode drops a last window that would start in the right padding). Comparisons
with torch and paddle live in test_conv_pool.py and test_pool_windows.py.
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


# -- 3-D convolution references: the same definitions over three spatial axes -----------------------------------

def _triple(v):
    return (v,) * 3 if np.isscalar(v) else tuple(v) * (3 // len(v))


def _pads3(padding, size, kernel, stride, dilation):
    """((front, back), (top, bottom), (left, right)) and the dilation Paddle uses."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * 3, dilation
        totals = [max((int(np.ceil(n / s)) - 1) * s + k - n, 0) for n, k, s in zip(size, kernel, stride)]
        return tuple((t // 2, t - t // 2) for t in totals), (1, 1, 1)
    if np.isscalar(padding):
        return ((padding, padding),) * 3, dilation
    if isinstance(padding[0], (list, tuple)):
        return tuple(tuple(p) for p in padding[2:]), dilation
    if len(padding) == 3:
        return tuple((p, p) for p in padding), dilation
    return tuple((padding[2 * i], padding[2 * i + 1]) for i in range(3)), dilation


def _ncdhw(x, data_format):
    return x.transpose(0, 4, 1, 2, 3) if data_format == "NDHWC" else x


def _back3(y, data_format):
    return y.transpose(0, 2, 3, 4, 1) if data_format == "NDHWC" else y


def _window3(index, stride, reach, dilation):
    """The slices of the window at output position `index` (per axis: start, end, step)."""
    return tuple(slice(i * s, i * s + r, d) for i, s, r, d in zip(index, stride, reach, dilation))


def conv3d_ref(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format="NCDHW"):
    x = _ncdhw(x, data_format)
    kernel, stride = weight.shape[2:], _triple(stride)
    pads, dilation = _pads3(padding, x.shape[2:], kernel, stride, _triple(dilation))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    o, cg = weight.shape[0], x.shape[1] // groups
    og = o // groups
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    out_size = [(m - r) // s + 1 for m, r, s in zip(xp.shape[2:], reach, stride)]
    out = np.zeros((x.shape[0], o) + tuple(out_size))
    for index in np.ndindex(*out_size):
        patch = xp[(slice(None), slice(None)) + _window3(index, stride, reach, dilation)]
        for g in range(groups):
            out[(slice(None), slice(g * og, (g + 1) * og)) + index] = np.einsum(
                "ncdkl,ocdkl->no", patch[:, g * cg:(g + 1) * cg], weight[g * og:(g + 1) * og])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1, 1)
    return _back3(out, data_format)


def conv3d_transpose_ref(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                         output_size=None, data_format="NCDHW"):
    """Every input element scatters weight * value into the (padded) output, which is then cropped."""
    x = _ncdhw(x, data_format)
    size_in, kernel, stride = x.shape[2:], weight.shape[2:], _triple(stride)
    pads, dilation = _pads3(padding, size_in, kernel, stride, _triple(dilation))
    cg, og = x.shape[1] // groups, weight.shape[1]
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    natural = [(m - 1) * s - p[0] - p[1] + r for m, s, p, r in zip(size_in, stride, pads, reach)]
    size = list(output_size) if output_size is not None else [m + e for m, e in zip(natural, _triple(output_padding))]
    full = np.zeros((x.shape[0], og * groups) + tuple(max(p[0] + n, (m - 1) * s + r)
                                                       for p, n, m, s, r in zip(pads, size, size_in, stride, reach)))
    for index in np.ndindex(*size_in):
        for g in range(groups):
            full[(slice(None), slice(g * og, (g + 1) * og)) + _window3(index, stride, reach, dilation)] += np.einsum(
                "nc,codkl->nodkl", x[(slice(None), slice(g * cg, (g + 1) * cg)) + index], weight[g * cg:(g + 1) * cg])
    out = full[(slice(None), slice(None)) + tuple(slice(p[0], p[0] + n) for p, n in zip(pads, size))]
    if bias is not None:
        out = out + bias.reshape(1, -1, 1, 1, 1)
    return _back3(out, data_format)


def conv3d_grad_weight_ref(x, grad, kernel_size, stride=1, padding=0, dilation=1, groups=1, data_format="NCDHW"):
    """dw[o, c, *k] = sum over samples and output positions of grad * the input element it multiplied."""
    x, grad = _ncdhw(x, data_format), _ncdhw(grad, data_format)
    kernel, stride = _triple(kernel_size), _triple(stride)
    pads, dilation = _pads3(padding, x.shape[2:], kernel, stride, _triple(dilation))
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    c, o = x.shape[1], grad.shape[1]
    cg, og = c // groups, o // groups
    dw = np.zeros((o, cg) + kernel)
    for offset in np.ndindex(*kernel):
        window = xp[(slice(None), slice(None)) + tuple(
            slice(i * d, i * d + (m - 1) * s + 1, s) for i, d, m, s in zip(offset, dilation, grad.shape[2:], stride))]
        for g in range(groups):
            dw[(slice(g * og, (g + 1) * og), slice(None)) + offset] = np.einsum(
                "nodhw,ncdhw->oc", grad[:, g * og:(g + 1) * og], window[:, g * cg:(g + 1) * cg])
    return dw


# -- unfold / fold references: a loop over the blocks --------------------------------------------------------------

def _blocks(size, kernel_sizes, strides, paddings, dilations):
    """(pads ((top, bottom), (left, right)), block grid, kernel, stride, dilation); Paddle's 4-element
    paddings are [top, left, bottom, right]."""
    kernel, stride, dilation = _pair(kernel_sizes), _pair(strides), _pair(dilations)
    p = [paddings] * 4 if np.isscalar(paddings) else list(paddings) * (4 // len(paddings))
    pads = ((p[0], p[2]), (p[1], p[3]))
    reach = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    grid = [(n + a + b - r) // s + 1 for n, (a, b), r, s in zip(size, pads, reach, stride)]
    return pads, grid, kernel, stride, dilation


def _block(i, j, kernel, stride, dilation):
    return (Ellipsis, slice(i * stride[0], i * stride[0] + dilation[0] * (kernel[0] - 1) + 1, dilation[0]),
            slice(j * stride[1], j * stride[1] + dilation[1] * (kernel[1] - 1) + 1, dilation[1]))


def unfold_ref(x, kernel_sizes, strides=1, paddings=0, dilations=1):
    pads, grid, kernel, stride, dilation = _blocks(x.shape[2:], kernel_sizes, strides, paddings, dilations)
    xp = np.pad(x, ((0, 0), (0, 0)) + pads)
    n = x.shape[0]
    return np.stack([xp[_block(i, j, kernel, stride, dilation)].reshape(n, -1) for i, j in np.ndindex(*grid)], -1)


def fold_ref(x, output_sizes, kernel_sizes, strides=1, paddings=0, dilations=1):
    size = _pair(output_sizes)
    pads, grid, kernel, stride, dilation = _blocks(size, kernel_sizes, strides, paddings, dilations)
    n, c = x.shape[0], x.shape[1] // (kernel[0] * kernel[1])
    out = np.zeros((n, c, size[0] + sum(pads[0]), size[1] + sum(pads[1])))
    for b, (i, j) in enumerate(np.ndindex(*grid)):
        out[_block(i, j, kernel, stride, dilation)] += x[:, :, b].reshape(n, c, *kernel)
    return out[:, :, pads[0][0]:pads[0][0] + size[0], pads[1][0]:pads[1][0] + size[1]]


# -- pooling references ------------------------------------------------------------------------------------

def _windows(size, kernel_size, stride, padding, ceil_mode, inside=None):
    """[(rows, cols)] per output position (row-major): the ranges each window covers inside the input
    (inside="padded": inside the input and its padding, in input coordinates)."""
    kernel = _pair(kernel_size)
    stride = kernel if stride is None else _pair(stride)
    pads, _ = _pads(padding, size, kernel, stride, (1, 1))
    counts = []
    for n, (b, a), k, s in zip(size, pads, kernel, stride):
        room = n + b + a - k
        count = (-(-room // s) if ceil_mode else room // s) + 1
        counts.append(count - 1 if ceil_mode and (count - 1) * s >= n + b else count)
    ranges = [[range(max(o * s - b, -b if inside else 0), min(o * s - b + k, n + a if inside else n)) for o in range(m)]
              for n, (b, a), k, s, m in zip(size, pads, kernel, stride, counts)]
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
    _, (padded_rows, padded_cols), _ = _windows(size, kernel_size, stride, padding, ceil_mode, inside="padded")
    area = kernel[0] * kernel[1]
    factor = np.zeros((oh, ow))
    for i in range(oh):
        for j in range(ow):
            count = len(rows[i]) * len(cols[j]) if exclusive else len(padded_rows[i]) * len(padded_cols[j])
            factor[i, j] = (1.0 / count) * (area / divisor_override if divisor_override else 1)
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
    OpSpec("conv3d", [
        Case([In((2, 2, 3, 4, 3)), In((3, 2, 2, 2, 2)), In((3,))], name="basic"),
        Case([In((1, 4, 4, 3, 5)), In((2, 2, 2, 1, 3)), None],
             {"stride": [2, 1, 2], "padding": [1, 0, 1], "dilation": [1, 2, 1], "groups": 2},
             name="stride_pad_dilation_groups"),
        Case([In((1, 2, 3, 4, 3)), In((2, 2, 2, 3, 2))], {"padding": [0, 1, 1, 0, 2, 1]}, name="pads6"),
        Case([In((1, 1, 4, 3, 5)), In((2, 1, 3, 2, 2))], {"padding": "same", "stride": 2}, name="same"),
        Case([In((1, 3, 4, 3, 2)), In((2, 2, 2, 2, 2)), In((2,))], {"padding": 1, "data_format": "NDHWC"},
             name="ndhwc"),
        Case([In((1, 3, 2, 3, 2)), In((4, 3, 1, 1, 1))], name="pointwise"),
    ], ref=conv3d_ref, call=F.conv3d),
    OpSpec("conv3d_transpose", [
        Case([In((1, 2, 2, 3, 2)), In((2, 3, 2, 2, 2)), In((3,))], name="basic"),
        Case([In((1, 4, 2, 2, 3)), In((4, 1, 2, 3, 2)), None],
             {"stride": [2, 1, 2], "padding": 1, "output_padding": [1, 0, 0], "groups": 2}, name="stride_groups"),
        Case([In((1, 2, 2, 2, 2)), In((2, 2, 2, 2, 2))], {"stride": 2, "output_size": [5, 4, 5], "dilation": [1, 1, 2]},
             name="output_size_dilation"),
        Case([In((1, 2, 3, 2, 2)), In((2, 2, 2, 2, 2)), In((2,))], {"stride": [1, 2, 1], "data_format": "NDHWC"},
             name="ndhwc"),
    ], ref=conv3d_transpose_ref, call=F.conv3d_transpose),
    OpSpec("conv3d_grad_weight", [
        Case([In((2, 2, 3, 4, 3)), In((2, 3, 2, 3, 2)), [2, 2, 2]], name="basic"),
        Case([In((1, 4, 4, 3, 5)), In((1, 2, 3, 3, 3))],
             {"kernel_size": [2, 1, 3], "stride": [2, 1, 2], "padding": [1, 0, 1], "groups": 2}, name="groups"),
        Case([In((1, 3, 4, 3, 2)), In((1, 3, 4, 3, 2))], {"kernel_size": 2, "padding": [1, 0, 1, 0, 0, 1],
                                                           "data_format": "NDHWC"}, name="ndhwc"),
    ], ref=conv3d_grad_weight_ref, call=lambda *a, **k: oarlock.conv3d_grad_weight(*a, **k)),
    OpSpec("unfold", [
        Case([In((2, 2, 4, 5)), 2], name="k2"),
        Case([In((1, 2, 5, 6))], {"kernel_sizes": [2, 3], "strides": [2, 1], "paddings": [1, 2], "dilations": [1, 2]},
             name="stride_pad_dilation"),
        Case([In((1, 3, 4, 4)), 3], {"paddings": [1, 0, 2, 1], "strides": 2}, name="pads4_top_left_bottom_right"),
        Case([In((1, 3, 3, 4)), 1], name="pointwise"),
    ], ref=unfold_ref, call=F.unfold),
    OpSpec("fold", [
        Case([In((2, 8, 12)), [4, 5], 2], name="k2"),
        Case([In((1, 12, 18))], {"output_sizes": [5, 6], "kernel_sizes": [2, 3], "strides": [2, 1],
                                  "paddings": [1, 2], "dilations": [1, 2]}, name="stride_pad_dilation"),
        Case([In((1, 18, 15))], {"output_sizes": 4, "kernel_sizes": 3, "paddings": [1, 0, 2, 1], "strides": 1},
             name="pads4"),
    ], ref=fold_ref, call=F.fold),
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
             name="ceil_drops_window_in_padding"),
    ], ref=avg_pool_ref, call=F.avg_pool2d),
    OpSpec("avg_pool2d_grad", [
        Case([In((2, 3, 2, 3)), [4, 6], 2], name="k2"),
        Case([In((1, 2, 4, 3))], {"input_size": [7, 6], "kernel_size": 3, "stride": 2, "padding": 1},
             name="exclusive"),
        Case([In((1, 2, 4, 3))], {"input_size": [7, 6], "kernel_size": 3, "stride": 2, "padding": 1,
                                  "exclusive": False, "divisor_override": 4.0}, name="inclusive_divisor"),
        Case([In((1, 1, 3, 3))], {"input_size": [7, 8], "kernel_size": 3, "stride": 3, "padding": 1,
                                  "ceil_mode": True}, name="ceil_drops_window_in_padding"),
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
