"""Hostile pickles for test_safe_load: every opcode a pickle can import or call with, each carrying a
payload that creates the file SENTINEL when it runs (so a test can tell that nothing ran).

Importable from the checkpoint tests (conftest puts this folder on sys.path), so that the classes
below pickle by reference the way an attacker's own classes would.

case(mechanism, payload, protocol) -> (bytes, live): `live` says whether stdlib pickle.loads runs the
payload (the tests check that it does, so each refusal is of a working exploit).
handwritten(npy_path) -> the cases Python's pickler never writes (INST, OBJ, dotted names, misused
reconstructors), with what the refusal must name.
extension(mechanism, payload) -> a context in which an EXTn case's code is registered with copyreg.
first_foreign_global(data) -> the first global stdlib pickle asks for that genuine Paddle files never name.
"""

from __future__ import annotations

import builtins
import contextlib
import copyreg
import functools
import io
import os
import pickle
import struct

import numpy as np

SENTINEL = os.devnull  # set by the test to a path in its tmp_path before building or loading a case
EXT_CODES = {"EXT1": 0xF1, "EXT2": 0xBEEF, "EXT4": 0x1234567}


def touch(*_):
    """What every payload amounts to: create SENTINEL."""
    with open(SENTINEL, "w"):
        pass


class Reduce:
    """Pickles as func(*args) (GLOBAL/STACK_GLOBAL + REDUCE)."""

    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class SetState:
    """Runs the payload from __setstate__ (BUILD)."""

    def __getstate__(self):
        return {"k": 1}

    def __setstate__(self, state):
        touch()


class NewObj:
    """Runs the payload from __new__ (NEWOBJ at protocols 2+)."""

    def __new__(cls, *args):
        touch()
        return super().__new__(cls)

    def __reduce_ex__(self, protocol):
        return copyreg.__newobj__, (NewObj, 1)


class NewObjEx:
    """Runs the payload from __new__ with keyword arguments (NEWOBJ_EX at protocols 4+)."""

    def __new__(cls, *args, **kwargs):
        touch()
        return super().__new__(cls)

    def __reduce_ex__(self, protocol):
        return copyreg.__newobj_ex__, (NewObjEx, (1,), {"k": 2})


class EvilDict(dict):
    """A subclass of an admitted container whose __setitem__ runs the payload (SETITEMS)."""

    def __setitem__(self, key, value):
        touch()
        super().__setitem__(key, value)


class EvilArray(np.ndarray):
    """A subclass of numpy.ndarray whose __setstate__ runs the payload (_reconstruct + BUILD)."""

    def __setstate__(self, state):
        touch()
        super().__setstate__(state)


def payloads(npy_path: str) -> dict:
    """name -> (function, args): calls that create SENTINEL, from os.system to numpy functions that are
    not numpy's reconstructors. `npy_path` is where the numpy.load payload's .npy file is written."""
    code = f"open({SENTINEL!r}, 'w').close()"
    np.save(npy_path, np.array([Reduce(touch, ())], dtype=object), allow_pickle=True)
    return {
        "open": (builtins.open, (SENTINEL, "w")),
        "os.system": (os.system, (f"touch '{SENTINEL}'",)),
        "eval": (builtins.eval, (code,)),
        "exec": (builtins.exec, (code,)),
        "numpy.load": (np.load, (npy_path, None, True)),  # an object array whose pickle runs touch
        "numpy.testing.runstring": (np.testing.runstring, (code, {})),
        "functools.partial": (functools.partial(touch), ()),
    }


def _in_state_dict(obj):
    """obj inside a state dict like a genuine file's."""
    return {"evil": obj, "weight": np.ones([2, 3], np.float32), "step": 3}


class _PersistentPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Reduce):
            return "evil-id" if self.proto == 0 else ("evil-id", 1)
        return None

    def __init__(self, file, protocol):
        super().__init__(file, protocol)
        self.proto = protocol


@contextlib.contextmanager
def extension(mechanism: str, payload: str, npy_path: str):
    """For an EXTn mechanism: the payload's function registered in copyreg's extension registry, so that
    pickle writes (and stdlib pickle reads) it as an EXTn code; a no-op for the other mechanisms."""
    if mechanism not in EXT_CODES:
        yield
        return
    func = payloads(npy_path)[payload][0]
    copyreg.add_extension(func.__module__, func.__qualname__, EXT_CODES[mechanism])
    try:
        yield
    finally:
        copyreg.remove_extension(func.__module__, func.__qualname__, EXT_CODES[mechanism])


def case(mechanism: str, payload, protocol: int, npy_path: str):
    """(bytes, live) for one hostile pickle; `payload` names an entry of payloads() (for 'reduce' and
    the EXT codes) and is ignored by the other mechanisms."""
    if mechanism == "reduce" or mechanism in EXT_CODES:  # EXTn: inside extension(), pickle writes the code
        return pickle.dumps(_in_state_dict(Reduce(*payloads(npy_path)[payload])), protocol), True
    if mechanism == "persistent id":
        buffer = io.BytesIO()
        _PersistentPickler(buffer, protocol).dump(_in_state_dict(Reduce(touch, ())))
        return buffer.getvalue(), False
    objects = {"BUILD": SetState, "NEWOBJ": lambda: object.__new__(NewObj),  # without running the payload
               "NEWOBJ_EX": lambda: object.__new__(NewObjEx), "dict subclass": lambda: EvilDict(a=1),
               "ndarray subclass": lambda: np.zeros(3).view(EvilArray)}
    # below protocol 2 a dict subclass is rebuilt by copyreg._reconstructor, which never calls __setitem__
    live = mechanism != "dict subclass" or protocol >= 2
    return pickle.dumps(_in_state_dict(objects[mechanism]()), protocol), live


def handwritten(npy_path: str) -> dict:
    """name -> (bytes, live, what the refusal names): opcodes Python's pickler never writes for these
    (INST, OBJ), getattr chains, dotted names, and admitted callables called or built the wrong way."""
    command = f"touch '{SENTINEL}'".encode()
    os_system = f"{os.system.__module__}\nsystem".encode()  # GLOBAL's and INST's argument: two lines

    def text(value: bytes):  # BINUNICODE
        return b"X" + struct.pack("<I", len(value)) + value

    def stack_global(module: bytes, name: bytes):
        return b"\x80\x04" + text(module) + text(name) + b"\x93"

    chain_getattr = (b"cbuiltins\ngetattr\n(cbuiltins\n__import__\n(Vos\ntRVsystem\ntR(V" + command
                     + b"\ntR.")
    code = f"open({SENTINEL!r}, 'w').close()".encode()
    runstring = stack_global(b"numpy", b"testing.runstring") + text(code) + b"}\x86R."
    ndarray_call = stack_global(b"numpy", b"ndarray") + b"K\x0a\x85\x85R."  # ndarray((10,))
    reconstruct_dtype = (stack_global(b"numpy._core.multiarray", b"_reconstruct")
                         + b"\x8c\x05numpy\x8c\x05dtype\x93K\x00\x85C\x01b\x87R.")
    ordered_dict_build = (stack_global(b"collections", b"OrderedDict") + b")R}\x8c\x01kK\x01sb.")
    return {
        "INST os.system": (b"(V" + command + b"\ni" + os_system + b"\n.", True,
                           os_system.decode().replace("\n", ".")),
        "OBJ os.system": (b"(c" + os_system + b"\nV" + command + b"\no.", True,
                          os_system.decode().replace("\n", ".")),
        "INST numpy.load": (b"(V" + npy_path.encode() + b"\nNI01\ninumpy\nload\n.", True, "numpy.load"),
        "getattr chain": (chain_getattr, True, "builtins.getattr"),
        "dotted name numpy testing.runstring": (runstring, True, "numpy.testing.runstring"),
        "dotted name builtins tuple.__class__": (stack_global(b"builtins", b"tuple.__class__") + b".", False,
                                                 "builtins.tuple.__class__"),
        "call of numpy.ndarray": (ndarray_call, False, "a call (REDUCE) of numpy.ndarray"),
        "_reconstruct of a dtype": (reconstruct_dtype, False, "_reconstruct with arguments"),
        "BUILD of an OrderedDict": (ordered_dict_build, False, "BUILD (__setstate__) of a collections.OrderedDict"),
        "NEWOBJ of _reconstruct": (stack_global(b"numpy._core.multiarray", b"_reconstruct")
                                   + b"\x8c\x05numpy\x8c\x07ndarray\x93K\x00\x85C\x01b\x87\x81.", False,
                                   "NEWOBJ of numpy._core.multiarray._reconstruct, which is not a class"),
        "OBJ of numpy.ndarray": (b"\x80\x02(cnumpy\nndarray\nK\x0ao.", False, "a call (OBJ) of numpy.ndarray"),
    }


# The globals genuine Paddle 3.2 state-dict files name (numpy's array reconstruction).
GENUINE = {"numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct", "numpy.ndarray",
           "numpy.dtype"}


def first_foreign_global(data: bytes):
    """The first global outside GENUINE that stdlib pickle's find_class is asked for while loading `data`
    (nothing foreign runs: that lookup is refused), or None if it asks for none."""
    asked = []

    class Tracer(pickle.Unpickler):
        def find_class(self, module, name):
            if f"{module}.{name}" in GENUINE:
                return super().find_class(module, name)
            asked.append(f"{module}.{name}")
            raise pickle.UnpicklingError("traced")

        def persistent_load(self, pid):
            raise pickle.UnpicklingError("traced")

    with contextlib.suppress(Exception):
        Tracer(io.BytesIO(data)).load()
    return asked[0] if asked else None
