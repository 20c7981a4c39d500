"""What paddle.save writes for an object, so that Paddle 3.2's paddle.load reads oarlock's files and gets
what it gets from its own (Paddle 3.2: paddle/framework/io.py `save`, `_is_state_dict`,
`_build_saved_state_dict`, `_pickle_save`; paddle/framework/io_utils.py `_unpack_saved_dict`).
paddle_layout.py is the other direction (what paddle.load makes of such a file).

- A state dict (a dict whose values are all Tensors, or dicts holding no Tensor anywhere) is pickled
  as a plain dict: each Tensor as the ndarray Paddle's `numpy()` gives, every other value as it is,
  then the table "StructuredToParameterName@@" of key to Tensor name. With pickle protocol 2 or 3 an
  array over 2**30 - 1 bytes is split into 1-D pieces listed in "UnpackBigParamInfor@@".
- Anything else is pickled as it is, each Tensor reduced to `tuple(((name, ndarray),))`, Paddle's
  dispatch-table reduction.

Paddle's numpy form of a Tensor: bfloat16 as uint16 bits (paddle.load turns them back into bfloat16)
and float8 as int8 bits (paddle.load gives int8 Tensors: Paddle's own files lose float8). Paddle
names every Tensor; an oarlock Tensor without a name gets one of Paddle's "generated_tensor_<n>"
names in the file.
"""

from __future__ import annotations

import collections
import math
import pickle

import numpy as np

from oarlock import Tensor
from oarlock_checkpoint._arrays import NUMPY_DTYPE, host_array
from oarlock_checkpoint.paddle_layout import BIG_PARAMS, NAME_TABLE

__all__ = ["write", "loses_dtypes"]

_BITS = {NUMPY_DTYPE["bfloat16"]: np.uint16, NUMPY_DTYPE["float8_e4m3fn"]: np.int8,
         NUMPY_DTYPE["float8_e5m2"]: np.int8}
_FLOAT8 = (NUMPY_DTYPE["float8_e4m3fn"], NUMPY_DTYPE["float8_e5m2"])
_WALKED = (dict, collections.OrderedDict, list, tuple)   # the containers Paddle's _contain_x walks
_SPLIT_BYTES = 2**30 - 1   # io_utils._unpack_saved_dict: pickle protocols 2 and 3 cannot hold more in one object


def numpy_form(tensor: Tensor) -> np.ndarray:
    """The ndarray paddle.save stores for a Tensor (np.array(tensor.cpu()) in Paddle)."""
    array = host_array(tensor)
    # numpy's own dtype instance, as Paddle's arrays have: pickle then writes one dtype and refers back to it
    return array.view(_BITS.get(array.dtype) or np.dtype(array.dtype.char))


def _contains(obj, leaf, seen: set | None = None) -> bool:
    """Paddle's _contain_x: `leaf` holds for obj or anything in its dicts, lists and tuples (exact types);
    `seen` walks a container met before (shared or containing itself) once."""
    if leaf(obj):
        return True
    seen = set() if seen is None else seen
    if type(obj) in _WALKED and id(obj) not in seen:
        seen.add(id(obj))
        return any(_contains(child, leaf, seen) for child in (obj.values() if isinstance(obj, dict) else obj))
    return False


def _is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def is_state_dict(obj) -> bool:
    """Paddle's _is_state_dict: a dict whose values are Tensors, or dicts with no Tensor anywhere inside."""
    if not isinstance(obj, dict):
        return False
    for value in obj.values():
        if isinstance(value, dict):
            if any(_contains(inner, _is_tensor) for inner in value.values()):
                return False
        elif not isinstance(value, Tensor):
            return False
    return True


def loses_dtypes(obj) -> bool:
    """Whether the object holds a float8 Tensor or array, which Paddle's files can only store as int8
    (a Tensor) or as an ml_dtypes array Paddle does not read."""
    def leaf(value):
        if isinstance(value, Tensor):
            return value.dtype.np in _FLOAT8
        return isinstance(value, (np.ndarray, np.generic)) and value.dtype in _BITS
    return _contains(obj, leaf)


class _Namer:
    """Paddle's names for Tensors; "generated_tensor_<n>" for those without one, as Paddle names them."""

    def __init__(self):
        self.count = 0

    def __call__(self, tensor: Tensor) -> str:
        if tensor.name is not None:
            return tensor.name
        name = f"generated_tensor_{self.count}"
        self.count += 1
        return name


def _state_dict_payload(obj: dict, protocol: int, name_of: _Namer) -> dict:
    """_build_saved_state_dict, then _unpack_saved_dict for protocols 2 and 3."""
    saved, names = {}, {}
    for key, value in obj.items():
        if isinstance(value, Tensor):
            saved[key] = numpy_form(value)
            names[key] = name_of(value)
        else:
            saved[key] = value
    saved[NAME_TABLE] = names
    if protocol >= 4:
        return saved
    split = {}
    for key, value in list(saved.items()):
        if not isinstance(value, np.ndarray):
            continue
        most = _SPLIT_BYTES // value.dtype.itemsize
        if value.size > most:
            flat = value.reshape(-1)
            split[key] = {"OriginShape": value.shape, "slices": [f"{key}@@.{i}" for i in
                                                                 range(math.ceil(value.size / most))]}
            del saved[key]
            for i, piece in enumerate(split[key]["slices"]):
                saved[piece] = flat[i * most:(i + 1) * most]
    if split:
        saved[BIG_PARAMS] = split
    return saved


class _Pickler(pickle.Pickler):
    """_pickle_save's pickler: a Tensor becomes tuple(((name, ndarray),))."""

    def __init__(self, file, protocol: int, name_of: _Namer):
        super().__init__(file, protocol)
        self.name_of = name_of

    def reducer_override(self, obj):
        if isinstance(obj, Tensor):
            return tuple, ((self.name_of(obj), numpy_form(obj)),)
        return NotImplemented


def write(obj, f, protocol: int = 4) -> None:
    """Pickle `obj` into the open binary file `f` as paddle.save(obj, path, protocol) does."""
    name_of = _Namer()
    if is_state_dict(obj):
        pickle.Pickler(f, protocol).dump(_state_dict_payload(obj, protocol, name_of))
    else:
        _Pickler(f, protocol, name_of).dump(obj)
