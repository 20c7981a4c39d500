"""oarlock.vision.datasets against Paddle 3.2's own data sets on the same local files (every item, label and
length), and the offline behaviour of oarlock.utils.download and the models' pretrained weights."""

from __future__ import annotations

import hashlib
import os
import warnings

import numpy as np
import pytest

import oarlock
import oarlock.vision.datasets as D
import oarlock.vision.models as M
import oarlock.vision.transforms as T
from errors import raises_naming
from image_files import write_cifar10, write_image_folder, write_mnist
from oarlock.utils.download import get_path_from_url, get_weights_path_from_url

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import paddle
    import paddle.vision.datasets as PD


def _items(dataset):
    out = []
    for i in range(len(dataset)):
        item = dataset[i]
        out.append([np.asarray(x.numpy() if hasattr(x, "numpy") else x) for x in item])
    return out


def _same_items(ours, theirs):
    assert len(ours) == len(theirs)
    for got, expected in zip(_items(ours), _items(theirs)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert g.shape == e.shape and g.dtype == e.dtype
            np.testing.assert_allclose(g, e, rtol=1e-6)


@pytest.mark.parametrize("cls", ["MNIST", "FashionMNIST"])
@pytest.mark.parametrize("backend", ["pil", "cv2"])
def test_mnist_as_paddle(tmp_path, cls, backend):
    images, labels = write_mnist(tmp_path)
    kwargs = dict(image_path=images, label_path=labels, mode="test", download=False, backend=backend)
    _same_items(getattr(D, cls)(**kwargs), getattr(PD, cls)(**kwargs))
    transformed = [getattr(lib, cls)(transform=T_.ToTensor(), **kwargs)
                   for lib, T_ in ((D, T), (PD, paddle.vision.transforms))] if backend == "pil" else None
    if transformed:
        _same_items(*transformed)


@pytest.mark.parametrize("mode", ["train", "test"])
def test_cifar10_as_paddle(tmp_path, mode):
    path = write_cifar10(tmp_path)
    for backend in ("pil", "cv2"):
        _same_items(D.Cifar10(path, mode=mode, download=False, backend=backend),
                    PD.Cifar10(path, mode=mode, download=False, backend=backend))


def test_folders_as_paddle(tmp_path):
    root = write_image_folder(tmp_path)
    ours, theirs = D.DatasetFolder(root), PD.DatasetFolder(root)
    assert ours.classes == theirs.classes == ["cat", "dog"]
    assert ours.samples == theirs.samples and ours.targets == theirs.targets
    _same_items(ours, theirs)
    ours, theirs = D.ImageFolder(root), PD.ImageFolder(root)
    assert ours.samples == theirs.samples and len(ours.samples) == 5  # notes.txt is not an image
    _same_items(ours, theirs)
    raises_naming(lambda: D.DatasetFolder(str(tmp_path / "images" / "cat" / "more")), RuntimeError,
                  "DatasetFolder", "0 files")


def test_offline_errors_name_the_file(tmp_path):
    raises_naming(lambda: D.MNIST(mode="train", download=False), ValueError, "MNIST", "image_path", "download")
    raises_naming(lambda: D.MNIST(mode="valid", download=False), ValueError, "MNIST", "mode", "valid")
    raises_naming(lambda: D.Cifar10(data_file=str(tmp_path / "none.tar.gz")), FileNotFoundError, "Cifar10",
                  "data_file", "none.tar.gz")
    # nothing listens on port 9 of this host: the download fails at once, and the error says where to put the file
    url = "http://127.0.0.1:9/weights/tiny.pdparams"
    raises_naming(lambda: get_path_from_url(url, str(tmp_path)), RuntimeError, "get_path_from_url", url,
                  str(tmp_path / "tiny.pdparams"))
    raises_naming(lambda: get_path_from_url("ftp://x/y", str(tmp_path)), ValueError, "get_path_from_url", "ftp://x/y")


def test_pretrained_weights_from_the_cache_or_a_path(tmp_path, monkeypatch):
    """pretrained=True finds Paddle's published file in the weights cache (checked by MD5), as Paddle does;
    a path works too; a missing file gives the URL and the path to put it at."""
    paddle.seed(3)
    reference = paddle.vision.models.squeezenet1_1()
    weights = tmp_path / "SqueezeNet1_1_pretrained.pdparams"
    paddle.save(reference.state_dict(), str(weights))  # a file in Paddle's own format, written by Paddle
    x = np.random.default_rng(0).normal(size=(1, 3, 64, 64)).astype("float32")
    reference.eval()
    expected = reference(paddle.to_tensor(x)).numpy()

    def check(model):
        model.eval()
        np.testing.assert_allclose(model(oarlock.to_tensor(x)).numpy(), expected, rtol=1e-4, atol=1e-5)

    ours = M.squeezenet1_1(pretrained=str(weights))
    check(ours)
    # and back: our state dict saved by oarlock.save loads into Paddle's model with the same result
    oarlock.save(ours.state_dict(), str(tmp_path / "ours.pdparams"))
    back = paddle.vision.models.squeezenet1_1()
    back.set_state_dict(paddle.load(str(tmp_path / "ours.pdparams")))
    back.eval()
    np.testing.assert_allclose(back(paddle.to_tensor(x)).numpy(), expected, rtol=1e-6, atol=1e-7)
    import oarlock_vision.download as download
    import oarlock_vision.models.squeezenet as squeezenet
    monkeypatch.setattr(download, "WEIGHTS_HOME", str(tmp_path))
    url, _ = squeezenet.model_urls["squeezenet1_1"]
    md5 = hashlib.md5(weights.read_bytes()).hexdigest()
    monkeypatch.setitem(squeezenet.model_urls, "squeezenet1_1", (url, md5))
    assert get_weights_path_from_url(url, md5) == str(weights)
    check(M.squeezenet1_1(pretrained=True))
    os.remove(weights)
    monkeypatch.setitem(squeezenet.model_urls, "squeezenet1_1", ("http://127.0.0.1:9/" + weights.name, md5))
    raises_naming(lambda: M.squeezenet1_1(pretrained=True), RuntimeError, "127.0.0.1:9", str(weights))
    raises_naming(lambda: M.resnet18(pretrained=str(tmp_path / "missing.pdparams")), FileNotFoundError,
                  "resnet18", "missing.pdparams")
    raises_naming(lambda: M.vgg11(pretrained=True), ValueError, "vgg11", "pretrained")
