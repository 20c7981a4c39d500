"""Names the façade lacks: a façade module's `__getattr__` raises NotImplementedError naming the exact torch
name and the file:line that asked for it, so a library never gets a silently wrong stand-in."""

from __future__ import annotations

import sys


def caller_site(depth: int) -> str:
    """`file:line` of the frame `depth` levels above the caller, skipping import machinery frames."""
    frame = sys._getframe(depth)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen")
                                 or "oarlock_torch_proxy" in frame.f_code.co_filename):
        frame = frame.f_back
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def missing_getattr(torch_module: str):
    """A module-level `__getattr__` for the façade module standing for `torch_module`."""

    def __getattr__(name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)   # dunder probes (__path__, __file__ ...) by import machinery and tools
        from oarlock_torch_proxy.hook import MissingAttribute
        raise MissingAttribute(f"{torch_module}.{name} is not implemented by oarlock's torch proxy (used at "
                                f"{caller_site(2)}); please report it").named(f"{torch_module}.{name}")

    return __getattr__


def not_implemented(torch_name: str, why: str = ""):
    """A stand-in callable for a torch function whose use we reject explicitly (an argument we cannot honour)."""
    from oarlock_torch_proxy.hook import TorchProxyMissing
    raise TorchProxyMissing(f"{torch_name}{' ' + why if why else ''} is not implemented by oarlock's torch proxy "
                            f"(used at {caller_site(2)}); please report it").named(torch_name)
