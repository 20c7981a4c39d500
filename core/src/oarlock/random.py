"""Seeding and random-generator state, per device, delegated to the backends."""

from __future__ import annotations

__all__ = ["seed", "get_rng_state", "set_rng_state"]


def _backends():
    from oarlock.registry import default_registry
    return default_registry().backends


def seed(seed: int) -> None:
    """Seed the random generators of every device of every backend."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed(): seed must be an int, got {type(seed).__name__} {seed!r}")
    for backend in _backends().values():
        backend.seed(seed)


def _place(device):
    from oarlock.registry import default_registry
    from oarlock.device import default_place
    return default_place() if device is None else default_registry().parse_place(device, what="device")


def get_rng_state(device=None) -> list:
    """The generator states of every device of `device`'s type (default: the current device)."""
    place = _place(device)
    backend = place.backend
    return [backend.get_rng_state(i) for i in range(backend.device_count())]


def set_rng_state(state_list, device=None) -> None:
    """Restore states returned by get_rng_state."""
    place = _place(device)
    backend = place.backend
    if len(state_list) != backend.device_count():
        raise ValueError(f"set_rng_state(): got {len(state_list)} states for {backend.device_count()} "
                         f"{place.type} device(s)")
    for i, state in enumerate(state_list):
        backend.set_rng_state(state, i)
