"""The 17 vision model families against real Paddle 3.2 with the same weights, twice over:

- Paddle's own model sources (site-packages/paddle/vision/models/*.py, unedited) executed with `paddle`
  aliased to oarlock;
- oarlock.vision.models, our own implementation, which must list the same parameters under the same keys
  (so Paddle's state dicts and .pdparams load) and compute the same function.

For each family the smallest variant on a tiny input: eval outputs (float32) within 1e-4 relative, train-mode
outputs, parameter gradients and the updated running statistics (float64, see paddle_sources.run) within
1e-3 relative. Paddle's model is built and run once per case and serves as the oracle for both (our own
classes take the training step when the model has under 4M parameters; the larger ones, built from the same
layers, are compared in eval mode, to keep the file's time down). ResNeXt, a
second variant of the ResNet family (its bottleneck blocks, grouped), is compared in eval mode only: its train
step costs 15 s here, and its batch statistics need 2x2 maps, so inputs of 64x64."""

from __future__ import annotations

import numpy as np
import pytest

import oarlock
import oarlock.vision.models as our_models
from paddle_sources import compare, load_model_sources, paddle, random_state, run

# (file, builder, kwargs, input shape[, train]): the smallest variant of each family and the smallest input it takes
# without batch statistics over one or two elements per channel (ill-conditioned even in float64)
CASES = [
    ("lenet", "LeNet", {"num_classes": 10}, (2, 1, 28, 28)),
    # AlexNet's classifier takes 6x6 features of 224x224 inputs and holds 58M weights (15 s here): the
    # convolutional part only
    ("alexnet", "alexnet", {"num_classes": 0}, (2, 3, 64, 64)),
    ("vgg", "vgg11", {"batch_norm": True, "num_classes": 0}, (2, 3, 32, 32)),  # 1x1 features pooled up to 7x7
    ("resnet", "resnet18", {"num_classes": 10}, (2, 3, 64, 64)),
    ("resnet", "resnext50_32x4d", {"num_classes": 10}, (2, 3, 32, 32), False),
    ("mobilenetv1", "mobilenet_v1", {"scale": 0.25, "num_classes": 10}, (2, 3, 64, 64)),
    ("mobilenetv2", "mobilenet_v2", {"scale": 0.25, "num_classes": 10}, (2, 3, 64, 64)),
    ("mobilenetv3", "mobilenet_v3_small", {"scale": 0.5, "num_classes": 10}, (2, 3, 64, 64)),
    ("mobilenetv3", "mobilenet_v3_large", {"scale": 0.35, "num_classes": 10}, (2, 3, 64, 64)),
    ("squeezenet", "squeezenet1_1", {"num_classes": 10}, (2, 3, 64, 64)),
    ("squeezenet", "squeezenet1_0", {"num_classes": 10}, (1, 3, 64, 64)),
    ("shufflenetv2", "shufflenet_v2_x0_25", {"num_classes": 10}, (2, 3, 64, 64)),
    ("shufflenetv2", "shufflenet_v2_swish", {"num_classes": 10}, (2, 3, 32, 32)),
    ("densenet", "densenet121", {"num_classes": 10}, (4, 3, 32, 32)),
    # GoogLeNet's auxiliary classifiers need 224x224 inputs (8 s here); without classifiers it returns the
    # three pooled feature maps
    ("googlenet", "googlenet", {"num_classes": 0}, (1, 3, 96, 96)),
    ("inceptionv3", "inception_v3", {"num_classes": 10}, (2, 3, 75, 75)),
]
FILES = sorted({c[0] for c in CASES})
SMALL_MODEL = 4_000_000  # parameters: oarlock.vision.models' own classes also take the training step below it


@pytest.fixture(scope="module")
def sources():
    return load_model_sources(*FILES)


def _listing(model):
    return [(n, list(p.shape), bool(p.stop_gradient)) for n, p in model.named_parameters()]


@pytest.mark.parametrize("file,builder,kwargs,shape,train", [c + (True,) * (5 - len(c)) for c in CASES],
                         ids=[f"{c[1]}-{c[2]}" for c in CASES])
def test_model_matches_paddle(sources, file, builder, kwargs, shape, train):
    paddle.seed(0)
    theirs = getattr(paddle.vision.models, builder)(**kwargs)
    from_source = getattr(sources[file], builder)(**kwargs)
    ours = getattr(our_models, builder)(**kwargs)
    assert type(from_source).__module__ == f"paddle.vision.models.{file}"  # Paddle's source, run on oarlock
    assert type(ours).__module__.startswith("oarlock_vision.models.")
    assert type(ours).__name__ == type(theirs).__name__
    for model in (from_source, ours):
        assert isinstance(model, oarlock.nn.Layer)
        assert _listing(model) == _listing(theirs)
        assert list(model.state_dict()) == list(theirs.state_dict())
    state = random_state(theirs)
    x = np.random.default_rng(2).normal(size=shape).astype("float32")
    expected = run(paddle, theirs, state, x, train=train)
    compare(run(oarlock, from_source, state, x, train=train), expected)
    # our own classes: the training step too where the model is small (the big ones run the same layers in eval)
    small = sum(int(np.prod(p.shape)) for p in theirs.parameters()) < SMALL_MODEL
    compare(run(oarlock, ours, state, x, train=train and small), expected if small else {"eval": expected["eval"]})
