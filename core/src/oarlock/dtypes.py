"""Data types: the DType objects, conversion from user spellings, and type promotion.

A DType wraps one numpy dtype (ml_dtypes supplies bfloat16 and the float8
types), so every backend that speaks numpy dtypes (numpy, CuPy) can use it
directly. Promotion follows PyTorch's lattice, which Paddle 3.x adopted:
bool < integers < floating < complex, where a Python scalar only lifts the
category (int tensor + 2.5 gives the default float dtype, float16 + 2.5 stays
float16).
"""

from __future__ import annotations

import builtins
import math

import ml_dtypes
import numpy as np

__all__ = [
    "DType", "convert_dtype", "promote_types", "result_type_with_scalar",
    "set_default_dtype", "get_default_dtype", "all_dtypes", "fit_scalar", "ScalarConversionError",
]


class DType:
    """One element type. Compares equal to its name and to its numpy dtype."""

    __slots__ = ("name", "np", "itemsize", "kind", "rank", "is_floating_point", "is_complex",
                 "is_integer", "is_bool", "differentiable", "weak_scalars")

    def __init__(self, name: str, np_dtype, kind: str, rank: int):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.kind = kind            # "bool", "int", "float", "complex"
        self.rank = rank            # order inside the kind, for promotion
        self.is_floating_point = kind == "float"
        self.is_complex = kind == "complex"
        self.is_integer = kind == "int"
        self.is_bool = kind == "bool"
        self.differentiable = kind in ("float", "complex")
        # numpy keeps Python scalars weak (NEP 50) for its own dtypes, not for ml_dtypes' ones
        self.weak_scalars = self.np.isbuiltin == 1

    def __repr__(self):
        return f"paddle.{self.name}"

    __str__ = __repr__

    def __eq__(self, other):
        if other.__class__ is DType:
            return self is other
        try:
            return convert_dtype(other) is self
        except (TypeError, ValueError):
            return NotImplemented

    # DTypes are singletons: identity hashing keeps dict lookups on the dispatch path in C.
    # (So a DType and its name compare equal but hash differently: don't mix them as dict keys.)
    __hash__ = object.__hash__

    def __reduce__(self):
        return (convert_dtype, (self.name,))


_KINDS = ("bool", "int", "float", "complex")
_SPECS = [
    ("bool", np.bool_, "bool", 0),
    ("uint8", np.uint8, "int", 1),
    ("int8", np.int8, "int", 1),
    ("int16", np.int16, "int", 2),
    ("int32", np.int32, "int", 3),
    ("int64", np.int64, "int", 4),
    ("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "float", 0),
    ("float8_e5m2", ml_dtypes.float8_e5m2, "float", 0),
    ("float16", np.float16, "float", 1),
    ("bfloat16", ml_dtypes.bfloat16, "float", 1),
    ("float32", np.float32, "float", 2),
    ("float64", np.float64, "float", 3),
    ("complex64", np.complex64, "complex", 2),
    ("complex128", np.complex128, "complex", 3),
]
_BY_NAME: dict[str, DType] = {}
_BY_NP: dict[np.dtype, DType] = {}
for _name, _np_type, _kind, _rank in _SPECS:
    _dt = DType(_name, _np_type, _kind, _rank)
    _BY_NAME[_name] = _dt
    _BY_NP[_dt.np] = _dt
    globals()[_name] = _dt
_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "int": "int64", "long": "int64",
            "bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "bool_": "bool",
            "cfloat": "complex64", "cdouble": "complex128"}
__all__ += [name for name, *_ in _SPECS]

all_dtypes: tuple[DType, ...] = tuple(_BY_NAME.values())
_default_float = _BY_NAME["float32"]


def convert_dtype(value) -> DType:
    """Turn a DType, its name ('float32', 'paddle.float32', 'float'), a numpy dtype or a
    Python type (float, int, bool, complex) into a DType; raise naming what was given."""
    if value.__class__ is DType:
        return value
    if isinstance(value, str):
        key = value.rsplit(".", 1)[-1]
        found = _BY_NAME.get(key) or _BY_NAME.get(_ALIASES.get(key, ""))
        if found is not None:
            return found
        raise ValueError(f"unknown dtype {value!r}; known dtypes: {', '.join(_BY_NAME)}")
    if value is float:
        return _default_float
    if value is int:
        return _BY_NAME["int64"]
    if value is builtins.bool:
        return _BY_NAME["bool"]
    if value is complex:
        return _BY_NAME["complex64"] if _default_float.rank <= 2 else _BY_NAME["complex128"]
    try:
        found = _BY_NP.get(np.dtype(value))
    except TypeError:
        found = None
    if found is None:
        raise TypeError(f"cannot interpret {value!r} (a {type(value).__name__}) as a dtype; "
                        f"known dtypes: {', '.join(_BY_NAME)}")
    return found


def from_numpy_dtype(np_dtype) -> DType:
    """The DType of a numpy dtype; the hot path (one dict lookup)."""
    found = _BY_NP.get(np_dtype)
    if found is None:
        return convert_dtype(np_dtype)
    return found


def _promote(a: DType, b: DType) -> DType:
    if a is b:
        return a
    ka, kb = _KINDS.index(a.kind), _KINDS.index(b.kind)
    if ka != kb:
        hi, lo = (a, b) if ka > kb else (b, a)
        if hi.kind == "complex" and lo.kind == "float" and lo.rank > hi.rank:
            return _BY_NAME["complex128"]
        return hi
    if a.kind == "int":
        if a.name == "uint8" or b.name == "uint8":
            other = b if a.name == "uint8" else a
            if other.name == "int8":
                return _BY_NAME["int16"]
            return other
        return a if a.rank > b.rank else b
    if a.kind == "float" and a.rank == b.rank:
        if a.rank == 0:
            raise TypeError(f"no promotion between {a} and {b}: cast one float8 type explicitly")
        return _BY_NAME["float32"]  # float16 with bfloat16
    return a if a.rank > b.rank else b


_PROMOTION: dict[tuple[DType, DType], DType] = {}
for _a in all_dtypes:
    for _b in all_dtypes:
        try:
            _PROMOTION[_a, _b] = _promote(_a, _b)
        except TypeError:
            pass


def promote_types(a: DType, b: DType) -> DType:
    """The dtype two tensors of dtypes a and b compute in (PyTorch/Paddle 3 rules)."""
    found = _PROMOTION.get((a, b))
    if found is None:
        _promote(a, b)  # raises with the reason
    return found


# builtins.bool: the module-level name `bool` is the DType defined above
_SCALAR_KIND = {builtins.bool: "bool", int: "int", float: "float", complex: "complex"}


def scalar_kind(value) -> str | None:
    """The promotion kind of a Python scalar, or None if value is not one."""
    kind = _SCALAR_KIND.get(value.__class__)
    if kind is None and isinstance(value, np.generic):
        return from_numpy_dtype(value.dtype).kind
    return kind


def result_type_with_scalar(dtype: DType, kind: str) -> DType:
    """A tensor of `dtype` combined with a Python scalar of `kind`: the scalar only lifts the kind."""
    if _KINDS.index(kind) <= _KINDS.index(dtype.kind):
        return dtype
    return default_for_kind(kind)


def default_for_kind(kind: str) -> DType:
    """The dtype a lone Python scalar of this kind becomes."""
    if kind == "float":
        return _default_float
    if kind == "complex":
        return _BY_NAME["complex128"] if _default_float.rank == 3 else _BY_NAME["complex64"]
    return _BY_NAME["int64"] if kind == "int" else _BY_NAME["bool"]


def set_default_dtype(d) -> None:
    """Set the dtype that Python floats and float creation ops default to (float16/32/64, bfloat16)."""
    global _default_float
    dt = convert_dtype(d)
    if not dt.is_floating_point or dt.rank == 0:
        raise TypeError(f"set_default_dtype(): d must be float16, bfloat16, float32 or float64, got {dt}")
    _default_float = dt


def get_default_dtype() -> DType:
    return _default_float


# -- a Python number going into a tensor ---------------------------------------------------------------

class ScalarConversionError(ValueError, RuntimeError):
    """A Python number that the dtype it is stored in cannot hold. A ValueError (Paddle's InvalidArgument)
    and a RuntimeError (what PyTorch raises for it), so code written for either catches it."""


# dtypes that take a finite value beyond their range as inf, as PyTorch does (it converts through float32,
# so only a value beyond float32's range raises); float32 and complex64 refuse a value beyond their range,
# and float8_e4m3fn, which has no inf, refuses it and inf itself
_OVERFLOW_TO_INF = frozenset({"float16", "bfloat16", "float8_e5m2"})
_FLOAT_MAX: dict = {}


def _float_max(dt: DType) -> float:
    found = _FLOAT_MAX.get(dt)
    if found is None:
        found = _FLOAT_MAX[dt] = float(ml_dtypes.finfo(dt.np).max)
    return found


def fit_scalar(value, dtype, what: str = "value"):
    """`value` (a Python or numpy number) as the Python number a tensor of `dtype` stores, or a
    ScalarConversionError whose message starts with `what`. PyTorch's checks of a Python scalar going
    into a tensor (c10::checked_convert), so that nothing is stored silently wrong:
    - integer dtypes refuse nan, inf and values outside their range (a float is truncated toward zero
      once it fits; a negative int wraps into an unsigned dtype down to -max, as in PyTorch);
    - a complex value goes into a real dtype only when its imaginary part is 0;
    - float32 and complex64 refuse a finite value beyond their range (float16, bfloat16 and float8_e5m2
      round it to inf unless it is beyond float32's too; float8_e4m3fn, which has no inf, refuses it and
      inf);
    - bool takes anything (nonzero is True).
    Tensors and arrays converted between dtypes are not checked: this is for Python numbers only."""
    dt = dtype if dtype.__class__ is DType else convert_dtype(dtype)
    if isinstance(value, np.generic):
        value = value.item()
    if dt.kind == "bool":
        return builtins.bool(value)
    if value.__class__ is complex and dt.kind != "complex":
        if value.imag != 0 or math.isnan(value.imag):
            raise ScalarConversionError(f"{what} {value!r} has an imaginary part, which {dt.name} cannot hold; "
                                        f"pass its .real, or use a complex dtype")
        value = value.real
    if dt.kind == "int":
        return _fit_int(value, dt, what)
    if dt.kind == "float":
        return _fit_float(value, dt, what)
    value = complex(value)
    return complex(_fit_float(value.real, dt, f"{what} {value!r}: its real part"),
                   _fit_float(value.imag, dt, f"{what} {value!r}: its imaginary part"))


def _shown(value) -> str:
    """A number for a message: a huge int by its leading digits and length, not a screenful of digits."""
    text = repr(value)
    return f"{text[:8]}...({len(text)} digits)" if isinstance(value, int) and len(text) > 24 else text


def _fit_int(value, dt: DType, what: str) -> int:
    info = np.iinfo(dt.np)
    if isinstance(value, float):
        fits = math.isfinite(value) and info.min <= value <= info.max
    else:
        value = int(value)
        # PyTorch lets a negative int wrap into an unsigned dtype (-1 into uint8 is 255), down to -max
        fits = (-info.max if info.min == 0 else info.min) <= value <= info.max
    if not fits:
        note = " (nan and inf have no integer value)" if isinstance(value, float) and not math.isfinite(value) \
            else f" (negative ints down to -{info.max} wrap around)" if info.min == 0 and isinstance(value, int) \
            else ""
        raise ScalarConversionError(f"{what} {_shown(value)} cannot be converted to {dt.name} without overflow: "
                                    f"{dt.name} holds integers from {info.min} to {info.max}{note}")
    value = int(value)   # truncation toward zero, as a C cast
    return value % (info.max + 1) if value < 0 and info.min == 0 else value


def _fit_float(value, dt: DType, what: str) -> float:
    try:
        value = float(value)
    except OverflowError:   # a Python int beyond float64
        raise ScalarConversionError(f"{what} {_shown(value)} cannot be converted to {dt.name} without overflow: "
                                    f"it is beyond float64's largest value {float(np.finfo(np.float64).max)!r}") \
            from None
    wide = dt.name in _OVERFLOW_TO_INF or (dt.kind == "complex" and dt.rank <= 2)
    bound = _BY_NAME["float32"] if wide else dt if dt.kind == "float" else _BY_NAME["float64"]
    limit = _float_max(bound)
    if (abs(value) > limit and not math.isinf(value)) or (math.isinf(value) and dt.name == "float8_e4m3fn"):
        raise ScalarConversionError(f"{what} {value!r} cannot be converted to {dt.name} without overflow: it is "
                                    f"beyond {bound.name}'s largest finite value {limit!r}"
                                    + (", and float8_e4m3fn has no inf" if dt.name == "float8_e4m3fn" else ""))
    return value
