"""MNIST and FashionMNIST from their IDX files (gzip-compressed, as published), Paddle 3.2's constructor and
items: a 28x28 image (PIL 'L' image, or float32 array with backend 'cv2') and an int64 label of shape [1]."""

from __future__ import annotations

import gzip
import struct

import numpy as np

from oarlock.io import Dataset
from oarlock_vision.datasets.common import check_backend, check_mode, default_dtype, local_or_download

IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049


def read_idx(path, magic, dims, dataset):
    """The uint8 payload of an IDX file (gzip or plain) as an array of shape [count, *dims read]."""
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        data = f.read()
    header = ">" + "I" * (1 + dims)
    fields = struct.unpack_from(header, data, 0)
    if fields[0] != magic:
        raise ValueError(f"{dataset}: {path} is not an IDX file of the expected kind (magic number {fields[0]}, "
                         f"expected {magic})")
    shape = fields[1:]
    payload = np.frombuffer(data, np.uint8, offset=struct.calcsize(header))
    if payload.size != int(np.prod(shape)):
        raise ValueError(f"{dataset}: {path} holds {payload.size} bytes of data, its header says {list(shape)}")
    return payload.reshape(shape)


class MNIST(Dataset):
    """The MNIST digits; image_path / label_path name local IDX files (else they are downloaded when
    download=True, which needs network access)."""

    NAME = "mnist"
    URL_PREFIX = "https://dataset.bj.bcebos.com/mnist/"
    TEST_IMAGE_URL = URL_PREFIX + "t10k-images-idx3-ubyte.gz"
    TEST_IMAGE_MD5 = "9fb629c4189551a2d022fa330f9573f3"
    TEST_LABEL_URL = URL_PREFIX + "t10k-labels-idx1-ubyte.gz"
    TEST_LABEL_MD5 = "ec29112dd5afa0611ce80d1b7f02629c"
    TRAIN_IMAGE_URL = URL_PREFIX + "train-images-idx3-ubyte.gz"
    TRAIN_IMAGE_MD5 = "f68b3c2dcbeaaa9fbdd348bbdeb94873"
    TRAIN_LABEL_URL = URL_PREFIX + "train-labels-idx1-ubyte.gz"
    TRAIN_LABEL_MD5 = "d53e105ee54ea40749a09fcbcd1e9432"

    def __init__(self, image_path=None, label_path=None, mode="train", transform=None, download=True, backend=None):
        name = type(self).__name__
        self.backend = check_backend(name, backend)
        self.mode = check_mode(name, mode)
        train = self.mode == "train"
        self.image_path = local_or_download(name, "image_path", image_path,
                                            self.TRAIN_IMAGE_URL if train else self.TEST_IMAGE_URL,
                                            self.TRAIN_IMAGE_MD5 if train else self.TEST_IMAGE_MD5, self.NAME, download)
        self.label_path = local_or_download(name, "label_path", label_path,
                                            self.TRAIN_LABEL_URL if train else self.TEST_LABEL_URL,
                                            self.TRAIN_LABEL_MD5 if train else self.TEST_LABEL_MD5, self.NAME, download)
        self.transform = transform
        self._parse_dataset()
        self.dtype = default_dtype()

    def _parse_dataset(self):
        name = type(self).__name__
        images = read_idx(self.image_path, IMAGE_MAGIC, 3, name)
        labels = read_idx(self.label_path, LABEL_MAGIC, 1, name)
        if len(images) != len(labels):
            raise ValueError(f"{name}: {len(images)} images but {len(labels)} labels")
        self.images = list(images.reshape(len(images), -1).astype("float32"))
        self.labels = [np.array([label], dtype="int64") for label in labels]

    def __getitem__(self, idx):
        image = np.reshape(self.images[idx], [28, 28])
        if self.backend == "pil":
            from PIL import Image
            image = Image.fromarray(image.astype("uint8"), mode="L")
        if self.transform is not None:
            image = self.transform(image)
        if self.backend == "pil":
            return image, self.labels[idx].astype("int64")
        return image.astype(self.dtype), self.labels[idx].astype("int64")

    def __len__(self):
        return len(self.labels)


class FashionMNIST(MNIST):
    """Fashion-MNIST (the same files and items as MNIST)."""

    NAME = "fashion-mnist"
    URL_PREFIX = "https://dataset.bj.bcebos.com/fashion_mnist/"
    TEST_IMAGE_URL = URL_PREFIX + "t10k-images-idx3-ubyte.gz"
    TEST_IMAGE_MD5 = "bef4ecab320f06d8554ea6380940ec79"
    TEST_LABEL_URL = URL_PREFIX + "t10k-labels-idx1-ubyte.gz"
    TEST_LABEL_MD5 = "bb300cfdad3c16e7a12a480ee83cd310"
    TRAIN_IMAGE_URL = URL_PREFIX + "train-images-idx3-ubyte.gz"
    TRAIN_IMAGE_MD5 = "8d4fb7e6c68d591d4c3dfef9ec88bf0d"
    TRAIN_LABEL_URL = URL_PREFIX + "train-labels-idx1-ubyte.gz"
    TRAIN_LABEL_MD5 = "25c81989df183df01b3e8a0aad5dffbe"
