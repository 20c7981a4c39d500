"""File handling shared by the formats: atomic writes and option checks."""

from __future__ import annotations

import os
import uuid
from contextlib import contextmanager


@contextmanager
def atomic_write(path, where: str):
    """Open a temporary file next to `path` for writing and move it over `path` only once the
    writer finished, so a failed or interrupted save never leaves a truncated checkpoint.
    Missing parent directories are created (as paddle.save does)."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{where}: path {path!r} is a directory; give a file name such as "
                                f"{os.path.join(path, 'model.pdparams')!r}")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # opened by name (not mkstemp) so the file gets the usual permissions from the umask
    tmp = f"{path}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "xb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def reject_unknown_options(where: str, options: dict, accepted) -> None:
    if options:
        raise TypeError(f"{where}: unknown option(s) {', '.join(sorted(options))}; "
                        f"it accepts {', '.join(accepted) or 'no options'}")
