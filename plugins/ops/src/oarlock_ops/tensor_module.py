"""`oarlock.tensor`, which in Paddle 3.2 is both the creation function `paddle.tensor(data, ...)` and the module
`paddle.tensor` whose attributes are the tensor functions (`paddle.tensor.normal(...)`,
`paddle.tensor.math.add`, `paddle.tensor.creation.to_tensor`): one callable object that calls the `tensor` op
and resolves any other attribute from the top-level namespace (its submodule names give itself)."""

from __future__ import annotations

import oarlock

# the submodules of Paddle's paddle/tensor package: each holds a part of the top-level functions
SUBMODULES = frozenset({"array", "attribute", "creation", "einsum", "layer_function_generator", "linalg", "logic",
                        "manipulation", "math", "ops", "random", "search", "stat", "to_string", "tensor"})


class TensorFunctionOrModule:
    """Call it as `oarlock.tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False)`; read
    tensor functions from it as from Paddle's module `paddle.tensor` (`oarlock.tensor.normal`)."""

    def __init__(self, create):
        self._create = create
        self.__doc__ = create.__doc__

    def __call__(self, *args, **kwargs):
        return self._create(*args, **kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name in SUBMODULES:
            return self
        try:
            return getattr(oarlock, name)
        except AttributeError:
            raise AttributeError(f"oarlock.tensor has no attribute {name!r} (as the module paddle.tensor, it "
                                 f"gives the top-level tensor functions)") from None

    def __repr__(self):
        return "<oarlock.tensor: the tensor(data, ...) function and the paddle.tensor module>"
