"""oarlock.vision.transforms: Paddle 3.2's transform classes over transforms.functional.

Random transforms draw exactly as Paddle's do (Python's `random` for flips and crop offsets, numpy's global
generator for RandomResizedCrop's scale and ratio), so with the same seeds they pick the same crops and flips.
A transform called with a tuple applies itself to the elements named by `keys` (default ("image",)) and
passes the rest through, as Paddle's BaseTransform does.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Sequence

import numpy as np

import oarlock
from oarlock_vision.transforms import functional as F


class BaseTransform:
    """A transform of the inputs named by `keys`; subclasses define _apply_image (and _get_params)."""

    def __init__(self, keys=None):
        keys = ("image",) if keys is None else keys
        if not isinstance(keys, Sequence) or isinstance(keys, str):
            raise ValueError(f"{type(self).__name__}: keys should be a sequence, got keys={keys!r}")
        for key in keys:
            if getattr(self, f"_apply_{key}", None) is None:
                raise NotImplementedError(f"{type(self).__name__}: {key!r} is an unsupported data structure")
        self.keys, self.params = keys, None

    def _get_params(self, inputs):
        return None

    def __call__(self, inputs):
        single = not isinstance(inputs, tuple)
        inputs = (inputs,) if single else inputs
        self.params = self._get_params(inputs)
        outputs = [getattr(self, f"_apply_{key}")(value) for key, value in zip(self.keys, inputs)]
        outputs += list(inputs[len(self.keys):])
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _apply_image(self, image):
        raise NotImplementedError


class Compose:
    """Apply the transforms in order."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, data):
        for transform in self.transforms:
            data = transform(data)
        return data

    def __repr__(self):
        return type(self).__name__ + "(" + "".join(f"\n    {t}" for t in self.transforms) + "\n)"


class ToTensor(BaseTransform):
    """PIL image or HWC array -> float32 Tensor (uint8 scaled to [0, 1]), CHW unless data_format='HWC'."""

    def __init__(self, data_format="CHW", keys=None):
        super().__init__(keys)
        self.data_format = data_format

    def _apply_image(self, img):
        return F.to_tensor(img, self.data_format)


class Resize(BaseTransform):
    """Resize to (height, width), or the shorter side to an int size."""

    def __init__(self, size, interpolation="bilinear", keys=None):
        super().__init__(keys)
        if not (isinstance(size, int) or (isinstance(size, Sequence) and len(size) == 2)):
            raise ValueError(f"Resize: size must be an int or a (height, width) pair, got {size!r}")
        self.size, self.interpolation = size, interpolation

    def _apply_image(self, img):
        return F.resize(img, self.size, self.interpolation)


class RandomResizedCrop(BaseTransform):
    """A random crop of random area (scale) and aspect ratio (ratio), resized to size."""

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3.0 / 4, 4.0 / 3), interpolation="bilinear", keys=None):
        super().__init__(keys)
        self.size = (size, size) if isinstance(size, int) else size
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"RandomResizedCrop: scale and ratio should be (min, max), got scale={scale}, "
                             f"ratio={ratio}")
        self.scale, self.ratio, self.interpolation = scale, ratio, interpolation

    def _get_param(self, image, attempts=10):
        width, height = F.get_image_size(image)
        area = height * width
        log_ratio = tuple(math.log(x) for x in self.ratio)
        for _ in range(attempts):
            target_area = np.random.uniform(*self.scale) * area
            aspect_ratio = math.exp(np.random.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect_ratio)))
            h = int(round(math.sqrt(target_area / aspect_ratio)))
            if 0 < w <= width and 0 < h <= height:
                return random.randint(0, height - h), random.randint(0, width - w), h, w
        # fallback: the central crop with the ratio clamped into range
        in_ratio = width / height
        if in_ratio < min(self.ratio):
            w, h = width, int(round(width / min(self.ratio)))
        elif in_ratio > max(self.ratio):
            w, h = int(round(height * max(self.ratio))), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def _apply_image(self, img):
        i, j, h, w = self._get_param(img)
        return F.resize(F.crop(img, i, j, h, w), self.size, self.interpolation)


class CenterCrop(BaseTransform):
    """The central size (int or (height, width)) region."""

    def __init__(self, size, keys=None):
        super().__init__(keys)
        self.size = (int(size), int(size)) if isinstance(size, numbers.Number) else size

    def _apply_image(self, img):
        return F.center_crop(img, self.size)


class _RandomFlip(BaseTransform):
    flip = None

    def __init__(self, prob=0.5, keys=None):
        super().__init__(keys)
        if not 0 <= prob <= 1:
            raise ValueError(f"{type(self).__name__}: prob must be between 0 and 1, got {prob!r}")
        self.prob = prob

    def _apply_image(self, img):
        return type(self).flip(img) if random.random() < self.prob else img


class RandomHorizontalFlip(_RandomFlip):
    """Mirror left to right with probability prob."""

    flip = staticmethod(F.hflip)


class RandomVerticalFlip(_RandomFlip):
    """Mirror top to bottom with probability prob."""

    flip = staticmethod(F.vflip)


class Normalize(BaseTransform):
    """(img - mean) / std per channel (a number means the same for three channels)."""

    def __init__(self, mean=0.0, std=1.0, data_format="CHW", to_rgb=False, keys=None):
        super().__init__(keys)
        self.mean = [mean] * 3 if isinstance(mean, numbers.Number) else mean
        self.std = [std] * 3 if isinstance(std, numbers.Number) else std
        self.data_format, self.to_rgb = data_format, to_rgb

    def _apply_image(self, img):
        return F.normalize(img, self.mean, self.std, self.data_format, self.to_rgb)


class Transpose(BaseTransform):
    """Permute the axes of an HWC image (a PIL image becomes an array; 2-D arrays gain a channel axis)."""

    def __init__(self, order=(2, 0, 1), keys=None):
        super().__init__(keys)
        self.order = order

    def _apply_image(self, img):
        if isinstance(img, oarlock.Tensor):
            return img.transpose(list(self.order))
        img = np.asarray(img)
        return (img[..., np.newaxis] if img.ndim == 2 else img).transpose(self.order)


class RandomCrop(BaseTransform):
    """A random size crop, after optional padding (pad_if_needed pads images smaller than size)."""

    def __init__(self, size, padding=None, pad_if_needed=False, fill=0, padding_mode="constant", keys=None):
        super().__init__(keys)
        self.size = (int(size), int(size)) if isinstance(size, numbers.Number) else size
        self.padding, self.pad_if_needed, self.fill, self.padding_mode = padding, pad_if_needed, fill, padding_mode

    def _get_param(self, img, output_size):
        w, h = F.get_image_size(img)
        th, tw = output_size
        if w == tw and h == th:
            return 0, 0, h, w
        if h < th or w < tw:
            raise ValueError(f"RandomCrop: the image ({h}x{w}) is smaller than the crop size {th}x{tw}; pass "
                             f"padding or pad_if_needed=True")
        return random.randint(0, h - th), random.randint(0, w - tw), th, tw

    def _apply_image(self, img):
        if self.padding is not None:
            img = F.pad(img, self.padding, self.fill, self.padding_mode)
        w, h = F.get_image_size(img)
        if self.pad_if_needed and w < self.size[1]:
            img = F.pad(img, (self.size[1] - w, 0), self.fill, self.padding_mode)
        if self.pad_if_needed and h < self.size[0]:
            img = F.pad(img, (0, self.size[0] - h), self.fill, self.padding_mode)
        return F.crop(img, *self._get_param(img, self.size))


class Pad(BaseTransform):
    """Pad the borders (see functional.pad)."""

    def __init__(self, padding, fill=0, padding_mode="constant", keys=None):
        if padding_mode not in F.PAD_MODES:
            raise ValueError(f"Pad: padding_mode must be one of {F.PAD_MODES}, got {padding_mode!r}")
        F._padding(padding)  # checks the form
        super().__init__(keys)
        self.padding = tuple(padding) if isinstance(padding, list) else padding
        self.fill = tuple(fill) if isinstance(fill, list) else fill
        self.padding_mode = padding_mode

    def _apply_image(self, img):
        return F.pad(img, self.padding, self.fill, self.padding_mode)


class Grayscale(BaseTransform):
    """Convert to grayscale with 1 or 3 channels."""

    def __init__(self, num_output_channels=1, keys=None):
        super().__init__(keys)
        self.num_output_channels = num_output_channels

    def _apply_image(self, img):
        return F.to_grayscale(img, self.num_output_channels)


def _check_input(name, value, center=1, bound=(0, float("inf")), clip_first_on_zero=True):
    """Paddle's range of a colour factor: a number v gives [center - v, center + v] (clipped at 0), a pair is
    checked against bound; None when the range is the identity."""
    if isinstance(value, numbers.Number):
        if value < 0:
            raise ValueError(f"{name}: if it is a single number it must be non-negative, got {value}")
        value = [center - value, center + value]
        if clip_first_on_zero:
            value[0] = max(value[0], 0)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        if not bound[0] <= value[0] <= value[1] <= bound[1]:
            raise ValueError(f"{name}: values should be between {bound}, got {value}")
    else:
        raise TypeError(f"{name}: should be a single number or a list/tuple of length 2, got {value!r}")
    return None if value[0] == value[1] == center else value


class _ColorTransform(BaseTransform):
    """Apply `adjust` with a factor drawn uniformly (Python's random) from the range of `value`."""

    adjust, name, center, bound, clip_first_on_zero = None, "", 1, (0, float("inf")), True

    def __init__(self, value, keys=None):
        super().__init__(keys)
        self.value = _check_input(self.name, value, self.center, self.bound, self.clip_first_on_zero)

    def _apply_image(self, img):
        if self.value is None:
            return img
        return type(self).adjust(img, random.uniform(self.value[0], self.value[1]))


class BrightnessTransform(_ColorTransform):
    """Random brightness in [max(0, 1 - value), 1 + value] (or the given range)."""

    adjust, name = staticmethod(F.adjust_brightness), "brightness"


class ContrastTransform(_ColorTransform):
    """Random contrast in [max(0, 1 - value), 1 + value] (or the given range)."""

    adjust, name = staticmethod(F.adjust_contrast), "contrast"


class SaturationTransform(_ColorTransform):
    """Random saturation in [max(0, 1 - value), 1 + value] (or the given range)."""

    adjust, name = staticmethod(F.adjust_saturation), "saturation"


class HueTransform(_ColorTransform):
    """Random hue shift in [-value, value], value at most 0.5."""

    adjust, name, center, bound, clip_first_on_zero = staticmethod(F.adjust_hue), "hue", 0, (-0.5, 0.5), False


class ColorJitter(BaseTransform):
    """Brightness, contrast, saturation and hue transforms in a random order (Python's random.shuffle)."""

    def __init__(self, brightness=0, contrast=0, saturation=0, hue=0, keys=None):
        super().__init__(keys)
        self.brightness, self.contrast, self.saturation, self.hue = brightness, contrast, saturation, hue

    def _apply_image(self, img):
        transforms = [cls(value, self.keys) for cls, value in (
            (BrightnessTransform, self.brightness), (ContrastTransform, self.contrast),
            (SaturationTransform, self.saturation), (HueTransform, self.hue)) if value is not None]
        random.shuffle(transforms)
        return Compose(transforms)(img)


class RandomRotation(BaseTransform):
    """Rotate by an angle drawn uniformly (Python's random) from degrees ((-d, d) for a number)."""

    def __init__(self, degrees, interpolation="nearest", expand=False, center=None, fill=0, keys=None):
        if isinstance(degrees, numbers.Number):
            if degrees < 0:
                raise ValueError(f"RandomRotation: degrees, if a single number, must be non-negative, got {degrees}")
            degrees = (-degrees, degrees)
        elif len(degrees) != 2:
            raise ValueError(f"RandomRotation: degrees, if a sequence, must have length 2, got {degrees!r}")
        super().__init__(keys)
        self.degrees, self.interpolation, self.expand, self.center, self.fill = (degrees, interpolation, expand,
                                                                                 center, fill)

    def _apply_image(self, img):
        angle = random.uniform(self.degrees[0], self.degrees[1])
        return F.rotate(img, angle, self.interpolation, self.expand, self.center, self.fill)


class RandomErasing(BaseTransform):
    """With probability prob, set a random rectangle (area fraction in scale, aspect ratio in ratio) to value
    (a number, one per channel, or 'random' for normal noise); draws as Paddle's (Python's random for the
    decision, numpy's generator for the rectangle)."""

    def __init__(self, prob=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0, inplace=False, keys=None):
        super().__init__(keys)
        if not (isinstance(scale, (tuple, list)) and 0 <= scale[0] <= scale[1] <= 1):
            raise ValueError(f"RandomErasing: scale should be (min, max) in [0, 1], got {scale!r}")
        if not (isinstance(ratio, (tuple, list)) and 0 <= ratio[0] <= ratio[1]):
            raise ValueError(f"RandomErasing: ratio should be (min, max), got {ratio!r}")
        if not 0 <= prob <= 1:
            raise ValueError(f"RandomErasing: prob should be in [0, 1], got {prob!r}")
        if isinstance(value, str) and value != "random":
            raise ValueError(f"RandomErasing: a str value must be 'random', got {value!r}")
        self.prob, self.scale, self.ratio, self.value, self.inplace = prob, scale, ratio, value, inplace

    def _get_param(self, img, value):
        if F._is_tensor_image(img):
            c, h, w = img.shape[-3:]
        else:
            h, w, c = np.asarray(img).shape[-3:]
        log_ratio = np.log(self.ratio)
        for _ in range(10):
            erase_area = np.random.uniform(*self.scale) * h * w
            aspect_ratio = np.exp(np.random.uniform(*log_ratio))
            eh, ew = int(round(np.sqrt(erase_area * aspect_ratio))), int(round(np.sqrt(erase_area / aspect_ratio)))
            if eh >= h or ew >= w:
                continue
            if F._is_tensor_image(img):
                v = (oarlock.normal(shape=[c, eh, ew]).astype(img.dtype) if value is None
                     else oarlock.to_tensor(value, dtype=img.dtype)[:, None, None])
            else:
                v = np.random.normal(size=[eh, ew, c]) * 255 if value is None else np.array(value)[None, None, :]
            return np.random.randint(0, h - eh + 1), np.random.randint(0, w - ew + 1), eh, ew, v
        return 0, 0, h, w, img

    def _apply_image(self, img):
        if random.random() >= self.prob:
            return img
        value = [self.value] if isinstance(self.value, numbers.Number) else (
            None if isinstance(self.value, str) else self.value)
        if value is not None and len(value) not in (1, 3):
            raise ValueError(f"RandomErasing: value should be a number or one per channel, got {self.value!r}")
        return F.erase(img, *self._get_param(img, value), self.inplace)


__all__ = ["RandomRotation", "RandomErasing", "BrightnessTransform", "ContrastTransform", "SaturationTransform",
           "HueTransform", "ColorJitter", "BaseTransform", "Compose", "ToTensor", "Resize", "RandomResizedCrop",
           "CenterCrop", "RandomHorizontalFlip", "RandomVerticalFlip", "Normalize", "Transpose", "RandomCrop", "Pad",
           "Grayscale"]
