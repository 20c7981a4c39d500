"""oarlock.vision.transforms.functional: Paddle 3.2's image functions for PIL images, numpy arrays (HWC, what
Paddle hands to OpenCV) and Tensors (CHW).

PIL images go through Pillow exactly as Paddle's PIL backend does. Numpy arrays get numpy versions of the
OpenCV calls Paddle makes: resize is cv2.INTER_LINEAR / INTER_NEAREST (half-pixel centres, no antialiasing,
uint8 rounded), pad maps 'reflect' to BORDER_REFLECT_101 and 'symmetric' to BORDER_REFLECT, grayscale is
0.299 R + 0.587 G + 0.114 B. So no OpenCV is needed.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

import oarlock
import oarlock.nn.functional as NF

try:
    from PIL import Image, ImageEnhance, ImageOps
except ImportError:  # Pillow is optional: numpy and Tensor images work without it
    Image = ImageEnhance = ImageOps = None

PIL_INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "box", "lanczos", "hamming")
NUMPY_INTERPOLATIONS = ("nearest", "bilinear")
PAD_MODES = ("constant", "edge", "reflect", "symmetric")


def _is_pil_image(img):
    return Image is not None and isinstance(img, Image.Image)


def _is_numpy_image(img):
    return isinstance(img, np.ndarray) and img.ndim in (2, 3)


def _is_tensor_image(img):
    return isinstance(img, oarlock.Tensor)


def _kind(fn, img):
    if _is_pil_image(img):
        return "pil"
    if _is_numpy_image(img):
        return "numpy"
    if _is_tensor_image(img):
        return "tensor"
    raise TypeError(f"{fn}: img should be a PIL Image, a Tensor image or an ndarray with 2 or 3 dimensions, got "
                    f"{type(img).__name__}" + (f" with {img.ndim} dimensions" if isinstance(img, np.ndarray) else ""))


def _pil_interp(fn, interpolation):
    if interpolation not in PIL_INTERPOLATIONS:
        raise ValueError(f"{fn}: interpolation must be one of {PIL_INTERPOLATIONS} for PIL images, got "
                         f"{interpolation!r}")
    return getattr(Image, interpolation.upper())


def get_image_size(img):
    """(width, height) of a PIL image, an HWC array or a CHW / NCHW Tensor."""
    kind = _kind("get_image_size", img)
    if kind == "pil":
        return img.size
    if kind == "numpy":
        return img.shape[1], img.shape[0]
    if len(img.shape) not in (3, 4):
        raise ValueError(f"get_image_size: a Tensor image must be 3-D or 4-D, got {len(img.shape)}-D")
    return img.shape[-1], img.shape[-2]


# -- to_tensor / normalize ------------------------------------------------------------------------------

def to_tensor(pic, data_format="CHW"):
    """A float32 Tensor (uint8 values scaled to [0, 1]) in data_format 'CHW' or 'HWC'."""
    if data_format not in ("CHW", "HWC"):
        raise ValueError(f"to_tensor: data_format should be 'CHW' or 'HWC', got {data_format!r}")
    kind = _kind("to_tensor", pic)
    if kind == "tensor":
        return pic if data_format == "CHW" else pic.transpose([1, 2, 0])
    if kind == "pil":
        array = {"I": np.int32, "I;16": np.int32, "F": np.float32}.get(pic.mode)
        array = np.asarray(pic, array) if array else np.asarray(pic)
        if pic.mode == "1":
            array = array.astype(np.uint8) * 255
        channels = 3 if pic.mode == "YCbCr" else 1 if pic.mode == "I;16" else len(pic.mode)
        array = array.reshape(pic.size[1], pic.size[0], channels)
    else:
        array = pic[:, :, None] if pic.ndim == 2 else pic
    if data_format == "CHW":
        array = array.transpose(2, 0, 1)
    if array.dtype == np.uint8:
        return oarlock.to_tensor(array.astype(np.float32) / np.float32(255.0))
    return oarlock.to_tensor(np.ascontiguousarray(array))


def normalize(img, mean, std, data_format="CHW", to_rgb=False):
    """(img - mean) / std per channel; PIL images and arrays give float32 arrays, Tensors give Tensors."""
    if data_format not in ("CHW", "HWC"):
        raise ValueError(f"normalize: data_format should be 'CHW' or 'HWC', got {data_format!r}")
    shape = (-1, 1, 1) if data_format == "CHW" else (1, 1, -1)
    if _is_tensor_image(img):
        mean_t = oarlock.to_tensor(np.asarray(mean, np.float32).reshape(shape)).astype(img.dtype)
        std_t = oarlock.to_tensor(np.asarray(std, np.float32).reshape(shape)).astype(img.dtype)
        return (img - mean_t) / std_t
    if _is_pil_image(img):
        img = np.array(img).astype(np.float32)
    elif not isinstance(img, np.ndarray):
        raise TypeError(f"normalize: img should be a PIL Image, an ndarray or a Tensor, got {type(img).__name__}")
    if to_rgb:
        img = img[..., ::-1]
    return (img - np.float32(np.array(mean).reshape(shape))) / np.float32(np.array(std).reshape(shape))


# -- geometry -------------------------------------------------------------------------------------------

def _target_size(fn, size, w, h):
    """(height, width) for Paddle's size: an int sets the shorter side (keeping the aspect ratio)."""
    if isinstance(size, numbers.Integral):
        if w < h:
            return int(size * h / w), int(size)
        return int(size), int(size * w / h)
    if isinstance(size, Sequence) and len(size) == 2:
        return int(size[0]), int(size[1])
    raise TypeError(f"{fn}: size must be an int or a (height, width) pair, got {size!r}")


def _linear_taps(n_in, n_out):
    """Source indices and weights of cv2's INTER_LINEAR along one axis (half-pixel centres, edge clamped)."""
    pos = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    return lo, hi, (pos - lo).astype(np.float32)


def _resize_numpy(img, oh, ow, interpolation):
    h, w = img.shape[:2]
    if interpolation == "nearest":  # cv2.INTER_NEAREST: floor(dst * scale)
        rows = np.minimum((np.arange(oh) * (h / oh)).astype(np.int64), h - 1)
        cols = np.minimum((np.arange(ow) * (w / ow)).astype(np.int64), w - 1)
        return img[rows][:, cols]
    work = img.astype(np.float32)
    r0, r1, fr = _linear_taps(h, oh)
    c0, c1, fc = _linear_taps(w, ow)
    fr = fr.reshape(-1, *([1] * (img.ndim - 1)))
    rows = work[r0] * (1 - fr) + work[r1] * fr
    fc = fc.reshape(1, -1, *([1] * (img.ndim - 2)))
    out = rows[:, c0] * (1 - fc) + rows[:, c1] * fc
    if np.issubdtype(img.dtype, np.integer):
        info = np.iinfo(img.dtype)
        return np.clip(np.rint(out), info.min, info.max).astype(img.dtype)
    return out.astype(img.dtype)


def resize(img, size, interpolation="bilinear"):
    """Resize to size (height, width), or make the shorter side `size` keeping the aspect ratio."""
    kind = _kind("resize", img)
    w, h = get_image_size(img)
    if isinstance(size, numbers.Integral) and ((w <= h and w == size) or (h <= w and h == size)):
        return img
    oh, ow = _target_size("resize", size, w, h)
    if kind == "pil":
        return img.resize((ow, oh), _pil_interp("resize", interpolation))
    if interpolation not in NUMPY_INTERPOLATIONS:
        raise ValueError(f"resize: interpolation must be one of {NUMPY_INTERPOLATIONS} for arrays and Tensors, "
                         f"got {interpolation!r}")
    if kind == "numpy":
        return _resize_numpy(img, oh, ow, interpolation)
    batched = img if len(img.shape) == 4 else img.unsqueeze(0)
    out = NF.interpolate(batched, size=[oh, ow], mode=interpolation,
                         align_corners=False if interpolation == "bilinear" else None)
    return out if len(img.shape) == 4 else out.squeeze(0)


def crop(img, top, left, height, width):
    """The height x width region whose top-left corner is (top, left)."""
    kind = _kind("crop", img)
    if kind == "pil":
        return img.crop((left, top, left + width, top + height))
    if kind == "numpy":
        return img[top:top + height, left:left + width]
    return img[..., top:top + height, left:left + width]


def center_crop(img, output_size):
    """The central output_size (int or (height, width)) region."""
    th, tw = (int(output_size), int(output_size)) if isinstance(output_size, numbers.Number) else output_size
    w, h = get_image_size(img)
    return crop(img, int(round((h - th) / 2.0)), int(round((w - tw) / 2.0)), th, tw)


def hflip(img):
    """Mirror left to right."""
    kind = _kind("hflip", img)
    if kind == "pil":
        return img.transpose(Image.FLIP_LEFT_RIGHT)
    return img[:, ::-1] if kind == "numpy" else img.flip([-1])


def vflip(img):
    """Mirror top to bottom."""
    kind = _kind("vflip", img)
    if kind == "pil":
        return img.transpose(Image.FLIP_TOP_BOTTOM)
    return img[::-1] if kind == "numpy" else img.flip([-2])


def _padding(padding):
    """(left, top, right, bottom) from an int, (left/right, top/bottom) or (left, top, right, bottom)."""
    if isinstance(padding, numbers.Integral):
        return (int(padding),) * 4
    if isinstance(padding, (list, tuple)) and len(padding) == 2:
        return padding[0], padding[1], padding[0], padding[1]
    if isinstance(padding, (list, tuple)) and len(padding) == 4:
        return tuple(padding)
    raise ValueError(f"pad: padding must be an int or a 2 or 4 element tuple, got {padding!r}")


def pad(img, padding, fill=0, padding_mode="constant"):
    """Pad the borders: constant (fill), edge, reflect (without repeating the edge) or symmetric."""
    if padding_mode not in PAD_MODES:
        raise ValueError(f"pad: padding_mode must be one of {PAD_MODES}, got {padding_mode!r}")
    left, top, right, bottom = _padding(padding)
    kind = _kind("pad", img)
    if kind == "pil":
        if padding_mode == "constant":
            out = ImageOps.expand(img, border=(left, top, right, bottom), fill=fill)
            if img.mode == "P":
                out.putpalette(img.getpalette())
            return out
        out = Image.fromarray(pad(np.asarray(img), padding, fill, padding_mode))
        if img.mode == "P":
            out.putpalette(img.getpalette())
        return out
    if kind == "tensor":
        if padding_mode != "constant":
            raise ValueError(f"pad: Tensor images take padding_mode 'constant' only, got {padding_mode!r}")
        batched = img if len(img.shape) == 4 else img.unsqueeze(0)
        out = NF.pad(batched, [left, right, top, bottom], mode="constant", value=fill)
        return out if len(img.shape) == 4 else out.squeeze(0)
    widths = [(top, bottom), (left, right)] + [(0, 0)] * (img.ndim - 2)
    if padding_mode == "constant":
        if isinstance(fill, numbers.Number) and img.ndim == 3 and img.shape[2] > 1:
            # a number is a colour with that first channel and zeros after it, in OpenCV and in Pillow alike
            fill = (fill,) + (0,) * (img.shape[2] - 1)
        if isinstance(fill, (list, tuple)) and img.ndim == 3:  # a colour per channel
            return np.stack([np.pad(img[..., c], widths[:2], constant_values=fill[c])
                             for c in range(img.shape[2])], axis=-1)
        return np.pad(img, widths, mode="constant", constant_values=fill)
    return np.pad(img, widths, mode=padding_mode)


def to_grayscale(img, num_output_channels=1):
    """Luma (0.299 R + 0.587 G + 0.114 B) with 1 or 3 channels."""
    if num_output_channels not in (1, 3):
        raise ValueError(f"to_grayscale: num_output_channels should be either 1 or 3, got {num_output_channels!r}")
    kind = _kind("to_grayscale", img)
    if kind == "pil":
        gray = img.convert("L")
        return gray if num_output_channels == 1 else Image.fromarray(np.dstack([np.asarray(gray)] * 3), "RGB")
    weights = np.array([0.299, 0.587, 0.114], np.float32)
    if kind == "numpy":
        luma = img[..., :3].astype(np.float32) @ weights
        if np.issubdtype(img.dtype, np.integer):
            luma = np.rint(luma)
        luma = luma.astype(img.dtype)[..., None]
        return luma if num_output_channels == 1 else np.broadcast_to(luma, luma.shape[:2] + (3,))
    luma = (img[..., :3, :, :] * oarlock.to_tensor(weights.reshape(3, 1, 1)).astype(img.dtype)).sum(
        axis=-3, keepdim=True)
    return luma if num_output_channels == 1 else luma.expand(list(luma.shape[:-3]) + [3] + list(luma.shape[-2:]))


# -- colour ---------------------------------------------------------------------------------------------------
# PIL images: Pillow's ImageEnhance and an HSV hue shift, as Paddle's PIL backend. Arrays: Paddle's OpenCV
# formulas (lookup tables; contrast pivots on 74; saturation blends with a random alpha drawn from numpy's
# generator and the gray of the channels read as BGR), computed with numpy.

def _color_kind(fn, img, numpy_ok=True):
    kind = _kind(fn, img)
    if kind == "tensor" or (kind == "numpy" and not numpy_ok):
        raise TypeError(f"{fn}: takes a PIL Image" + (" or a uint8 HWC ndarray" if numpy_ok else "") +
                        f", got a {'Tensor' if kind == 'tensor' else 'ndarray'}")
    return kind


def _lookup(img, table):
    return table[img]


def adjust_brightness(img, brightness_factor):
    """Scale the intensities by brightness_factor (0 gives black, 1 the image)."""
    if _color_kind("adjust_brightness", img) == "pil":
        return ImageEnhance.Brightness(img).enhance(brightness_factor)
    return _lookup(img, (np.arange(256) * brightness_factor).clip(0, 255).astype("uint8"))


def adjust_contrast(img, contrast_factor):
    """Scale the contrast by contrast_factor (0 gives a uniform gray, 1 the image)."""
    if _color_kind("adjust_contrast", img) == "pil":
        return ImageEnhance.Contrast(img).enhance(contrast_factor)
    return _lookup(img, ((np.arange(256) - 74) * contrast_factor + 74).clip(0, 255).astype("uint8"))


def adjust_saturation(img, saturation_factor):
    """Scale the saturation by saturation_factor (0 gives gray, 1 the image)."""
    if _color_kind("adjust_saturation", img) == "pil":
        return ImageEnhance.Color(img).enhance(saturation_factor)
    work = img.astype(np.float32)
    alpha = np.random.uniform(max(0, 1 - saturation_factor), 1 + saturation_factor)
    gray = (work[..., 2] * np.float32(0.299) + work[..., 1] * np.float32(0.587) + work[..., 0] * np.float32(0.114))
    return (work * alpha + gray[..., None] * (1 - alpha)).clip(0, 255).astype(img.dtype)


def adjust_hue(img, hue_factor):
    """Shift the hue by hue_factor in [-0.5, 0.5] of a turn (PIL images)."""
    if not -0.5 <= hue_factor <= 0.5:
        raise ValueError(f"adjust_hue: hue_factor must be in [-0.5, 0.5], got {hue_factor}")
    _color_kind("adjust_hue", img, numpy_ok=False)
    if img.mode in {"L", "1", "I", "F"}:
        return img
    h, s, v = img.convert("HSV").split()
    shifted = ((np.array(h, dtype=np.uint8).astype(np.int16) + int(hue_factor * 255)) % 256).astype(np.uint8)
    return Image.merge("HSV", (Image.fromarray(shifted, "L"), s, v)).convert(img.mode)


def rotate(img, angle, interpolation="nearest", expand=False, center=None, fill=0):
    """Rotate a PIL image by angle degrees counter-clockwise (Pillow's rotate, as Paddle's PIL backend)."""
    if _kind("rotate", img) != "pil":
        raise TypeError(f"rotate: takes a PIL Image (arrays need OpenCV's warpAffine in Paddle), got "
                        f"{type(img).__name__}")
    fill = (fill,) * 3 if isinstance(fill, int) else fill
    return img.rotate(angle, _pil_interp("rotate", interpolation), expand, center, fillcolor=fill)


def erase(img, i, j, h, w, v, inplace=False):
    """The h x w region at (i, j) set to v (CHW Tensors, HWC arrays, RGB PIL images); a copy unless inplace."""
    kind = _kind("erase", img)
    if kind == "tensor":
        if len(img.shape) < 3:
            raise ValueError(f"erase: a Tensor image must be CHW, got shape {list(img.shape)}")
        out = img if inplace else img.clone()
        out[..., i:i + h, j:j + w] = v
        return out
    if kind == "pil":
        array = np.array(img, dtype=np.uint8)
        array[i:i + h, j:j + w, ...] = v
        return Image.fromarray(array, "RGB")
    out = img if inplace else img.copy()
    out[i:i + h, j:j + w, ...] = v
    return out


__all__ = ["to_tensor", "normalize", "resize", "crop", "center_crop", "hflip", "vflip", "pad", "to_grayscale",
           "adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue", "rotate", "erase"]
