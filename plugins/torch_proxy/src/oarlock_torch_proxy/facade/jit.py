"""torch.jit for eager code: script/ignore/unused return what they are given (scripting does not change what a
function computes), and is_scripting / is_tracing answer False."""

from __future__ import annotations

from oarlock_torch_proxy.missing import missing_getattr


def script(obj=None, *args, **kwargs):
    return obj


def ignore(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


unused = export = ignore


def trace(func, example_inputs=None, *args, **kwargs):
    """torch.jit.trace: the function or module itself (a trace replays the same computation)."""
    return func


def is_scripting() -> bool:
    return False


def is_tracing() -> bool:
    return False


__getattr__ = missing_getattr("torch.jit")
