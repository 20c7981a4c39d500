"""Small local data sets in the published formats, written by the tests: MNIST IDX files (gzip), a CIFAR
python-pickle tarball and a folder of PNG images."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import struct
import tarfile

import numpy as np
from PIL import Image


def write_mnist(directory, count=100, seed=0):
    """(image_path, label_path) of gzip IDX files holding `count` random 28x28 images and labels."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=count, dtype=np.uint8)
    image_path, label_path = os.path.join(directory, "images.gz"), os.path.join(directory, "labels.gz")
    with gzip.open(image_path, "wb") as f:
        f.write(struct.pack(">IIII", 2051, count, 28, 28) + images.tobytes())
    with gzip.open(label_path, "wb") as f:
        f.write(struct.pack(">II", 2049, count) + labels.tobytes())
    return image_path, label_path


def write_cifar10(directory, per_batch=6, seed=0):
    """A cifar-10-python.tar.gz with two training batches and a test batch."""
    rng = np.random.default_rng(seed)
    path = os.path.join(directory, "cifar-10-python.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for name in ("data_batch_2", "data_batch_1", "test_batch"):
            batch = {b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
                     b"labels": rng.integers(0, 10, size=per_batch).tolist()}
            data = pickle.dumps(batch)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def write_image_folder(directory, seed=0):
    """root/<class>/<n>.png for classes cat and dog (and a .txt file that is not an image)."""
    rng = np.random.default_rng(seed)
    root = os.path.join(directory, "images")
    for cls, n in (("dog", 2), ("cat", 3)):
        os.makedirs(os.path.join(root, cls, "more" if cls == "cat" else ""), exist_ok=True)
        for i in range(n):
            sub = "more" if cls == "cat" and i == 2 else ""
            array = rng.integers(0, 256, size=(5 + i, 7, 3), dtype=np.uint8)
            Image.fromarray(array).save(os.path.join(root, cls, sub, f"{i}.png"))
    with open(os.path.join(root, "dog", "notes.txt"), "w") as f:
        f.write("not an image")
    return root
