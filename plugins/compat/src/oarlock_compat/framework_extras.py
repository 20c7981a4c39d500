"""More of Paddle's framework modules that library code (PaddleFormers, PaddleNLP) touches at import time or
in dygraph paths: `core.VarDesc.VarType` and `core.AmpLevel` (Paddle's enum values), the dygraph tracer's
flags (`framework._dygraph_tracer()._has_grad`, `_amp_level`, `_amp_dtype`, `_train_mode`),
`framework.recall_error`'s error strings, `common_ops_import.convert_dtype` / `convert_np_dtype_to_dtype_`,
`utils.map_structure`, `LazyGuard`, `disable_signal_handler`, `get_flags` /
`set_flags`, and `paddle.version`."""

from __future__ import annotations

import enum

import oarlock
from oarlock.plugin_api import AUTOCAST


class VarType(enum.IntEnum):
    """Paddle's core.VarDesc.VarType, with Paddle's values. Its dtype members are the static-graph dtype codes:
    as in Paddle 3.2, they are not equal to the dtypes of dygraph tensors (use core.DataType for those)."""
    BOOL = 0
    INT16 = 1
    INT32 = 2
    INT64 = 3
    FP16 = 4
    FP32 = 5
    FP64 = 6
    DENSE_TENSOR = 7
    LOD_TENSOR = 7
    SELECTED_ROWS = 8
    DENSE_TENSOR_ARRAY = 13
    LOD_TENSOR_ARRAY = 13
    UINT8 = 20
    INT8 = 21
    BF16 = 22
    COMPLEX64 = 23
    COMPLEX128 = 24

    def __str__(self):
        return f"VarType.{self.name}"   # Paddle's spelling (an IntEnum would print the number)


VarDesc = type("VarDesc", (), {"VarType": VarType, "__doc__": "Paddle's core.VarDesc: holds the VarType enum."})


class AmpLevel(enum.IntEnum):
    """Paddle's core.AmpLevel (O0: no autocast, O1: per-op lists, O2: almost everything in low precision)."""
    O0 = 0
    O1 = 1
    O2 = 2
    O3 = 3
    OD = 4


class Tracer:
    """What `framework._dygraph_tracer()` gives in Paddle: the eager engine's flags, read from (and `_has_grad`
    written to) oarlock's grad mode and autocast state of this thread."""

    @property
    def _has_grad(self) -> bool:
        return oarlock.is_grad_enabled()

    @_has_grad.setter
    def _has_grad(self, value):
        oarlock.set_grad_enabled(bool(value))

    @property
    def _amp_level(self) -> AmpLevel:
        """O0 outside auto_cast, O1 inside: the core's autocast state keeps the op lists an auto_cast block
        resolved, not the level it was given, so an O2 block also reads O1 here (a known limit)."""
        return AmpLevel.O1 if AUTOCAST.enabled else AmpLevel.O0

    @property
    def _amp_dtype(self) -> str:
        return oarlock.dtypes.convert_dtype(AUTOCAST.dtype).name if AUTOCAST.enabled else "float32"

    @property
    def _train_mode(self) -> bool:
        return True


_TRACER = Tracer()


def dygraph_tracer() -> Tracer:
    """The tracer of dynamic mode (always on in oarlock)."""
    return _TRACER


# paddle.framework.recall_error: the messages Paddle raises for a non-finite loss, matched by string
LOSS_NAN_ERROR = "PaddleRecall error(102): LossNan"
LOSS_INF_ERROR = "PaddleRecall error(104): LossInf"
AADIFF_ERROR = "PaddleRecall error(103): AAdiff"
SHARDING_PAD_NON_ZERO_ERROR = "PaddleRecall error(105): ShardingPadNonZero"


def convert_dtype(dtype) -> str:
    """The dtype's name ("float32"; bfloat16 is "uint16", Paddle's legacy spelling there)."""
    name = oarlock.dtypes.convert_dtype(dtype).name
    return "uint16" if name == "bfloat16" else name


def convert_np_dtype_to_dtype_(np_dtype):
    """The oarlock dtype of a numpy dtype or dtype name."""
    return oarlock.dtypes.convert_dtype(np_dtype)


def map_structure(func, *structure):
    """Apply func to the leaves of nested lists, tuples and dicts (all of one structure), keeping the nesting,
    as paddle.utils.map_structure does."""
    first = structure[0]
    if isinstance(first, dict):
        return {k: map_structure(func, *(s[k] for s in structure)) for k in first}
    if isinstance(first, (list, tuple)):
        if any(len(s) != len(first) for s in structure):
            raise ValueError(f"oarlock.utils.map_structure(): the structures differ in length: "
                             f"{[len(s) for s in structure]}")
        items = [map_structure(func, *parts) for parts in zip(*structure)]
        return type(first)(*items) if hasattr(first, "_fields") else type(first)(items)
    return func(*structure)


class LazyGuard:
    """Paddle's LazyGuard delays parameter initialisation of the Layers built inside it until they are used.
    oarlock initialises parameters when they are created, so the block runs as it would without the guard."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def disable_signal_handler() -> None:
    """Paddle removes its C++ signal handlers; oarlock installs none, so there is nothing to remove."""


_FLAGS: dict[str, object] = {}   # flags set through set_flags, read back by get_flags


def set_flags(flags: dict) -> None:
    """Record Paddle runtime flags ({"FLAGS_name": value}); they tune Paddle's C++ runtime, which oarlock does
    not have, so they are only stored (get_flags reads them back)."""
    if not isinstance(flags, dict):
        raise TypeError(f"oarlock.set_flags(): flags must be a dict of FLAGS_* names to values, got "
                        f"{type(flags).__name__}")
    for name in flags:
        if not isinstance(name, str) or not name.startswith("FLAGS_"):
            raise ValueError(f"oarlock.set_flags(): flag names start with 'FLAGS_', got {name!r}")
    _FLAGS.update(flags)


def get_flags(flags):
    """{name: value} of flags set earlier with set_flags; a flag never set raises ValueError naming it."""
    names = [flags] if isinstance(flags, str) else list(flags)
    missing = [n for n in names if n not in _FLAGS]
    if missing:
        raise ValueError(f"oarlock.get_flags(): flags {missing} were never set with oarlock.set_flags (oarlock has "
                         f"no Paddle C++ runtime flags of its own)")
    return {n: _FLAGS[n] for n in names}


# paddle.version: oarlock reports the Paddle version whose API it follows, and no CUDA build
VERSION = {"full_version": "3.2.0", "major": "3", "minor": "2", "patch": "0", "rc": "0", "is_tagged": True,
           "commit": "oarlock", "with_mkl": "OFF", "cuda": lambda: "False", "cudnn": lambda: "False",
           "nccl": lambda: "0", "xpu": lambda: "False", "show": lambda: print("full_version: 3.2.0 (oarlock)")}
