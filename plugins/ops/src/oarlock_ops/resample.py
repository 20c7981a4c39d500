"""Paddle 3.2's pad, zeropad2d, interpolate, upsample, affine_grid and grid_sample in oarlock.nn.functional,
as Python functions over public ops (so every mode is differentiable with no rule of its own).

Both reduce to gathers along one axis at a time. A non-constant pad of an axis of size n is
index_select(x, idx) with idx = numpy.pad(arange(n), (before, after), mode) ('reflect', 'edge' for
replicate, 'wrap' for circular); a constant pad concatenates blocks of the value (negative amounts crop).
Interpolation is separable: per resized axis, the output is a weighted sum of a few gathered slices
(1 tap for nearest, 2 for linear, 4 for bicubic) whose source indices and weights follow Paddle's CPU
kernels: align_corners maps the corners onto each other (ratio (in - 1) / (out - 1)); otherwise
align_mode=0 uses half-pixel centres (src = (dst + 0.5) * ratio - 0.5, clamped at 0 for linear) and
align_mode=1 the asymmetric src = dst * ratio; ratio is 1 / scale_factor when a scale factor is given
(and not recomputed), in / out otherwise, and 0 for an output of size 1. 'area' is adaptive average
pooling to the output size. 'nearest' also takes a 3-D input here (Paddle 3.2 refuses it; PyTorch has it).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

import oarlock

PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}
CHANNEL_FIRST = {3: "NCL", 4: "NCHW", 5: "NCDHW"}
CHANNEL_LAST = {3: "NLC", 4: "NHWC", 5: "NDHWC"}
INTERP_MODES = {"nearest": (3, 4, 5), "linear": (3,), "bilinear": (4,), "trilinear": (5,), "bicubic": (4,),
                "area": (3, 4, 5)}
CUBIC_A = -0.75  # the bicubic kernel's parameter (Keys), as Paddle and PyTorch


def _int_list(function, name, value):
    if isinstance(value, oarlock.Tensor):
        value = value.numpy().tolist()
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return [int(value)]
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value):
        raise TypeError(f"{function}: {name} must be an int or a list of ints, got {value!r}")
    return [int(v) for v in value]


def _spatial_axes(function, x, data_format):
    """(the spatial axes in order, the data format) for a 3-, 4- or 5-D input."""
    if x.ndim not in CHANNEL_FIRST:
        raise ValueError(f"{function}: x must be 3-, 4- or 5-D for a data_format, got shape {x.shape}")
    data_format = (data_format or CHANNEL_FIRST[x.ndim]).upper()
    if data_format == "NCW":
        data_format = "NCL"
    if data_format == "NWC":
        data_format = "NLC"
    if data_format == CHANNEL_FIRST[x.ndim]:
        return list(range(2, x.ndim)), data_format
    if data_format == CHANNEL_LAST[x.ndim]:
        return list(range(1, x.ndim - 1)), data_format
    raise ValueError(f"{function}: data_format must be {CHANNEL_FIRST[x.ndim]!r} or {CHANNEL_LAST[x.ndim]!r} for a "
                     f"{x.ndim}-D input, got {data_format!r}")


# -- pad ----------------------------------------------------------------------------------------------

def _pad_axis_constant(x, axis, before, after, value):
    if before < 0 or after < 0:   # negative padding crops
        n = x.shape[axis]
        x = x[(slice(None),) * axis + (slice(max(-before, 0), n - max(-after, 0)),)]
        before, after = max(before, 0), max(after, 0)
    parts = []
    for amount in (before, after):
        shape = list(x.shape)
        shape[axis] = amount
        parts.append(oarlock.full(shape, value, dtype=x.dtype) if amount else None)
    pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
    return pieces[0] if len(pieces) == 1 else oarlock.concat(pieces, axis=axis)


def _pad_axis_indexed(x, axis, before, after, mode):
    n = x.shape[axis]
    if mode == "reflect" and (before >= n or after >= n):
        raise ValueError(f"pad: reflect padding of an axis of size {n} must be smaller than it, got "
                         f"({before}, {after}) on axis {axis}")
    if mode in ("edge", "wrap") and n == 0:
        raise ValueError(f"pad: {mode} padding needs a non-empty axis (axis {axis} has size 0)")
    index = np.pad(np.arange(n), (before, after), mode=mode)
    return oarlock.index_select(x, oarlock.to_tensor(index.astype(np.int64)), axis=axis)


def _pad_axes(x, amounts, mode, value):
    """amounts: {axis: (before, after)}."""
    for axis, (before, after) in amounts.items():
        if not before and not after:
            continue
        if mode == "constant":
            x = _pad_axis_constant(x, axis, before, after, value)
        else:
            if before < 0 or after < 0:
                raise ValueError(f"pad: {mode} padding must be >= 0, got ({before}, {after}) on axis {axis}")
            x = _pad_axis_indexed(x, axis, before, after, PAD_MODES[mode])
    return x


def pad(x, pad, mode="constant", value=0.0, data_format=None, pad_from_left_axis=True, name=None):
    """Paddle's F.pad. mode 'constant' with a pad list whose length is not 2 * (ndim - 2) pads any axes:
    2 * ndim entries with pad_from_left_axis=True are (before, after) pairs from the first axis on;
    otherwise pairs start at the last axis (torch's order, missing pairs meaning 0). Else x is 3-, 4- or
    5-D and pad gives the spatial axes of data_format from the last one: [left, right(, top, bottom(,
    front, back))]. Modes 'reflect', 'replicate', 'circular' pad the spatial axes only."""
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"pad: x must be a Tensor, got {type(x).__name__}")
    if mode not in ("constant", *PAD_MODES):
        raise ValueError(f"pad: mode must be one of 'constant', 'reflect', 'replicate', 'circular', got {mode!r}")
    amounts = _int_list("pad", "pad", pad)
    if len(amounts) % 2:
        raise ValueError(f"pad: pad must have an even number of entries, got {len(amounts)}")
    if mode == "constant" and len(amounts) != 2 * (x.ndim - 2):
        if len(amounts) > 2 * x.ndim:
            raise ValueError(f"pad: at most {2 * x.ndim} entries for a {x.ndim}-D input, got {len(amounts)}")
        pairs = [amounts[i:i + 2] for i in range(0, len(amounts), 2)]
        if len(amounts) == 2 * x.ndim and pad_from_left_axis:
            return _pad_axes(x, dict(enumerate(pairs)), mode, value)
        return _pad_axes(x, {x.ndim - 1 - i: pair for i, pair in enumerate(pairs)}, mode, value)
    axes, _ = _spatial_axes("pad", x, data_format)
    if len(amounts) != 2 * len(axes):
        raise ValueError(f"pad: a {x.ndim}-D input in mode {mode!r} takes {2 * len(axes)} pad entries (two per "
                         f"spatial axis), got {len(amounts)}")
    return _pad_axes(x, {axis: amounts[2 * i:2 * i + 2] for i, axis in enumerate(reversed(axes))}, mode, value)


def zeropad2d(x, padding, data_format="NCHW", name=None):
    """Zero padding of a 4-D input: padding = [left, right, top, bottom]."""
    padding = _int_list("zeropad2d", "padding", padding)
    if x.ndim != 4 or len(padding) != 4:
        raise ValueError(f"zeropad2d: x must be 4-D and padding have 4 entries, got shape {x.shape} and {padding}")
    return globals()["pad"](x, padding, mode="constant", value=0.0, data_format=data_format)


# -- interpolate --------------------------------------------------------------------------------------

def _output_sizes(x, axes, size, scale_factor):
    """(output sizes, the scale per axis or None) from size or scale_factor."""
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        if isinstance(size, oarlock.Tensor):
            size = size.numpy().tolist()
        sizes = [size] * len(axes) if isinstance(size, numbers.Integral) else list(size)
        sizes = [int(s.item()) if isinstance(s, oarlock.Tensor) else s for s in sizes]
        if len(sizes) != len(axes) or not all(isinstance(s, numbers.Integral) and s > 0 for s in sizes):
            raise ValueError(f"interpolate: size must be {len(axes)} positive ints for a {x.ndim}-D input, "
                             f"got {size!r}")
        return [int(s) for s in sizes], None
    if isinstance(scale_factor, oarlock.Tensor):
        scale_factor = scale_factor.numpy().tolist()
    scales = [scale_factor] * len(axes) if isinstance(scale_factor, numbers.Real) else list(scale_factor)
    if len(scales) != len(axes) or not all(isinstance(s, numbers.Real) and s > 0 for s in scales):
        raise ValueError(f"interpolate: scale_factor must be a positive number or {len(axes)} of them for a "
                         f"{x.ndim}-D input, got {scale_factor!r}")
    return [int(math.floor(x.shape[a] * float(s))) for a, s in zip(axes, scales)], [float(s) for s in scales]


def _ratio(n_in, n_out, scale, align_corners):
    if n_out == 1:   # Paddle's kernels: a single output reads from source position 0 (clamped)
        return 0.0
    if align_corners:
        return (n_in - 1) / (n_out - 1)
    return 1.0 / scale if scale is not None else n_in / n_out


def _gather(x, axis, index):
    return oarlock.index_select(x, oarlock.to_tensor(np.asarray(index, dtype=np.int64)), axis=axis)


def _weighted(x, axis, taps):
    """sum over taps of gather(x, index) * weight, the weights broadcast along `axis`."""
    shape = [1] * x.ndim
    out = None
    for index, weight in taps:
        shape[axis] = len(weight)
        term = _gather(x, axis, index) * oarlock.cast(oarlock.to_tensor(np.asarray(weight).reshape(shape)), x.dtype)
        out = term if out is None else out + term
    return out


def _nearest(x, axis, n_out, ratio, align_corners):
    dst = np.arange(n_out, dtype=np.float64)
    src = np.floor(dst * ratio + 0.5) if align_corners else np.floor(dst * ratio)
    return _gather(x, axis, np.minimum(src.astype(np.int64), x.shape[axis] - 1))


def _source(n_out, ratio, align_corners, align_mode):
    dst = np.arange(n_out, dtype=np.float64)
    if align_corners or align_mode == 1:
        return dst * ratio
    return (dst + 0.5) * ratio - 0.5


def _linear(x, axis, n_out, ratio, align_corners, align_mode):
    n_in = x.shape[axis]
    src = np.maximum(_source(n_out, ratio, align_corners, align_mode), 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = src - i0
    return _weighted(x, axis, [(i0, 1.0 - w1), (i1, w1)])


def _cubic_weights(t):
    """Keys' cubic convolution weights for the taps at offsets -1, 0, 1, 2 from floor(src)."""
    a = CUBIC_A

    def near(d):   # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):    # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _bicubic(x, axis, n_out, ratio, align_corners):
    n_in = x.shape[axis]
    src = _source(n_out, ratio, align_corners, 0)
    base = np.floor(src).astype(np.int64)
    weights = _cubic_weights(src - base)
    return _weighted(x, axis, [(np.clip(base + k - 1, 0, n_in - 1), weights[k]) for k in range(4)])


def _area(x, axes, sizes, data_format):
    channel_last = data_format in CHANNEL_LAST.values()
    if channel_last:
        x = oarlock.transpose(x, [0, x.ndim - 1, *range(1, x.ndim - 1)])
    pool = getattr(oarlock.nn.functional, f"adaptive_avg_pool{len(axes)}d")
    out = pool(x, sizes)
    return oarlock.transpose(out, [0, *range(2, out.ndim), 1]) if channel_last else out


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=False, align_mode=0,
                data_format=None, recompute_scale_factor=None, name=None):
    """Resize the spatial axes of a 3-, 4- or 5-D input (Paddle's F.interpolate; see the module docstring for
    how source positions are computed). mode: 'nearest', 'linear' (3-D), 'bilinear' / 'bicubic' (4-D),
    'trilinear' (5-D) or 'area'."""
    if not isinstance(x, oarlock.Tensor):
        raise TypeError(f"interpolate: x must be a Tensor, got {type(x).__name__}")
    mode = mode.lower() if isinstance(mode, str) else mode
    if mode not in INTERP_MODES:
        raise ValueError(f"interpolate: mode must be one of {', '.join(INTERP_MODES)}, got {mode!r}")
    if x.ndim not in INTERP_MODES[mode]:
        raise ValueError(f"interpolate: mode {mode!r} takes a {' or '.join(f'{r}-D' for r in INTERP_MODES[mode])} "
                         f"input, got shape {x.shape}")
    if align_mode not in (0, 1):
        raise ValueError(f"interpolate: align_mode must be 0 or 1, got {align_mode!r}")
    if align_corners and mode == "nearest":
        raise ValueError("interpolate: align_corners=True is not valid for mode 'nearest' (as in Paddle)")
    if mode == "area" and size is None:
        raise ValueError("interpolate: mode 'area' needs size (Paddle has no scale_factor for it)")
    axes, data_format = _spatial_axes("interpolate", x, data_format)
    sizes, scales = _output_sizes(x, axes, size, scale_factor)
    if recompute_scale_factor:
        scales = None
    if mode == "area":
        return _area(x, axes, sizes, data_format)
    out = x
    for i, (axis, n_out) in enumerate(zip(axes, sizes)):
        n_in = x.shape[axis]
        if n_in == n_out and (scales is None or scales[i] == 1.0):
            continue
        ratio = _ratio(n_in, n_out, None if scales is None else scales[i], align_corners)
        if mode == "nearest":
            out = _nearest(out, axis, n_out, ratio, align_corners)
        elif mode == "bicubic":
            out = _bicubic(out, axis, n_out, ratio, align_corners)
        else:
            out = _linear(out, axis, n_out, ratio, align_corners, align_mode)
    return out


def upsample(x, size=None, scale_factor=None, mode="nearest", align_corners=False, align_mode=0, data_format=None,
             name=None):
    """interpolate under its older name."""
    return interpolate(x, size, scale_factor, mode, align_corners, align_mode, data_format)


# -- affine_grid / grid_sample ------------------------------------------------------------------------

def _base_coordinates(n, align_corners):
    """The normalised [-1, 1] positions of n samples (pixel centres unless align_corners)."""
    if n == 1:
        return np.zeros(1)
    line = np.linspace(-1.0, 1.0, n)
    return line if align_corners else line * (n - 1) / n


def affine_grid(theta, out_shape, align_corners=True, name=None):
    """The sampling grid [N, H, W, 2] (or [N, D, H, W, 3]) of the affine maps theta [N, 2, 3] ([N, 3, 4]) for
    an output of out_shape [N, C, H, W] ([N, C, D, H, W]); the last axis is (x, y(, z))."""
    if not isinstance(theta, oarlock.Tensor):
        raise TypeError(f"affine_grid: theta must be a Tensor, got {type(theta).__name__}")
    out_shape = _int_list("affine_grid", "out_shape", out_shape)
    spatial = len(out_shape) - 2
    if spatial not in (2, 3) or list(theta.shape) != [out_shape[0], spatial, spatial + 1]:
        raise ValueError(f"affine_grid: theta must be [N, 2, 3] for a 4-D out_shape or [N, 3, 4] for a 5-D one, "
                         f"got theta {theta.shape} and out_shape {out_shape}")
    sizes = out_shape[2:]                            # (H, W) or (D, H, W)
    axes = [_base_coordinates(n, align_corners) for n in reversed(sizes)]   # x over W first
    mesh = np.meshgrid(*axes[::-1], indexing="ij")   # D/H/W-major arrays
    base = np.stack([*mesh[::-1], np.ones_like(mesh[0])], axis=-1).reshape(-1, spatial + 1)   # (x, y(, z), 1)
    base = oarlock.cast(oarlock.to_tensor(base), theta.dtype)
    grid = oarlock.matmul(oarlock.unsqueeze(base, 0), theta, transpose_y=True)   # [N, points, spatial]
    return oarlock.reshape(grid, [out_shape[0], *sizes, spatial])


def _unnormalize(coord, size, align_corners):
    return (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2


def _reflect(coord, size, align_corners):
    """Reflect source positions back into the image (the 'reflection' padding), then clip."""
    twice_low, twice_high = (0, 2 * (size - 1)) if align_corners else (-1, 2 * size - 1)
    if twice_low == twice_high:
        return oarlock.zeros_like(coord)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    coord = oarlock.abs(coord - low)
    flips = oarlock.floor(coord / span).detach()
    extra = coord - flips * span
    even = oarlock.remainder(flips, 2.0) == 0
    return oarlock.clip(oarlock.where(even, extra + low, span - extra + low), 0, size - 1)


def _grid_source(coord, size, padding_mode, align_corners):
    """Pixel positions from grid_sample's normalised ones, after the padding mode."""
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        return oarlock.clip(coord, 0, size - 1)
    if padding_mode == "reflection":
        return _reflect(coord, size, align_corners)
    return coord


def _taps(x_flat, ix, iy, width, height, weight):
    """weight * x at integer positions (ix, iy) [N, P] (zero where outside), x_flat [N, C, H*W]."""
    inside = (ix >= 0) & (ix <= width - 1) & (iy >= 0) & (iy <= height - 1)
    index = oarlock.cast(oarlock.clip(iy, 0, height - 1) * width + oarlock.clip(ix, 0, width - 1), "int64")
    index = oarlock.expand(oarlock.unsqueeze(index, 1), [x_flat.shape[0], x_flat.shape[1], index.shape[-1]])
    values = oarlock.take_along_axis(x_flat, index, 2)
    return values * oarlock.unsqueeze(weight * oarlock.cast(inside, weight.dtype), 1)


def grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True, name=None):
    """Sample x [N, C, H, W] at the normalised positions grid [N, Ho, Wo, 2] ((x, y) in [-1, 1]): mode
    'bilinear' or 'nearest'; padding_mode 'zeros', 'border' or 'reflection' for positions outside."""
    for arg, value in (("x", x), ("grid", grid)):
        if not isinstance(value, oarlock.Tensor):
            raise TypeError(f"grid_sample: {arg} must be a Tensor, got {type(value).__name__}")
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"grid_sample: mode must be 'bilinear' or 'nearest', got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', got {padding_mode!r}")
    if x.ndim != 4 or grid.ndim != 4 or grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid_sample: expected x [N, C, H, W] and grid [N, H_out, W_out, 2], got {x.shape} and "
                         f"{grid.shape}")
    n, c, height, width = x.shape
    out_h, out_w = grid.shape[1], grid.shape[2]
    points = oarlock.reshape(grid, [n, out_h * out_w, 2])
    ix = _grid_source(points[:, :, 0], width, padding_mode, align_corners)
    iy = _grid_source(points[:, :, 1], height, padding_mode, align_corners)
    x_flat = oarlock.reshape(x, [n, c, height * width])
    if mode == "nearest":
        out = _taps(x_flat, oarlock.round(ix).detach(), oarlock.round(iy).detach(), width, height,
                    oarlock.ones_like(ix))
    else:
        x0, y0 = oarlock.floor(ix).detach(), oarlock.floor(iy).detach()
        wx, wy = ix - x0, iy - y0
        out = (_taps(x_flat, x0, y0, width, height, (1 - wx) * (1 - wy)) +
               _taps(x_flat, x0 + 1, y0, width, height, wx * (1 - wy)) +
               _taps(x_flat, x0, y0 + 1, width, height, (1 - wx) * wy) +
               _taps(x_flat, x0 + 1, y0 + 1, width, height, wx * wy))
    return oarlock.reshape(out, [n, c, out_h, out_w])


FUNCTIONS = (pad, zeropad2d, interpolate, upsample, affine_grid, grid_sample)


def register_api(api):
    for function in FUNCTIONS:
        api.export("oarlock.nn.functional", function.__name__, function)
