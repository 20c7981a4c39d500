"""Namespaces: the public modules under `oarlock` that plugins fill.

A plugin exports into any dotted namespace (`api.export("oarlock.incubate.nn.functional", "swiglu",
fn)`) and it exists: `import oarlock.incubate.nn.functional`, `from oarlock.distributed.fleet import
meta_parallel`, `oarlock.incubate.nn.functional.swiglu` and `dir()` all work, with no file in the core.

- A meta-path finder (appended to sys.meta_path, so real files always win) serves `oarlock.X.Y` when
  no file provides it, as an empty package whose module `__getattr__`/`__dir__` come from
  `lazy_namespace`. The real packages (`oarlock` itself, `oarlock.distributed` with its launch.py)
  install the same two functions, so plugins add names and child namespaces to them too.
- `__getattr__(name)` resolves an exported name (cached in the module's globals, so the next access
  is an ordinary lookup), then a child namespace (imported through the finder).
- `import oarlock` loads no plugin. Importing a namespace module loads them (in exec_module, once the
  module is in sys.modules) and checks that the namespace exists, except while a plugin manager is
  loading: plugin modules import namespaces at their top (`from oarlock.nn import functional as F`)
  before they are registered. The module is then served provisionally; its first attribute access,
  once the plugins are registered, says whether the namespace exists. A load that starts while a
  plugin module is half imported (imported on its own) defers that plugin's entry points until the
  import is done (PluginManager.load_deferred); until then nothing is judged missing either.
- A name missing because the plugin providing it is blocked by OARLOCK_DISABLE_PLUGINS says so.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys

from oarlock.registry import OP_LIBRARY, ROOT, TENSOR, private_allowed

_PREFIX = ROOT + "."


def registry_complete() -> bool:
    from oarlock.plugins import registry_complete
    return registry_complete()


def _waiting() -> str:
    """Which plugins wait for which half-imported modules (for messages)."""
    from oarlock.plugins import default_manager
    deferred = default_manager().deferred
    waits = sorted({name for _, waiting in deferred.values() for name in waiting})
    if not deferred:
        return "the plugins are being loaded"
    return (f"not registered yet: plugin(s) {', '.join(repr(n) for n in sorted(deferred))}, waiting for the "
            f"import of {', '.join(waits)} to finish")


def _registry_for_use(wait: bool = True):
    """The process-wide registry, loading the plugins if that has not happened. While a plugin manager is
    loading in this thread, the process-wide registry as filled so far (None before it exists): nothing
    loads then. While another thread loads them: wait for it, or with wait=False (the caller holds a module's
    import lock, which that load may need) None."""
    from oarlock.plugins import default_manager, plugins_importing
    from oarlock.registry import default_registry, peek_default_registry
    if plugins_importing():
        return peek_default_registry()
    if wait:
        return default_registry()
    return None if default_manager(wait=False) is None else peek_default_registry()


def disabled_provider(namespace: str, name: str | None = None) -> str | None:
    """The disabled plugin that would provide `namespace.name` (or namespace `namespace`), or None."""
    from oarlock.plugins import default_manager
    try:
        return default_manager().disabled_provider(namespace, name)
    except Exception:  # an error message must not fail while it is being written
        return None


def _disabled(what: str, provider: str) -> str:
    return f"{what} is provided by plugin {provider!r}, which is disabled by OARLOCK_DISABLE_PLUGINS"


def missing_message(registry, namespace: str, name: str) -> str:
    """Why `namespace.name` does not resolve, naming a disabled plugin that provides it."""
    head = f"module {namespace!r} has no attribute {name!r}"
    if not registry.has_namespace(namespace):
        provider = disabled_provider(namespace)
        if provider is not None:
            return f"{head}: namespace {_disabled(namespace, provider)}"
        return f"{head}: no installed plugin declares namespace {namespace} (see `oarlock plugins`)"
    provider = disabled_provider(namespace, name)
    if provider is not None:
        return f"{head}: {_disabled(f'{namespace}.{name}', provider)}"
    return f"{head}: no installed plugin exports {namespace}.{name} (see `oarlock plugins`)"


def tensor_missing_message(name: str) -> str:
    """The AttributeError message of a Tensor method no plugin registers."""
    head = f"'Tensor' object has no attribute {name!r}"
    provider = disabled_provider(TENSOR, name)
    return head if provider is None else f"{head}: {_disabled(f'Tensor.{name}', provider)}"


def namespace_doc(registry, namespace: str) -> str:
    doc = registry.namespace_docs.get(namespace)
    if doc is not None:
        return doc
    if namespace == OP_LIBRARY:
        return (f"{OP_LIBRARY}: every op, as {OP_LIBRARY}.<plugin>.<op name> (internal ops, such as gradient "
                f"kernels, only here).")
    if namespace.startswith(OP_LIBRARY + "."):
        return f"{namespace}: the ops plugin {registry.namespace_owner(namespace)!r} defines."
    return f"{namespace}: names exported by plugins; dir() lists them and the child namespaces."


def lazy_namespace(module_name: str, module_globals: dict):
    """Return (__getattr__, __dir__) for the module `module_name`, which shows the registry namespace of
    the same name: its exported names, then its child namespaces."""

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        registry = _registry_for_use()
        if registry is None:   # an isolated manager is loading: `from X import child` then imports the child
            raise AttributeError(f"module {module_name!r} has no attribute {name!r} while plugins are being "
                                 f"imported (plugin names resolve once they are registered)")
        entry = registry.api[module_name].get(name)
        if entry is not None:
            module_globals[name] = entry[0]
            return entry[0]
        if registry.has_namespace(f"{module_name}.{name}"):
            return importlib.import_module(f"{module_name}.{name}")
        if not registry_complete():   # a plugin waits for a module that is being imported: not final yet
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}: no plugin registered so far "
                                 f"exports {module_name}.{name} ({_waiting()})")
        raise AttributeError(missing_message(registry, module_name, name))

    def __dir__():
        registry = _registry_for_use()
        names = set(module_globals)
        if registry is not None:
            names |= set(registry.api[module_name]) | set(registry.children(module_name))
        return sorted(names)

    return __getattr__, __dir__


class NamespaceLoader(importlib.abc.Loader):
    """Executes a namespace module: an empty package with the lazy `__getattr__` and `__dir__`."""

    def create_module(self, spec):
        return None   # the default module object

    def exec_module(self, module):
        name, module_globals = module.__name__, module.__dict__
        module_globals["__getattr__"], module_globals["__dir__"] = lazy_namespace(name, module_globals)
        module.__doc__ = f"{name}: names exported by plugins; dir() lists them and the child namespaces."
        # The plugins load here, not in find_spec: the module is in sys.modules by now, so a plugin that
        # imports it while loading gets this very module.
        registry = _registry_for_use(wait=False)   # holding this module's import lock: see _registry_for_use
        if registry is not None and registry_complete():
            _check_namespace(registry, name)
            module.__doc__ = namespace_doc(registry, name)


def _check_namespace(registry, fullname: str) -> None:
    if not registry.has_namespace(fullname):
        provider = disabled_provider(fullname)
        reason = (f"namespace {_disabled(fullname, provider)}" if provider is not None else
                  f"no installed plugin declares namespace {fullname} (see `oarlock plugins`)")
        raise ModuleNotFoundError(f"No module named {fullname!r}: {reason}", name=fullname)


class NamespaceFinder(importlib.abc.MetaPathFinder):
    """Serves `oarlock.X...` modules that no file provides, when a plugin created that namespace."""

    loader = NamespaceLoader()

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX):
            return None
        parts = fullname.split(".")
        if not all(part.isidentifier() for part in parts) or not private_allowed(fullname):
            return None
        # Never load nor import here: find_spec runs under the interpreter's global import lock, which a
        # thread importing oarlock.plugins (or loading plugins) needs for each of its own imports
        plugins = sys.modules.get("oarlock.plugins")
        if plugins is None or getattr(plugins.__spec__, "_initializing", False):
            registry = None    # nothing is loaded before that module is
        else:
            registry = plugins.loaded_default_registry()   # exec_module loads, once the module is in sys.modules
        if registry is not None and registry_complete() and not registry.has_namespace(fullname):
            if disabled_provider(fullname) is not None:
                _check_namespace(registry, fullname)   # raises, naming the disabled plugin
            return None
        return importlib.machinery.ModuleSpec(fullname, self.loader, origin="oarlock namespace", is_package=True)


def install_finder() -> None:
    """Append the namespace finder to sys.meta_path once (after the path finder: files win)."""
    if not any(isinstance(finder, NamespaceFinder) for finder in sys.meta_path):
        sys.meta_path.append(NamespaceFinder())
