"""torch.xpu (and the same probes for other accelerators): none here."""

from oarlock_torch_proxy.missing import missing_getattr


def is_available() -> bool:
    return False


def device_count() -> int:
    return 0


__getattr__ = missing_getattr("torch.xpu")
