"""oarlock.save / oarlock.load: dispatch to the checkpoint format plugins register.

The core only chooses the format: an explicit `format=` name, else the
format that claims the path's suffix, else the default format.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["CheckpointFormat", "save", "load", "format_for"]


@dataclass
class CheckpointFormat:
    """A save/load format a plugin registers (see hookspecs.oarlock_register_checkpoint_formats)."""

    name: str
    save: Callable[..., Any]
    load: Callable[..., Any]
    suffixes: tuple = ()
    default: bool = False
    description: str = ""
    plugin: str | None = field(default=None, compare=False)


def format_for(path, format: str | None = None, what: str = "save") -> CheckpointFormat:
    from oarlock.registry import default_registry
    formats = default_registry().formats
    if format is not None:
        found = formats.get(format)
        if found is None:
            raise ValueError(f"{what}(): unknown format {format!r}; installed formats: "
                             f"{', '.join(sorted(formats)) or 'none (install oarlock-checkpoint)'}")
        return found
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    for fmt in formats.values():
        if suffix and suffix in fmt.suffixes:
            return fmt
    for fmt in formats.values():
        if fmt.default:
            return fmt
    raise ValueError(f"{what}(): no installed checkpoint format handles {os.fspath(path)!r}; installed formats: "
                     f"{', '.join(sorted(formats)) or 'none (install oarlock-checkpoint)'}")


def save(obj, path, format: str | None = None, **options) -> None:
    """Save a state dict (or nested containers of tensors and Python values) to `path`."""
    format_for(path, format, "save").save(obj, path, **options)


def load(path, format: str | None = None, **options):
    """Load what `save` wrote."""
    if not os.path.exists(os.fspath(path)):
        raise FileNotFoundError(f"load(): no such file {os.fspath(path)!r}")
    return format_for(path, format, "load").load(path, **options)
