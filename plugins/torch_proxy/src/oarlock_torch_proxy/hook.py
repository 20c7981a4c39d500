"""The import hook: `import torch` inside the proxy's scope gives the façade (oarlock_torch_proxy.facade).

How a scoped import works (both the real torch and the façade can live in one process):

- The façade modules live under their own names (`oarlock_torch_proxy.facade`, `...facade.nn`, ...); in scoped
  mode nothing named `torch*` in sys.modules changes, so code outside the scope keeps the real torch.
- A meta-path finder (`ScopeFinder`, first on sys.meta_path) sees every import of a module in the scope
  (`einops`, `einops.layers.torch`, ...): it asks the other finders for the real spec and wraps its loader so
  that, before the module's code runs, the module's globals get a private `__builtins__` whose `__import__`
  maps `torch` and `torch.X` onto the façade. `import torch` at module level, `from torch import nn` and the
  lazy `import torch` inside a function defined there (a function keeps its module's builtins) all resolve
  through it, and a library's submodules get the same façade because they are in the scope too.
- In-scope modules already imported with the real torch are set aside while the proxy is on and put back by
  `disable_torch_proxy()`; the façade-bound copies imported meanwhile stay alive in whatever holds them (the
  tests compare both copies in one process).
- `scope=None` means everywhere: then the façade is also put into sys.modules under the `torch*` names (the
  real ones set aside), so `importlib.import_module("torch")` and `sys.modules["torch"]` checks see it too.

The same private builtins dict marks a module as a torch caller: the Tensor methods whose torch and Paddle
meanings differ (`x.max(1)`, `x.split(2)`, `x.numel()`) look at their caller's globals (tensor_methods); with
scope=None every module but oarlock's own is a torch caller (a script run as __main__ included)."""

from __future__ import annotations

import builtins
import collections.abc
import contextlib
import importlib
import importlib.abc
import sys
import threading
import types

FACADE = "oarlock_torch_proxy.facade"
_LOCK = threading.RLock()


class TorchProxyMissing(NotImplementedError):
    """A torch module, name or argument the façade does not have: report it."""

    def named(self, torch_name: str):
        self.torch_name = torch_name
        with contextlib.suppress(AttributeError):
            self.name = torch_name
        return self


class MissingModule(TorchProxyMissing, ModuleNotFoundError):
    """A torch module the façade lacks; also a ModuleNotFoundError, so a library's `try: import torch.X except
    ImportError` fallback still runs."""


class MissingAttribute(TorchProxyMissing, AttributeError):
    """A torch name the façade lacks; also an AttributeError, so `hasattr(torch, "compile")` and
    `getattr(F, "name", None)` feature probes answer False / the default instead of failing."""


def _is_torch(name: str) -> bool:
    return name == "torch" or name.startswith("torch.")


def facade_module(torch_name: str):
    """The façade module that stands for `torch_name` ("torch", "torch.nn.functional", ...)."""
    target = FACADE + torch_name[len("torch"):]
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as err:
        if err.name is not None and not target.startswith(err.name) and not err.name.startswith(FACADE):
            raise   # a real import error inside a façade module
        from oarlock_torch_proxy.missing import caller_site
        raise MissingModule(f"{torch_name} is not implemented by oarlock's torch proxy (imported at "
                                f"{caller_site(3)}); please report it").named(torch_name) from None


class _ScopedModules(collections.abc.MutableMapping):
    """`sys.modules` as modules in the scope see it: the torch names are the façade's modules (libraries such
    as einops and einx look for "torch" there before using it), everything else is the real sys.modules."""

    def _facade(self, name):
        if not _is_torch(name):
            return None
        try:
            return facade_module(name)   # the façade counts as imported: libraries probe before importing
        except MissingModule:
            return None

    def __getitem__(self, name):
        module = self._facade(name)
        return module if module is not None else sys.modules[name]

    def __contains__(self, name):
        return self._facade(name) is not None or name in sys.modules

    def __setitem__(self, name, module):
        sys.modules[name] = module

    def __delitem__(self, name):
        del sys.modules[name]

    def __iter__(self):
        return iter(list(sys.modules))

    def __len__(self):
        return len(sys.modules)


class _ScopedSys(types.ModuleType):
    """The `sys` module handed to modules in the scope: the real one, except `modules` (_ScopedModules)."""

    modules = _ScopedModules()

    def __getattr__(self, name):
        return getattr(sys, name)

    def __setattr__(self, name, value):
        setattr(sys, name, value)


_SCOPED_SYS = _ScopedSys("sys")


def proxy_import(name, globals=None, locals=None, fromlist=(), level=0):
    """`__import__` of the modules in the scope: torch names go to the façade, `sys` is _ScopedSys, the rest
    goes to the real import."""
    if level == 0 and name == "sys":
        return _SCOPED_SYS
    if not _STATE.enabled and _SCOPE_OF:
        target = _absolute(name, globals, level)
        top = target.partition(".")[0]
        if top in _SCOPE_OF:   # a proxied package importing its own modules after the proxy was turned off
            with torch_proxy(scope=_SCOPE_OF[top]):
                return _real_import(name, globals, locals, fromlist, level)
    if level == 0 and _is_torch(name):
        module = facade_module(name)
        if fromlist:
            for item in fromlist:   # `from torch.nn import functional` imports the submodule if it is one
                if item != "*" and not hasattr(module, item):
                    with contextlib.suppress(MissingModule):
                        facade_module(f"{name}.{item}")
            return module
        return facade_module("torch")
    return _real_import(name, globals, locals, fromlist, level)


def _absolute(name, globals, level):
    if level == 0 or not globals:
        return name
    package = globals.get("__package__") or globals.get("__name__", "")
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


_real_import = builtins.__import__
# the builtins every module in the scope runs with; its identity marks "a torch caller" (tensor_methods)
PROXY_BUILTINS: dict = dict(builtins.__dict__, __import__=proxy_import)
# [True] while the proxy is on everywhere (scope=None): then every module but oarlock's counts as torch code
EVERYWHERE = [False]


class _ScopedLoader(importlib.abc.Loader):
    """The real loader, with the proxy's builtins put into the module's globals before its code runs."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        module.__dict__["__builtins__"] = PROXY_BUILTINS
        _STATE.loaded.add(module.__name__)
        self._loader.exec_module(module)

    def __getattr__(self, name):   # resource readers, get_source, is_package, ...
        return getattr(self._loader, name)


# top-level modules never re-imported under the proxy in scope=None mode: the standard library, oarlock
# itself, and the array libraries it is built on
_NEVER = frozenset(sys.stdlib_module_names) | {"oarlock", "numpy", "ml_dtypes", "torch", "pytest", "_pytest",
                                               "pluggy", "scipy", "typing_extensions"}


def _in_scope(fullname: str) -> bool:
    top = fullname.partition(".")[0]
    if _STATE.scope is None:
        return top not in _NEVER and not top.startswith("oarlock") and not top.startswith("_")
    return top in _STATE.scope


class ScopeFinder(importlib.abc.MetaPathFinder):
    """Wraps the loader of each module in the scope (see the module docstring); in scope=None mode it also
    serves `torch.X` as the façade."""

    def find_spec(self, fullname, path=None, target=None):
        if _STATE.scope is None and _is_torch(fullname):
            module = facade_module(fullname)
            return importlib.machinery.ModuleSpec(fullname, _Existing(module), is_package=hasattr(module, "__path__"))
        if not _in_scope(fullname):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ScopedLoader(spec.loader)
                return spec
        return None


class _Existing(importlib.abc.Loader):
    """Hands back an already imported façade module under a torch name (scope=None mode).

    oarlock-compat's paddle alias has the same small loader (_AliasLoader); it stays a copy because sharing it
    would make this plugin depend on oarlock-compat for a private name (oarlock-compat imports this one lazily)."""

    def __init__(self, module):
        self._module = module

    def create_module(self, spec):
        return self._module

    def exec_module(self, module):
        pass


class _State:
    def __init__(self):
        self.enabled = False
        self.scope: frozenset | None = None
        self.saved: dict[str, object] = {}   # modules set aside while the proxy is on
        self.loaded: set[str] = set()        # modules imported under the proxy


_STATE = _State()
_FINDER = ScopeFinder()
# modules imported through the proxy, kept while it is off (they are not in sys.modules then), and the scope
# each top-level package was imported with: a package imported through the proxy that imports one of its own
# submodules later (einops loads einops._torch_specific on first use) must get it through the proxy too
_PROXIED: dict[str, object] = {}
_SCOPE_OF: dict[str, frozenset | None] = {}


def _check_scope(scope):
    if scope is None:
        return None
    if isinstance(scope, str):
        scope = {scope}
    try:
        names = frozenset(scope)
    except TypeError:
        raise TypeError(f"enable_torch_proxy(): argument 'scope' must be None or a set of top-level module names, "
                        f"got {type(scope).__name__} {scope!r}") from None
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier()]
    if bad or not names:
        raise ValueError(f"enable_torch_proxy(): argument 'scope' must hold top-level module names such as "
                         f"{{'einops', 'x_transformers'}}, got {sorted(map(repr, names)) or 'an empty set'}")
    return names


def torch_proxy_enabled() -> bool:
    """Whether the torch proxy is on now."""
    return _STATE.enabled


def torch_proxy_scope():
    """The proxy's scope: a frozenset of top-level module names, None for everywhere (or when it is off)."""
    return _STATE.scope


def enable_torch_proxy(scope=None) -> None:
    """From now on `import torch` (and `torch.nn`, `torch.nn.functional`, `torch.optim`, `torch.utils.data`,
    ...) inside the modules of `scope` gives oarlock's torch façade.

    scope: a set of top-level module names (`{"x_transformers", "einops"}`); None means every module imported
    from now on, and `sys.modules["torch"]` too. Modules of the scope imported before (with the real torch) are
    set aside until `disable_torch_proxy()`. Outside the scope the real torch, if installed, is untouched."""
    names = _check_scope(scope)
    with _LOCK:
        if _STATE.enabled:
            if names == _STATE.scope:
                return
            raise RuntimeError(f"enable_torch_proxy(): the proxy is already on with scope "
                               f"{_describe(_STATE.scope)}; call disable_torch_proxy() before changing it to "
                               f"{_describe(names)}")
        from oarlock_torch_proxy import tensor_methods
        tensor_methods.install()
        _STATE.scope, _STATE.enabled = names, True
        for name in [n for n in sys.modules if _in_scope(n) or (names is None and _is_torch(n))]:
            _STATE.saved[name] = sys.modules.pop(name)
        # the copies imported through an earlier session come back: one façade-bound copy per process
        for name in [n for n in _PROXIED if _in_scope(n)]:
            sys.modules[name] = _PROXIED.pop(name)
            _STATE.loaded.add(name)
        sys.meta_path.insert(0, _FINDER)
        if names is None:
            sys.modules["torch"] = facade_module("torch")
            EVERYWHERE[0] = True


def _describe(scope) -> str:
    return "None (everywhere)" if scope is None else repr(sorted(scope))


def disable_torch_proxy() -> None:
    """Undo `enable_torch_proxy`: imports in the scope get the real torch again, and the modules set aside come
    back. Modules imported while the proxy was on keep their façade."""
    with _LOCK:
        if not _STATE.enabled:
            return
        sys.meta_path.remove(_FINDER)
        facade_names = [n for n in sys.modules if _is_torch(n)] if _STATE.scope is None else []
        for name in _STATE.loaded:
            if name in sys.modules:
                _PROXIED[name] = sys.modules.pop(name)
                _SCOPE_OF[name.partition(".")[0]] = _STATE.scope
        for name in facade_names:
            sys.modules.pop(name, None)
        sys.modules.update(_STATE.saved)
        EVERYWHERE[0] = False
        _STATE.saved.clear()
        _STATE.loaded.clear()
        _STATE.enabled, _STATE.scope = False, None


@contextlib.contextmanager
def torch_proxy(scope=None):
    """`with torch_proxy(scope={"einops"}): import einops` imports the library over oarlock; the proxy is off
    again afterwards (unless it was on before)."""
    was_on = _STATE.enabled
    enable_torch_proxy(scope)
    try:
        yield
    finally:
        if not was_on:
            disable_torch_proxy()
