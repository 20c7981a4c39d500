"""torch.cuda as seen by code on the CPU façade: no CUDA device (the probes say so, and seeding is a no-op,
as in torch without CUDA); asking for a device's properties is reported."""

from __future__ import annotations

from oarlock_torch_proxy.facade import amp as _amp
from oarlock_torch_proxy.facade import dtypes as _dtypes
from oarlock_torch_proxy.missing import missing_getattr


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


def is_bf16_supported(including_emulation=True) -> bool:
    return False


def manual_seed(seed) -> None:
    pass


manual_seed_all = manual_seed


def synchronize(device=None) -> None:
    pass


def empty_cache() -> None:
    pass


def is_initialized() -> bool:
    return False


class _Amp:
    autocast = _amp.autocast
    GradScaler = _amp.GradScaler
    custom_fwd = staticmethod(_amp.custom_fwd)
    custom_bwd = staticmethod(_amp.custom_bwd)


amp = _Amp()
globals().update(_dtypes.LEGACY_TYPES)   # torch.cuda.FloatTensor & co (never isinstance here: no CUDA tensors)
__getattr__ = missing_getattr("torch.cuda")
