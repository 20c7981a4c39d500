"""The in-memory state SDCMonitor's rollback returns to: copies of the parameters' arrays and of the optimizer's
state dict (its Tensors as array copies on their own device; nested dicts and lists kept), and putting them back.
"""

from __future__ import annotations

from dataclasses import dataclass

import oarlock
from oarlock.plugin_api import array_of, wrap


@dataclass
class _SavedTensor:
    array: object
    place: object


def _copied(value):
    """A deep copy of a state dict in which each Tensor becomes a _SavedTensor."""
    if isinstance(value, oarlock.Tensor):
        return _SavedTensor(array_of(value).copy(), value.place)
    if isinstance(value, dict):
        return {k: _copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_copied(v) for v in value)
    return value


def _restored(value):
    """The state dict _copied made, with fresh Tensors (the snapshot stays usable for a later rollback)."""
    if isinstance(value, _SavedTensor):
        return wrap(value.array.copy(), value.place)
    if isinstance(value, dict):
        return {k: _restored(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_restored(v) for v in value)
    return value


class Snapshot:
    """Copies of `params` and of optimizer.state_dict() (optimizer None: parameters only), taken now."""

    def __init__(self, params: list, optimizer=None):
        self.params, self.optimizer = params, optimizer
        self.arrays = [array_of(p).copy() for p in params]
        self.state = None if optimizer is None else _copied(optimizer.state_dict())

    def restore(self) -> None:
        """Writes the copies back into the parameters (in place: every reference stays valid) and the optimizer."""
        with oarlock.no_grad():
            for p, array in zip(self.params, self.arrays):
                p.set_value(wrap(array.copy(), p.place))
        if self.state is not None:
            self.optimizer.set_state_dict(_restored(self.state))
