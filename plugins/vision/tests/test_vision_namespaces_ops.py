"""oarlock.vision's names against Paddle 3.2's (paddle.vision.models.__all__ and each model module's classes and
functions, which model code imports from the module: `from paddle.vision.models.resnet import BottleneckBlock`),
and vision.ops.nms against Paddle's nms."""

from __future__ import annotations

import importlib
import inspect
import warnings

import numpy as np
import pytest

import oarlock
import oarlock.vision
import oarlock.vision.models
import oarlock.vision.ops as ops
from oarlock_vision.exports import MODEL_MODULES

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import paddle
    import paddle.vision.models


def test_models_namespace_has_paddles_names():
    assert set(paddle.vision.models.__all__) <= set(dir(oarlock.vision.models))
    top = set(paddle.vision.models.__all__) | {"MNIST", "FashionMNIST", "Cifar10", "Cifar100", "DatasetFolder",
                                              "ImageFolder", "set_image_backend", "get_image_backend", "image_load"}
    assert top <= set(dir(paddle.vision)) and top <= set(dir(oarlock.vision))


@pytest.mark.parametrize("module", MODEL_MODULES)
def test_model_modules_have_paddles_names(module):
    theirs = importlib.import_module(f"paddle.vision.models.{module}")
    ours = importlib.import_module(f"oarlock.vision.models.{module}")
    names = {n for n, v in vars(theirs).items() if not n.startswith("_") and (
        inspect.isclass(v) or inspect.isfunction(v)) and v.__module__ == theirs.__name__}
    assert names and names <= set(dir(ours))
    for name in names:  # the same signatures (parameter names and defaults)
        if inspect.isclass(getattr(theirs, name)) and not hasattr(getattr(theirs, name), "forward"):
            continue
        target = getattr(theirs, name)
        mine = getattr(ours, name)
        if inspect.isclass(target):
            target, mine = target.__init__, mine.__init__
        assert _parameters(mine) == _parameters(target), name


def _parameters(fn):
    """(name, default) of each parameter; a class default (a norm or activation layer) by its class name."""
    return [(p.name, p.default.__name__ if inspect.isclass(p.default) else p.default)
            for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("case", ["scores", "no_scores", "categories", "top_k"])
def test_nms_as_paddle(case):
    rng = np.random.default_rng(0)
    corners = rng.uniform(0, 50, size=(40, 2))
    boxes = np.concatenate([corners, corners + rng.uniform(5, 30, size=(40, 2))], axis=1).astype("float32")
    scores = rng.random(40).astype("float32")
    categories = rng.integers(0, 3, size=40).astype("int64")
    kwargs = {"scores": {"scores": scores}, "no_scores": {},
              "categories": {"scores": scores, "category_idxs": categories, "categories": [0, 1, 2]},
              "top_k": {"scores": scores, "category_idxs": categories, "categories": [0, 1, 2], "top_k": 7}}[case]
    results = []
    for lib, nms in ((paddle, paddle.vision.ops.nms), (oarlock, ops.nms)):
        args = {k: lib.to_tensor(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
        results.append(nms(lib.to_tensor(boxes), 0.3, **args).numpy())
    np.testing.assert_array_equal(results[1], results[0])
    assert results[1].dtype == np.int64
