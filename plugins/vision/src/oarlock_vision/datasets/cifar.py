"""Cifar10 and Cifar100 from the published python-pickle tarballs (cifar-10-python.tar.gz, cifar-100-python.tar.gz),
Paddle 3.2's constructor and items: a 32x32x3 image (PIL image, or float32 HWC array with backend 'cv2') and
an int64 label."""

from __future__ import annotations

import pickle
import tarfile

import numpy as np

from oarlock.io import Dataset
from oarlock_vision.datasets.common import check_backend, check_mode, default_dtype, local_or_download

URL_PREFIX = "https://dataset.bj.bcebos.com/cifar/"
CIFAR10_URL, CIFAR10_MD5 = URL_PREFIX + "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a"
CIFAR100_URL, CIFAR100_MD5 = URL_PREFIX + "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85"
MODE_FLAG_MAP = {"train10": "data_batch", "test10": "test_batch", "train100": "train", "test100": "test"}


class _RestrictedUnpickler(pickle.Unpickler):
    """The batches are dicts of bytes, lists and numpy arrays: refuse every other global (a tarball is data, not
    code)."""

    ALLOWED = {(core, name) for core in ("numpy.core.multiarray", "numpy._core.multiarray")
               for name in ("_reconstruct", "scalar")} | {("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"Cifar: refusing to load {module}.{name} from a data batch")


class Cifar10(Dataset):
    """CIFAR-10; data_file names the local tarball (else it is downloaded when download=True)."""

    def __init__(self, data_file=None, mode="train", transform=None, download=True, backend=None):
        name = type(self).__name__
        self.mode = check_mode(name, mode)
        self.backend = check_backend(name, backend)
        self._init_url_md5_flag()
        self.data_file = local_or_download(name, "data_file", data_file, self.data_url, self.data_md5, "cifar",
                                           download)
        self.transform = transform
        self._load_data()
        self.dtype = default_dtype()

    def _init_url_md5_flag(self):
        self.data_url, self.data_md5, self.flag = CIFAR10_URL, CIFAR10_MD5, MODE_FLAG_MAP[self.mode + "10"]

    def _load_data(self):
        self.data = []
        with tarfile.open(self.data_file, mode="r") as f:
            for member in sorted(m.name for m in f if self.flag in m.name):
                batch = _RestrictedUnpickler(f.extractfile(member), encoding="bytes").load()
                labels = batch.get(b"labels", batch.get(b"fine_labels"))
                if labels is None:
                    raise ValueError(f"{type(self).__name__}: {member} in {self.data_file} has no labels")
                self.data.extend(zip(batch[b"data"], labels))

    def __getitem__(self, idx):
        image, label = self.data[idx]
        image = np.reshape(image, [3, 32, 32]).transpose([1, 2, 0])
        if self.backend == "pil":
            from PIL import Image
            image = Image.fromarray(image.astype("uint8"))
        if self.transform is not None:
            image = self.transform(image)
        if self.backend == "pil":
            return image, np.array(label).astype("int64")
        return image.astype(self.dtype), np.array(label).astype("int64")

    def __len__(self):
        return len(self.data)


class Cifar100(Cifar10):
    """CIFAR-100 (fine labels)."""

    def _init_url_md5_flag(self):
        self.data_url, self.data_md5, self.flag = CIFAR100_URL, CIFAR100_MD5, MODE_FLAG_MAP[self.mode + "100"]
