"""What paddle.load does to the object it unpickled from a file paddle.save wrote, so that oarlock.load
returns the same (Paddle 3.2: paddle/framework/io.py `load` and `_parse_load_result`,
paddle/framework/io_utils.py `_pack_loaded_dict`).

paddle.save stores Tensors in one of two layouts, and paddle.load undoes each:

- a state dict (a dict whose values are Tensors, or dicts without Tensors, as Layer.state_dict() and
  Optimizer.state_dict() give): each Tensor as a bare ndarray, plus a table
  "StructuredToParameterName@@" from key to the Tensor's name. paddle.load turns the arrays the
  table names into Tensors with those names and drops the table (keep_name_table=True keeps it);
  everything else, such as an optimizer's "LR_Scheduler" dict, is left as it is. With pickle
  protocol 2 or 3 an array over 2**30 - 1 bytes is first split into 1-D pieces "<key>@@.0",
  "<key>@@.1", ... listed with the original shape in "UnpackBigParamInfor@@" (Paddle's spelling);
  paddle.load puts each back together before anything else.
- anything else (a Tensor alone, lists, tuples, nested dicts): each Tensor as the tuple
  (name, ndarray). If the object holds such a tuple anywhere, each becomes a Tensor with that name;
  if it holds none (files from Paddle 2.0), each bare ndarray becomes a Tensor.

return_numpy=True leaves the arrays as arrays (a tuple gives its array). Paddle hands bfloat16
Tensors to numpy as uint16 arrays and reads uint16 arrays back as bfloat16 (and float8 as int8, both
ways), so a uint16 array becomes a bfloat16 Tensor here too.

Where paddle.load fails, the values are left as they are instead: arrays of dtypes no Tensor holds
(strings, objects, uint32) are not converted (nor is a tuple pairing a name with one), and bytes,
sets and containers other than dict, OrderedDict, list and tuple are not walked into. oarlock's
own files hold no bare numeric arrays (they store arrays as records) but can hold those values, so
a file without Tensors from oarlock.save loads exactly as before through this module.
"""

from __future__ import annotations

import collections
import pickle

import numpy as np

from oarlock_checkpoint._arrays import NUMPY_DTYPE, OARLOCK_NAME, cpu_tensor, host_array

__all__ = ["from_paddle", "NAME_TABLE", "BIG_PARAMS"]

NAME_TABLE = "StructuredToParameterName@@"
BIG_PARAMS = "UnpackBigParamInfor@@"  # sic
_BFLOAT16 = NUMPY_DTYPE["bfloat16"]
_MAPS = (dict, collections.OrderedDict)  # exact types, as Paddle's walk: a subclass is left alone
_SEQUENCES = (list, tuple)


def _tensor_dtype(dtype: np.dtype) -> np.dtype | None:
    """The dtype of the Tensor paddle.to_tensor makes of an array of `dtype`; None where no Tensor holds it."""
    native = dtype.newbyteorder("=")
    if native == np.uint16:  # Paddle's numpy form of bfloat16
        return _BFLOAT16
    return native if native in OARLOCK_NAME else None


def _is_array(obj) -> bool:
    return isinstance(obj, np.ndarray) and _tensor_dtype(obj.dtype) is not None


def _is_tensor_tuple(obj) -> bool:
    """paddle.save's form of a Tensor outside a state dict: (name, ndarray)."""
    return isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and _is_array(obj[1])


def _tensor(array: np.ndarray, name: str | None = None):
    return cpu_tensor(host_array(array).view(_tensor_dtype(array.dtype)), name)


def _holds(obj, leaf, seen: set) -> bool:
    """Whether `leaf` is true of `obj` or of anything in its dicts, lists and tuples (Paddle's _contain_x;
    `seen` stops at containers met before, so shared and self-containing ones are walked once)."""
    if leaf(obj):
        return True
    kind = type(obj)
    if (kind not in _MAPS and kind not in _SEQUENCES) or id(obj) in seen:
        return False
    seen.add(id(obj))
    return any(_holds(child, leaf, seen) for child in (obj.values() if kind in _MAPS else obj))


def _replace(obj, leaf, convert, done: set):
    """`obj` with every value `leaf` is true of replaced by convert(value) (Paddle's _parse_every_object):
    dicts and lists in place, tuples rebuilt."""
    if leaf(obj):
        return convert(obj)
    kind = type(obj)
    if kind is tuple:
        return tuple(_replace(item, leaf, convert, done) for item in obj)
    if (kind in _MAPS or kind is list) and id(obj) not in done:
        done.add(id(obj))
        for key in list(obj.keys() if kind in _MAPS else range(len(obj))):
            obj[key] = _replace(obj[key], leaf, convert, done)
    return obj


def _reassemble_big_params(state: dict, source: str) -> None:
    """Put the pieces "UnpackBigParamInfor@@" lists back together (Paddle's _pack_loaded_dict, with its
    order of insertions and removals, so the keys come out in paddle.load's order)."""
    info = state[BIG_PARAMS]
    if not isinstance(info, dict):
        raise pickle.UnpicklingError(f"{source}: {BIG_PARAMS!r} should be a dict of split parameters, got "
                                     f"{type(info).__name__}; the file is damaged")
    pieces = []
    for key, entry in info.items():
        try:
            names = list(entry["slices"])
            parts = [state[name] for name in names]
            if not parts or not all(isinstance(part, np.ndarray) for part in parts):
                raise TypeError("its pieces must be one or more numpy arrays")
            state[key] = np.concatenate(parts).reshape(entry["OriginShape"])
        except (TypeError, ValueError, KeyError, IndexError) as exc:
            raise pickle.UnpicklingError(f"{source}: {BIG_PARAMS!r} cannot put {key!r} back together "
                                         f"({type(exc).__name__}: {exc}); the file is damaged") from None
        pieces += names
    for name in pieces:
        state.pop(name, None)  # a piece listed twice was popped already: Paddle would raise KeyError
    del state[BIG_PARAMS]


def _name_tensors(state: dict, return_numpy: bool, keep_name_table: bool, source: str) -> None:
    """The arrays the name table lists become Tensors with their names; the table goes unless kept."""
    table = state[NAME_TABLE]
    if not (isinstance(table, dict) and all(isinstance(name, str) for name in table.values())):
        raise pickle.UnpicklingError(f"{source}: {NAME_TABLE!r} should be a dict of key to Tensor name, "
                                     f"got {table!r:.100}; the file is damaged")
    for key, name in table.items():
        if key not in state:
            raise pickle.UnpicklingError(f"{source}: {NAME_TABLE!r} names the key {key!r:.100}, which the file "
                                         f"does not hold; the file is damaged")
        if not return_numpy and _is_array(state[key]):
            state[key] = _tensor(state[key], name)
    if not keep_name_table:
        del state[NAME_TABLE]


def from_paddle(obj, return_numpy: bool, keep_name_table: bool, source: str):
    """What paddle.load(path, return_numpy=..., keep_name_table=...) returns for a file that unpickled to
    `obj` (which may be changed in place). `source` names the file in errors ("load(): 'm.pdparams'")."""
    try:
        if isinstance(obj, dict):
            if BIG_PARAMS in obj:
                _reassemble_big_params(obj, source)
            if NAME_TABLE in obj:
                _name_tensors(obj, return_numpy, keep_name_table, source)
                return obj
        if _holds(obj, _is_tensor_tuple, set()):
            return _replace(obj, _is_tensor_tuple, (lambda pair: pair[1]) if return_numpy
                            else (lambda pair: _tensor(pair[1], pair[0])), set())
        return obj if return_numpy else _replace(obj, _is_array, _tensor, set())
    except RecursionError:  # only a crafted file: neither pickler writes containers this deep
        raise pickle.UnpicklingError(f"{source}: containers are nested too deeply to load; the file is damaged "
                                     f"or was not written by paddle.save or oarlock.save") from None
