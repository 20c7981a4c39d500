"""DatasetFolder (root/class_x/xxx.png -> (sample, class index)) and ImageFolder (every image under root ->
[sample]), Paddle 3.2's constructors, ordering and errors."""

from __future__ import annotations

import os

from oarlock.io import Dataset
from oarlock_vision.datasets.common import default_dtype
from oarlock_vision.image import get_image_backend, image_load

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def has_valid_extension(filename, extensions):
    """Whether filename ends with one of extensions (case-insensitive)."""
    if not isinstance(extensions, (list, tuple)):
        raise TypeError(f"has_valid_extension: extensions must be a list or tuple, got {type(extensions).__name__}")
    return filename.lower().endswith(tuple(x.lower() for x in extensions))


def _validity(extensions, is_valid_file):
    if extensions is not None:  # as in Paddle, extensions (always set by the callers) win over is_valid_file
        return lambda path: has_valid_extension(path, extensions)
    return is_valid_file


def make_dataset(dir, class_to_idx, extensions, is_valid_file=None):
    """(path, class index) for every valid file under dir/<class>, classes and files in sorted order."""
    valid = _validity(extensions, is_valid_file)
    items = []
    dir = os.path.expanduser(dir)
    for target in sorted(class_to_idx):
        d = os.path.join(dir, target)
        if not os.path.isdir(d):
            continue
        for root, _, fnames in sorted(os.walk(d, followlinks=True)):
            items += [(os.path.join(root, f), class_to_idx[target]) for f in sorted(fnames)
                      if valid(os.path.join(root, f))]
    return items


def pil_loader(path):
    return image_load(path, "pil")


def cv2_loader(path):
    """An HWC uint8 RGB array (what OpenCV's imread + BGR2RGB gives), read with Pillow."""
    return image_load(path, "cv2")


def default_loader(path):
    return cv2_loader(path) if get_image_backend() == "cv2" else pil_loader(path)


class DatasetFolder(Dataset):
    """Samples root/<class>/**/<file> labelled by the sorted index of <class>."""

    def __init__(self, root, loader=None, extensions=None, transform=None, is_valid_file=None):
        self.root, self.transform = root, transform
        extensions = IMG_EXTENSIONS if extensions is None else extensions
        classes = sorted(d.name for d in os.scandir(root) if d.is_dir())
        class_to_idx = {c: i for i, c in enumerate(classes)}
        samples = make_dataset(root, class_to_idx, extensions, is_valid_file)
        if not samples:
            raise RuntimeError(f"DatasetFolder: found 0 files in subfolders of: {root}\nSupported extensions are: "
                               + ",".join(extensions))
        self.loader = default_loader if loader is None else loader
        self.extensions, self.classes, self.class_to_idx, self.samples = extensions, classes, class_to_idx, samples
        self.targets = [s[1] for s in samples]
        self.dtype = default_dtype()

    def __getitem__(self, index):
        path, target = self.samples[index]
        sample = self.loader(path)
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, target

    def __len__(self):
        return len(self.samples)


class ImageFolder(Dataset):
    """Every valid file under root (sorted walk); an item is [sample]."""

    def __init__(self, root, loader=None, extensions=None, transform=None, is_valid_file=None):
        self.root, self.transform = root, transform
        extensions = IMG_EXTENSIONS if extensions is None else extensions
        valid = _validity(extensions, is_valid_file)
        samples = []
        for walk_root, _, fnames in sorted(os.walk(os.path.expanduser(root), followlinks=True)):
            samples += [os.path.join(walk_root, f) for f in sorted(fnames) if valid(os.path.join(walk_root, f))]
        if not samples:
            raise RuntimeError(f"ImageFolder: found 0 files in subfolders of: {root}\nSupported extensions are: "
                               + ",".join(extensions))
        self.loader = default_loader if loader is None else loader
        self.extensions, self.samples = extensions, samples

    def __getitem__(self, index):
        sample = self.loader(self.samples[index])
        if self.transform is not None:
            sample = self.transform(sample)
        return [sample]

    def __len__(self):
        return len(self.samples)
