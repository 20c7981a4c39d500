"""Shared check for the error-message promise: bad input raises an error that names the function,
the argument and the value."""

import pytest


def raises_naming(fn, exc, *words):
    """fn() raises `exc` whose message names every word (the function, the argument, the value)."""
    with pytest.raises(exc) as info:
        fn()
    for word in words:
        assert word in str(info.value), f"error should mention {word!r}: {info.value}"
