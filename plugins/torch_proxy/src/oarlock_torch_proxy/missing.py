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


# torch's submodules the façade does not have: `torch.fft.rfft2(x)` names torch.fft.rfft2 (the name asked for),
# not just torch.fft; `import torch.fft` still fails as a missing module
TORCH_SUBMODULES = frozenset({"fft", "sparse", "onnx", "export", "masked", "nested", "quantization", "ao", "profiler",
                              "hub", "signal", "overrides", "library", "mps", "package", "fx", "futures",
                              "multiprocessing", "_dynamo", "_inductor", "_C", "storage", "random", "types",
                              "serialization", "cpu", "mtia", "accelerator"})


class MissingNamespace:
    """torch.<submodule> the façade lacks: any name read from it raises, naming torch.<submodule>.<name>."""

    def __init__(self, torch_name: str):
        self._torch_name = torch_name

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        from oarlock_torch_proxy.hook import MissingAttribute
        raise MissingAttribute(f"{self._torch_name}.{name} is not implemented by oarlock's torch proxy (used at "
                               f"{caller_site(2)}); please report it").named(f"{self._torch_name}.{name}")

    def __call__(self, *args, **kwargs):
        not_implemented(self._torch_name)

    def __repr__(self):
        return f"<missing torch module {self._torch_name}>"


def missing_class(torch_name: str):
    """A torch class the façade knows by name but does not implement: importing it works (libraries import
    many classes they use only on some paths), making one raises NotImplementedError naming it."""

    def __new__(cls, *args, **kwargs):
        not_implemented(torch_name)

    return type(torch_name.rpartition(".")[2], (), {"__new__": __new__, "__module__": torch_name.rpartition(".")[0],
                                                    "__doc__": f"{torch_name}: not implemented by the torch proxy"})


def missing_getattr(torch_module: str):
    """A module-level `__getattr__` for the façade module standing for `torch_module`."""

    def __getattr__(name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)   # dunder probes (__path__, __file__ ...) by import machinery and tools
        if torch_module == "torch" and name in TORCH_SUBMODULES:
            return MissingNamespace(f"torch.{name}")
        from oarlock_torch_proxy.hook import MissingAttribute
        raise MissingAttribute(f"{torch_module}.{name} is not implemented by oarlock's torch proxy (used at "
                                f"{caller_site(2)}); please report it").named(f"{torch_module}.{name}")

    return __getattr__


def not_implemented(torch_name: str, why: str = ""):
    """A stand-in callable for a torch function whose use we reject explicitly (an argument we cannot honour)."""
    from oarlock_torch_proxy.hook import TorchProxyMissing
    raise TorchProxyMissing(f"{torch_name}{' ' + why if why else ''} is not implemented by oarlock's torch proxy "
                            f"(used at {caller_site(2)}); please report it").named(torch_name)
