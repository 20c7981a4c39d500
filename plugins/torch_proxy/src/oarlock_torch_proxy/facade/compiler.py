"""torch.compiler: the façade runs eagerly, so disable() leaves functions as they are and nothing compiles."""

from __future__ import annotations

from oarlock_torch_proxy.missing import missing_getattr


def disable(fn=None, recursive=True):
    return fn if fn is not None else (lambda f: f)


def allow_in_graph(fn):
    return fn


assume_constant_result = allow_in_graph


def is_compiling() -> bool:
    return False


is_dynamo_compiling = is_compiling


__getattr__ = missing_getattr("torch.compiler")
