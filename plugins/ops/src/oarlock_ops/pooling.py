"""Pooling (oarlock.nn.functional), registered by the conv family: max, average and adaptive (average and
max) pooling over 1, 2 and 3 spatial axes with Paddle's signatures -- max_pool1d/2d/3d, avg_pool1d/2d/3d,
adaptive_avg_pool1d/2d/3d, adaptive_max_pool1d/2d/3d.

How they compute. The 2-D and 3-D ops walk the strided windows of the conv family's geometry
(oarlock_ops.conv): max pooling keeps a running maximum and the offset where it was first reached,
average pooling sums them. Adaptive average pooling is a reshape and a mean when the windows tile the
input, else one band matrix per spatial axis whose rows average the windows. Adaptive max pooling
gathers, per axis, each window's indices padded to the longest window by repeating its last index (a
repeat changes no maximum), then takes an argmax over the window. Window o along an axis of n inputs
and m outputs spans floor(o * n / m) to ceil((o + 1) * n / m), so an output larger than the input
(m > n) has overlapping windows that repeat inputs, as in Paddle and torch. The 1-D functions run the
2-D ops on a unit height, as Paddle does. Narrow floats compute in float32.

Gradients: each op has a grad op (its adjoint) whose own gradient is the pooling op again; max
pooling's adjoint (max_poolNd_grad, also the gradient of adaptive max pooling) scatters into the saved
argmax positions, and its gradient gathers from them.

Paddle's semantics, where they differ from torch's: see the conv family's docstring (windows follow
torch's rules; divisor_override scales the average by prod(kernel) / divisor_override). The mask of
return_mask=True is the int32 index of each maximum in its input plane: w (1-D), h * W + w (2-D),
d * H * W + h * W + w (3-D). padding='same' gives the same windows with or without the mask (Paddle's
return_mask=True path drops 'same' and pools unpadded: 4 windows of 3 with stride 2 over 9 inputs, not 5).
"""

from __future__ import annotations

import contextlib
import math

import oarlock
from oarlock.nn import functional as F
from oarlock_ops.conv import (LAYOUTS, _as_nchw, _channel_last, _col2im, _from_nchw, _ints, _is_int, _layout,
                              _padded, _padding, _pool_geometry, _spatial, _window_counts, _window_slices)
from oarlock_ops.linalg import compute_dtype


def _check_input(x, nd, last, name="x"):
    if x.ndim != nd + 2:
        raise ValueError(f"{name} must be {nd + 2}-D {_layout(nd, last)} (data_format={LAYOUTS[nd][last]!r}), "
                         f"got shape {list(x.shape)}")


def _plane_strides(size):
    """The step of each spatial axis in a flattened input plane: (H*W, W, 1) for (D, H, W)."""
    return tuple(math.prod(size[i + 1:]) for i in range(len(size)))


def _outer_sum(xp, parts):
    """[len(p0), len(p1), ...]: p0[i] + p1[j] + ..., one axis per part."""
    total = parts[0]
    for part in parts[1:]:
        total = total[..., None] + part
    return total


# -- max pooling ----------------------------------------------------------------------------------------

def _max_pool_with_index(nd):
    def kernel(xp, x, kernel_size, stride=None, padding=0, ceil_mode=False, data_format=None):
        last = _channel_last(data_format, nd)
        _check_input(x, nd, last)
        geom = _pool_geometry(_spatial(x.shape, last), kernel_size, stride, padding, ceil_mode, last)
        ct = compute_dtype(xp, x.dtype)
        src = _padded(xp, _as_nchw(xp, x, ct, nd, last), geom, -xp.inf)
        strides = _plane_strides(geom.size)
        views, steps = [], []  # each offset's window slice, and its place in the plane relative to the corner
        for offset, index in _window_slices(geom):
            views.append(src[index])
            steps.append(sum(i * s for i, s in zip(offset, strides)))
        # a running maximum; where a later offset is strictly larger it takes over, so the first maximum in
        # the window (row-major) is the one recorded. (An arithmetic update: copyto(where=) is ~5x slower.)
        out = views[0].copy()
        step = xp.zeros(out.shape, dtype=xp.int32)
        larger = xp.empty(out.shape, dtype=bool)
        for view, offset in zip(views[1:], steps[1:]):
            xp.greater(view, out, out=larger)
            xp.maximum(out, view, out=out)  # nan propagates (and compares as not larger)
            step += larger * (offset - step)
        if bool(xp.isnan(out).any()):  # the first nan of a window is its maximum
            for view, offset in zip(views[::-1], steps[::-1]):
                step += xp.isnan(view) * (offset - step)
        # each maximum's index in its input plane: the window's corner (in the padded frame) plus its step
        corners = [xp.arange(o, dtype=xp.int32) * s - b for o, s, (b, _) in zip(geom.out, geom.stride, geom.pads)]
        mask = _outer_sum(xp, [c * p for c, p in zip(corners, strides)]) + step
        if bool((out == -xp.inf).any()):
            # a maximum of -inf may sit in the padding: point at the window's first input element, as torch does
            first = _outer_sum(xp, [xp.clip(c, 0, n - 1) * p for c, n, p in zip(corners, geom.size, strides)])
            mask = xp.where(out == -xp.inf, first, mask)
        return _from_nchw(xp, out, nd, last, x.dtype), _from_nchw(xp, mask, nd, last, xp.int32)
    return kernel


def _max_pool_grad(nd):
    def kernel(xp, grad, mask, input_size, data_format=None):
        last = _channel_last(data_format, nd)
        _check_input(grad, nd, last, "grad")
        if tuple(mask.shape) != tuple(grad.shape) or mask.dtype.kind not in "iu":
            raise ValueError(f"mask must be an integer tensor of grad's shape {list(grad.shape)}, got "
                             f"{mask.dtype} of shape {list(mask.shape)}")
        size = _ints("input_size", input_size, nd, 1)
        plane = math.prod(size)
        ct = compute_dtype(xp, grad.dtype)
        g, m = _as_nchw(xp, grad, ct, nd, last), _as_nchw(xp, mask, mask.dtype, nd, last)
        n, c = g.shape[:2]
        if m.size and (int(xp.max(m)) >= plane or int(xp.min(m)) < 0):
            raise ValueError(f"mask must hold indices in [0, {plane}) (an input plane of {' x '.join(map(str, size))}),"
                             f" got values from {int(xp.min(m))} to {int(xp.max(m))}")
        planes = (xp.arange(n * c, dtype=xp.int64) * plane).reshape((n, c) + (1,) * nd)
        dx = xp.zeros(n * c * plane, dtype=ct)
        xp.add.at(dx, (m.astype(xp.int64) + planes).reshape(-1), g.reshape(-1))  # windows may share an element
        return _from_nchw(xp, dx.reshape((n, c) + size), nd, last, grad.dtype)
    return kernel


# -- average pooling --------------------------------------------------------------------------------------

def _avg_scale(xp, geom, exclusive, divisor_override, dtype):
    """The factor of each window's sum: 1 / the input elements in the window (exclusive; never 0, as
    _pool_geometry leaves no window of padding alone) or 1 / its input and padding elements (inclusive:
    prod(kernel) except for a ceil_mode window running past the padding, as in Paddle and torch)."""
    scale = 1.0 / _window_counts(xp, geom, padding=not exclusive)
    if divisor_override is not None:  # Paddle: the average times prod(kernel) / divisor_override
        scale = scale * (math.prod(geom.kernel) / divisor_override)
    return scale.astype(dtype)


def _avg_geometry(size, kernel_size, stride, padding, ceil_mode, divisor_override, last):
    if divisor_override is not None and divisor_override == 0:
        raise ValueError("divisor_override must be non-zero (or None)")
    return _pool_geometry(size, kernel_size, stride, padding, ceil_mode, last)


def _avg_pool(nd):
    def kernel(xp, x, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True, divisor_override=None,
               data_format=None):
        last = _channel_last(data_format, nd)
        _check_input(x, nd, last)
        geom = _avg_geometry(_spatial(x.shape, last), kernel_size, stride, padding, ceil_mode, divisor_override, last)
        ct = compute_dtype(xp, x.dtype)
        src = _padded(xp, _as_nchw(xp, x, ct, nd, last), geom, 0)
        total = None
        for _, index in _window_slices(geom):
            total = src[index].copy() if total is None else xp.add(total, src[index], out=total)
        total *= _avg_scale(xp, geom, exclusive, divisor_override, ct)
        return _from_nchw(xp, total, nd, last, x.dtype)
    return kernel


def _avg_pool_grad(nd):
    def kernel(xp, grad, input_size, kernel_size, stride=None, padding=0, ceil_mode=False, exclusive=True,
               divisor_override=None, data_format=None):
        last = _channel_last(data_format, nd)
        _check_input(grad, nd, last, "grad")
        size = _ints("input_size", input_size, nd, 1)
        geom = _avg_geometry(size, kernel_size, stride, padding, ceil_mode, divisor_override, last)
        if _spatial(grad.shape, last) != geom.out:
            raise ValueError(f"grad has spatial size {list(_spatial(grad.shape, last))}, but pooling an input of "
                             f"size {list(size)} gives {list(geom.out)}")
        ct = compute_dtype(xp, grad.dtype)
        g = _as_nchw(xp, grad, ct, nd, last) * _avg_scale(xp, geom, exclusive, divisor_override, ct)
        dx = xp.ascontiguousarray(_col2im(xp, lambda offset: g, g.shape[:2], geom, ct))
        return _from_nchw(xp, dx, nd, last, grad.dtype)
    return kernel


# -- adaptive pooling -------------------------------------------------------------------------------------

def _adaptive_size(output_size, size):
    """Paddle's output_size: an int or one entry per spatial axis, None keeping that input size."""
    nd = len(size)
    items = [output_size] * nd if _is_int(output_size) else list(output_size) \
        if isinstance(output_size, (list, tuple)) else None
    if items is None or len(items) != nd or not all(v is None or (_is_int(v) and v >= 1) for v in items):
        raise ValueError(f"output_size must be a positive int or a list of {nd} (positive ints or None), "
                         f"got {output_size!r}")
    return tuple(n if v is None else int(v) for v, n in zip(items, size))


def _bounds(xp, n_in, n_out):
    """(start, end) of the n_out adaptive windows over n_in inputs: floor(o*n/m) and ceil((o+1)*n/m)."""
    o = xp.arange(n_out)
    return (o * n_in) // n_out, -((-(o + 1) * n_in) // n_out)


def _band(xp, n_in, n_out, dtype):
    """[n_out, n_in]: row o averages the inputs of window o."""
    start, end = (v[:, None] for v in _bounds(xp, n_in, n_out))
    i = xp.arange(n_in)[None, :]
    return (((i >= start) & (i < end)) / (end - start)).astype(dtype)


def _times(xp, x, axis, matrix):
    """x with its `axis` multiplied by matrix [size of that axis, new size]."""
    return xp.moveaxis(xp.matmul(xp.moveaxis(x, axis, -1), matrix), -1, axis)


def _adaptive_avg_pool(nd):
    def kernel(xp, x, output_size, data_format=None):
        last = _channel_last(data_format, nd)
        _check_input(x, nd, last)
        ct = compute_dtype(xp, x.dtype)
        xc = _as_nchw(xp, x, ct, nd, last)
        (n, c), size = xc.shape[:2], xc.shape[2:]
        out_size = _adaptive_size(output_size, size)
        if all(i % o == 0 for i, o in zip(size, out_size)):  # equal windows that tile the input: a mean
            split = [v for i, o in zip(size, out_size) for v in (o, i // o)]
            return _from_nchw(xp, xc.reshape([n, c] + split).mean(axis=tuple(range(3, 3 + 2 * nd, 2))), nd, last,
                              x.dtype)
        for axis, (i, o) in enumerate(zip(size, out_size)):
            xc = _times(xp, xc, 2 + axis, _band(xp, i, o, ct).T)
        return _from_nchw(xp, xc, nd, last, x.dtype)
    return kernel


def _adaptive_avg_pool_grad(nd):
    def kernel(xp, grad, input_size, data_format=None):
        last = _channel_last(data_format, nd)
        _check_input(grad, nd, last, "grad")
        size = _ints("input_size", input_size, nd, 1)
        ct = compute_dtype(xp, grad.dtype)
        g = _as_nchw(xp, grad, ct, nd, last)
        for axis, (i, o) in enumerate(zip(size, g.shape[2:])):
            g = _times(xp, g, 2 + axis, _band(xp, i, o, ct))
        return _from_nchw(xp, xp.ascontiguousarray(g), nd, last, grad.dtype)
    return kernel


def _adaptive_max_pool_with_index(nd):
    def kernel(xp, x, output_size):
        _check_input(x, nd, False)
        ct = compute_dtype(xp, x.dtype)
        xc = x.astype(ct, copy=False)
        size = xc.shape[2:]
        out_size = _adaptive_size(output_size, size)
        # per axis: [out, longest window] input indices, each window's last index repeated to the longest
        indices = []
        for i, o in zip(size, out_size):
            start, end = _bounds(xp, i, o)
            k = int((end - start).max())
            indices.append(xp.minimum(start[:, None] + xp.arange(k)[None, :], end[:, None] - 1))
        vals = xc
        for axis, idx in enumerate(indices):  # [N, C, O1, K1, O2, K2, ...]
            vals = xp.take(vals, idx, axis=2 + 2 * axis)
        n, c = xc.shape[:2]
        order = [0, 1] + [2 + 2 * a for a in range(nd)] + [3 + 2 * a for a in range(nd)]
        windows = vals.transpose(order).reshape((n, c) + out_size + (-1,))
        arg = xp.argmax(windows, axis=-1)  # the first maximum (or nan) of each window, row-major
        out = xp.take_along_axis(windows, arg[..., None], axis=-1)[..., 0]
        # the argmax's input position along each axis, then its index in the plane
        offsets = xp.unravel_index(arg, tuple(idx.shape[1] for idx in indices))
        strides = _plane_strides(size)
        mask = 0
        for axis, (idx, off, stride) in enumerate(zip(indices, offsets, strides)):
            window = xp.arange(out_size[axis]).reshape((1, 1) + tuple(-1 if a == axis else 1 for a in range(nd)))
            mask = mask + idx[window, off] * stride
        return out.astype(x.dtype, copy=False), mask.astype(xp.int32)
    return kernel


# -- Python functions (Paddle's signatures over the ops) -----------------------------------------------------

def _fn(name):
    return f"oarlock.nn.functional.{name}()"


def _check_bool(name, arg, value):
    if not isinstance(value, bool):
        raise TypeError(f"{_fn(name)}: {arg} must be a bool, got {type(value).__name__} {value!r}")


def _check_rank(name, x, nd, last=False):
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"{_fn(name)}: x must be a Tensor, got {type(x).__name__}")
    if x.ndim != nd + 2:
        raise ValueError(f"{_fn(name)}: x must be {nd + 2}-D {_layout(nd, last)}, got shape {list(x.shape)}")


def _max_pool(name, nd, x, kernel_size, stride, padding, return_mask, ceil_mode, data_format):
    _check_bool(name, "return_mask", return_mask)
    if return_mask and data_format != LAYOUTS[nd][0]:
        raise ValueError(f"{_fn(name)}: return_mask=True needs data_format={LAYOUTS[nd][0]!r} (as in Paddle), "
                         f"got {data_format!r}")
    op = getattr(oarlock, f"max_pool{nd}d_with_index")
    out, mask = op(x, kernel_size, stride, padding, ceil_mode, data_format)
    return (out, mask) if return_mask else out


def max_pool2d(x, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCHW",
               name=None):
    """Max pooling over [N, C, H, W] windows (Paddle's signature); with return_mask=True also the int32
    index h * W + w of every maximum in its input plane."""
    return _max_pool("max_pool2d", 2, x, kernel_size, stride, padding, return_mask, ceil_mode, data_format)


def max_pool3d(x, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, data_format="NCDHW",
               name=None):
    """Max pooling over [N, C, D, H, W] windows (Paddle's signature); with return_mask=True also the int32
    index d * H * W + h * W + w of every maximum in its input plane."""
    return _max_pool("max_pool3d", 3, x, kernel_size, stride, padding, return_mask, ceil_mode, data_format)


def _as_2d_args(name, x, kernel_size, stride, padding):
    """A 1-D pooling's arguments as those of the 2-D op on a unit height: x [N, C, 1, L], and kernel, stride
    and padding with a leading 1 (or 0)."""
    _check_rank(name, x, 1)
    kernel = _ints("kernel_size", kernel_size, 1, 1)
    stride = kernel if stride is None else _ints("stride", stride, 1, 1)
    if isinstance(padding, str):
        pads = padding   # 'same' / 'valid' mean the same on a unit height
    else:
        ((before, after),), _ = _padding(padding, tuple(x.shape[2:]), kernel, stride, (1,), False)
        pads = [0, 0, before, after]
    return oarlock.unsqueeze(x, 2), [1, kernel[0]], [1, stride[0]], pads


@contextlib.contextmanager
def _as_1d(name):
    """Errors of the 2-D op a 1-D function runs name the 1-D function (the sizes they show are 2-D ones)."""
    try:
        yield
    except ValueError as exc:
        raise ValueError(f"{_fn(name)} (as 2-D on a unit height): {exc}") from None


def max_pool1d(x, kernel_size, stride=None, padding=0, return_mask=False, ceil_mode=False, name=None):
    """Max pooling over [N, C, L] windows (Paddle's signature); with return_mask=True also the int32
    position of every maximum along L."""
    _check_bool("max_pool1d", "return_mask", return_mask)
    x4, kernel, stride, pads = _as_2d_args("max_pool1d", x, kernel_size, stride, padding)
    with _as_1d("max_pool1d"):
        out, mask = oarlock.max_pool2d_with_index(x4, kernel, stride, pads, ceil_mode)
    out, mask = oarlock.squeeze(out, 2), oarlock.squeeze(mask, 2)
    return (out, mask) if return_mask else out


def avg_pool1d(x, kernel_size, stride=None, padding=0, exclusive=True, ceil_mode=False, name=None):
    """Average pooling over [N, C, L] windows (Paddle's signature: exclusive before ceil_mode)."""
    x4, kernel, stride, pads = _as_2d_args("avg_pool1d", x, kernel_size, stride, padding)
    with _as_1d("avg_pool1d"):
        return oarlock.squeeze(F.avg_pool2d(x4, kernel, stride, pads, ceil_mode, exclusive), 2)


def _output_size_1d(name, output_size):
    if isinstance(output_size, (list, tuple)) and len(output_size) == 1:
        output_size = output_size[0]
    if not (_is_int(output_size) and output_size >= 1):
        raise ValueError(f"{_fn(name)}: output_size must be a positive int, got {output_size!r}")
    return [1, int(output_size)]


def adaptive_avg_pool1d(x, output_size, name=None):
    """Adaptive average pooling of [N, C, L] to output_size windows."""
    _check_rank("adaptive_avg_pool1d", x, 1)
    size = _output_size_1d("adaptive_avg_pool1d", output_size)
    return oarlock.squeeze(F.adaptive_avg_pool2d(oarlock.unsqueeze(x, 2), size), 2)


def _adaptive_max(name, nd, x, output_size, return_mask):
    _check_bool(name, "return_mask", return_mask)
    _check_rank(name, x, nd)
    if nd == 1:
        out, mask = oarlock.adaptive_max_pool2d_with_index(oarlock.unsqueeze(x, 2), _output_size_1d(name, output_size))
        out, mask = oarlock.squeeze(out, 2), oarlock.squeeze(mask, 2)
    else:
        out, mask = getattr(oarlock, f"adaptive_max_pool{nd}d_with_index")(x, output_size)
    return (out, mask) if return_mask else out


def adaptive_max_pool1d(x, output_size, return_mask=False, name=None):
    """Adaptive max pooling of [N, C, L]; with return_mask=True also each maximum's position along L."""
    return _adaptive_max("adaptive_max_pool1d", 1, x, output_size, return_mask)


def adaptive_max_pool2d(x, output_size, return_mask=False, name=None):
    """Adaptive max pooling of [N, C, H, W] (output_size: an int or [OH, OW], None keeping that size); with
    return_mask=True also each maximum's index h * W + w in its input plane."""
    return _adaptive_max("adaptive_max_pool2d", 2, x, output_size, return_mask)


def adaptive_max_pool3d(x, output_size, return_mask=False, name=None):
    """Adaptive max pooling of [N, C, D, H, W]; with return_mask=True also each maximum's index
    d * H * W + h * W + w in its input plane."""
    return _adaptive_max("adaptive_max_pool3d", 3, x, output_size, return_mask)


# -- gradients (Tensors and public ops only) --------------------------------------------------------------

def _input_size(ctx, nd, data_format):
    return list(_spatial(ctx.meta[0][0], _channel_last(data_format, nd)))


def _max_pool_rule(nd):
    def rule(ctx, g, _g_mask):
        if g is None:
            return None
        (mask,) = ctx.saved
        fmt = ctx.attrs.get("data_format", LAYOUTS[nd][0])
        return getattr(oarlock, f"max_pool{nd}d_grad")(g, mask, input_size=_input_size(ctx, nd, fmt), data_format=fmt)
    return rule


def _max_pool_grad_rule(nd):
    def rule(ctx, gg):
        """The adjoint of the scatter: gather gg at the saved argmax positions."""
        (mask,) = ctx.saved
        last = _channel_last(ctx.attrs["data_format"], nd)
        if last:  # the mask indexes planes: work channel-first
            perm = [0, nd + 1] + list(range(1, nd + 1))
            gg, mask = oarlock.transpose(gg, perm), oarlock.transpose(mask, perm)
        (n, c), plane = gg.shape[:2], math.prod(gg.shape[2:])
        planes = oarlock.reshape(oarlock.arange(n * c, dtype="int64") * plane, [n, c] + [1] * nd)
        index = oarlock.cast(mask, "int64") + planes
        picked = oarlock.reshape(oarlock.gather(oarlock.reshape(gg, [-1]), oarlock.reshape(index, [-1])), mask.shape)
        return (oarlock.transpose(picked, [0] + list(range(2, nd + 2)) + [1]) if last else picked), None
    return rule


def _avg_pool_rule(nd):
    def rule(ctx, g):
        return getattr(oarlock, f"avg_pool{nd}d_grad")(
            g, input_size=_input_size(ctx, nd, ctx.attrs["data_format"]), **ctx.attrs)
    return rule


def _avg_pool_grad_rule(nd):
    def rule(ctx, gg):
        """The adjoint of the adjoint is avg_poolNd."""
        a = dict(ctx.attrs)
        a.pop("input_size")
        return getattr(F, f"avg_pool{nd}d")(gg, **a)
    return rule


def _adaptive_rule(nd):
    def rule(ctx, g):
        fmt = ctx.attrs["data_format"]
        grad_op = getattr(oarlock, f"adaptive_avg_pool{nd}d_grad")
        return grad_op(g, input_size=_input_size(ctx, nd, fmt), data_format=fmt)
    return rule


def _adaptive_grad_rule(nd):
    def rule(ctx, gg):
        fmt = ctx.attrs["data_format"]
        return getattr(F, f"adaptive_avg_pool{nd}d")(gg, output_size=_input_size(ctx, nd, fmt), data_format=fmt)
    return rule


# -- registration --------------------------------------------------------------------------------------------

_POOL = "kernel_size: Shape, stride: Shape|None = None, padding: Any = 0, ceil_mode: bool = False, "
_AVG = _POOL + "exclusive: bool = True, divisor_override: float|None = None, "
_FLOATS = ("float",)


def register(ops):
    for nd in (2, 3):
        fmt, plane = LAYOUTS[nd][0], PLANE_INDEX[nd]
        ops.define(f"max_pool{nd}d_with_index(x: Tensor, {_POOL}data_format: str = '{fmt}') -> tuple[Tensor, Tensor]",
                   public=[f"max_pool{nd}d_with_index"], dtypes=_FLOATS, grad=_max_pool_rule(nd), saves=("out1",),
                   doc=f"{nd}-D max pooling and the int32 index ({plane}) of every maximum in its input plane.")
        ops.kernel(f"max_pool{nd}d_with_index")(_max_pool_with_index(nd))
        ops.define(f"max_pool{nd}d_grad(grad: Tensor, mask: Tensor, input_size: Shape, data_format: str = '{fmt}') "
                   f"-> Tensor", public=[f"max_pool{nd}d_grad"], dtypes=_FLOATS, nondiff=("mask",),
                   grad=_max_pool_grad_rule(nd), saves=("mask",),
                   doc=f"The gradient of {nd}-D max pooling: grad added at the mask's input positions.")
        ops.kernel(f"max_pool{nd}d_grad")(_max_pool_grad(nd))

        ops.define(f"avg_pool{nd}d(x: Tensor, {_AVG}data_format: str = '{fmt}') -> Tensor",
                   public=[f"oarlock.nn.functional.avg_pool{nd}d"], dtypes=_FLOATS, grad=_avg_pool_rule(nd),
                   doc=f"{nd}-D average pooling; exclusive=True leaves padding out of each window's count.")
        ops.kernel(f"avg_pool{nd}d")(_avg_pool(nd))
        ops.define(f"avg_pool{nd}d_grad(grad: Tensor, input_size: Shape, {_AVG}data_format: str = '{fmt}') -> Tensor",
                   public=[f"avg_pool{nd}d_grad"], dtypes=_FLOATS, grad=_avg_pool_grad_rule(nd),
                   doc=f"The gradient (adjoint) of avg_pool{nd}d.")
        ops.kernel(f"avg_pool{nd}d_grad")(_avg_pool_grad(nd))

        ops.define(f"adaptive_avg_pool{nd}d(x: Tensor, output_size: Any, data_format: str = '{fmt}') -> Tensor",
                   public=[f"oarlock.nn.functional.adaptive_avg_pool{nd}d"], dtypes=_FLOATS, grad=_adaptive_rule(nd),
                   doc=f"{nd}-D average pooling to output_size windows: window o spans floor(o*n/m) to "
                       f"ceil((o+1)*n/m) (an output larger than the input repeats inputs).")
        ops.kernel(f"adaptive_avg_pool{nd}d")(_adaptive_avg_pool(nd))
        ops.define(f"adaptive_avg_pool{nd}d_grad(grad: Tensor, input_size: Shape, data_format: str = '{fmt}') "
                   f"-> Tensor", public=[f"adaptive_avg_pool{nd}d_grad"], dtypes=_FLOATS,
                   grad=_adaptive_grad_rule(nd), doc=f"The gradient (adjoint) of adaptive_avg_pool{nd}d.")
        ops.kernel(f"adaptive_avg_pool{nd}d_grad")(_adaptive_avg_pool_grad(nd))

        ops.define(f"adaptive_max_pool{nd}d_with_index(x: Tensor, output_size: Any) -> tuple[Tensor, Tensor]",
                   public=[f"adaptive_max_pool{nd}d_with_index"], dtypes=_FLOATS, grad=_max_pool_rule(nd),
                   saves=("out1",),
                   doc=f"{nd}-D adaptive max pooling of {_layout(nd, False)} and the int32 index ({plane}) of every "
                       f"maximum in its input plane.")
        ops.kernel(f"adaptive_max_pool{nd}d_with_index")(_adaptive_max_pool_with_index(nd))


PLANE_INDEX = {2: "h * W + w", 3: "d * H * W + h * W + w"}  # how a mask indexes an input plane, for docs

FUNCTIONS = [max_pool1d, max_pool2d, max_pool3d, avg_pool1d, adaptive_avg_pool1d, adaptive_max_pool1d,
             adaptive_max_pool2d, adaptive_max_pool3d]


def register_api(api):
    """The functions that pick whether to return the mask, and the 1-D ones (the 2-D ops on a unit height)."""
    for fn in FUNCTIONS:
        api.export("oarlock.nn.functional", fn.__name__, fn)
