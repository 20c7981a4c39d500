"""Specs for the 3-D pooling ops and adaptive max pooling (oarlock_ops/pooling.py): max_pool3d_with_index and
its gradient, avg_pool3d and its gradient, adaptive_avg_pool3d and its gradient, adaptive_max_pool2d/3d.

The references loop over output positions with each window written out as index ranges per axis, over any
number of spatial axes (the 2-D ones of op_specs/conv.py are the same definitions on two axes); they share no
code with the strided-window kernels. Windows follow torch's rules (see oarlock_ops/conv.py); adaptive window
o of m over n inputs spans floor(o*n/m) to ceil((o+1)*n/m).
"""

import itertools

import numpy as np

import oarlock
import oarlock.nn.functional as F
from op_specs.base import Case, In, OpSpec


def _tuple(v, nd):
    return (v,) * nd if np.isscalar(v) else tuple(v) * (nd // len(v))


def _first(x, data_format):
    """Channel-last to channel-first."""
    return np.moveaxis(x, -1, 1) if data_format in ("NHWC", "NDHWC") else x


def _back(y, data_format):
    return np.moveaxis(y, 1, -1) if data_format in ("NHWC", "NDHWC") else y


def _pool_windows(size, kernel_size, stride, padding, ceil_mode):
    """Per axis: (ranges inside the input, ranges inside input + padding) of every window."""
    nd = len(size)
    kernel = _tuple(kernel_size, nd)
    stride = kernel if stride is None else _tuple(stride, nd)
    flat = _tuple(padding, nd) if np.isscalar(padding) or len(padding) == nd else tuple(padding)
    pads = [(flat[i], flat[i]) for i in range(nd)] if len(flat) == nd else [(flat[2 * i], flat[2 * i + 1])
                                                                            for i in range(nd)]
    inside, padded = [], []
    for n, (b, a), k, s in zip(size, pads, kernel, stride):
        room = n + b + a - k
        count = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (count - 1) * s >= n + b:
            count -= 1
        inside.append([range(max(o * s - b, 0), min(o * s - b + k, n)) for o in range(count)])
        padded.append([range(o * s - b, min(o * s - b + k, n + a)) for o in range(count)])
    return inside, padded, kernel


def _plane_index(position, size):
    return int(np.ravel_multi_index(position, size))


def _max_over(x, windows):
    """(out, mask) of max pooling x [N, C, *size] over the given per-axis windows (first maximum wins)."""
    size = x.shape[2:]
    counts = tuple(len(w) for w in windows)
    out, mask = np.zeros(x.shape[:2] + counts), np.zeros(x.shape[:2] + counts, dtype=np.int32)
    for o in itertools.product(*(range(c) for c in counts)):
        positions = list(itertools.product(*(windows[a][o[a]] for a in range(len(size)))))
        values = np.stack([x[(slice(None), slice(None)) + p] for p in positions], axis=-1)
        arg = np.argmax(values, axis=-1)
        out[(slice(None), slice(None)) + o] = np.take_along_axis(values, arg[..., None], -1)[..., 0]
        mask[(slice(None), slice(None)) + o] = np.array([_plane_index(p, size) for p in positions])[arg]
    return out, mask


def max_pool_nd_ref(x, kernel_size, stride=None, padding=0, ceil_mode=False, data_format="NCDHW"):
    x = _first(x, data_format)
    inside, _, _ = _pool_windows(x.shape[2:], kernel_size, stride, padding, ceil_mode)
    out, mask = _max_over(x, inside)
    return _back(out, data_format), _back(mask, data_format)


def max_pool_nd_grad_ref(grad, mask, input_size, data_format="NCDHW"):
    grad, mask = _first(grad, data_format), _first(mask, data_format)
    n, c = grad.shape[:2]
    dx = np.zeros((n, c, int(np.prod(input_size))))
    for idx in np.ndindex(grad.shape):
        dx[idx[0], idx[1], mask[idx]] += grad[idx]
    return _back(dx.reshape((n, c) + tuple(input_size)), data_format)


def _avg_factor(inside, padded, kernel, exclusive, divisor_override, o):
    count = np.prod([len((inside if exclusive else padded)[a][o[a]]) for a in range(len(o))])
    return (1.0 / count) * (np.prod(kernel) / divisor_override if divisor_override else 1)


def avg_pool_nd_ref(x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
                    data_format="NCDHW"):
    x = _first(x, data_format)
    inside, padded, kernel = _pool_windows(x.shape[2:], kernel_size, stride, padding, ceil_mode)
    counts = tuple(len(w) for w in inside)
    out = np.zeros(x.shape[:2] + counts)
    for o in itertools.product(*(range(c) for c in counts)):
        box = (slice(None), slice(None)) + tuple(slice(inside[a][o[a]].start, inside[a][o[a]].stop)
                                                 for a in range(len(o)))
        out[(slice(None), slice(None)) + o] = x[box].sum(axis=tuple(range(2, x.ndim))) * \
            _avg_factor(inside, padded, kernel, exclusive, divisor_override, o)
    return _back(out, data_format)


def avg_pool_nd_grad_ref(grad, input_size, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True,
                         divisor_override=None, data_format="NCDHW"):
    grad = _first(grad, data_format)
    inside, padded, kernel = _pool_windows(tuple(input_size), kernel_size, stride, padding, ceil_mode)
    dx = np.zeros(grad.shape[:2] + tuple(input_size))
    for o in itertools.product(*(range(len(w)) for w in inside)):
        box = (slice(None), slice(None)) + tuple(slice(inside[a][o[a]].start, inside[a][o[a]].stop)
                                                 for a in range(len(o)))
        factor = _avg_factor(inside, padded, kernel, exclusive, divisor_override, o)
        dx[box] += (grad[(slice(None), slice(None)) + o] * factor).reshape(grad.shape[:2] + (1,) * len(o))
    return _back(dx, data_format)


def _adaptive_windows(size, output_size):
    out = [n if m is None else m for m, n in zip(_tuple(output_size, len(size)), size)]
    return [[range(int(np.floor(o * n / m)), int(np.ceil((o + 1) * n / m))) for o in range(m)]
            for n, m in zip(size, out)]


def adaptive_avg_nd_ref(x, output_size, data_format="NCDHW"):
    x = _first(x, data_format)
    windows = _adaptive_windows(x.shape[2:], output_size)
    out = np.zeros(x.shape[:2] + tuple(len(w) for w in windows))
    for o in itertools.product(*(range(len(w)) for w in windows)):
        box = (slice(None), slice(None)) + tuple(slice(w[i].start, w[i].stop) for w, i in zip(windows, o))
        out[(slice(None), slice(None)) + o] = x[box].mean(axis=tuple(range(2, x.ndim)))
    return _back(out, data_format)


def adaptive_avg_nd_grad_ref(grad, input_size, data_format="NCDHW"):
    grad = _first(grad, data_format)
    windows = _adaptive_windows(tuple(input_size), list(grad.shape[2:]))
    dx = np.zeros(grad.shape[:2] + tuple(input_size))
    for o in itertools.product(*(range(len(w)) for w in windows)):
        box = (slice(None), slice(None)) + tuple(slice(w[i].start, w[i].stop) for w, i in zip(windows, o))
        area = np.prod([len(w[i]) for w, i in zip(windows, o)])
        dx[box] += (grad[(slice(None), slice(None)) + o] / area).reshape(grad.shape[:2] + (1,) * len(o))
    return _back(dx, data_format)


def adaptive_max_nd_ref(x, output_size):
    return _max_over(x, _adaptive_windows(x.shape[2:], output_size))


def _mask_case(shape, name, data_format="NCDHW", **pool):
    """max_pool3d_grad's inputs: a real mask (from the reference) and an upstream gradient of its shape."""
    x = np.random.default_rng(sum(shape)).standard_normal(shape)
    out, mask = max_pool_nd_ref(x, data_format=data_format, **pool)
    size = shape[1:4] if data_format == "NDHWC" else shape[2:]
    return Case([In(out.shape), In(mask.shape, dtype="int32", values=mask, grad=False)],
                {"input_size": list(size), "data_format": data_format}, name=name)


def _op(name):
    return lambda *a, **k: getattr(oarlock, name)(*a, **k)


SPECS = [
    OpSpec("max_pool3d_with_index", [
        Case([In((2, 2, 4, 4, 6))], {"kernel_size": 2}, name="k2"),
        Case([In((1, 2, 5, 6, 5))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="k3s2p1"),
        Case([In((1, 1, 5, 7, 6))], {"kernel_size": [2, 3, 2], "stride": [1, 2, 2], "ceil_mode": True},
             name="rect_ceil"),
        Case([In((1, 3, 4, 5, 2))], {"kernel_size": 2, "stride": 1, "padding": [1, 0, 0, 1, 0, 0],
                                     "data_format": "NDHWC"}, name="ndhwc_pads6"),
    ], ref=max_pool_nd_ref, call=_op("max_pool3d_with_index")),
    OpSpec("max_pool3d_grad", [
        _mask_case((1, 2, 5, 4, 5), "overlapping", kernel_size=3, stride=2, padding=1),
        _mask_case((1, 3, 4, 4, 2), "tiling", kernel_size=2),
        _mask_case((1, 4, 3, 5, 2), "ndhwc", data_format="NDHWC", kernel_size=2, stride=1),
    ], ref=max_pool_nd_grad_ref, call=_op("max_pool3d_grad")),
    OpSpec("avg_pool3d", [
        Case([In((2, 2, 4, 4, 6))], {"kernel_size": 2}, name="k2"),
        Case([In((1, 2, 5, 6, 5))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="exclusive"),
        Case([In((1, 2, 5, 6, 5))], {"kernel_size": 3, "stride": 2, "padding": 1, "exclusive": False},
             name="inclusive"),
        Case([In((1, 1, 5, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                                     "divisor_override": 5.0}, name="ceil_divisor"),
        Case([In((1, 4, 3, 5, 2))], {"kernel_size": [2, 3, 1], "stride": 1, "padding": [1, 0, 0, 1, 0, 0],
                                     "data_format": "NDHWC"}, name="ndhwc"),
    ], ref=avg_pool_nd_ref, call=F.avg_pool3d),
    OpSpec("avg_pool3d_grad", [
        Case([In((1, 2, 2, 2, 3)), [4, 4, 6], 2], name="k2"),
        Case([In((1, 2, 3, 3, 3))], {"input_size": [5, 6, 5], "kernel_size": 3, "stride": 2, "padding": 1,
                                     "exclusive": False}, name="inclusive"),
        Case([In((1, 1, 3, 4, 4))], {"input_size": [5, 7, 6], "kernel_size": 3, "stride": 2, "padding": 1,
                                     "ceil_mode": True}, name="ceil"),
    ], ref=avg_pool_nd_grad_ref, call=_op("avg_pool3d_grad")),
    OpSpec("adaptive_avg_pool3d", [
        Case([In((2, 2, 4, 6, 3)), 1], name="global"),
        Case([In((1, 2, 4, 6, 3)), [2, 3, 3]], name="tiling"),
        Case([In((1, 2, 5, 3, 2)), [3, 4, None]], name="overlapping_larger_keep"),
        Case([In((1, 3, 5, 2, 2)), [2, 3, 1]], {"data_format": "NDHWC"}, name="ndhwc"),
    ], ref=adaptive_avg_nd_ref, call=F.adaptive_avg_pool3d),
    OpSpec("adaptive_avg_pool3d_grad", [
        Case([In((1, 2, 2, 3, 3)), [4, 6, 3]], name="tiling"),
        Case([In((1, 2, 3, 4, 2)), [5, 3, 2]], name="overlapping_larger"),
        Case([In((1, 3, 2, 2, 2))], {"input_size": [5, 3, 4], "data_format": "NDHWC"}, name="ndhwc"),
    ], ref=adaptive_avg_nd_grad_ref, call=_op("adaptive_avg_pool3d_grad")),
    OpSpec("adaptive_max_pool2d_with_index", [
        Case([In((2, 3, 6, 4)), [3, 2]], name="tiling"),
        Case([In((1, 2, 7, 5)), 3], name="overlapping"),
        Case([In((1, 2, 2, 3)), [5, 4]], name="larger"),
        Case([In((1, 2, 5, 4)), [None, 3]], name="keep_height"),
    ], ref=adaptive_max_nd_ref, call=_op("adaptive_max_pool2d_with_index")),
    OpSpec("adaptive_max_pool3d_with_index", [
        Case([In((1, 2, 4, 6, 4)), [2, 3, 2]], name="tiling"),
        Case([In((1, 2, 5, 3, 2)), [3, 4, None]], name="overlapping_larger_keep"),
    ], ref=adaptive_max_nd_ref, call=_op("adaptive_max_pool3d_with_index")),
]
