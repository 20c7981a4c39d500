"""What the data sets share: Paddle's backend check and the local-file-or-download rule."""

from __future__ import annotations

import os.path as osp

from oarlock_vision.download import get_path_from_url
from oarlock_vision.image import get_image_backend

DATA_HOME = osp.expanduser("~/.cache/paddle/dataset")


def default_dtype():
    """The default dtype's name, a string as Paddle's get_default_dtype gives ('float32')."""
    import oarlock
    return oarlock.get_default_dtype().name


def check_backend(dataset, backend):
    backend = get_image_backend() if backend is None else backend
    if backend not in ("pil", "cv2"):
        raise ValueError(f"{dataset}: backend must be one of ['pil', 'cv2'], got {backend!r}")
    return backend


def check_mode(dataset, mode):
    if not isinstance(mode, str) or mode.lower() not in ("train", "test"):
        raise ValueError(f"{dataset}: mode should be 'train' or 'test', got {mode!r}")
    return mode.lower()


def local_or_download(dataset, argument, path, url, md5, name, download):
    """`path` when given; else the cached download of url (under DATA_HOME/name), if download is allowed."""
    if path is not None:
        if not osp.isfile(path):
            raise FileNotFoundError(f"{dataset}: {argument}={path!r} is not a file")
        return path
    if not download:
        raise ValueError(f"{dataset}: {argument} is not set and downloading automatically is disabled "
                         f"(download=False); give the path of the local file")
    return get_path_from_url(url, osp.join(DATA_HOME, name), md5, decompress=False)
