"""The plugin manager: finds plugins through entry points and lets them fill a Registry.

Loading is lazy and idempotent: `import oarlock` loads nothing; the first
use of an op, a device or a public name loads the entry-point group
`oarlock.plugins` once. `OARLOCK_DISABLE_PLUGINS=a,b` blocks plugins by
entry-point name, `OARLOCK_DISABLE_PLUGIN_AUTOLOAD=1` skips entry points
altogether (plugins can still be registered by hand). A plugin that fails to
import is reported by name with its error; the others still load.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import traceback
import warnings
from dataclasses import dataclass, field
from importlib.metadata import entry_points

import pluggy

from oarlock import hookspecs
from oarlock.registry import (ApiRegistrar, BackendRegistrar, CommandRegistrar, CommRegistrar, FormatRegistrar,
                               Registry, StrategyRegistrar, set_default_registry, set_registry_pending)

ENTRY_POINT_GROUP = "oarlock.plugins"

# The order registration hooks run in: devices before the ops that target them.
_REGISTRATION_HOOKS = (
    ("oarlock_register_backends", "backends", BackendRegistrar),
    ("oarlock_register_ops", "ops", None),       # OpRegistrar lives in dispatch (imported lazily)
    ("oarlock_register_api", "api", ApiRegistrar),
    ("oarlock_register_comm_backends", "comms", CommRegistrar),
    ("oarlock_register_parallel_strategies", "strategies", StrategyRegistrar),
    ("oarlock_register_checkpoint_formats", "formats", FormatRegistrar),
    ("oarlock_register_commands", "cli", CommandRegistrar),
)


class PluginLoadWarning(UserWarning):
    """A plugin could not be imported or failed while registering."""


@dataclass
class PluginInfo:
    """What `oarlock plugins` shows for one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    kernels: int = 0
    comms: list[str] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)   # parallel strategies, "name: description"
    error: str | None = None
    # one entry per device of this plugin that derives from another (its backend names a parent):
    # {"device", "parent", "reused", "overridden", "total", "problems"}; see device_reuse()
    reuse: list[dict] = field(default_factory=list)


class PluginManager:
    """A pluggy manager plus the Registry its plugins fill."""

    def __init__(self, group: str = ENTRY_POINT_GROUP, environ=None):
        self.group = group
        self.environ = os.environ if environ is None else environ
        self.registry = Registry()
        self.pm = pluggy.PluginManager("oarlock")
        self.pm.add_hookspecs(hookspecs)
        self.failures: dict[str, str] = {}
        self.distributions: dict[str, tuple[str, str]] = {}
        self.loaded = False
        self.loading = False     # True while load() imports and registers the entry points
        self.deferred: dict[str, tuple] = {}   # entry-point name -> (entry point, the imports it waits for)
        self._probes: dict[str, Registry | None] = {}   # disabled plugin -> its registrations (disabled_provider)
        self._blocked_eps: tuple | None = None          # (blocked names, their entry points)

    # -- loading ------------------------------------------------------------------------
    def disabled(self) -> set[str]:
        raw = self.environ.get("OARLOCK_DISABLE_PLUGINS", "")
        return {name.strip() for name in raw.split(",") if name.strip()}

    def load(self) -> "PluginManager":
        """Load the entry-point group once; later calls return at once (see load_deferred)."""
        if self.loaded:
            return self
        self.loaded = True
        if self.autoload_disabled():
            return self
        blocked = self.disabled()
        self._load_entry_points([ep for ep in sorted(entry_points(group=self.group), key=lambda e: e.name)
                                 if ep.name not in blocked])
        return self

    def _load_entry_points(self, eps):
        # A load can start while a plugin module is half imported (imported on its own; it uses an oarlock
        # name at its top): importing that plugin's entry point now would meet the half-imported module. Such
        # entry points, and any that fail while some module is half imported, are deferred: load_deferred
        # loads them once those imports are done.
        busy = _modules_being_imported()
        self.loading = True
        _IMPORTING.count += 1
        try:
            for ep in eps:
                if self.pm.is_registered(ep.name) or self.pm.has_plugin(ep.name):
                    continue
                package = ep.value.split(":")[0].split(".")[0]
                waiting = [m for m in busy if m.split(".")[0] == package]
                if waiting:
                    self.deferred[ep.name] = (ep, waiting)
                    continue
                dist = getattr(ep, "dist", None)
                try:
                    plugin = ep.load()
                except Exception as exc:  # a broken plugin must not take the others down
                    if busy:   # perhaps it imports a half-imported module: try again when that is done
                        self.deferred[ep.name] = (ep, busy)
                        continue
                    self._report(ep.name, f"import of {ep.value!r} failed: {type(exc).__name__}: {exc}", exc)
                    continue
                self.register(plugin, ep.name, dist.metadata["Name"] if dist else None,
                              dist.version if dist else None)
        finally:
            self.loading = False
            _IMPORTING.count -= 1

    def load_deferred(self) -> None:
        """Load the entry points deferred by load() once the imports they waited for are done (the process-wide
        manager does it on the next registry use)."""
        if not self.deferred or self.loading:
            return
        if any(_being_imported(name) for _, waiting in self.deferred.values() for name in waiting):
            return
        eps = [ep for ep, _ in self.deferred.values()]
        self.deferred.clear()
        self._load_entry_points(eps)

    def wait_for_deferring_imports(self) -> None:
        """Wait until the half-done imports that deferred entry points wait for are finished, where other
        threads run them (importing a module another thread is importing waits for it; this thread's own
        half-done import returns at once, and it stays deferred). Never call it holding _LOAD_LOCK: the
        importing thread may need that lock before its import finishes."""
        for name in sorted({name for _, waiting in list(self.deferred.values()) for name in waiting}):
            if _being_imported(name):
                try:
                    importlib.import_module(name)
                except Exception:   # noqa: BLE001 - that import's own thread reports its failure
                    pass

    def autoload_disabled(self) -> bool:
        return self.environ.get("OARLOCK_DISABLE_PLUGIN_AUTOLOAD", "") not in ("", "0")

    def disabled_provider(self, namespace: str, name: str | None = None) -> str | None:
        """The entry-point name of a plugin blocked by OARLOCK_DISABLE_PLUGINS that exports `namespace.name`
        (with name None: that creates `namespace`), or None. For error messages only: each blocked plugin
        is imported once and registers its ops and public names into a throwaway Registry (its backends,
        formats and commands are not registered, so nothing of it becomes usable)."""
        blocked = self.disabled()
        if not blocked or self.autoload_disabled() or _IMPORTING.count:   # not while plugins are being imported
            return None
        if self._blocked_eps is None or self._blocked_eps[0] != blocked:   # entry points are read once
            self._blocked_eps = (blocked, sorted((ep for ep in entry_points(group=self.group) if ep.name in blocked),
                                                 key=lambda ep: ep.name))
        for ep in self._blocked_eps[1]:
            if ep.name not in self._probes:
                self._probes[ep.name] = self._probe(ep)
            registry = self._probes[ep.name]
            if registry is None:
                continue
            if name is None:
                if registry.has_namespace(namespace):
                    return ep.name
            elif name in registry.api[namespace] or registry.has_namespace(f"{namespace}.{name}"):
                return ep.name
        return None

    def _probe(self, ep) -> Registry | None:
        probe = PluginManager(group=self.group, environ={})
        before = set(sys.modules)
        _IMPORTING.count += 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                plugin = ep.load()
                probe.pm.register(plugin, name=ep.name)
                probe._run_registration_hooks(plugin, ep.name, only=("ops", "api"))
        except Exception:  # a plugin blocked because it is broken: nothing it provides can be named
            return None
        finally:
            _IMPORTING.count -= 1
            # the namespace modules the blocked plugin imported exist only for it: forget them
            for name in sorted(set(sys.modules) - before, key=lambda n: -n.count(".")):
                module = sys.modules[name]
                spec = getattr(module, "__spec__", None)
                if getattr(spec, "origin", None) == "oarlock namespace" and not self.registry.has_namespace(name):
                    del sys.modules[name]
                    parent, _, child = name.rpartition(".")
                    if getattr(sys.modules.get(parent), "__dict__", {}).get(child) is module:
                        delattr(sys.modules[parent], child)
        return probe.registry

    def register(self, plugin, name: str, distribution: str | None = None, version: str | None = None):
        """Register a plugin object (module or instance) and run its registration hooks now."""
        if name in self.disabled():
            return None
        self.pm.register(plugin, name=name)
        try:
            self.pm.check_pending()
        except pluggy.PluginValidationError:
            self.pm.unregister(plugin)
            raise
        self.distributions[name] = (distribution, version)
        try:
            self._run_registration_hooks(plugin, name)
        except Exception as exc:
            self._report(name, f"registration failed: {type(exc).__name__}: {exc}", exc)
        return plugin

    def _run_registration_hooks(self, plugin, name: str, only=None):
        from oarlock.dispatch import OpRegistrar
        for hook_name, arg, registrar_cls in _REGISTRATION_HOOKS:
            if only is not None and arg not in only:
                continue
            registrar_cls = registrar_cls or OpRegistrar
            for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                if impl.plugin is plugin:
                    impl.function(**{arg: registrar_cls(self.registry, name)})

    def _report(self, name: str, message: str, exc: BaseException):
        self.failures[name] = message
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        warnings.warn(f"oarlock plugin {name!r} skipped: {message}\n  ({detail})", PluginLoadWarning,
                      stacklevel=3)

    # -- listing ---------------------------------------------------------------------------
    def info(self) -> list[PluginInfo]:
        rows = []
        for name, plugin in sorted(self.pm.list_name_plugin()):
            if plugin is None:
                continue
            dist, version = self.distributions.get(name, (None, None))
            hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or ())
            comms = [comm.name for comm in self.registry.comms.values() if comm.plugin == name]
            devices = list(self.registry.devices_of.get(name, []))
            reuse = [device_reuse(self.registry, device) for device in devices
                     if getattr(self.registry.backends.get(device), "parent", None) is not None]
            strategies = [f"{s.name}: {s.description}" for s in self.registry.strategies.values()
                          if s.plugin == name]
            rows.append(PluginInfo(name, dist, version, hooks, devices, self.registry.kernel_count.get(name, 0),
                                   comms, strategies, self.failures.get(name), reuse))
        for name, error in sorted(self.failures.items()):
            if not self.pm.has_plugin(name):
                rows.append(PluginInfo(name, error=error))
        return rows


def device_reuse(registry: Registry, device: str) -> dict:
    """How many kernels a derived device reuses from its parent chain (Registry.kernel_reuse), and what
    is wrong with it: a parent no plugin provides, kernels registered for ops no plugin defines."""
    parent = registry.backends[device].parent
    reused, overridden, total = registry.kernel_reuse(device)
    problems = []
    if parent not in registry.backends:
        problems.append(f"its parent device type {parent!r} is not registered by any installed plugin")
    undefined = sorted({op for (op, dev, _dtype) in registry.kernels if dev == device and op not in registry.ops})
    if undefined:
        problems.append(f"it has kernels for ops no installed plugin defines: {', '.join(undefined)}")
    return {"device": device, "parent": parent, "reused": reused, "overridden": overridden, "total": total,
            "problems": problems}


_default_manager: PluginManager | None = None


LOAD_WAIT_S = 120.0   # the longest a thread waits for another thread's plugin load (see default_manager)
_LOAD_LOCK = threading.RLock()   # held while the process-wide plugins load (re-entered by their own imports)
_loader = [None]                 # the ident of the thread loading them, None when none is


def default_manager(wait: bool = True) -> PluginManager | None:
    """The process-wide manager; its registry becomes the default one before plugins load. One thread loads
    them; meanwhile registry users in other threads wait here (set_registry_pending(True) sends them here)
    rather than see a half-filled registry; entry points deferred for a plugin module that another thread
    is importing are loaded once that import is done. wait=False: None instead of waiting (a namespace
    module being imported: the load may import it too, and would wait for its import lock). A wait is
    bounded as well: a thread that holds the import of a plugin module the load also imports would otherwise
    wait forever; after LOAD_WAIT_S it goes on with the registry as filled so far."""
    manager = _load_once(wait)
    # came while another thread was loading, and entry points stayed deferred for a module being imported:
    # now that no thread loads, wait for that import (outside _LOAD_LOCK, see wait_for_deferring_imports)
    if wait and manager is not None and manager.deferred and _loader[0] is None:
        manager = _load_once(wait)
    return manager


def _load_once(wait: bool) -> PluginManager | None:
    global _default_manager
    if wait and _loader[0] is None and _default_manager is not None and _default_manager.deferred:
        _default_manager.wait_for_deferring_imports()
    if not _LOAD_LOCK.acquire(timeout=LOAD_WAIT_S if wait else 0):
        if not wait:
            return None
        warnings.warn(f"oarlock: waited {LOAD_WAIT_S:.0f} s for another thread to load the plugins; going on with "
                      f"the plugins registered so far", PluginLoadWarning, stacklevel=3)
        return _default_manager
    try:
        if _default_manager is None or _default_manager.deferred:
            outer = _loader[0] is None
            if outer:
                _loader[0] = threading.get_ident()
            set_registry_pending(True)
            try:
                if _default_manager is None:
                    _default_manager = PluginManager()
                    set_default_registry(_default_manager.registry)
                    _default_manager.load()
                else:
                    _default_manager.load_deferred()
            finally:
                if outer:
                    _loader[0] = None
            if outer:
                _install_tensor_properties(_default_manager.registry)
        # pending while anything is left to load, or while this thread (re-entering from a plugin's import)
        # is still loading: other threads keep coming here to wait
        set_registry_pending(bool(_default_manager.deferred) or _loader[0] is not None)
    finally:
        _LOAD_LOCK.release()
    return _default_manager


def _install_tensor_properties(registry) -> None:
    """Put the Tensor properties plugins export on the class now, not on first read (methods are cached there
    lazily): model code may *set* one before ever reading it (`param.is_distributed = True`), and a set must
    reach the property's setter rather than the instance's own attributes."""
    from oarlock._tensor import Tensor
    for name, (obj, _plugin) in list(registry.api["Tensor"].items()):
        if isinstance(obj, property) and name not in Tensor.__dict__:
            setattr(Tensor, name, obj)


def plugins_importing() -> bool:
    """Whether a plugin manager is loading plugins (or probing a disabled one) right now. Namespace modules
    then neither load the plugins nor judge whether a namespace exists (oarlock._namespace)."""
    return _IMPORTING.count > 0


def registry_complete() -> bool:
    """Whether the process-wide registry holds every plugin it will: loaded, not loading, nothing deferred."""
    manager = _default_manager
    return manager is not None and manager.loaded and not manager.loading and not manager.deferred \
        and not _IMPORTING.count and _loader[0] is None


def loaded_default_registry() -> Registry | None:
    """The process-wide registry when its plugins are loaded (not loading, in any thread); None otherwise.
    Loads nothing."""
    manager = _default_manager
    loaded = manager is not None and manager.loaded and not manager.loading and _loader[0] is None
    return manager.registry if loaded else None


def _being_imported(name: str) -> bool:
    module = sys.modules.get(name)
    return module is not None and bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _modules_being_imported() -> list[str]:
    """The modules outside the core whose import is in progress now (the core never imports a plugin)."""
    return [name for name in list(sys.modules) if name != "oarlock" and not name.startswith("oarlock.")
            and _being_imported(name)]


class _Importing(threading.local):
    """How many managers are loading or probing plugins now, in this thread: per thread, so that another
    thread, which must not see the registry half filled, waits in default_manager() instead of being
    served it the way a plugin's own imports are."""

    count = 0


_IMPORTING = _Importing()


def register_plugin(plugin, name: str):
    """Register a plugin object in the process-wide manager (for code that is not installed)."""
    return default_manager().register(plugin, name)
