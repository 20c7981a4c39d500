"""`paddle.static.InputSpec`: the shape, dtype and name of a model input, as `to_static(input_spec=...)`
and model summaries take it. A plain description object (no static graph behind it); its fields, repr,
`from_tensor`/`from_numpy` and `batch`/`unbatch` follow Paddle 3.2 (unknown sizes stored as -1)."""

from __future__ import annotations

import numpy as np

import oarlock


def _shape_tuple(shape, what):
    if isinstance(shape, int):
        shape = [shape]
    if not isinstance(shape, (list, tuple)):
        raise TypeError(f"{what}: shape must be a list or tuple of ints (None or -1 for an unknown size), got "
                        f"{type(shape).__name__}")
    out = []
    for s in shape:
        if s is None:
            s = -1
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < -1:
            raise ValueError(f"{what}: every size in shape must be an int >= -1 or None, got {list(shape)}")
        out.append(int(s))
    return tuple(out)


class InputSpec:
    """InputSpec(shape, dtype='float32', name=None, stop_gradient=False): a model input's description."""

    def __init__(self, shape, dtype="float32", name=None, stop_gradient=False):
        self.shape = _shape_tuple(shape, "InputSpec()")
        self.dtype = oarlock.dtypes.convert_dtype(dtype)
        if name is not None and not isinstance(name, str):
            raise TypeError(f"InputSpec(): name must be a str or None, got {type(name).__name__}")
        self.name = name
        self.stop_gradient = bool(stop_gradient)

    @classmethod
    def from_tensor(cls, tensor, name=None):
        """The spec of an existing Tensor (its shape and dtype; its name unless `name` is given)."""
        if not isinstance(tensor, oarlock.Tensor):
            raise TypeError(f"InputSpec.from_tensor(): tensor must be an oarlock.Tensor, got "
                            f"{type(tensor).__name__}")
        return cls(tensor.shape, tensor.dtype, name or getattr(tensor, "name", None))

    @classmethod
    def from_numpy(cls, ndarray, name=None):
        """The spec of a numpy array (its shape and dtype)."""
        if not isinstance(ndarray, np.ndarray):
            raise TypeError(f"InputSpec.from_numpy(): ndarray must be a numpy.ndarray, got {type(ndarray).__name__}")
        return cls(ndarray.shape, ndarray.dtype, name)

    def batch(self, batch_size):
        """Insert `batch_size` (an int, or a list/tuple of one int) as a new leading dimension; returns self."""
        if isinstance(batch_size, (list, tuple)):
            if len(batch_size) != 1:
                raise ValueError(f"InputSpec.batch(): batch_size must hold exactly one int, got {batch_size}")
            batch_size = batch_size[0]
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"InputSpec.batch(): batch_size must be an int, got {type(batch_size).__name__}")
        self.shape = (int(batch_size),) + self.shape
        return self

    def unbatch(self):
        """Remove the leading dimension; returns self."""
        if not self.shape:
            raise ValueError("InputSpec.unbatch(): the shape is empty, there is no batch dimension to remove")
        self.shape = self.shape[1:]
        return self

    def __repr__(self):
        return (f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, name={self.name}, "
                f"stop_gradient={self.stop_gradient})")

    def __eq__(self, other):
        return type(self) is type(other) and (self.shape, self.dtype, self.name, self.stop_gradient) == \
            (other.shape, other.dtype, other.name, other.stop_gradient)

    def __hash__(self):
        return hash((self.shape, self.dtype, self.name))

    def __ne__(self, other):
        return not self == other
