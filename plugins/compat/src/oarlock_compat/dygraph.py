"""Paddle's mode queries and guards for dygraph code (`paddle.in_dynamic_mode()`, `base.dygraph.guard`,
`framework._current_expected_place()`): oarlock only runs eagerly, so these report dynamic mode, and the
static-graph switch is refused with an error rather than silently ignored."""

from __future__ import annotations

import contextlib

import oarlock


def in_dynamic_mode() -> bool:
    """True: oarlock always runs eagerly (Paddle's dygraph mode)."""
    return True


def in_dygraph_mode() -> bool:
    """Paddle's older name of `in_dynamic_mode`: True."""
    return True


def in_pir_mode() -> bool:
    """False: there is no static program (PIR) in oarlock."""
    return False


def in_dynamic_or_pir_mode() -> bool:
    """True (dynamic mode), as in Paddle's dygraph."""
    return True


def use_pir_api() -> bool:
    """True, as Paddle 3.2 answers by default: code that checks it before building static programs never
    reaches that branch here, because `in_dynamic_mode()` is True."""
    return True


def enable_static() -> None:
    """Refused: oarlock has no static-graph mode; write the program in dynamic mode."""
    raise RuntimeError("oarlock.enable_static(): oarlock runs only in dynamic (dygraph) mode and has no static "
                       "graph; remove the call (paddle.jit.to_static code runs eagerly)")


def disable_static(place=None) -> None:
    """Dynamic mode is the only mode; with `place` given, it becomes the default device (as in Paddle)."""
    if place is not None:
        oarlock.set_device(place)


enable_dygraph = disable_static


class _VariableMeta(type):
    """Paddle's VariableMetaClass: in dynamic mode every Tensor is an instance of static.Variable."""

    def __instancecheck__(cls, instance):
        return isinstance(instance, oarlock.Tensor)


class Variable(metaclass=_VariableMeta):
    """Paddle's static-graph variable (`paddle.static.Variable`). oarlock has no static graph; as in Paddle's
    dynamic mode, every Tensor is an instance (`isinstance(x, paddle.static.Variable)` is True), and no
    static variable can be made."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError("oarlock.static.Variable(): oarlock has no static graph, so static variables cannot be "
                           "created; use oarlock.Tensor")


def current_expected_place():
    """The place new tensors go to (the default device), Paddle's `framework._current_expected_place()`."""
    return oarlock.device.default_place()


@contextlib.contextmanager
def guard(place=None):
    """`base.dygraph.guard(place)`: run the block in dynamic mode (always the case) on `place` if given."""
    if place is None:
        yield
        return
    previous = oarlock.get_device()
    oarlock.set_device(place)
    try:
        yield
    finally:
        oarlock.set_device(previous)


@contextlib.contextmanager
def no_check_dy2st_diff():
    """Paddle's `framework._no_check_dy2st_diff()`: it silences dynamic-to-static consistency checks, which
    oarlock never makes (code always runs eagerly), so the block just runs."""
    yield
