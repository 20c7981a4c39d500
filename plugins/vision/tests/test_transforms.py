"""oarlock.vision.transforms against Paddle 3.2's own transforms: PIL images and Tensors through both with the
same seeds (Python's and numpy's generators, which both draw from) must give the same pixels; numpy images,
for which Paddle needs OpenCV (not installed), against Paddle's PIL results (the same operation) and against
torch's bilinear interpolation (cv2.INTER_LINEAR's definition)."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from PIL import Image

import oarlock
import oarlock.vision.transforms as T
from errors import raises_naming

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import paddle
    import paddle.vision.transforms as PT


def _image(h=37, w=53, mode="RGB", seed=0):
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "L": 1}[mode]
    array = rng.integers(0, 256, size=(h, w, channels), dtype=np.uint8)
    return Image.fromarray(array[..., 0] if channels == 1 else array, mode)


def _plain(x):
    if isinstance(x, (oarlock.Tensor, paddle.Tensor)):
        return x.numpy()
    return np.asarray(x)


def _same(ours, theirs, atol=0):
    assert type(_plain(ours)) is np.ndarray
    got, expected = _plain(ours), _plain(theirs)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, expected.shape, got.dtype,
                                                                         expected.dtype)
    if np.issubdtype(expected.dtype, np.floating):  # float32 rounding (x / 255 against x * (1 / 255), ...)
        atol = max(atol, 1e-5 * max(1.0, float(np.abs(expected).max())))
    np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), atol=atol, rtol=1e-5)


# (name, ours, Paddle's): each built the same way; random ones drawn with the same seeds
PIL_CASES = [
    ("to_tensor", lambda M: M.ToTensor()),
    ("to_tensor_hwc", lambda M: M.ToTensor(data_format="HWC")),
    ("resize_int", lambda M: M.Resize(24)),
    ("resize_pair_nearest", lambda M: M.Resize((20, 31), interpolation="nearest")),
    ("resize_bicubic", lambda M: M.Resize((40, 60), interpolation="bicubic")),
    ("center_crop", lambda M: M.CenterCrop((21, 30))),
    ("random_crop", lambda M: M.RandomCrop(20)),
    ("random_crop_padding", lambda M: M.RandomCrop((40, 50), padding=4, fill=7)),
    ("random_crop_pad_if_needed", lambda M: M.RandomCrop((45, 60), pad_if_needed=True, padding_mode="reflect")),
    ("random_resized_crop", lambda M: M.RandomResizedCrop(16, scale=(0.2, 1.0))),
    ("hflip", lambda M: M.RandomHorizontalFlip(0.5)),
    ("vflip", lambda M: M.RandomVerticalFlip(0.5)),
    ("normalize", lambda M: M.Normalize(mean=[120.0, 110.0, 100.0], std=[50.0, 60.0, 70.0], data_format="HWC")),
    ("transpose", lambda M: M.Transpose()),
    ("pad_constant", lambda M: M.Pad((1, 2, 3, 4), fill=(10, 20, 30))),
    ("pad_edge", lambda M: M.Pad(3, padding_mode="edge")),
    ("pad_reflect", lambda M: M.Pad((2, 5), padding_mode="reflect")),
    ("pad_symmetric", lambda M: M.Pad(4, padding_mode="symmetric")),
    ("grayscale", lambda M: M.Grayscale()),
    ("grayscale3", lambda M: M.Grayscale(3)),
    ("brightness", lambda M: M.BrightnessTransform(0.4)),
    ("contrast", lambda M: M.ContrastTransform(0.7)),
    ("saturation", lambda M: M.SaturationTransform(0.6)),
    ("hue", lambda M: M.HueTransform(0.3)),
    ("color_jitter", lambda M: M.ColorJitter(0.4, 0.4, 0.4, 0.2)),
    ("rotation", lambda M: M.RandomRotation(40)),
    ("rotation_expand_bilinear", lambda M: M.RandomRotation((10, 80), interpolation="bilinear", expand=True,
                                                            fill=(5, 6, 7))),
    ("erasing", lambda M: M.RandomErasing(prob=0.9, value=(10, 20, 30))),
    ("compose", lambda M: M.Compose([M.RandomResizedCrop(24), M.RandomHorizontalFlip(), M.ToTensor(),
                                     M.Normalize(mean=0.5, std=0.25)])),
]


@pytest.mark.parametrize("name,build", PIL_CASES, ids=[c[0] for c in PIL_CASES])
def test_pil_images_as_paddle(name, build):
    ours, theirs = build(T), build(PT)
    for seed in range(4):  # several draws of the random transforms
        img = _image(seed=seed)
        results = []
        for transform in (theirs, ours):
            random.seed(seed)
            np.random.seed(seed)
            results.append(transform(img))
        _same(results[1], results[0])


TENSOR_CASES = [
    ("resize", lambda M: M.Resize((20, 31))),
    ("resize_int_nearest", lambda M: M.Resize(19, interpolation="nearest")),
    ("center_crop", lambda M: M.CenterCrop(17)),
    ("random_crop", lambda M: M.RandomCrop((11, 23))),
    ("hflip", lambda M: M.RandomHorizontalFlip(1.0)),
    ("vflip", lambda M: M.RandomVerticalFlip(1.0)),
    ("normalize", lambda M: M.Normalize(mean=[0.5, 0.4, 0.3], std=[0.2, 0.3, 0.4])),
    ("pad", lambda M: M.Pad((1, 2, 3, 4), fill=0.5)),
    ("erasing", lambda M: M.RandomErasing(prob=1.0, value=0.25)),
]


@pytest.mark.parametrize("name,build", TENSOR_CASES, ids=[c[0] for c in TENSOR_CASES])
def test_tensor_images_as_paddle(name, build):
    x = np.random.default_rng(3).random((3, 37, 53), dtype=np.float32)
    results = []
    for lib, module in ((paddle, PT), (oarlock, T)):
        random.seed(0)
        np.random.seed(0)
        results.append(build(module)(lib.to_tensor(x)))
    _same(results[1], results[0], atol=1e-6)


def test_numpy_images_without_opencv():
    """What Paddle does with OpenCV, in numpy: Paddle's own numpy paths where they need no OpenCV (to_tensor,
    normalize, crops, transpose), its PIL results for flips, pads and grayscale, torch for resizing."""
    import torch
    pil = _image(seed=5)
    hwc = np.asarray(pil)
    for seed in range(3):  # RandomErasing on arrays runs Paddle's own numpy code
        for lib_transforms in (PT, T):
            random.seed(seed)
            np.random.seed(seed)
            out = lib_transforms.RandomErasing(prob=0.8, value="random")(hwc)
            if lib_transforms is PT:
                expected = out
        _same(out, expected)
    for build in (lambda M: M.ToTensor(), lambda M: M.Normalize([1, 2, 3], [4, 5, 6], data_format="HWC"),
                  lambda M: M.CenterCrop(20), lambda M: M.Transpose((2, 1, 0))):
        _same(build(T)(hwc), build(PT)(hwc))
    random.seed(1)
    expected = PT.RandomCrop(17)(hwc)
    random.seed(1)
    _same(T.RandomCrop(17)(hwc), expected)
    F = T.functional
    _same(F.hflip(hwc), PT.functional.hflip(pil))
    _same(F.vflip(hwc), PT.functional.vflip(pil))
    for padding, mode in (((1, 2, 3, 4), "constant"), (3, "edge"), ((2, 5), "reflect"), (4, "symmetric")):
        _same(F.pad(hwc, padding, fill=9, padding_mode=mode), PT.functional.pad(pil, padding, fill=9,
                                                                                  padding_mode=mode))
    _same(F.to_grayscale(hwc), np.asarray(PT.functional.to_grayscale(pil))[..., None], atol=1)
    # bilinear resize = cv2.INTER_LINEAR = torch's bilinear without corner alignment or antialiasing
    floats = hwc.astype(np.float32)
    for size in ((20, 31), (60, 90), 24):
        got = F.resize(floats, size)
        oh, ow = got.shape[:2]
        ref = torch.nn.functional.interpolate(torch.tensor(floats).permute(2, 0, 1)[None], size=(oh, ow),
                                              mode="bilinear", align_corners=False, antialias=False)
        np.testing.assert_allclose(got, ref[0].permute(1, 2, 0).numpy(), rtol=1e-5, atol=1e-3)
        assert (oh, ow) == ((20, 31), (60, 90), (24, 34))[[(20, 31), (60, 90), 24].index(size)]
        assert np.abs(F.resize(hwc, size).astype(int) - np.rint(got)).max() <= 1  # uint8: rounded


def test_numpy_colour_as_paddles_opencv_code(monkeypatch):
    """Paddle's own OpenCV-backend colour functions (their lookup tables and blends), run with a shim for the
    three OpenCV calls they make (LUT: table indexing; BGR2GRAY: 0.114 B + 0.587 G + 0.299 R), on the same
    numpy generator state as ours."""
    import sys
    import types

    from paddle.vision.transforms import functional_cv2 as FC

    shim = types.SimpleNamespace(
        LUT=lambda img, table: table[img], COLOR_BGR2GRAY=6,
        cvtColor=lambda img, code: img[..., 0] * np.float32(0.114) + img[..., 1] * np.float32(0.587)
        + img[..., 2] * np.float32(0.299))
    monkeypatch.setitem(sys.modules, "cv2", shim)
    hwc = np.asarray(_image(seed=6))
    F = T.functional
    for name, factor in (("adjust_brightness", 1.3), ("adjust_brightness", 0.4), ("adjust_contrast", 1.6),
                         ("adjust_contrast", 0.3), ("adjust_saturation", 0.5), ("adjust_saturation", 1.8)):
        np.random.seed(7)
        expected = getattr(FC, name)(hwc, factor)
        np.random.seed(7)
        got = getattr(F, name)(hwc, factor)
        assert got.dtype == expected.dtype == np.uint8
        assert np.abs(got.astype(int) - expected.astype(int)).max() <= 1, name  # float32 sums' order


def test_bad_arguments_are_named():
    raises_naming(lambda: T.functional.adjust_hue(np.zeros((2, 2, 3), np.uint8), 0.1), TypeError, "adjust_hue",
                  "ndarray")
    raises_naming(lambda: T.functional.adjust_hue(_image(), 0.7), ValueError, "adjust_hue", "hue_factor", "0.7")
    raises_naming(lambda: T.BrightnessTransform(-1), ValueError, "brightness", "-1")
    raises_naming(lambda: T.functional.resize("not an image", 3), TypeError, "resize", "str")
    raises_naming(lambda: T.functional.resize(np.zeros((4, 4, 3), np.uint8), 2, "lanczos"), ValueError, "resize",
                  "interpolation", "lanczos")
    raises_naming(lambda: T.Pad(3, padding_mode="wrap"), ValueError, "Pad", "padding_mode", "wrap")
    raises_naming(lambda: T.RandomHorizontalFlip(1.5), ValueError, "RandomHorizontalFlip", "prob", "1.5")
    raises_naming(lambda: T.RandomCrop(50)(np.zeros((10, 10, 3), np.uint8)), ValueError, "RandomCrop", "10x10")
    raises_naming(lambda: T.ToTensor(data_format="NCHW")(np.zeros((2, 2), np.uint8)), ValueError, "to_tensor",
                  "data_format", "NCHW")
