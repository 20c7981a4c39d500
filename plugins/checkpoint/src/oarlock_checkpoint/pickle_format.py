"""The "pickle" checkpoint format: paddle.save / paddle.load for state dicts and nested containers
(.pdparams, .pdopt, .pdtensor, .pkl; the default for paths no format claims).

Any picklable object can be saved: dicts (OrderedDict included), lists,
tuples, numbers, strings, numpy arrays and Tensors, nested as deep as you
like, in one of two layouts:

- "paddle" (the default): exactly what Paddle 3.2's paddle.save writes for the same object
  (`paddle_save`), so paddle.load reads the file and returns what it returns for its own, and
  oarlock.load returns what paddle.load does (`paddle_layout`): Tensors as Paddle's ndarrays with a
  name table (state dicts) or (name, ndarray) tuples (anything else); bfloat16 as uint16 bits.
  Objects holding float8 values, which Paddle's files cannot hold (its paddle.save stores float8
  Tensors as int8), are written in the "oarlock" layout instead, with a warning, unless
  layout="paddle" is asked for explicitly.
- "oarlock": Tensors, numpy arrays and numpy scalars as small records (dtype name, shape,
  little-endian bytes, and a Tensor's name) through pickle's persistent-ID mechanism: every dtype
  (float8 included) and numpy arrays come back exactly as saved, and the file depends neither on
  oarlock's class layout nor on numpy's pickling internals; Paddle cannot read it.

Tensors come back as cpu Tensors with their dtype, their name and
stop_gradient=True, as in Paddle; with `return_numpy=True` they come back as
numpy arrays (Paddle's numpy form: bfloat16 as uint16, for Paddle-layout files).

Files in the Paddle layout hold no records: `load` hands what it unpickled from a
file without records to `paddle_layout`, which does what paddle.load does to
it (Tensors with their names, the name table dropped unless
keep_name_table=True, split big parameters put back together). A file with
records is in oarlock's layout and comes back as it was saved.

Security: a pickle can name any function for the loader to call, so `load`
unpickles through `safe_pickle` by default (`weights_only=True`): it builds
containers, numbers, strings, Tensors, numpy arrays and the tuples Paddle
writes for Tensors, and refuses anything else with UnsafePickleError before
it can run. That reads every file `save` or Paddle 3.2's paddle.save writes
for state dicts and optimizer states. `weights_only=False` is the explicit
opt-in to full pickle (any object, and any code the file names): only for
files you trust. (paddle.load has no such argument: it always runs pickle in
full.) The safetensors format holds no code at all.
"""

from __future__ import annotations

import os
import pickle
import warnings

import numpy as np

from oarlock import Tensor
from oarlock_checkpoint._arrays import NUMPY_DTYPE, OARLOCK_NAME, cpu_tensor, from_little_endian, host_array
from oarlock_checkpoint._arrays import little_endian_bytes
from oarlock_checkpoint._files import atomic_write, reject_unknown_options
from oarlock_checkpoint import paddle_save
from oarlock_checkpoint import safetensors as safetensors_format
from oarlock_checkpoint.paddle_layout import from_paddle
from oarlock_checkpoint.safe_pickle import safe_load

__all__ = ["save", "load", "write", "SUFFIXES"]

SUFFIXES = (".pdparams", ".pdopt", ".pdtensor", ".pkl", ".pickle")
_TENSOR, _ARRAY, _SCALAR = "oarlock.Tensor", "numpy.ndarray", "numpy.scalar"
_PROTOCOLS = (2, 3, 4, 5)
LAYOUTS = ("paddle", "oarlock")


def _dtype_key(dtype: np.dtype) -> str | None:
    """How a record names its dtype: oarlock's name when oarlock has the dtype, else numpy's
    little-endian type string ("<u2"); None for dtypes a record cannot hold (objects, strings)."""
    name = OARLOCK_NAME.get(dtype)
    if name is not None:
        return name
    return dtype.newbyteorder("<").str if dtype.kind in "biufc" else None


def _dtype_from_key(key: str) -> np.dtype:
    found = NUMPY_DTYPE.get(key)
    return found if found is not None else np.dtype(key).newbyteorder("=")


def _record(array: np.ndarray, key: str) -> dict:
    return {"dtype": key, "shape": list(array.shape), "data": little_endian_bytes(array)}


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Tensor):
            array = host_array(obj)
            return (_TENSOR, dict(_record(array, OARLOCK_NAME[array.dtype]), name=obj.name))
        if type(obj) is np.ndarray or isinstance(obj, np.generic):
            array = host_array(obj)
            key = _dtype_key(array.dtype)
            if key is not None:
                return (_SCALAR if isinstance(obj, np.generic) else _ARRAY, _record(array, key))
        return None  # everything else is pickled as usual


class _RecordLoader:
    """The persistent_load of both loaders: a record (see the module docstring) to its array, scalar or
    Tensor. It only reads the record's dtype name, shape and bytes, so safe_pickle can admit it.
    `seen` tells whether the file held any record, i.e. whether oarlock (not Paddle) wrote it."""

    def __init__(self, return_numpy: bool):
        self.return_numpy, self.seen = return_numpy, False

    def __call__(self, pid):
        self.seen = True
        return_numpy = self.return_numpy
        try:
            kind, record = pid
            array = from_little_endian(record["data"], _dtype_from_key(record["dtype"]), record["shape"])
            name = record.get("name")
            if not (name is None or isinstance(name, str)):
                raise TypeError(f"a tensor name must be a string, got {type(name).__name__}")
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise pickle.UnpicklingError(f"load(): a tensor record in this file is malformed ({exc}); "
                                         f"the file is damaged or not an oarlock checkpoint") from None
        if kind == _SCALAR:
            return array[()]
        if kind == _ARRAY or return_numpy:
            return array.copy()  # frombuffer over the file's bytes is read-only
        if kind == _TENSOR:
            return cpu_tensor(array, name)
        raise pickle.UnpicklingError(f"load(): unknown record kind {kind!r} in this file; it was written by a "
                                     f"newer oarlock-checkpoint or is not an oarlock checkpoint")


class _Unpickler(pickle.Unpickler):
    """Full pickle (weights_only=False): any global the file names, plus the records."""

    def __init__(self, file, records: _RecordLoader):
        super().__init__(file)
        self.persistent_load = records


def write(obj, f, protocol: int = 4, layout: str = "oarlock") -> None:
    """Pickle `obj` into the open binary file `f` in this format, in `layout` ("oarlock" or "paddle")."""
    if layout == "paddle":
        paddle_save.write(obj, f, protocol)
    else:
        _Pickler(f, protocol=protocol).dump(obj)


def _choose_layout(obj, layout, path) -> str:
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"save(): layout must be one of {list(LAYOUTS)} or None (Paddle's unless the object holds "
                         f"float8 values), got {layout!r}")
    if layout is None:
        if not paddle_save.loses_dtypes(obj):
            return "paddle"
        warnings.warn(f"save(): {os.fspath(path)!r} holds float8 values, which Paddle's file layout cannot hold "
                      f"(paddle.save stores float8 Tensors as int8); it is written in oarlock's layout, which "
                      f"oarlock.load reads and Paddle does not. Pass layout='paddle' for Paddle's int8 form, or "
                      f"layout='oarlock' to silence this warning", UserWarning, stacklevel=4)
        return "oarlock"
    return layout


def save(obj, path, protocol: int = 4, layout: str | None = None, safetensors: bool = False,
         pickle_protocol: int | None = None, use_binary_format: bool = False, **configs) -> None:
    """`oarlock.save(obj, path)` for this format: pickle `obj` to `path` (parent directories are made).

    `protocol` is the pickle protocol, 2 to 5 (Paddle's default 4; Paddle itself writes 2 to 4).
    `layout` is "paddle" (what paddle.save writes: Paddle 3.2 reads it), "oarlock" (records: every
    dtype and numpy arrays exactly, not readable by Paddle) or None, the default: "paddle" unless the
    object holds float8 values, which Paddle's layout stores as int8 (then "oarlock", with a warning).
    Paddle's options: safetensors=True writes a state dict of Tensors as a safetensors file under
    this name (anything else is still pickled, as in Paddle); pickle_protocol is the deprecated name
    of protocol; use_binary_format=True (Paddle's C++ format of one static-graph variable) is refused."""
    reject_unknown_options("save()", configs, ["protocol", "layout", "safetensors", "pickle_protocol",
                                               "use_binary_format"])
    if use_binary_format:
        raise NotImplementedError("save(): use_binary_format=True writes Paddle's C++ format of one static-graph "
                                  "variable, which oarlock (eager only) does not have; save without it")
    if pickle_protocol is not None:
        warnings.warn("save(): 'pickle_protocol' is a deprecated argument. Please use 'protocol' instead.",
                      DeprecationWarning, stacklevel=3)
        protocol = pickle_protocol
    if safetensors and paddle_save.is_state_dict(obj):
        safetensors_format.save(obj, path)
        return
    if not isinstance(protocol, int) or isinstance(protocol, bool) or protocol not in _PROTOCOLS:
        raise ValueError(f"save(): protocol must be one of {list(_PROTOCOLS)}, got {protocol!r}")
    layout = _choose_layout(obj, layout, path)
    try:
        with atomic_write(path, "save()") as f:  # an object that cannot be pickled leaves no file behind
            write(obj, f, protocol, layout)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise TypeError(f"save(): cannot pickle the object for {os.fspath(path)!r}: {exc}") from exc


def load(path, return_numpy: bool = False, weights_only: bool = True, keep_name_table: bool = False,
         safetensors: bool = False, **configs):
    """`oarlock.load(path)` for this format: what `save` wrote, or what paddle.load returns for a file
    Paddle's paddle.save wrote (see `paddle_layout`).

    return_numpy=True gives numpy arrays instead of Tensors (Paddle's option). keep_name_table=True keeps
    the key-to-name table "StructuredToParameterName@@" paddle.save writes beside a state dict (Paddle's
    option; oarlock's own files have none). By default (weights_only=True) the file is unpickled by
    `safe_pickle`, which builds only containers, numbers, strings, Tensors, numpy arrays and the tuples
    Paddle writes for Tensors, and refuses anything else with UnsafePickleError (a
    pickle.UnpicklingError) without running it: safe for files from anywhere. weights_only=False opts in
    to full pickle, which builds any object and runs any code the file names: only for files you trust.
    paddle.load has no weights_only argument (it is always full pickle). safetensors=True reads a
    safetensors file (what save(..., safetensors=True) wrote), as Paddle's option does."""
    reject_unknown_options("load()", configs, ["return_numpy", "weights_only", "keep_name_table", "safetensors"])
    if safetensors:
        return safetensors_format.load(path, return_numpy=bool(return_numpy))
    for option, value in (("weights_only", weights_only), ("keep_name_table", keep_name_table)):
        if not isinstance(value, bool):
            raise TypeError(f"load(): {option} must be True or False, got {value!r}")
    source = f"load(): {os.fspath(path)!r}"
    records = _RecordLoader(bool(return_numpy))
    with open(os.fspath(path), "rb") as f:
        if weights_only:
            obj = safe_load(f, source=source, persistent_load=records)
        else:
            try:
                obj = _Unpickler(f, records).load()
            except EOFError:  # pickle says "Ran out of input"; a truncated middle gives its own clear error
                raise pickle.UnpicklingError(f"{source} ends early: it is truncated or not a pickle "
                                             f"checkpoint") from None
    if records.seen:  # oarlock wrote it: the records are already the Tensors (or arrays) it saved
        return obj
    return from_paddle(obj, bool(return_numpy), keep_name_table, source)
