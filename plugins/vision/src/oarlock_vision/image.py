"""The image backend switch of paddle.vision: 'pil' (PIL images) or 'cv2' (HWC uint8 RGB numpy arrays; read here
with Pillow, so OpenCV is not needed), and image_load."""

from __future__ import annotations

import numpy as np

BACKENDS = ("pil", "cv2", "tensor")
_backend = ["pil"]


def set_image_backend(backend):
    """Choose what image datasets and image_load return: 'pil', 'cv2' (numpy) or 'tensor'."""
    if backend not in BACKENDS:
        raise ValueError(f"set_image_backend: backend must be one of {BACKENDS}, got {backend!r}")
    _backend[0] = backend


def get_image_backend():
    """The current image backend ('pil' unless set_image_backend chose another)."""
    return _backend[0]


def image_load(path, backend=None):
    """The image at path: a PIL RGB image ('pil'), an HWC uint8 RGB array ('cv2') or a CHW uint8 Tensor."""
    from PIL import Image

    backend = backend or get_image_backend()
    if backend not in BACKENDS:
        raise ValueError(f"image_load: backend must be one of {BACKENDS}, got {backend!r}")
    with open(path, "rb") as f:
        image = Image.open(f).convert("RGB")
    if backend == "pil":
        return image
    array = np.asarray(image)
    if backend == "cv2":
        return array
    import oarlock
    return oarlock.to_tensor(np.ascontiguousarray(array.transpose(2, 0, 1)))
