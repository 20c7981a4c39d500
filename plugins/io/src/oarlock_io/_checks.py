"""Argument checks shared by the io classes; each error names the function, the argument, what it
got and what it accepts (Paddle asserts here, which says much less)."""

from __future__ import annotations

import numbers


def check_bool(where: str, name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def check_int(where: str, name: str, value, minimum: int) -> int:
    """An int >= minimum (bools refused: batch_size=True is a mistake, not 1)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{where}: {name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{where}: {name} must be an int >= {minimum}, got {value}")
    return int(value)


def sized_length(where: str, name: str, obj) -> int:
    """len(obj), with an error that says the object has no length."""
    try:
        return len(obj)
    except TypeError:
        raise TypeError(f"{where}: {name} must have a length (define __len__), got {type(obj).__name__}") from None
