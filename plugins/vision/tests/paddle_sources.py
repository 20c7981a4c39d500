"""Paddle 3.2's own vision model sources (site-packages/paddle/vision/models/*.py, unedited) executed with
`paddle` aliased to oarlock, and the same-weights comparison against the real Paddle models.

Each file is loaded as the module `paddle.vision.models.<name>` so its relative imports (`from ..ops import
ConvNormActivation`, `from ._utils import _make_divisible`) resolve through the alias to oarlock.vision.ops
and to Paddle's own _utils.py (loaded the same way)."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # paddle's import-time notices
    import paddle  # the real Paddle 3.2, imported before any alias is switched on

from oarlock.compat import paddle_alias

MODELS_DIR = os.path.join(os.path.dirname(paddle.__file__), "vision", "models")


def load_model_sources(*names):
    """{name: Paddle's vision/models/<name>.py module, run on oarlock}."""
    modules = {}
    with paddle_alias():
        for name in ("_utils", *names):
            full = f"paddle.vision.models.{name}"
            spec = importlib.util.spec_from_file_location(full, os.path.join(MODELS_DIR, f"{name}.py"))
            module = importlib.util.module_from_spec(spec)
            sys.modules[full] = module  # the alias is switched off (and these entries dropped) on leaving
            spec.loader.exec_module(module)
            modules[name] = module
    return modules


def random_state(model, seed=0):
    """A Paddle model's state dict as numpy with its 1-D entries (biases, norm scales, running statistics)
    drawn at random, so normalisation and biases matter; weights keep the model's own initialisation."""
    rng = np.random.default_rng(seed)
    state = {}
    for key, value in model.state_dict().items():
        array = value.numpy()
        if array.ndim == 1:
            if key.endswith(("_variance", "weight")):
                array = rng.uniform(0.5, 1.5, array.shape)
            else:
                array = rng.normal(0.0, 0.1, array.shape)
        state[key] = np.asarray(array, dtype=value.numpy().dtype)
    return state


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _train_without_dropout(lib, model):
    """Training mode (batch statistics) with dropout switched off, so both frameworks compute the same function."""
    model.train()
    for layer in model.sublayers():
        if isinstance(layer, lib.nn.Dropout):
            layer.eval()


def run(lib, model, state, x, seed=1, train=True):
    """Load `state`, then: eval outputs in float32; in float64, train-mode outputs, the parameter gradients of
    a fixed random projection of them, and the running statistics after that step.

    Why float64 for training: batch statistics over few elements (small batches reach 1x1 or 2x2 maps) and
    ReLU kinks turn float32 rounding differences into percent-level gradient differences that say nothing
    about correctness; in float64 the same comparison is exact to far below the tolerance."""
    model.set_state_dict({k: lib.to_tensor(v) for k, v in state.items()})
    model.eval()
    with lib.no_grad():
        evaluated = [o.numpy() for o in _outputs(model(lib.to_tensor(x)))]
    if not train:
        return {"eval": evaluated}
    model.to(dtype="float64")  # the float32 state upcast: the same values
    _train_without_dropout(lib, model)
    outs = _outputs(model(lib.to_tensor(x.astype("float64"))))
    rng = np.random.default_rng(seed)
    loss = sum((o * lib.to_tensor(rng.normal(size=o.shape))).sum() for o in outs)
    loss.backward()
    grads = {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}
    after = {k: v.numpy() for k, v in model.state_dict().items()}
    return {"eval": evaluated, "train": [o.numpy() for o in outs], "grads": grads, "state": after}


def assert_close(got, expected, rtol, what):
    """Elementwise within rtol of the expected value or rtol of the tensor's largest magnitude (outputs near
    zero differ by the accumulation order alone)."""
    assert got.shape == expected.shape, f"{what}: shape {got.shape}, expected {expected.shape}"
    magnitude = np.abs(expected)
    scale = float(magnitude.max()) if expected.size else 0.0
    if not (np.abs(got - expected) <= rtol * (magnitude + scale)).all():  # the quick test; numpy's report on failure
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol * scale, err_msg=what)


ZERO_GRADIENT = 1e-8  # relative to the model's largest gradient: below it a gradient is rounding noise of zero


def compare(ours, theirs, eval_rtol=1e-4, grad_rtol=1e-3):
    for i, (g, e) in enumerate(zip(ours["eval"], theirs["eval"], strict=True)):
        assert_close(g, e, eval_rtol, f"eval output {i}")
    if "train" not in theirs:
        return
    for i, (g, e) in enumerate(zip(ours["train"], theirs["train"], strict=True)):
        assert_close(g, e, grad_rtol, f"train output {i}")
    assert sorted(ours["grads"]) == sorted(theirs["grads"]), "the parameters that got gradients differ"
    # A bias just before a training-mode batch norm has a gradient of exactly zero mathematically (the norm
    # removes the mean); both frameworks give rounding noise there, so such gradients must only be that small.
    floor = ZERO_GRADIENT * max(float(np.abs(e).max()) for e in theirs["grads"].values())
    for name, e in theirs["grads"].items():
        if float(np.abs(e).max()) < floor:
            assert float(np.abs(ours["grads"][name]).max()) < floor, f"gradient of {name} should be ~0"
        else:
            assert_close(ours["grads"][name], e, grad_rtol, f"gradient of {name}")
    assert list(ours["state"]) == list(theirs["state"])
    for name, e in theirs["state"].items():
        assert_close(ours["state"][name], e, grad_rtol, f"state {name} after the training step")
