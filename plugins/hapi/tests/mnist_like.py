"""A small MNIST-like data set, generated deterministically: 28x28 single-channel images of 10 classes.

Each class has a fixed glyph (a few thick random strokes on a 20x20 canvas, from a seeded RandomState); an
image is its class's glyph shifted by up to 3 pixels each way, scaled in brightness, with Gaussian noise, then
clipped to [0, 1]. Learnable by LeNet in a few epochs but not trivially (shifts and noise overlap classes)."""

from __future__ import annotations

import numpy as np


def glyphs(seed: int = 1234) -> np.ndarray:
    rng = np.random.RandomState(seed)
    out = np.zeros((10, 20, 20), dtype=np.float32)
    for c in range(10):
        for _ in range(3):   # three strokes per glyph
            (r0, c0), (r1, c1) = rng.randint(2, 18, size=(2, 2))
            for t in np.linspace(0.0, 1.0, 40):
                r, col = int(round(r0 + t * (r1 - r0))), int(round(c0 + t * (c1 - c0)))
                out[c, max(r - 1, 0):r + 2, max(col - 1, 0):col + 2] = 1.0
    return out


def make(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(images [n, 1, 28, 28] float32, labels [n, 1] int64), classes in a fixed pseudo-random order."""
    rng = np.random.RandomState(seed)
    shapes = glyphs()
    labels = rng.randint(0, 10, size=n).astype(np.int64)
    images = np.zeros((n, 1, 28, 28), dtype=np.float32)
    for i, label in enumerate(labels):
        dr, dc = rng.randint(-3, 4, size=2)
        images[i, 0, 4 + dr:24 + dr, 4 + dc:24 + dc] = shapes[label] * rng.uniform(0.6, 1.0)
    images += rng.normal(0.0, 0.3, size=images.shape).astype(np.float32)
    return np.clip(images, 0.0, 1.0), labels.reshape(n, 1)


def dataset_class(base):
    """A Dataset class over `base` (oarlock.io.Dataset or paddle.io.Dataset) serving (image, label) pairs."""

    class MnistLike(base):
        def __init__(self, n: int, seed: int):
            super().__init__()
            self.images, self.labels = make(n, seed)

        def __getitem__(self, index):
            return self.images[index], self.labels[index]

        def __len__(self):
            return len(self.labels)

    return MnistLike
