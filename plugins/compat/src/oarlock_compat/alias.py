"""`import paddle` resolved to oarlock: a meta-path finder that serves `paddle` and every `paddle.X.Y` as the
module `oarlock.X.Y` itself (the same object, so `paddle.nn.Linear is oarlock.nn.Linear`).

Why a finder and not `sys.modules["paddle"] = oarlock` alone: `import paddle.nn.functional` looks up each
dotted name in sys.modules and, failing that, asks the finders; with only the top-level entry the children are
searched for as files next to oarlock's core and not found. The finder goes first on sys.meta_path, so a real
PaddlePaddle installed alongside is shadowed while the alias is on; the real paddle modules already imported
are set aside and put back by `disable_paddle_alias()`, so one process can hold both (tests compare them).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import sys

_PADDLE = "paddle"
_saved: dict[str, object] = {}  # the real paddle modules set aside while the alias is on


def _is_paddle_name(name: str) -> bool:
    return name == _PADDLE or name.startswith(_PADDLE + ".")


class _AliasLoader(importlib.abc.Loader):
    """Hands back the already imported oarlock module; executing it again would be wrong."""

    def __init__(self, module):
        self._module = module

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):
        pass


class PaddleAliasFinder(importlib.abc.MetaPathFinder):
    """Serves `paddle[.X.Y]` as `oarlock[.X.Y]`."""

    def find_spec(self, fullname, path=None, target=None):
        if not _is_paddle_name(fullname):
            return None
        target_name = "oarlock" + fullname[len(_PADDLE):]
        try:
            module = importlib.import_module(target_name)
        except ModuleNotFoundError as err:
            if err.name != target_name:
                raise  # a real import error inside an oarlock module: show it, not a missing paddle module
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: the paddle alias maps it to {target_name!r}, which oarlock does "
                f"not have", name=fullname) from None
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(module), is_package=hasattr(module, "__path__"))


_FINDER = PaddleAliasFinder()


def paddle_alias_enabled() -> bool:
    """Whether `import paddle` gives oarlock now."""
    return _FINDER in sys.meta_path


def enable_paddle_alias() -> None:
    """From now on `import paddle` and `import paddle.X.Y` give `oarlock` and `oarlock.X.Y` (in every module).

    Real PaddlePaddle modules already imported are set aside (and restored by `disable_paddle_alias`). Calling
    it twice is harmless."""
    if paddle_alias_enabled():
        return
    for name in [n for n in sys.modules if _is_paddle_name(n)]:
        _saved[name] = sys.modules.pop(name)
    sys.meta_path.insert(0, _FINDER)
    import oarlock
    sys.modules[_PADDLE] = oarlock


def disable_paddle_alias() -> None:
    """Undo `enable_paddle_alias`: `import paddle` finds the real PaddlePaddle (if installed) again, and the real
    modules set aside are put back. Modules that imported `paddle` while the alias was on keep their oarlock."""
    if not paddle_alias_enabled():
        return
    sys.meta_path.remove(_FINDER)
    for name in [n for n in sys.modules if _is_paddle_name(n)]:
        del sys.modules[name]
    sys.modules.update(_saved)
    _saved.clear()


@contextlib.contextmanager
def paddle_alias():
    """`with paddle_alias(): import paddle_code` runs the code on oarlock; the alias is off again afterwards
    (unless it was on before)."""
    was_on = paddle_alias_enabled()
    enable_paddle_alias()
    try:
        yield
    finally:
        if not was_on:
            disable_paddle_alias()
