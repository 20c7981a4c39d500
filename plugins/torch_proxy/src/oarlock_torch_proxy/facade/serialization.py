"""torch.save / torch.load for the façade: any picklable object with oarlock Tensors inside (state dicts,
optimizer states), written with pickle and the tensors as numpy arrays. The files round-trip through the
façade; they are not PyTorch's zip format (real torch cannot read them, nor the façade torch's files)."""

from __future__ import annotations

import io
import os
import pickle

import numpy as np
import oarlock


class _TensorRecord:
    def __init__(self, array, requires_grad, is_parameter):
        self.array, self.requires_grad, self.is_parameter = array, requires_grad, is_parameter


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj):
        if isinstance(obj, oarlock.Tensor):
            array = np.asarray(obj.detach().astype("float32").numpy() if obj.dtype == oarlock.bfloat16
                               else obj.detach().numpy())
            return _TensorRecord, (array, not obj.stop_gradient, obj.param_attrs is not None)
        return NotImplemented


def _restore(obj):
    if isinstance(obj, _TensorRecord):
        t = oarlock.to_tensor(obj.array)
        if obj.is_parameter:
            return oarlock.nn.Parameter(t, requires_grad=obj.requires_grad)
        t.stop_gradient = not obj.requires_grad
        return t
    if isinstance(obj, dict):
        return type(obj)((k, _restore(v)) for k, v in obj.items()) if type(obj) is not dict else \
            {k: _restore(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(_restore(v) for v in obj)
    return obj


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True):
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=max(pickle_protocol, 4)).dump(obj)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            fh.write(buffer.getvalue())
    else:
        f.write(buffer.getvalue())


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **kwargs):
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            data = fh.read()
    else:
        data = f.read()
    return _restore(pickle.loads(data))
