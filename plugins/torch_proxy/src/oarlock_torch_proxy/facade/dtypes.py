"""torch's dtype names, devices and default-dtype functions over oarlock's: `torch.float32 is oarlock.float32`,
so `x.dtype == torch.float32` holds for every oarlock Tensor."""

from __future__ import annotations

import oarlock
from oarlock.plugin_api import default_registry

float32 = float = oarlock.float32
float64 = double = oarlock.float64
float16 = half = oarlock.float16
bfloat16 = oarlock.bfloat16
int8, int16, int32, int64, uint8 = oarlock.int8, oarlock.int16, oarlock.int32, oarlock.int64, oarlock.uint8
int = int32
long = int64
short = int16
bool = oarlock.bool
complex64 = cfloat = oarlock.complex64
complex128 = cdouble = oarlock.complex128
dtype = oarlock.dtype

NAMES = {"float32": float32, "float": float32, "float64": float64, "double": float64, "float16": float16,
         "half": float16, "bfloat16": bfloat16, "int8": int8, "int16": int16, "short": short, "int32": int32,
         "int": int32, "int64": int64, "long": int64, "uint8": uint8, "bool": bool, "complex64": complex64,
         "cfloat": complex64, "complex128": complex128, "cdouble": complex128}
_LEGACY = {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor", "float16": "torch.HalfTensor",
           "bfloat16": "torch.BFloat16Tensor", "int64": "torch.LongTensor", "int32": "torch.IntTensor",
           "bool": "torch.BoolTensor", "uint8": "torch.ByteTensor", "int8": "torch.CharTensor"}


def type_string(t) -> str:
    """x.type(): torch's legacy type name ("torch.FloatTensor")."""
    return _LEGACY.get(t.dtype.name, f"torch.{t.dtype.name}")


def get_default_dtype():
    return oarlock.dtypes.convert_dtype(oarlock.get_default_dtype())


def set_default_dtype(d) -> None:
    oarlock.set_default_dtype(d)


def is_floating_point(t) -> bool:
    return t.dtype in (float16, bfloat16, float32, float64)


def is_complex(t) -> bool:
    return t.dtype in (complex64, complex128)


def promote_types(a, b):
    return (oarlock.zeros([1], dtype=a) + oarlock.zeros([1], dtype=b)).dtype


class _DeviceMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, oarlock.plugin_api.Place)


class device(metaclass=_DeviceMeta):
    """torch.device("cpu"), torch.device("cuda", 0): oarlock's Place for it (Place has torch's .type and
    .index and compares equal to "cpu"); isinstance(x.device, torch.device) holds."""

    def __new__(cls, type, index=None):
        if isinstance(type, oarlock.plugin_api.Place):
            return type
        spec = type if index is None or ":" in str(type) else f"{type}:{index}"
        return default_registry().parse_place(spec, "torch.device(): argument 'type'")


class _LegacyTensorMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, oarlock.Tensor) and obj.dtype == cls.dtype


def _legacy_type(name, dt):
    """torch.FloatTensor & co: FloatTensor(data) or FloatTensor(*sizes) make a tensor of that dtype,
    isinstance(x, torch.FloatTensor) checks the dtype, and x.type(torch.FloatTensor) casts."""

    def __new__(cls, *args):
        import builtins

        from oarlock_torch_proxy.tensor_methods import Size
        if len(args) == 1 and isinstance(args[0], Size):
            return oarlock.zeros(list(args[0]), dtype=dt)
        if len(args) == 1 and not isinstance(args[0], builtins.int):
            return oarlock.tensor(args[0], dtype=dt) if not isinstance(args[0], oarlock.Tensor) \
                else args[0].astype(dt)
        return oarlock.zeros(list(args), dtype=dt)

    return _LegacyTensorMeta(name, (), {"__new__": __new__, "dtype": dt, "__module__": "torch"})


LEGACY_TYPES = {f"{prefix}Tensor": _legacy_type(f"{prefix}Tensor", dt) for prefix, dt in (
    ("Float", float32), ("Double", float64), ("Half", float16), ("BFloat16", bfloat16), ("Long", int64),
    ("Int", int32), ("Short", int16), ("Char", int8), ("Byte", uint8), ("Bool", bool))}


def resolve_type(dst):
    """x.type(dst) / Module.type(dst): a dtype, a legacy tensor type, or its name ("torch.FloatTensor")."""
    if isinstance(dst, str):
        name = dst.rpartition(".")[2]
        if name in LEGACY_TYPES:
            return LEGACY_TYPES[name].dtype
        return NAMES[name]
    if isinstance(dst, _LegacyTensorMeta):
        return dst.dtype
    return dst
