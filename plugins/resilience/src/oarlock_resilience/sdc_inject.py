"""Fault injection for the tests of SDCMonitor, and for nothing else: a bit flipped in a parameter of one rank,
or the matrix products of one rank returning perturbed results for one step.

Faults come from `inject_fault(...)` (a context manager) or from the environment variable
OARLOCK_FAULT_INJECT, read when an SDCMonitor is made: faults separated by ";", each "kind:key=value,...":

    OARLOCK_FAULT_INJECT="bitflip:rank=1,step=5,param=0.weight,bit=3;matmul:rank=0,step=7"

- bitflip (rank, step, param, bit=0, index=0): right after optimizer step `step` on global rank `rank` (and after
  the monitor's check of that step), bit `bit` of element `index` (flat) of the parameter named `param` flips in
  place, as a memory fault between two steps would.
- matmul (rank, step, delta=0.01, calls=0): while global rank `rank` computes step `step` (from the end of step
  `step`-1's check to the end of step `step`'s check: its forward, backward, update and replays), the results of
  the matmul, linear and bmm kernels have delta * (1 + |x|) added to their first element: a faulty core. calls=N
  perturbs only the first N of those products (N=1: the first product of the step's training forward, gone by
  the time a replay runs); 0, every one. It works by swapping those kernels in the registry (public Registry
  tables) and restoring them afterwards.

Faults fire at the step boundaries the monitor counts, so they need a monitor; each fires once.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, field

import numpy as np

from oarlock.plugin_api import array_of, default_registry

ENV = "OARLOCK_FAULT_INJECT"
MATMUL_OPS = ("matmul", "linear", "bmm")
_KEYS = {"bitflip": {"rank", "step", "param", "bit", "index"}, "matmul": {"rank", "step", "delta", "calls"}}
_ACTIVE: list = []   # the faults of the open inject_fault() blocks


@dataclass
class Fault:
    kind: str
    rank: int
    step: int
    param: str | None = None
    bit: int = 0
    index: int = 0
    delta: float = 0.01
    calls: int = 0
    fired: bool = field(default=False, compare=False)


def make_fault(kind: str, what: str, **keys) -> Fault:
    """A checked Fault; `what` names the caller in errors."""
    if kind not in _KEYS:
        raise ValueError(f"{what}: fault kind must be one of {sorted(_KEYS)}, got {kind!r}")
    unknown = set(keys) - _KEYS[kind]
    if unknown:
        raise ValueError(f"{what}: a {kind} fault takes the keys {sorted(_KEYS[kind])}, got {sorted(unknown)}")
    for key in ("rank", "step"):
        if key not in keys:
            raise ValueError(f"{what}: a {kind} fault needs {key}=")
    if kind == "bitflip" and not keys.get("param"):
        raise ValueError(f"{what}: a bitflip fault needs param= (a parameter name)")
    try:
        fault = Fault(kind, int(keys["rank"]), int(keys["step"]), keys.get("param"), int(keys.get("bit", 0)),
                      int(keys.get("index", 0)), float(keys.get("delta", 0.01)), int(keys.get("calls", 0)))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: bad value in {keys!r}: {exc}") from None
    if fault.step < 1 or min(fault.rank, fault.bit, fault.index, fault.calls) < 0:
        raise ValueError(f"{what}: rank, bit, index and calls must be >= 0 and step >= 1, got {keys!r}")
    return fault


def parse(text: str) -> list:
    """The faults an OARLOCK_FAULT_INJECT value describes."""
    faults = []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        kind, _, rest = item.partition(":")
        pairs = [p.split("=", 1) for p in filter(None, rest.split(","))]
        if any(len(p) != 2 for p in pairs):
            raise ValueError(f"{ENV}: each fault is kind:key=value,... ; got {item!r}")
        faults.append(make_fault(kind.strip(), ENV, **{k.strip(): v.strip() for k, v in pairs}))
    return faults


@contextlib.contextmanager
def inject_fault(kind: str, **keys):
    """Inject one fault (see the module docstring) into the SDCMonitors made inside the block."""
    fault = make_fault(kind, "inject_fault()", **keys)
    _ACTIVE.append(fault)
    try:
        yield fault
    finally:
        _ACTIVE.remove(fault)


def pending_faults() -> list:
    """The faults a monitor made now gets: the environment's and those of the open inject_fault() blocks."""
    return parse(os.environ.get(ENV, "")) + list(_ACTIVE)


def flip_bit(tensor, bit: int, index: int) -> None:
    """Flips bit `bit` of element `index` (flat) of `tensor`'s storage in place."""
    array = array_of(tensor)
    bits = array.dtype.itemsize * 8
    if bit >= bits or index >= array.size:
        raise ValueError(f"inject bitflip: bit {bit} / index {index} out of range for a {array.dtype} tensor of "
                         f"{array.size} elements")
    words = array.reshape(-1).view(f"u{array.dtype.itemsize}")
    words[index] ^= np.array(1 << bit, dtype=words.dtype)


class FaultyMatmul:
    """While entered, the matrix-product kernels of the registry return a perturbed first element (the first
    `calls` products only, when calls > 0)."""

    def __init__(self, delta: float, calls: int = 0):
        self.delta, self.saved, self.left = delta, {}, calls if calls > 0 else None
        self._depth = threading.local()   # a kernel may call another matmul kernel: perturb the outermost only

    def _perturbed(self, kernel):
        delta, depth = self.delta, self._depth

        def faulty(*args, **kwargs):
            depth.n = getattr(depth, "n", 0) + 1
            try:
                out = kernel(*args, **kwargs)
            finally:
                depth.n -= 1
            if depth.n or self.left == 0:
                return out
            if self.left is not None:
                self.left -= 1
            out = out.copy()
            out.reshape(-1)[0] += delta * (1 + abs(out.reshape(-1)[0]))
            return out
        return faulty

    def __enter__(self):
        registry = default_registry()
        self.saved = {key: entry for key, entry in registry.kernels.items() if key[0] in MATMUL_OPS}
        for key, (kernel, plugin) in self.saved.items():
            registry.kernels[key] = (self._perturbed(kernel), plugin)
        registry.changed()   # drops the cached kernel lookups
        return self

    def __exit__(self, *exc):
        registry = default_registry()
        registry.kernels.update(self.saved)
        registry.changed()
        return False
