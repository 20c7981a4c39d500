"""File handling shared by the formats: atomic (and optionally durable) writes and option checks."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager


TMP_SUFFIX = ".tmp"


def fsync_directory(directory) -> None:
    """Make renames and new names in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_write(path, where: str, durable: bool = False):
    """Open a temporary file next to `path` for writing and move it over `path` only once the
    writer finished, so a failed or interrupted save never leaves a truncated checkpoint.
    Missing parent directories are created (as paddle.save does). durable=True also flushes the
    data to the disk before the rename and the rename after it, so a machine crash cannot leave the
    name pointing at lost data."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{where}: path {path!r} is a directory; give a file name such as "
                                f"{os.path.join(path, 'model.pdparams')!r}")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # opened by name (not mkstemp) so the file gets the usual permissions from the umask
    tmp = f"{path}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}"
    try:
        with open(tmp, "xb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if durable:
            fsync_directory(directory)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def reject_unknown_options(where: str, options: dict, accepted) -> None:
    if options:
        raise TypeError(f"{where}: unknown option(s) {', '.join(sorted(options))}; "
                        f"it accepts {', '.join(accepted) or 'no options'}")
