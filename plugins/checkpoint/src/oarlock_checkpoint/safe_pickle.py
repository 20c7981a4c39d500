"""Restricted unpickling for checkpoints: build containers, numbers, strings, numpy arrays and
Paddle's tensor tuples from a pickle, and refuse everything that could import or call anything else.

A pickle is a small program: GLOBAL imports any name, REDUCE / NEWOBJ / INST /
OBJ call what is on the stack, BUILD calls `__setstate__`, EXT1/2/4 import
through copyreg's registry and PERSID hands an id to the loader. pickle's
own `Unpickler.find_class` hook cannot tell a call of `tuple` from a call of
`numpy.ndarray`, so this module runs the program itself: `pickletools.genops`
decodes the opcodes and a small stack machine below executes them with
pickle's semantics, except that

- a global is only looked up in `_GLOBALS` (never imported), so nothing outside the allow-list
  can reach the stack;
- a call (REDUCE, NEWOBJ, NEWOBJ_EX, INST, OBJ) must be of one of the admitted reconstructors
  with the arguments numpy / Python / Paddle write for it (`_CALLS`);
- BUILD only sets the state of numpy arrays and dtypes, and only to states numpy itself writes
  (numpy trusts a dtype state's flags, so a forged one could make it treat raw bytes as object
  pointers); structured and subarray dtypes are refused, as checkpoints do not hold them;
- APPEND(S), SETITEM(S) and ADDITEMS only fill lists, dicts and sets;
- EXT1/2/4 are refused, and so are persistent ids unless the caller supplies a handler
  (oarlock's own format stores tensors as persistent-id records that only hold bytes);
- a caller may admit plain record classes of its own under the names a file spells them with
  (`records=`, e.g. the dataclasses of Paddle's FlexCheckpoint metadata): such a class is only
  instantiated empty (NEWOBJ with no arguments, never its __init__) and given a state by BUILD that
  is a dict of its declared fields, holding only what this machine built (the caller checks the
  values' types afterwards);
- reads are bounded by the file's size, so a corrupt length cannot ask for exabytes, and frames
  are checked as pickle checks them.

Anything else that goes wrong on the bytes is reported as pickle.UnpicklingError naming the source.

The allow-list is what genuine checkpoints reference (checked by saving Linear, Conv2D,
BatchNorm2D, AdamW-with-scheduler and nested-container files with Paddle 3.2): numpy's
array / scalar / dtype reconstructors, `builtins.tuple` (Paddle pickles a Tensor as
`tuple(((name, ndarray),))`), the builtins Python's own pickler calls for bytes, bytearray,
set, frozenset and complex, `collections.OrderedDict`, and oarlock's DType.
"""

from __future__ import annotations

import codecs
import collections
import copyreg
import io
import math
import os
import pickle
import pickletools
from typing import Callable

import numpy as np

from oarlock.dtypes import convert_dtype

__all__ = ["safe_load", "safe_loads", "UnsafePickleError"]

_OPT_IN = ("If you trust where this file came from, load it with weights_only=False (full pickle, which "
           "runs whatever the file names).")


class UnsafePickleError(pickle.UnpicklingError):
    """A pickle asked for something checkpoints never contain: a global outside the allow-list, a call
    of anything but an admitted reconstructor, an extension-registry code or a persistent id."""


# numpy's reconstructors, taken from what numpy itself writes (so they are right for numpy 1.x and 2.x).
_RECONSTRUCT = np.zeros(1).__reduce__()[0]     # multiarray._reconstruct(ndarray, (0,), b'b'), then BUILD
_SCALAR = np.float32(0).__reduce__()[0]        # multiarray.scalar(dtype, raw bytes) for numpy scalars
_FROMBUFFER = np.zeros(1).__reduce_ex__(5)[0]  # numeric._frombuffer(buffer, dtype, shape, order): protocol 5


def _spellings(modules, name, obj):
    return {(module, name): obj for module in modules}


_GLOBALS = {
    # numpy 2 pickles under numpy._core, numpy 1.x under numpy.core; both spellings name the same object
    **_spellings(("numpy.core.multiarray", "numpy._core.multiarray"), "_reconstruct", _RECONSTRUCT),
    **_spellings(("numpy.core.multiarray", "numpy._core.multiarray"), "scalar", _SCALAR),
    **_spellings(("numpy.core.numeric", "numpy._core.numeric"), "_frombuffer", _FROMBUFFER),
    ("numpy", "ndarray"): np.ndarray,   # only as _reconstruct's first argument; never called
    ("numpy", "dtype"): np.dtype,       # dtypes pickle as dtype('f4', False, True) plus BUILD
    # protocols 0-2 write Python 2's module name __builtin__
    **_spellings(("builtins", "__builtin__"), "tuple", tuple),          # Paddle's Tensor: tuple(((name, array),))
    **_spellings(("builtins", "__builtin__"), "complex", complex),
    **_spellings(("builtins", "__builtin__"), "set", set),              # protocols 0-3 have no set opcodes
    **_spellings(("builtins", "__builtin__"), "frozenset", frozenset),
    **_spellings(("builtins", "__builtin__"), "bytearray", bytearray),  # protocols 0-4 have no bytearray opcode
    **_spellings(("builtins", "__builtin__"), "bytes", bytes),          # protocols 0-2: bytes() for b""
    ("_codecs", "encode"): codecs.encode,                               # protocols 0-2: encode(str, "latin1")
    ("collections", "OrderedDict"): collections.OrderedDict,            # state dicts
    ("oarlock.dtypes", "convert_dtype"): convert_dtype,                 # an oarlock DType: convert_dtype(name)
}
_NAMES = {}
for (_module, _name), _obj in _GLOBALS.items():
    _NAMES.setdefault(id(_obj), f"{_module}.{_name}")


def _ints(value) -> bool:
    return isinstance(value, tuple) and all(type(v) is int and v >= 0 for v in value)


def _is(value, kind, *allowed) -> bool:
    """value is a `kind` equal to one of `allowed` (the type check first: == on an array is elementwise)."""
    return type(value) is kind and value in allowed


def _latin1(args) -> bool:
    return len(args) == 2 and isinstance(args[0], str) and _is(args[1], str, "latin1", "latin-1")


def _sequence(args) -> bool:
    return args == () or (len(args) == 1 and isinstance(args[0], (list, tuple)))


# The admitted calls and the arguments each accepts: exactly the shapes numpy, Python and Paddle write,
# so that no admitted callable can be talked into allocating or converting something else.
_CALLS: dict[int, Callable[[tuple], bool]] = {
    id(_RECONSTRUCT): lambda a: (len(a) == 3 and a[0] is np.ndarray and _is(a[1], tuple, (0,))
                                 and (_is(a[2], bytes, b"b") or _is(a[2], str, "b"))),
    id(_SCALAR): lambda a: (len(a) == 2 and isinstance(a[0], np.dtype)
                            and (a[0].hasobject or isinstance(a[1], bytes))),
    id(_FROMBUFFER): lambda a: (len(a) == 4 and isinstance(a[0], (bytes, bytearray, memoryview))
                                and isinstance(a[1], np.dtype) and _ints(a[2]) and _is(a[3], str, "C", "F")),
    # copy=True as numpy writes it: a copy=False lookup would hand BUILD numpy's shared float32 & co.
    id(np.dtype): lambda a: len(a) == 3 and isinstance(a[0], str) and a[1] is False and a[2] is True,
    id(tuple): _sequence,
    id(set): _sequence,
    id(frozenset): _sequence,
    id(complex): lambda a: len(a) <= 2 and all(type(x) in (int, float) for x in a),
    id(bytearray): lambda a: a == () or (len(a) == 1 and isinstance(a[0], bytes)) or _latin1(a),
    id(bytes): lambda a: a == () or (len(a) == 1 and isinstance(a[0], bytes)),
    id(codecs.encode): _latin1,
    id(collections.OrderedDict): lambda a: a == () or (len(a) == 1 and isinstance(a[0], (list, tuple)) and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 for pair in a[0])),
    id(convert_dtype): lambda a: len(a) == 1 and isinstance(a[0], str),
}


def _describe(obj) -> str:
    name = _NAMES.get(id(obj))
    return name if name is not None else f"a {type(obj).__module__}.{type(obj).__qualname__} object"


class _BoundedReader:
    """The file as genops reads it, with reads capped at what is left of it: a corrupt length field
    then reads short (and genops reports the shortfall) instead of allocating what it claims."""

    def __init__(self, file):
        self._file = file
        self.ran_out = False  # a read came back short: the file ends inside the pickle
        try:
            here = file.tell()
            self.end = file.seek(0, os.SEEK_END)
            file.seek(here)
        except (AttributeError, OSError, ValueError):  # a pipe or socket: read in chunks instead
            self.end = None

    def tell(self):
        return self._file.tell()

    def readline(self):
        line = self._file.readline()
        self.ran_out |= not line.endswith(b"\n")
        return line

    def read(self, n):
        if self.end is not None:
            data = self._file.read(max(0, min(n, self.end - self._file.tell())))
        else:
            parts, left = [], n
            while left > 0:
                part = self._file.read(min(left, 1 << 24))
                if not part:
                    break
                parts.append(part)
                left -= len(part)
            data = b"".join(parts)
        self.ran_out |= len(data) < n
        return data


class _Machine:
    """pickle's stack machine, with the restrictions the module docstring lists."""

    def __init__(self, source: str, persistent_load, records: dict | None = None):
        self.source, self.persistent_load = source, persistent_load
        self.records = records or {}   # (module, name) -> a plain record class the caller admits
        self.record_classes = {id(cls): cls for cls in self.records.values()}
        self.stack: list = []
        self.metastack: list = []
        self.memo: dict = {}
        self.pos = None
        self.spelled: dict[int, str] = {}  # id of an admitted object -> the name this file gave it
        self.frame_end = -1  # where the current protocol 4+ frame ends (-1: none yet)
        self.file_end = None

    def describe(self, obj) -> str:
        return self.spelled.get(id(obj)) or _describe(obj)

    def refuse(self, what: str):
        raise UnsafePickleError(f"{self.source}: refused to unpickle {what} (at byte {self.pos}): checkpoints "
                                f"never contain it, and unpickling it could run code. {_OPT_IN}")

    def broken(self, why: str):
        raise pickle.UnpicklingError(f"{self.source}: {why} (at byte {self.pos}); the file is damaged or not "
                                     f"a pickle")

    def run(self, reader):
        self.file_end = reader.end
        for opcode, arg, pos in pickletools.genops(reader):
            if self.pos is not None and self.pos < self.frame_end < pos:  # as pickle, which reads frame by frame
                self.pos = pos
                self.broken("an opcode runs across the end of its frame")
            self.pos = pos
            if opcode.name == "STOP":
                if len(self.stack) != 1 or self.metastack:
                    self.broken("the pickle stops with a malformed stack")
                return self.stack.pop()
            handler = getattr(self, "op_" + opcode.name, None)
            if handler is None:
                self.broken(f"opcode {opcode.name} is not one a Python 3 checkpoint uses")
            handler(arg)
        self.broken("the pickle has no STOP")  # genops raises first; kept so run() never returns None

    # -- stack helpers --------------------------------------------------------------------------
    def pop_mark(self) -> list:
        if not self.metastack:
            self.broken("a MARK is missing")
        items, self.stack = self.stack, self.metastack.pop()
        return items

    def top(self, kind, opname):
        if not self.stack or not isinstance(self.stack[-1], kind):
            self.refuse(f"{opname} on {self.describe(self.stack[-1]) if self.stack else 'an empty stack'}")
        return self.stack[-1]

    def find(self, module, name):
        if not (isinstance(module, str) and isinstance(name, str)):
            self.broken("a global's module and name are not strings")
        found = _GLOBALS.get((module, name)) or self.records.get((module, name))
        if found is None:
            self.refuse(f"the global {module}.{name}")
        self.spelled[id(found)] = f"{module}.{name}"
        return found

    def call(self, func, args, kwargs=None, opname="REDUCE"):
        if id(func) in self.record_classes:   # a record: created empty, filled by BUILD
            if not (opname.startswith("NEWOBJ") and args == () and not kwargs):
                self.refuse(f"a call ({opname}) of {self.describe(func)} other than creating it empty")
            return func.__new__(func)
        accepts = _CALLS.get(id(func))  # the admitted objects stay alive, so their ids cannot be reused
        if accepts is None:
            self.refuse(f"a call ({opname}) of {self.describe(func)}")
        if not isinstance(args, tuple) or kwargs or not accepts(args):
            self.refuse(f"a call ({opname}) of {self.describe(func)} with arguments it never has in a checkpoint "
                        f"({', '.join(type(a).__name__ for a in args) if isinstance(args, tuple) else args!r})")
        if opname.startswith("NEWOBJ"):
            if not isinstance(func, type):
                self.refuse(f"{opname} of {self.describe(func)}, which is not a class")
            return func.__new__(func, *args)
        return func(*args)

    # -- constants ----------------------------------------------------------------------------
    def push(self, arg):
        self.stack.append(arg)

    op_INT = op_BININT = op_BININT1 = op_BININT2 = op_LONG = op_LONG1 = op_LONG4 = push
    op_FLOAT = op_BINFLOAT = push
    op_UNICODE = op_SHORT_BINUNICODE = op_BINUNICODE = op_BINUNICODE8 = push
    op_BINBYTES = op_SHORT_BINBYTES = op_BINBYTES8 = push

    def op_NONE(self, _):
        self.push(None)

    def op_NEWTRUE(self, _):
        self.push(True)

    def op_NEWFALSE(self, _):
        self.push(False)

    def op_BYTEARRAY8(self, arg):
        self.push(bytearray(arg))

    def op_READONLY_BUFFER(self, _):
        with memoryview(self.stack[-1]) as view:
            if not view.readonly:
                self.stack[-1] = view.toreadonly()

    def op_NEXT_BUFFER(self, _):
        self.broken("the pickle refers to out-of-band buffers, which a checkpoint file cannot carry")

    def op_PROTO(self, arg):
        if not 0 <= arg <= pickle.HIGHEST_PROTOCOL:
            self.broken(f"unsupported pickle protocol {arg}")

    def op_FRAME(self, length):
        # genops reads straight through frames; check them as pickle does, which reads a frame at a time
        if self.pos < self.frame_end:
            self.broken("a frame begins inside the previous one")
        self.frame_end = self.pos + 9 + length  # the FRAME opcode and its 8-byte length, then the frame
        if self.file_end is not None and self.frame_end > self.file_end:
            raise EOFError("a frame runs past the end of the file")

    # -- containers ---------------------------------------------------------------------------
    def op_EMPTY_LIST(self, _):
        self.push([])

    def op_EMPTY_DICT(self, _):
        self.push({})

    def op_EMPTY_TUPLE(self, _):
        self.push(())

    def op_EMPTY_SET(self, _):
        self.push(set())

    def op_MARK(self, _):
        self.metastack.append(self.stack)
        self.stack = []

    def op_POP_MARK(self, _):
        self.pop_mark()

    def op_LIST(self, _):
        self.push(self.pop_mark())

    def op_TUPLE(self, _):
        self.push(tuple(self.pop_mark()))

    def tuple_of(self, n):
        if len(self.stack) < n:
            self.broken(f"a {n}-tuple is built from fewer items")
        self.stack[len(self.stack) - n:] = [tuple(self.stack[len(self.stack) - n:])]

    def op_TUPLE1(self, _):
        self.tuple_of(1)

    def op_TUPLE2(self, _):
        self.tuple_of(2)

    def op_TUPLE3(self, _):
        self.tuple_of(3)

    def pairs(self, opname):
        items = self.pop_mark()
        if len(items) % 2:
            self.broken(f"{opname} has a key without a value")
        return zip(items[::2], items[1::2])

    def op_DICT(self, _):
        self.push(dict(self.pairs("DICT")))

    def op_FROZENSET(self, _):
        self.push(frozenset(self.pop_mark()))

    def op_APPEND(self, _):
        value = self.stack.pop()
        self.top(list, "APPEND").append(value)

    def op_APPENDS(self, _):
        items = self.pop_mark()
        self.top(list, "APPENDS").extend(items)

    def op_SETITEM(self, _):
        value, key = self.stack.pop(), self.stack.pop()
        self.top(dict, "SETITEM")[key] = value

    def op_SETITEMS(self, _):
        pairs = self.pairs("SETITEMS")
        self.top(dict, "SETITEMS").update(pairs)

    def op_ADDITEMS(self, _):
        items = self.pop_mark()
        self.top(set, "ADDITEMS").update(items)

    def op_POP(self, _):
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def op_DUP(self, _):
        self.push(self.stack[-1])

    # -- memo ---------------------------------------------------------------------------------
    def op_GET(self, arg):
        if arg not in self.memo:
            self.broken(f"memo entry {arg!r} is read before it is written")
        self.push(self.memo[arg])

    op_BINGET = op_LONG_BINGET = op_GET

    def op_PUT(self, arg):
        arg = int(arg)  # genops reads protocol 0's "p01" as True; pickle means 1
        if arg < 0:
            self.broken("a negative memo index")
        self.memo[arg] = self.stack[-1]

    op_BINPUT = op_LONG_BINPUT = op_PUT

    def op_MEMOIZE(self, _):
        self.memo[len(self.memo)] = self.stack[-1]

    # -- what imports or calls: the restricted part ----------------------------------------------
    def op_GLOBAL(self, arg):
        module, _, name = arg.partition(" ")
        self.push(self.find(module, name))

    def op_STACK_GLOBAL(self, _):
        name, module = self.stack.pop(), self.stack.pop()
        self.push(self.find(module, name))

    def op_REDUCE(self, _):
        args, func = self.stack.pop(), self.stack.pop()
        self.push(self.call(func, args))

    def op_NEWOBJ(self, _):
        args, cls = self.stack.pop(), self.stack.pop()
        self.push(self.call(cls, args, opname="NEWOBJ"))

    def op_NEWOBJ_EX(self, _):
        kwargs, args, cls = self.stack.pop(), self.stack.pop(), self.stack.pop()
        self.push(self.call(cls, args, kwargs, opname="NEWOBJ_EX"))

    def op_INST(self, arg):
        module, _, name = arg.partition(" ")
        func = self.find(module, name)
        self.push(self.call(func, tuple(self.pop_mark()), opname="INST"))

    def op_OBJ(self, _):
        items = self.pop_mark()
        if not items:
            self.broken("OBJ without a class")
        self.push(self.call(items[0], tuple(items[1:]), opname="OBJ"))

    def op_BUILD(self, _):
        state = self.stack.pop()
        target = self.stack[-1] if self.stack else None
        if type(target) is np.ndarray:
            _check_array_state(state, self)
        elif isinstance(target, np.dtype):
            _check_dtype_state(target, state, self)
        elif id(type(target)) in self.record_classes:
            fields = type(target).__dataclass_fields__
            if not (type(state) is dict and all(type(k) is str and k in fields for k in state)):
                self.refuse(f"BUILD of {self.describe(type(target))} with a state other than a dict of its fields "
                            f"({', '.join(fields)})")
            target.__dict__.update(state)   # what pickle does for a class without __setstate__
            return
        else:
            self.refuse(f"BUILD (__setstate__) of {self.describe(target)}")
        target.__setstate__(state)

    def _extension(self, code):
        # only to name it in the error: the same code -> (module, name) table pickle itself reads
        key = getattr(copyreg, "_inverted_registry", {}).get(code)
        self.refuse(f"extension-registry code {code}" + (f" (the global {key[0]}.{key[1]})" if key else ""))

    op_EXT1 = op_EXT2 = op_EXT4 = _extension

    def op_PERSID(self, arg):
        self.persistent(arg)

    def op_BINPERSID(self, _):
        self.persistent(self.stack.pop())

    def persistent(self, pid):
        if self.persistent_load is None:
            self.refuse(f"a persistent id ({pid!r:.80})")
        self.push(self.persistent_load(pid))


def _check_array_state(state, machine: _Machine) -> None:
    """ndarray.__setstate__'s ([1,] shape, dtype, fortran, data) as numpy writes it: raw bytes for plain
    dtypes, an item list for object arrays, as much data as the shape says (numpy would allocate an
    object array's shape before looking at its list)."""
    ok = isinstance(state, tuple) and (len(state) == 4 or (len(state) == 5 and type(state[0]) is int
                                                           and state[0] == 1))
    if ok:
        shape, dtype, fortran, data = state[-4:]
        ok = (_ints(shape) and isinstance(dtype, np.dtype) and type(fortran) is bool
              and isinstance(data, list if dtype.hasobject else (bytes, bytearray)))
    if not ok:
        machine.refuse("BUILD (__setstate__) of numpy.ndarray with a state numpy never writes")
    expected = math.prod(shape) * (1 if dtype.hasobject else dtype.itemsize)
    if len(data) != expected:
        machine.broken(f"an array of shape {shape} and dtype {dtype} comes with {len(data)} "
                       f"{'items' if dtype.hasobject else 'bytes'} instead of {expected}")


def _check_dtype_state(target: np.dtype, state, machine: _Machine) -> None:
    """dtype.__setstate__'s (version, byteorder, subarray, names, fields, elsize, alignment, flags
    [, metadata]) as numpy writes it for the dtype that np.dtype(name) made: numpy takes the item size,
    alignment and flags from the state, and a float32 whose flags claim object references makes numpy
    clear (and copy) its bytes as pointers. Structured and subarray dtypes, whose flags come from the
    file, are refused: checkpoints do not hold them."""
    ok = isinstance(state, tuple) and len(state) in (8, 9) and type(state[0]) is int and state[0] in (3, 4)
    if ok:
        byteorder, subarray, names, fields, elsize, alignment, flags = state[1:8]
        flexible = target.kind in "SUV"
        ok = (isinstance(byteorder, str) and byteorder in ("<", ">", "|", "=")
              and subarray is None and names is None and fields is None
              and all(type(v) is int for v in (elsize, alignment, flags))
              and (elsize, alignment) == ((target.itemsize, target.alignment) if flexible else (-1, -1))
              and flags == target.flags)
    if ok and len(state) == 9:
        metadata = state[8]
        if target.kind in "Mm":  # (metadata dict or None, (unit, count, 1, 1))
            ok = (isinstance(metadata, tuple) and len(metadata) == 2
                  and (metadata[0] is None or isinstance(metadata[0], dict))
                  and isinstance(metadata[1], tuple) and len(metadata[1]) == 4
                  and isinstance(metadata[1][0], bytes) and all(type(v) is int for v in metadata[1][1:]))
        else:
            ok = metadata is None or isinstance(metadata, dict)
    if not ok:
        machine.refuse(f"BUILD (__setstate__) of numpy.dtype {target} with a state numpy never writes for it")


def safe_load(file, *, source: str, persistent_load: Callable[[object], object] | None = None,
              records: dict | None = None):
    """Unpickle one object from the open binary `file`, admitting only what checkpoints contain (see the
    module docstring); `source` names the data in errors, e.g. "load(): 'model.pdparams'".

    persistent_load, if given, builds the object for a persistent id (PERSID / BINPERSID); it must only
    build data. Without it a persistent id is refused. `records` ({(module, name): dataclass}) admits
    plain record classes under those spellings (see the module docstring). Raises UnsafePickleError (a
    pickle.UnpicklingError) for anything refused and pickle.UnpicklingError for a damaged file."""
    machine, reader = _Machine(source, persistent_load, records), _BoundedReader(file)
    try:
        return machine.run(reader)
    except (pickle.UnpicklingError, MemoryError):
        raise
    except Exception as exc:  # any other failure on these bytes means they are not a valid pickle
        if reader.ran_out or isinstance(exc, EOFError):
            raise pickle.UnpicklingError(f"{source}: ends early: it is truncated or not a pickle checkpoint") \
                from None
        raise pickle.UnpicklingError(f"{source}: not a valid pickle ({type(exc).__name__}: {exc}; at byte "
                                     f"{machine.pos}); the file is damaged") from exc


def safe_loads(data: bytes, *, source: str, persistent_load: Callable[[object], object] | None = None):
    """safe_load for a bytes-like object holding a pickle."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"safe_loads(): data must be bytes, bytearray or memoryview, got {type(data).__name__}")
    return safe_load(io.BytesIO(data), source=source, persistent_load=persistent_load)
