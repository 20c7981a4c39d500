"""`paddle.jit` for eager execution: `to_static` keeps the function or Layer as it is (oarlock has no
static-graph compiler, so code decorated for Paddle's dynamic-to-static conversion runs eagerly with the
same results), `not_to_static` and `ignore_module` mark what the converter would skip (nothing to do)."""

from __future__ import annotations

import types

_ENABLED = [True]   # enable_to_static's switch: kept so code can read back what it set


def _check_input_spec(input_spec):
    if input_spec is not None and not isinstance(input_spec, (list, tuple, dict)):
        raise TypeError(f"oarlock.jit.to_static(): input_spec must be a list, tuple or dict of InputSpec or "
                        f"Tensor, or None; got {type(input_spec).__name__}")


def to_static(function=None, input_spec=None, build_strategy=None, backend="CINN", **kwargs):
    """Paddle's dynamic-to-static decorator, as eager execution: returns `function` itself (a function or a
    Layer, whose forward stays eager), or a decorator doing that when called as `@to_static(input_spec=...)`."""
    _check_input_spec(input_spec)

    def decorate(fn):
        if not callable(fn):
            raise TypeError(f"oarlock.jit.to_static(): expects a function or a Layer, got {type(fn).__name__}")
        return fn

    return decorate if function is None else decorate(function)


def not_to_static(func=None):
    """Marks a function that the dynamic-to-static converter must leave alone; everything runs eagerly here,
    so it is returned unchanged (or a decorator that does that, when called without a function)."""
    if func is None:
        return lambda fn: fn
    if not callable(func):
        raise TypeError(f"oarlock.jit.not_to_static(): expects a function, got {type(func).__name__}")
    return func


def ignore_module(modules) -> None:
    """Modules the dynamic-to-static converter should not transcribe; there is no converter, so only the
    argument is checked (a list of modules, as Paddle requires)."""
    if not isinstance(modules, (list, tuple)) or not all(isinstance(m, types.ModuleType) for m in modules):
        raise TypeError(f"oarlock.jit.ignore_module(): modules must be a list of modules, got {modules!r}")


def enable_to_static(enable_to_static_bool: bool) -> None:
    """Paddle's global switch for to_static; code runs eagerly either way. The value must be a bool."""
    if not isinstance(enable_to_static_bool, bool):
        raise TypeError(f"oarlock.jit.enable_to_static(): enable_to_static_bool must be a bool, got "
                        f"{type(enable_to_static_bool).__name__}")
    _ENABLED[0] = enable_to_static_bool

