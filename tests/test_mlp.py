"""The acceptance test of the first op families: a small MLP learns two moons to > 95% accuracy."""

import importlib.util
import pathlib

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "two_moons.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("two_moons", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mlp_learns_two_moons():
    example = _load_example()
    params, test_accuracy = example.train(steps=400, lr=0.5, seed=0, out=None)
    assert test_accuracy > 0.95, f"test accuracy {test_accuracy:.3f}"
    assert all(not p.stop_gradient and p.is_leaf for p in params), "SGD must update parameters in place"
