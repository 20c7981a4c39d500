"""Convolution and sliding blocks (oarlock.nn.functional): conv1d, conv2d, conv3d, conv1d_transpose,
conv2d_transpose, conv3d_transpose, unfold and fold, with Paddle's signatures and semantics; the
pooling ops (oarlock_ops.pooling) walk the same windows and are registered with this family.

How they compute. A convolution is im2col + matmul: the patches of the padded input are copied into
a [groups, *kernel, C/groups, N, *out] array with one strided slice per kernel offset (prod(kernel)
copies, no loop over elements), and one matmul per group multiplies them with the weight. Its
adjoint, col2im, adds each offset's slice back into a padded buffer: the transposed convolution (and
so the input gradient of a convolution) is matmul + col2im. The window walk works over any number of
spatial axes: 2-D and 3-D run natively, a 1-D convolution runs as a 2-D one of unit height (and
conv1d_transpose is conv2d_transpose on a unit height, as in Paddle), and channel-last layouts as
channel-first views. unfold and fold are im2col and col2im themselves, with the batch in the group axis.
Narrow floats (bfloat16, float16) compute in float32.

Gradients close over three ops per dimension (N = 2, 3), so derivatives of every order exist:
    d convNd / dx = convNd_transpose(g, w)      d convNd_transpose / dx = convNd(g, w)
    d convNd / dw = convNd_grad_weight(x, g)    d convNd_transpose / dw = convNd_grad_weight(g, x)
and convNd_grad_weight, bilinear in (x, g), differentiates into convNd_transpose and convNd (conv1d
goes through the 2-D ops). unfold and fold are linear and each other's adjoint, so each is the
other's gradient.

Paddle's semantics, where they differ from torch's:
- padding: an int, one per spatial axis ([ph, pw]), a (before, after) pair per spatial axis flattened
  ([top, bottom, left, right]; 3-D: [front, back, top, bottom, left, right]), a [before, after] pair
  for every axis with [0, 0] for batch and channel ([[0, 0], [0, 0], [t, b], [l, r]] for NCHW), or
  'same' / 'valid'. 'same' gives ceil(size / stride) outputs with the odd padding element after, and,
  as in Paddle, it ignores dilation (uses 1). unfold/fold's paddings are an int, [ph, pw] or
  [top, left, bottom, right] (Paddle's order for them).
- weight layouts: conv [out, in/groups, *kernel]; convNd_transpose [in, out/groups, *kernel].
- argument order: conv2d_transpose takes (..., output_padding, dilation, groups, ...) but
  conv1d_transpose and conv3d_transpose (..., output_padding, groups, dilation, ...), as in Paddle.
- pooling windows follow PyTorch's rules, not Paddle's: padding is at most half the kernel (Paddle
  accepts more), and with ceil_mode a last window that would start in the right padding is dropped
  (torch's pooling_output_shape; Paddle keeps it). So every window holds an input element: Paddle's
  windows of padding alone gave the lowest finite value (max) or nan (exclusive average), and those
  cases have the torch-sized, finite result here instead.
- avg_pool2d divides by kh*kw when exclusive=False, and divisor_override scales the average by
  kh*kw / divisor_override (so near borders with exclusive=True it is not sum / divisor_override).
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

import oarlock
from oarlock.nn import functional as F
from oarlock.plugin_api import xp_function
from oarlock_ops.linalg import compute_dtype

LAYOUTS = {1: ("NCL", "NLC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}  # spatial rank -> (first, last)
SPATIAL = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}  # the spatial axes' names, for messages


# -- arguments and geometry: plain Python on shapes, shared by kernels and rules ----------------------

def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _channel_last(data_format, nd):
    first, last = LAYOUTS[nd]
    if data_format not in (first, last):
        raise ValueError(f"data_format must be {first!r} or {last!r}, got {data_format!r}")
    return data_format == last


def _layout(nd, last):
    """The axes of an activation, for messages: '[N, C, H, W]'."""
    spatial = SPATIAL[nd]
    return "[" + ", ".join(["N", *spatial, "C"] if last else ["N", "C", *spatial]) + "]"


def _spatial(shape, last):
    shape = tuple(shape)
    return shape[1:-1] if last else shape[2:]


def _channels(shape, last):
    return shape[-1] if last else shape[1]


def _ints(name, value, n, minimum):
    """An int or a list of 1 or n ints (what the Shape converter leaves) as n ints >= minimum."""
    items = (value,) if _is_int(value) else tuple(value) if isinstance(value, (list, tuple)) else None
    if items is not None and len(items) == 1:
        items *= n
    if items is None or len(items) != n or not all(_is_int(v) and v >= minimum for v in items):
        shown = list(value) if isinstance(value, tuple) else value
        raise ValueError(f"{name} must be an int or a list of {n} ints, each >= {minimum}; got {shown!r}")
    return tuple(int(v) for v in items)


def _padding(padding, size, kernel, stride, dilation, last):
    """(pads, dilation): pads holds a (before, after) pair per spatial axis. 'same' pads for
    ceil(size / stride) outputs and, like Paddle, sets the dilation to 1."""
    nd = len(size)
    if isinstance(padding, str):
        mode = padding.lower()
        if mode == "valid":
            return ((0, 0),) * nd, dilation
        if mode == "same":
            pads = []
            for n, k, s in zip(size, kernel, stride):
                total = max((-(-n // s) - 1) * s + k - n, 0)
                pads.append((total // 2, total - total // 2))
            return tuple(pads), (1,) * nd
        flat = None
    elif _is_int(padding):
        flat = [padding] * (2 * nd)
    elif isinstance(padding, (list, tuple)) and padding and all(isinstance(p, (list, tuple)) for p in padding):
        # one [before, after] pair per axis of the input, batch and channel included (and zero)
        outer = [padding[0], padding[-1]] if last else list(padding[:2])
        inner = padding[1:-1] if last else padding[2:]
        ok = len(padding) == nd + 2 and all(len(p) == 2 for p in padding) and \
            all(list(p) == [0, 0] for p in outer)
        flat = [v for p in inner for v in p] if ok else None
    elif isinstance(padding, (list, tuple)) and len(padding) in (nd, 2 * nd):
        flat = [v for p in padding for v in (p, p)] if len(padding) == nd else list(padding)
    else:
        flat = None
    if flat is None or not all(_is_int(v) and v >= 0 for v in flat):
        raise ValueError(f"padding must be 'same', 'valid', a non-negative int, a list of {nd} or {2 * nd} of "
                         f"them, or {nd + 2} [before, after] pairs ([0, 0] for the batch and channel axes); "
                         f"got {padding!r}")
    return tuple((int(flat[2 * i]), int(flat[2 * i + 1])) for i in range(nd)), dilation


class Geometry(NamedTuple):
    """Where the windows of a convolution or pooling lie, per spatial axis.

    `size` is the input's spatial size and `out` the number of windows; for a transposed convolution,
    which is the adjoint of a convolution, `size` is its output's size and `out` its input's."""

    size: tuple
    kernel: tuple
    stride: tuple
    pads: tuple      # a (before, after) pair per axis
    dilation: tuple
    out: tuple

    def span(self):
        """The padded extent every window fits in (more than the padded input with ceil_mode)."""
        return tuple(max(n + b + a, (o - 1) * s + (k - 1) * d + 1) for n, (b, a), o, k, s, d in
                     zip(self.size, self.pads, self.out, self.kernel, self.stride, self.dilation))

    def lift(self):
        """A 1-D geometry as 2-D with a unit height in front (2-D and 3-D ones stay as they are)."""
        if len(self.size) != 1:
            return self
        return Geometry(*((1,) + field for field in (self.size, self.kernel, self.stride)),
                        ((0, 0),) + self.pads, (1,) + self.dilation, (1,) + self.out)

    def attrs(self, groups, last):
        """Keyword arguments that make convNd / convNd_transpose / convNd_grad_weight use this geometry."""
        return {"stride": list(self.stride), "padding": [v for p in self.pads for v in p],
                "dilation": list(self.dilation), "groups": groups, "data_format": LAYOUTS[len(self.size)][last]}


def _conv_geometry(size, kernel, stride, padding, dilation, last):
    nd = len(size)
    stride, dilation = _ints("stride", stride, nd, 1), _ints("dilation", dilation, nd, 1)
    pads, dilation = _padding(padding, size, kernel, stride, dilation, last)
    out = tuple((n + b + a - (k - 1) * d - 1) // s + 1
                for n, (b, a), k, s, d in zip(size, pads, kernel, stride, dilation))
    if min(out) < 1:
        raise ValueError(f"the input's spatial size {list(size)} padded by {[list(p) for p in pads]} is smaller "
                         f"than the kernel {list(kernel)} with dilation {list(dilation)}")
    return Geometry(tuple(size), tuple(kernel), stride, pads, dilation, out)


def _transpose_geometry(size, kernel, stride, padding, output_padding, dilation, output_size, last):
    """The geometry of the convolution whose adjoint this transposed convolution is (see Geometry)."""
    nd = len(size)
    stride, dilation = _ints("stride", stride, nd, 1), _ints("dilation", dilation, nd, 1)
    pads, dilation = _padding(padding, size, kernel, stride, dilation, last)
    natural = tuple((n - 1) * s - b - a + (k - 1) * d + 1
                    for n, (b, a), k, s, d in zip(size, pads, kernel, stride, dilation))
    extra = _ints("output_padding", output_padding, nd, 0)
    if output_size is not None:
        if any(extra):
            raise ValueError("output_padding and output_size are mutually exclusive; give one of them")
        wanted = _ints("output_size", output_size, nd, 1)
        if not all(n <= w < n + s for w, n, s in zip(wanted, natural, stride)):
            raise ValueError(f"output_size {list(wanted)} is not reachable: with this input, stride, padding, "
                             f"kernel and dilation each size must be at least {list(natural)} and less than "
                             f"that plus the stride {list(stride)}")
        extra = tuple(w - n for w, n in zip(wanted, natural))
    elif not all(e < max(s, d) for e, s, d in zip(extra, stride, dilation)):
        raise ValueError(f"output_padding {list(extra)} must be smaller than max(stride, dilation) "
                         f"{[max(s, d) for s, d in zip(stride, dilation)]} along each axis")
    out_size = tuple(n + e for n, e in zip(natural, extra))
    if min(out_size) < 1:
        raise ValueError(f"the output would be empty (spatial size {list(out_size)}): padding "
                         f"{[list(p) for p in pads]} removes more than the kernel adds")
    return Geometry(out_size, tuple(kernel), stride, pads, dilation, tuple(size))


def _pool_geometry(size, kernel_size, stride, padding, ceil_mode, last):
    """PyTorch's pooling windows (see the module docstring): padding at most half the kernel, and with
    ceil_mode no window that starts in the right padding; so every window holds an input element."""
    nd = len(size)
    kernel = _ints("kernel_size", kernel_size, nd, 1)
    stride = kernel if stride is None else _ints("stride", stride, nd, 1)
    if ceil_mode and isinstance(padding, str) and padding.lower() == "valid":
        raise ValueError("ceil_mode=True cannot be combined with padding='valid' (as in Paddle)")
    pads, _ = _padding(padding, size, kernel, stride, (1,) * nd, last)
    if any(max(p) > k // 2 for p, k in zip(pads, kernel)):
        raise ValueError(f"padding {[list(p) for p in pads]} (a [before, after] pair per spatial axis) must be at "
                         f"most half of kernel_size {list(kernel)} along each axis, i.e. at most "
                         f"{[k // 2 for k in kernel]} (as in PyTorch: pad should be at most half of effective "
                         f"kernel size); larger padding makes windows of padding alone")
    out = []
    for n, (b, a), k, s in zip(size, pads, kernel, stride):
        room = n + b + a - k
        if room < 0:
            raise ValueError(f"kernel_size {list(kernel)} is larger than the input's spatial size {list(size)} "
                             f"padded by {[list(p) for p in pads]}")
        count = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (count - 1) * s >= n + b:   # the last window would start in the right padding
            count -= 1
        out.append(count)
    return Geometry(tuple(size), kernel, stride, pads, (1,) * nd, tuple(out))


def _window_counts(xp, geom, padding=False):
    """[OH, OW] (one axis per spatial axis): how many input elements (and padding elements, with
    padding=True) each pooling window covers; a ceil_mode window may run past both."""
    total = None
    for n, (before, after), k, s, o in zip(geom.size, geom.pads, geom.kernel, geom.stride, geom.out):
        start = xp.arange(o) * s - before
        low, high = (-before, n + after) if padding else (0, n)
        count = xp.clip(start + k, low, high) - xp.clip(start, low, high)
        total = count if total is None else total[..., None] * count  # an outer product, axis by axis
    return total


# -- array helpers (kernels) ---------------------------------------------------------------------------

def _as_nchw(xp, x, dtype, nd, last):
    """An activation as channel-first ([N, C, H, W], [N, C, D, H, W]) in the compute dtype (a view where
    possible); a 1-D one gets a unit height."""
    x = x.astype(dtype, copy=False)
    if last:
        x = xp.moveaxis(x, -1, 1)
    return x[:, :, None] if nd == 1 else x


def _from_nchw(xp, y, nd, last, dtype):
    if nd == 1:
        y = y[:, :, 0]
    if last:
        y = xp.moveaxis(y, 1, -1)
    return y.astype(dtype, copy=False)


def _window_slices(geom):
    """(offset, index) per kernel offset (a tuple, one entry per spatial axis): `index` picks, from a
    [..., *span] buffer of the geometry's span, the element that offset contributes to every window -- a
    strided slice, so a view."""
    axes = [[slice(i * d, i * d + (o - 1) * s + 1, s) for i in range(k)]
            for k, s, d, o in zip(geom.kernel, geom.stride, geom.dilation, geom.out)]
    for offset in itertools.product(*(range(k) for k in geom.kernel)):
        yield offset, (Ellipsis,) + tuple(axis[i] for axis, i in zip(axes, offset))


def _inner(geom):
    """The index of the unpadded input inside a buffer of the geometry's span: (..., top:top + H, ...)."""
    return (Ellipsis,) + tuple(slice(b, b + n) for (b, _), n in zip(geom.pads, geom.size))


def _padded(xp, x, geom, fill):
    """x [..., *geom.size] inside a buffer of the geometry's span filled with `fill` (x itself if it fits)."""
    span = geom.span()
    if span == x.shape[-len(span):]:
        return x
    buf = xp.full(x.shape[:-len(span)] + span, fill, dtype=x.dtype)
    buf[_inner(geom)] = x
    return buf


def _im2col(xp, x, geom):
    """[G, *kernel, *lead, *out]: the window elements of x [G, *lead, *size], one block per kernel offset."""
    nd = len(geom.size)
    src = _padded(xp, x, geom, 0)
    if set(geom.kernel) == {1} and set(geom.stride) == {1} and src.shape[-nd:] == geom.out:
        src = xp.ascontiguousarray(src)  # a 1x1 convolution reads the input as it is
        return src.reshape(src.shape[:1] + (1,) * nd + src.shape[1:])
    cols = xp.empty(x.shape[:1] + geom.kernel + x.shape[1:-nd] + geom.out, dtype=x.dtype)
    for offset, index in _window_slices(geom):
        cols[(slice(None),) + offset] = src[index]
    return cols


def _col2im(xp, part, lead, geom, dtype):
    """The adjoint of the window walk: a [*lead, *size] array (a view) to which each kernel offset adds
    part(offset) (shaped [*lead, *out]) at its window elements; the padding is cut off at the end."""
    buf = xp.zeros(tuple(lead) + geom.span(), dtype=dtype)
    for offset, index in _window_slices(geom):
        view = buf[index]
        xp.add(view, part(offset), out=view)
    return buf[_inner(geom)]


# -- convolution ---------------------------------------------------------------------------------------
# The matmuls see the batch inside the columns: activations are [groups, C/groups, N, *spatial] and the
# columns [groups, prod(kernel)*C/groups, N*prod(out)], so each group is one large matmul (faster than one
# per sample, and the weight gradient needs no [N, ...] partial products). Getting there and back costs a
# copy that moves whole spatial planes. Weights are reordered to [groups, O/groups, *kernel, C/groups].

def _batch_inner(xp, x, groups):
    """[N, C, *spatial] -> [groups, C/groups, N, *spatial] (a view)."""
    n, c = x.shape[:2]
    rest = tuple(range(3, x.ndim + 1))
    return x.reshape((n, groups, c // groups) + x.shape[2:]).transpose((1, 2, 0) + rest)


def _batch_outer(xp, y):
    """[groups, C/groups, N, *spatial] -> a fresh [N, C, *spatial]."""
    groups, per_group, n = y.shape[:3]
    rest = tuple(range(3, y.ndim))
    return xp.ascontiguousarray(y.transpose((2, 0, 1) + rest)).reshape((n, groups * per_group) + y.shape[3:])


def _conv_nchw(xp, x, w, geom, groups):
    (n, c), o, nd = x.shape[:2], w.shape[0], len(geom.size)
    k, size = c // groups * math.prod(geom.kernel), n * math.prod(geom.out)  # explicit sizes: N may be 0
    cols = _im2col(xp, _batch_inner(xp, x, groups), geom).reshape(groups, k, size)
    weight = w.reshape((groups, o // groups, c // groups) + geom.kernel)
    weight = weight.transpose((0, 1) + tuple(range(3, 3 + nd)) + (2,))
    out = xp_function(xp, "matmul")(weight.reshape(groups, o // groups, k), cols)  # [groups, O/groups, N*prod(out)]
    return _batch_outer(xp, out.reshape((groups, o // groups, n) + geom.out))


def _conv_transpose_nchw(xp, x, w, geom, groups):
    (n, c_in), per_group, nd = x.shape[:2], w.shape[1], len(geom.size)
    weight = w.reshape((groups, c_in // groups, per_group) + geom.kernel)
    weight = weight.transpose((0,) + tuple(range(3, 3 + nd)) + (2, 1))
    weight = weight.reshape(groups, math.prod(geom.kernel) * per_group, c_in // groups)
    inner = _batch_inner(xp, x, groups).reshape(groups, c_in // groups, n * math.prod(geom.out))
    cols = xp_function(xp, "matmul")(weight, inner).reshape((groups,) + geom.kernel + (per_group, n) + geom.out)
    return _batch_outer(xp, _col2im(xp, lambda offset: cols[(slice(None),) + offset], (groups, per_group, n), geom,
                                    x.dtype))


def _conv_weight_grad_nchw(xp, x, grad, geom, groups):
    (n, c), o, nd = x.shape[:2], grad.shape[1], len(geom.size)
    k, size = c // groups * math.prod(geom.kernel), n * math.prod(geom.out)
    cols = _im2col(xp, _batch_inner(xp, x, groups), geom).reshape(groups, k, size)
    g = _batch_inner(xp, grad, groups).reshape(groups, o // groups, size)
    # cols @ g^T rather than g @ cols^T: OpenBLAS runs this orientation markedly faster
    dw = xp_function(xp, "matmul")(cols, g.swapaxes(-1, -2))  # [groups, prod(kernel)*C/groups, O/groups]
    dw = dw.reshape((groups,) + geom.kernel + (c // groups, o // groups))
    dw = dw.transpose((0, nd + 2, nd + 1) + tuple(range(1, nd + 1)))
    return dw.reshape((o, c // groups) + geom.kernel)


def _check_groups(groups, channels, what):
    if groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups}")
    if channels % groups:
        raise ValueError(f"the {channels} {what} are not divisible by groups={groups}")


def _check_conv(x, weight, bias, groups, nd, last, transpose):
    """Raise, naming shapes, unless x, weight and bias make a (transposed) convolution."""
    fmt = LAYOUTS[nd][last]
    kernel = ", ".join(f"k{axis.lower()}" for axis in SPATIAL[nd]) if nd > 1 else "kL"
    wlayout = f"[in_channels, out_channels/groups, {kernel}]" if transpose else \
        f"[out_channels, in_channels/groups, {kernel}]"
    if x.ndim != nd + 2:
        raise ValueError(f"x must be {nd + 2}-D {_layout(nd, last)} (data_format={fmt!r}), got shape "
                         f"{list(x.shape)}")
    if weight.ndim != nd + 2:
        raise ValueError(f"weight must be {nd + 2}-D {wlayout}, got shape {list(weight.shape)}")
    channels = _channels(x.shape, last)
    _check_groups(groups, channels, "input channels")
    expected = weight.shape[0] if transpose else weight.shape[1] * groups
    if channels != expected:
        rule = "weight.shape[0]" if transpose else "weight.shape[1] * groups"
        raise ValueError(f"x has {channels} channels (shape {list(x.shape)}, data_format={fmt!r}) but weight of "
                         f"shape {list(weight.shape)} with groups={groups} expects {expected} "
                         f"(in_channels = {rule}; weight layout {wlayout})")
    out_channels = weight.shape[1] * groups if transpose else weight.shape[0]
    if not transpose:
        _check_groups(groups, out_channels, "output channels (weight.shape[0])")
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise ValueError(f"bias must have shape [{out_channels}] (one value per output channel), got "
                         f"{list(bias.shape)}")


def _add_bias(out, bias):
    if bias is not None:
        out += bias.astype(out.dtype, copy=False).reshape((1, -1) + (1,) * (out.ndim - 2))
    return out


def _conv_kernel(nd):
    def conv(xp, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, data_format=None):
        last = _channel_last(data_format, nd)
        _check_conv(x, weight, bias, groups, nd, last, transpose=False)
        geom = _conv_geometry(_spatial(x.shape, last), weight.shape[2:], stride, padding, dilation, last)
        ct = compute_dtype(xp, x.dtype)
        x4, w4 = _as_nchw(xp, x, ct, nd, last), _as_nchw(xp, weight, ct, nd, False)
        out = _add_bias(_conv_nchw(xp, x4, w4, geom.lift(), groups), bias)
        return _from_nchw(xp, out, nd, last, x.dtype)
    return conv


def _conv_transpose_kernel(nd):
    def conv_transpose(xp, x, weight, bias=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1,
                       output_size=None, data_format=None):
        last = _channel_last(data_format, nd)
        _check_conv(x, weight, bias, groups, nd, last, transpose=True)
        geom = _transpose_geometry(_spatial(x.shape, last), weight.shape[2:], stride, padding, output_padding,
                                   dilation, output_size, last)
        ct = compute_dtype(xp, x.dtype)
        out = _conv_transpose_nchw(xp, _as_nchw(xp, x, ct, nd, last), weight.astype(ct, copy=False), geom, groups)
        return _from_nchw(xp, _add_bias(out, bias), nd, last, x.dtype)
    return conv_transpose


def _grad_weight_geometry(x_shape, grad_shape, kernel_size, stride, padding, dilation, groups, nd, last):
    """The geometry of convNd_grad_weight: x's convolution, with as many windows as grad has."""
    for name, shape in (("x", x_shape), ("grad", grad_shape)):
        if len(shape) != nd + 2:
            raise ValueError(f"{name} must be {nd + 2}-D {_layout(nd, last)}, got shape {list(shape)}")
    if x_shape[0] != grad_shape[0]:
        raise ValueError(f"x (shape {list(x_shape)}) and grad (shape {list(grad_shape)}) have different batch sizes")
    _check_groups(groups, _channels(x_shape, last), "channels of x")
    _check_groups(groups, _channels(grad_shape, last), "channels of grad")
    kernel = _ints("kernel_size", kernel_size, nd, 1)
    geom = _conv_geometry(_spatial(x_shape, last), kernel, stride, padding, dilation, last)
    out = _spatial(grad_shape, last)
    if any(o > n for o, n in zip(out, geom.out)):
        raise ValueError(f"grad has spatial size {list(out)}, but the convolution of x (shape {list(x_shape)}) "
                         f"has only {list(geom.out)} windows")
    return geom._replace(out=out)


def _conv_grad_weight_kernel(nd):
    def grad_weight(xp, x, grad, kernel_size, stride=1, padding=0, dilation=1, groups=1, data_format=None):
        last = _channel_last(data_format, nd)
        geom = _grad_weight_geometry(x.shape, grad.shape, kernel_size, stride, padding, dilation, groups, nd, last)
        ct = compute_dtype(xp, x.dtype)
        dw = _conv_weight_grad_nchw(xp, _as_nchw(xp, x, ct, nd, last), _as_nchw(xp, grad, ct, nd, last), geom,
                                    groups)
        return dw.astype(x.dtype, copy=False)
    return grad_weight


# -- unfold and fold (im2col and col2im as ops) ----------------------------------------------------------

def _unfold_geometry(size, kernel_sizes, strides, paddings, dilations):
    """Paddle's unfold arguments as a Geometry; paddings is an int, [ph, pw] or, unlike the convolutions'
    [top, bottom, left, right], [top, left, bottom, right]."""
    kernel = _ints("kernel_sizes", kernel_sizes, 2, 1)
    stride, dilation = _ints("strides", strides, 2, 1), _ints("dilations", dilations, 2, 1)
    flat = (paddings,) * 4 if _is_int(paddings) else tuple(paddings) if isinstance(paddings, (list, tuple)) else ()
    flat = flat * (4 // len(flat)) if len(flat) in (1, 2) else flat  # (an int arrives as a 1-tuple)
    if len(flat) != 4 or not all(_is_int(v) and v >= 0 for v in flat):
        shown = list(paddings) if isinstance(paddings, tuple) else paddings
        raise ValueError(f"paddings must be a non-negative int, [padding_h, padding_w] or [top, left, bottom, "
                         f"right]; got {shown!r}")
    pads = ((int(flat[0]), int(flat[2])), (int(flat[1]), int(flat[3])))
    out = tuple((n + b + a - (k - 1) * d - 1) // s + 1
                for n, (b, a), k, s, d in zip(size, pads, kernel, stride, dilation))
    if min(out) < 1:
        raise ValueError(f"the spatial size {list(size)} padded by {[list(p) for p in pads]} is smaller than the "
                         f"kernel {list(kernel)} with dilations {list(dilation)}: there are no blocks")
    return Geometry(tuple(size), kernel, stride, pads, dilation, out)


def _unfold(xp, x, kernel_sizes, strides=1, paddings=0, dilations=1):
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D [N, C, H, W], got shape {list(x.shape)}")
    geom = _unfold_geometry(x.shape[2:], kernel_sizes, strides, paddings, dilations)
    (n, c), blocks = x.shape[:2], math.prod(geom.out)
    # the batch takes _im2col's group axis: [N, kh, kw, C, OH, OW], then channels ahead of the kernel offsets
    cols = _im2col(xp, x.astype(compute_dtype(xp, x.dtype), copy=False), geom)
    out = cols.transpose(0, 3, 1, 2, 4, 5).reshape(n, c * math.prod(geom.kernel), blocks)
    return out.astype(x.dtype, copy=False)


def _fold(xp, x, output_sizes, kernel_sizes, strides=1, paddings=0, dilations=1):
    if x.ndim != 3:
        raise ValueError(f"x must be 3-D [N, C*kh*kw, L], got shape {list(x.shape)}")
    geom = _unfold_geometry(_ints("output_sizes", output_sizes, 2, 1), kernel_sizes, strides, paddings, dilations)
    (n, rows, blocks), area = x.shape, math.prod(geom.kernel)
    if rows % area or blocks != math.prod(geom.out):
        raise ValueError(f"x of shape {list(x.shape)} does not hold the blocks of a {list(geom.size)} output: "
                         f"expected [N, C*{area}, {math.prod(geom.out)}] (kernel {list(geom.kernel)}, "
                         f"{list(geom.out)} blocks)")
    ct = compute_dtype(xp, x.dtype)
    cols = x.astype(ct, copy=False).reshape((n, rows // area) + geom.kernel + geom.out)
    out = _col2im(xp, lambda offset: cols[(slice(None), slice(None)) + offset], (n, rows // area), geom, ct)
    return xp.ascontiguousarray(out).astype(x.dtype, copy=False)


# -- conv1d_transpose (a Python function over conv2d_transpose) ------------------------------------------

def conv1d_transpose(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     output_size=None, data_format="NCL", name=None):
    """1-D transposed convolution of x [N, C, L] (or [N, L, C]) with weight [in_channels, out_channels/groups,
    kL], Paddle's signature: conv2d_transpose on a unit height, as Paddle computes it."""
    where = "oarlock.nn.functional.conv1d_transpose()"
    for arg, t in (("x", x), ("weight", weight), ("bias", bias)):
        if not isinstance(t, oarlock.Tensor) and not (arg == "bias" and t is None):
            raise TypeError(f"{where}: {arg} must be a Tensor, got {type(t).__name__}")
    try:  # the checks in 1-D terms, so an error shows the sizes the caller gave
        last = _channel_last(data_format, 1)
        _check_conv(x, weight, bias, groups, 1, last, transpose=True)
        _transpose_geometry(_spatial(x.shape, last), tuple(weight.shape[2:]), stride, padding, output_padding,
                            dilation, output_size, last)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    one = lambda name, v: list(_ints(name, v, 1, 0 if name == "output_padding" else 1))  # noqa: E731
    stride, dilation = one("stride", stride), one("dilation", dilation)
    if isinstance(padding, str):
        pads = padding  # 'same' / 'valid' mean the same on a unit height
    else:
        ((before, after),), _ = _padding(padding, _spatial(x.shape, last), tuple(weight.shape[2:]), stride,
                                         dilation, last)
        pads = [0, 0, before, after]
    size = None if output_size is None else [1] + one("output_size", output_size)
    out = F.conv2d_transpose(oarlock.unsqueeze(x, 1 if last else 2), oarlock.unsqueeze(weight, 2), bias,
                             [1] + stride, pads, [0] + one("output_padding", output_padding), [1] + dilation, groups,
                             size, LAYOUTS[2][last])
    return oarlock.squeeze(out, 1 if last else 2)


# -- gradients (Tensors and public ops only) --------------------------------------------------------------

def _lift(t, nd, last):
    """A 1-D activation (or weight: last=False) as 2-D with a unit height (2-D and 3-D ones as they are)."""
    return oarlock.unsqueeze(t, 1 if last else 2) if nd == 1 else t


def _drop(t, nd, last):
    return oarlock.squeeze(t, 1 if last else 2) if nd == 1 else t


def _ops(nd):
    """(convNd, convNd_transpose, convNd_grad_weight) for a 2-D or 3-D geometry: the three ops the
    gradients of each other close over."""
    return (getattr(F, f"conv{nd}d"), getattr(F, f"conv{nd}d_transpose"), getattr(oarlock, f"conv{nd}d_grad_weight"))


def _fit(t, size, last):
    """t cut to the spatial size `size`: a convolution of a transposed one's gradient may have extra
    windows when output_padding >= stride (possible with dilation > stride)."""
    if tuple(_spatial(t.shape, last)) == tuple(size):
        return t
    cut = (slice(None),) + tuple(slice(0, n) for n in size)
    return oarlock.getitem(t, cut + (slice(None),) if last else (slice(None),) + cut)


def _bias_grad(ctx, g, last):
    if len(ctx.edges) < 3 or ctx.edges[2] is None:
        return None
    channel = g.ndim - 1 if last else 1
    return oarlock.sum(g, axis=[i for i in range(g.ndim) if i != channel])


def _conv_rule(nd):
    def rule(ctx, g):
        x, weight = ctx.saved
        a = ctx.attrs
        last = _channel_last(a["data_format"], nd)
        geom = _conv_geometry(_spatial(x.shape, last), tuple(weight.shape[2:]), a["stride"], a["padding"],
                              a["dilation"], last).lift()
        attrs = geom.attrs(a["groups"], last)
        _, transpose, grad_weight = _ops(len(geom.size))
        x2, w2, g2 = _lift(x, nd, last), _lift(weight, nd, False), _lift(g, nd, last)
        dx = dw = None
        if ctx.edges[0] is not None:
            dx = _drop(transpose(g2, w2, output_size=list(geom.size), **attrs), nd, last)
        if ctx.edges[1] is not None:
            dw = _drop(grad_weight(x2, g2, kernel_size=list(geom.kernel), **attrs), nd, False)
        return dx, dw, _bias_grad(ctx, g, last)
    return rule


def _conv_transpose_rule(nd):
    def rule(ctx, g):
        x, weight = ctx.saved
        a = ctx.attrs
        last = _channel_last(a["data_format"], nd)
        size = _spatial(x.shape, last)
        geom = _transpose_geometry(size, tuple(weight.shape[2:]), a["stride"], a["padding"], a["output_padding"],
                                   a["dilation"], a["output_size"], last)
        attrs = geom.attrs(a["groups"], last)
        conv, _, grad_weight = _ops(nd)
        dx = _fit(conv(g, weight, **attrs), size, last) if ctx.edges[0] is not None else None
        dw = grad_weight(g, x, kernel_size=list(geom.kernel), **attrs) if ctx.edges[1] is not None else None
        return dx, dw, _bias_grad(ctx, g, last)
    return rule


def _grad_weight_rule(nd):
    def rule(ctx, gg):
        """dw(x, grad) is bilinear: <gg, dw(x, grad)> = <grad, convNd(x, gg)>."""
        x, grad = ctx.saved
        a = ctx.attrs
        last = _channel_last(a["data_format"], nd)
        geom = _grad_weight_geometry(tuple(x.shape), tuple(grad.shape), a["kernel_size"], a["stride"], a["padding"],
                                     a["dilation"], a["groups"], nd, last)
        attrs = geom.attrs(a["groups"], last)
        conv, transpose, _ = _ops(nd)
        dx = transpose(grad, gg, output_size=list(geom.size), **attrs) if ctx.edges[0] is not None else None
        dgrad = _fit(conv(x, gg, **attrs), geom.out, last) if ctx.edges[1] is not None else None
        return dx, dgrad
    return rule


def _unfold_rule(ctx, g):
    return F.fold(g, list(ctx.meta[0][0][2:]), **ctx.attrs)


def _fold_rule(ctx, gg):
    a = dict(ctx.attrs)
    del a["output_sizes"]
    return F.unfold(gg, **a)


# -- registration --------------------------------------------------------------------------------------------

_CONV = "x: Tensor, weight: Tensor, bias: OptTensor = None, stride: Shape = 1, padding: Any = 0, "
# Paddle orders conv2d_transpose's arguments dilation, groups but conv1d/conv3d_transpose's groups, dilation
_GROUPS_DILATION = {False: "dilation: Shape = 1, groups: int = 1, ", True: "groups: int = 1, dilation: Shape = 1, "}
_FLOATS = ("float",)


def register(ops):
    conv = {"aliases": {"input": "x"}, "promote": True, "dtypes": _FLOATS, "saves": ("x", "weight"), "amp": "white"}
    for nd in (1, 2, 3):
        name, fmt = f"conv{nd}d", LAYOUTS[nd][0]
        ops.define(f"{name}({_CONV}{_GROUPS_DILATION[False]}data_format: str = '{fmt}') -> Tensor",
                   public=[f"oarlock.nn.functional.{name}"], grad=_conv_rule(nd), **conv,
                   doc=f"{nd}-D convolution (cross-correlation) of x {_layout(nd, False)} with weight "
                       f"[out_channels, in_channels/groups, *kernel], plus bias [out_channels].")
        ops.kernel(name)(_conv_kernel(nd))
    for nd in (2, 3):
        name, fmt = f"conv{nd}d", LAYOUTS[nd][0]
        ops.define(f"{name}_transpose({_CONV}output_padding: Shape = 0, {_GROUPS_DILATION[nd == 3]}"
                   f"output_size: Shape|None = None, data_format: str = '{fmt}') -> Tensor",
                   public=[f"oarlock.nn.functional.{name}_transpose"], grad=_conv_transpose_rule(nd), **conv,
                   doc=f"{nd}-D transposed convolution (the adjoint of {name}) with weight [in_channels, "
                       f"out_channels/groups, *kernel]; output_size picks among the sizes the stride allows.")
        ops.kernel(f"{name}_transpose")(_conv_transpose_kernel(nd))
        ops.define(f"{name}_grad_weight(x: Tensor, grad: Tensor, kernel_size: Shape, stride: Shape = 1, "
                   f"padding: Any = 0, dilation: Shape = 1, groups: int = 1, data_format: str = '{fmt}') -> Tensor",
                   public=[f"{name}_grad_weight"], promote=True, dtypes=_FLOATS, grad=_grad_weight_rule(nd),
                   saves=("x", "grad"),
                   doc=f"The gradient of {name} with respect to its weight, for input x and output gradient grad.")
        ops.kernel(f"{name}_grad_weight")(_conv_grad_weight_kernel(nd))

    blocks = "kernel_sizes: Shape, strides: Shape = 1, paddings: Shape = 0, dilations: Shape = 1"
    ops.define(f"unfold(x: Tensor, {blocks}) -> Tensor", public=["oarlock.nn.functional.unfold"],
               aliases={"input": "x"}, dtypes=_FLOATS, grad=_unfold_rule,
               doc="im2col: the sliding blocks of x [N, C, H, W] as columns, [N, C*kh*kw, L] (L blocks, "
                   "channel-major rows); paddings is an int, [ph, pw] or [top, left, bottom, right].")
    ops.kernel("unfold")(_unfold)
    ops.define(f"fold(x: Tensor, output_sizes: Shape, {blocks}) -> Tensor", public=["oarlock.nn.functional.fold"],
               aliases={"input": "x"}, dtypes=_FLOATS, grad=_fold_rule,
               doc="col2im, the adjoint of unfold: sums the blocks of x [N, C*kh*kw, L] into [N, C, *output_sizes] "
                   "(with [top, left, bottom, right] paddings L counts unfold's blocks; Paddle's own check "
                   "assumes bottom = top and right = left).")
    ops.kernel("fold")(_fold)

    from oarlock_ops import pooling  # here, not at the top: pooling imports this module's geometry
    pooling.register(ops)


def register_api(api):
    """conv1d_transpose is a Python function over conv2d_transpose; pooling exports its own functions."""
    from oarlock_ops import pooling
    api.export("oarlock.nn.functional", "conv1d_transpose", conv1d_transpose)
    pooling.register_api(api)


# -- argument helpers oarlock-nn's conv and pooling layers share (public: another distribution imports them) --
layout_text = _layout          # layout_text(nd, channel_last) -> '[N, C, H, W]'
int_args = _ints               # int_args(name, value, n, minimum) -> n ints, or a ValueError naming `name`
resolve_padding = _padding     # resolve_padding(padding, size, kernel, stride, dilation, last) -> (pads, dilation)
