"""torch.distributed on the façade: not available (single process); libraries check is_available() /
is_initialized() before using it, and any other use is reported."""

from __future__ import annotations

from oarlock_torch_proxy.missing import MissingNamespace, missing_getattr

nn = MissingNamespace("torch.distributed.nn")   # importable (`from torch.distributed import nn`), reported on use


def is_available() -> bool:
    return False


def is_initialized() -> bool:
    return False


__getattr__ = missing_getattr("torch.distributed")
