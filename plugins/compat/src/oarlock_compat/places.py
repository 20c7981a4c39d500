"""Paddle's place constructors that the core does not have: `CUDAPinnedPlace` and `XPUPlace`.

Pinned host memory is host memory: a pinned tensor is a cpu tensor (`Tensor.pin_memory()` page-locks it),
so `CUDAPinnedPlace()` is the cpu place. `XPUPlace(i)` is the place of device type "xpu", usable when a
plugin provides that device (the error of any op on it says when none does)."""

from __future__ import annotations

import oarlock


def CUDAPinnedPlace():  # noqa: N802  (Paddle's spelling)
    """The place of page-locked host memory: the cpu place (pinned tensors are cpu tensors in oarlock)."""
    return oarlock.CPUPlace()


def XPUPlace(dev_id: int = 0):  # noqa: N802
    """The place of XPU device `dev_id` (device type "xpu")."""
    if isinstance(dev_id, bool) or not isinstance(dev_id, int) or dev_id < 0:
        raise ValueError(f"oarlock.XPUPlace(): dev_id must be an int >= 0, got {dev_id!r}")
    return oarlock.CustomPlace("xpu", dev_id)
