"""The registry: every backend, operator, kernel, public name and command plugins add.

Plugins never touch the tables directly: each registration hook gets a
registrar bound to the plugin's name, so the registry knows who registered
what. That is how a duplicate registration names both plugins and how
`oarlock plugins` counts kernels per plugin.

Namespaces are not a fixed list: exporting into "oarlock.incubate.nn.functional" creates that
namespace (and "oarlock.incubate", "oarlock.incubate.nn" above it), which `oarlock._namespace`
serves as importable modules. "Tensor" is the table of Tensor methods. Every op is also in the op
library, "oarlock.ops.<plugin>" (OP_LIBRARY), filled by the op registrar only.
"""

from __future__ import annotations

import keyword
import re
from collections import Counter, defaultdict
from types import MappingProxyType

from oarlock.device import Backend, Place, split_device_string

GENERIC = None  # device key of the generic array-API kernels
ANY_DTYPE = None

ROOT = "oarlock"          # the top namespace
TENSOR = "Tensor"         # the Tensor-methods table, not a module
OP_LIBRARY = "oarlock.ops"  # every op as oarlock.ops.<plugin>.<op name>; filled by OpRegistrar only

_EMPTY = MappingProxyType({})

# Paddle's private names that code written for Paddle calls (`paddle._C_ops.matmul(...)`,
# `paddle.framework._current_expected_place()`, `x._md5sum()`): the only names and namespaces starting with "_"
# a plugin may export (docs/ARCHITECTURE.md, "Namespaces"). A namespace listed here may hold public names; every
# other name or namespace part starting with "_" is refused, so a private helper never leaks by accident.
PADDLE_PRIVATE_NAMES = frozenset({
    "oarlock._C_ops",                                        # namespace: Paddle's raw op entry points
    "oarlock.framework._current_expected_place", "oarlock.framework._current_expected_place_",
    "oarlock.base.framework._current_expected_place", "oarlock.base.framework._current_expected_place_",
    "oarlock.framework._no_check_dy2st_diff", "oarlock.framework._dygraph_tracer",
    "oarlock.base.framework._dygraph_tracer",
    "Tensor._md5sum", "Tensor._numel", "Tensor._is_initialized", "Tensor._inplace_version", "Tensor._copy_to",
    "Tensor._place_str",
    "Tensor._local_value",     # a dist tensor's local piece; None on a plain tensor (exported by oarlock-autoparallel)
    # model-parallel helpers Paddle's tensor-parallel layers and PaddleFormers call (exported by oarlock-parallel)
    "oarlock.distributed.fleet.layers.mpu.mp_ops._c_identity", "oarlock.distributed.fleet.layers.mpu.mp_ops._c_concat",
    "oarlock.distributed.fleet.layers.mpu.mp_ops._c_split", "oarlock.distributed.fleet.layers.mpu.mp_ops._mp_allreduce",
    "oarlock.distributed.collective._c_identity", "oarlock.distributed.collective._c_concat",
    "oarlock.distributed.communication.group._get_global_group",
    # Paddle's mask helper, imported at module top by PaddleFormers' model_outputs (exported by oarlock-nn)
    "oarlock.nn.layer.transformer._convert_attention_mask",
})
PADDLE_PRIVATE_TENSOR = frozenset(n[len(TENSOR) + 1:] for n in PADDLE_PRIVATE_NAMES if n.startswith(TENSOR + "."))


def private_allowed(qualified: str) -> bool:
    """Whether every part of `qualified` ("oarlock._C_ops.matmul", "Tensor._md5sum") that starts with "_" is
    allowed: the prefix ending at that part is in PADDLE_PRIVATE_NAMES."""
    parts = qualified.split(".")
    return all(not p.startswith("_") or ".".join(parts[:i + 1]) in PADDLE_PRIVATE_NAMES for i, p in enumerate(parts))


class DuplicateRegistration(ValueError):
    """Two plugins registered the same key."""


class NamespaceConflict(ValueError):
    """A name and a child namespace of one namespace have the same spelling."""


class ApiTable(dict):
    """namespace -> {name: (object, plugin)}. Reading a namespace nobody exported to gives an empty,
    read-only mapping and does not create it; namespaces are created by Registry.add_api/add_namespace."""

    def __missing__(self, namespace):
        return _EMPTY


def _is_identifier(part: str) -> bool:
    return part.isidentifier() and not keyword.iskeyword(part)


def library_name(plugin: str) -> str:
    """A plugin's name as an identifier, for its op library `oarlock.ops.<library_name(plugin)>`:
    characters other than letters, digits and "_" become "_"; a leading digit gets a "p" before it,
    a Python keyword an "_" after it."""
    ident = re.sub(r"\W", "_", plugin) or "plugin"
    if ident[0].isdigit():
        ident = "p" + ident
    return ident + "_" if keyword.iskeyword(ident) else ident


def is_op_library(namespace: str) -> bool:
    """Whether `namespace` is the op library or inside it (where internal op names may start with "_")."""
    return namespace == OP_LIBRARY or namespace.startswith(OP_LIBRARY + ".")


class Registry:
    """All tables; one per plugin manager (tests build isolated ones)."""

    def __init__(self):
        self.backends: dict[str, Backend] = {}
        self.ops: dict = {}
        self.kernels: dict[tuple, tuple] = {}      # (op, device, dtype) -> (fn, plugin)
        self.api: ApiTable = ApiTable({ROOT: {}, TENSOR: {}})   # namespace -> {name: (obj, plugin)}
        self.namespace_docs: dict[str, str] = {}
        self._children: dict[str, set] = defaultdict(set)   # namespace -> its child namespaces' last parts
        self._namespace_owner: dict[str, str] = {ROOT: "the core"}   # namespace -> plugin that created it
        self.commands: dict[str, tuple] = {}       # name -> (help, configure, run, plugin)
        self.formats: dict[str, object] = {}       # checkpoint format name -> CheckpointFormat
        self.comms: dict[str, object] = {}         # communication backend name -> backend
        self.strategies: dict[str, object] = {}    # parallel strategy name -> strategy (registration order)
        self.owner: dict[tuple, str] = {}          # (table, key) -> plugin
        self.kernel_count: Counter = Counter()
        self.devices_of: dict[str, list[str]] = defaultdict(list)
        self._lookup_cache: dict = {}
        self.generation = 0                        # bumped on every change; caches compare it

    # -- bookkeeping -------------------------------------------------------------
    def _claim(self, table: str, key, plugin: str, what: str):
        previous = self.owner.get((table, key))
        if previous is not None:
            raise DuplicateRegistration(
                f"{what} is registered twice: first by plugin {previous!r}, again by plugin {plugin!r}")
        self.owner[(table, key)] = plugin
        self.changed()

    def changed(self):
        self._lookup_cache.clear()
        for op in self.ops.values():
            op.fast.clear()
        self.generation += 1

    # -- devices -------------------------------------------------------------------
    def add_backend(self, backend: Backend, plugin: str):
        if not backend.type:
            raise ValueError(f"plugin {plugin!r} registered a backend with no device type")
        self._claim("backend", backend.type, plugin, f"device type {backend.type!r}")
        self.backends[backend.type] = backend
        self.devices_of[plugin].append(backend.type)
        self.generation += 1   # plugin_api.xp_function's cache reads the backends
        if self._binds(backend.type):
            for place in list(Place._interned.values()):
                if place.type == backend.type:
                    place.backend = backend

    def _binds(self, device_type: str) -> bool:
        """Places are interned process-wide, so the places of a device type the process's registry provides are
        bound by that registry only (set_default_registry binds them all): a private Registry (a test's, a tool's)
        with its own "cpu" backend must not redirect every CPU tensor of the process to it."""
        return _default is None or self is _default or device_type not in _default.backends

    def bind_places(self) -> None:
        """Point every interned place of a device type this registry has at its backend."""
        for place in list(Place._interned.values()):
            backend = self.backends.get(place.type)
            if backend is not None:
                place.backend = backend

    def parent_chain(self, device_type: str) -> list[str]:
        """`device_type` followed by the device types it derives from, nearest first (a CUDA-like
        "npu" gives ["npu", "gpu"]); the order kernel lookup and communication backends follow.
        A type no plugin registered ends the chain; a cycle is cut where it repeats."""
        chain, current = [], device_type
        while current is not None and current not in chain:
            chain.append(current)
            backend = self.backends.get(current)
            current = backend.parent if backend is not None else None
        return chain

    def parse_place(self, device, what: str = "device") -> Place:
        """A Place from "cpu", "gpu", "gpu:1", "cuda:0", "name:N" or a Place; errors name `what`."""
        if isinstance(device, Place):
            place = device
        elif isinstance(device, str):
            kind, index = split_device_string(device)
            place = Place(kind, 0 if index is None else index)
        else:
            raise TypeError(f"{what} must be a device string such as 'cpu' or 'gpu:0' or a Place, "
                            f"got {type(device).__name__} {device!r}")
        backend = self.backends.get(place.type)
        if backend is None:
            known = ", ".join(sorted(self.backends)) or "none"
            raise ValueError(f"{what}: device type {place.type!r} (from {device!r}) is not available; "
                             f"no installed plugin provides it. Available device types: {known}")
        count = backend.device_count()
        if place.index >= count:
            usable, reason = backend.available() if count == 0 else (True, "")
            if not usable:  # installed but unusable (no driver, no library, no device): say why
                working = ", ".join(sorted(t for t, b in self.backends.items()
                                           if b.available()[0])) or "none"
                raise ValueError(f"{what}: device type {place.type!r} (from {device!r}) is not available: "
                                 f"{reason}. Usable device types: {working}")
            raise ValueError(f"{what}: {device!r} asks for device index {place.index} but only "
                             f"{count} {place.type} device(s) exist")
        if self._binds(place.type):
            place.backend = backend
        return place

    # -- operators and kernels --------------------------------------------------------
    def add_op(self, opdef, plugin: str):
        self._claim("op", opdef.name, plugin, f"operator {opdef.name!r}")
        opdef.plugin = plugin
        self.ops[opdef.name] = opdef

    def add_kernel(self, op: str, device: str | None, dtype, fn, plugin: str):
        key = (op, device, dtype)
        where = f"device {device!r}" if device else "the generic array-API"
        self._claim("kernel", key, plugin, f"kernel for op {op!r} on {where}, dtype {dtype.name if dtype else 'any'}")
        self.kernels[key] = (fn, plugin)
        self.kernel_count[plugin] += 1

    def find_kernel(self, op: str, device: str, dtype):
        """The kernel for (op, device type, dtype): exact device, then parent devices, then the
        generic kernel; for each, the dtype-specific kernel before the any-dtype one."""
        key = (op, device, dtype)
        fn = self._lookup_cache.get(key)
        if fn is not None:
            return fn
        kernels = self.kernels
        chain = [*self.parent_chain(device), GENERIC]
        for dev in chain:
            for dt in (dtype, ANY_DTYPE):
                found = kernels.get((op, dev, dt))
                if found is not None:
                    self._lookup_cache[key] = found[0]
                    return found[0]
        return None

    def kernels_of(self, op: str) -> list[str]:
        """Human-readable list of the kernels an op has, for error messages."""
        return [f"{dev or 'generic'}/{dt.name if dt else 'any'}" for (name, dev, dt) in self.kernels if name == op]

    def kernel_reuse(self, device_type: str) -> tuple[int, int, int]:
        """(reused, overridden, total) for a device type, over every registered op it has a kernel for.

        An op is overridden when the device registered a kernel of its own for it (for any dtype), and
        reused when find_kernel's fallback reaches one on a device of its parent chain or among the
        generic kernels; total = reused + overridden (an op no kernel reaches is counted in neither).
        This is the reuse rate of a CUDA-like device that derives from "gpu"."""
        if device_type not in self.backends:
            known = ", ".join(sorted(self.backends)) or "none"
            raise ValueError(f"kernel_reuse(): device_type {device_type!r} is not a registered device type; "
                             f"registered: {known}")
        chain = [*self.parent_chain(device_type)[1:], GENERIC]   # the parents, as find_kernel walks them
        devices_of_op = defaultdict(set)
        for op, device, _dtype in self.kernels:
            devices_of_op[op].add(device)
        reused = overridden = 0
        for op in self.ops:
            devices = devices_of_op.get(op, ())
            if device_type in devices:
                overridden += 1
            elif any(device in devices for device in chain):
                reused += 1
        return reused, overridden, reused + overridden

    # -- public names and commands ------------------------------------------------------
    def has_namespace(self, namespace: str) -> bool:
        """Whether `namespace` exists: something was exported into it or into a namespace below it, or a
        plugin declared it ("oarlock" and "Tensor" always exist)."""
        return namespace in self.api or namespace in self._children

    def children(self, namespace: str) -> list[str]:
        """The last parts of `namespace`'s child namespaces ("oarlock.nn" -> ["attention", "functional", ...])."""
        return sorted(self._children.get(namespace, ()))

    def namespaces(self) -> list[str]:
        """Every namespace, those only implied by a deeper one ("oarlock.incubate") included; "Tensor" too."""
        return sorted(set(self.api) | set(self._children))

    def namespace_owner(self, namespace: str) -> str | None:
        """The plugin that created `namespace` (its first export or declaration), or None."""
        return self._namespace_owner.get(namespace)

    def _check_namespace_name(self, namespace: str, plugin: str, what: str):
        if namespace == TENSOR:
            return
        parts = namespace.split(".")
        if parts[0] != ROOT or not all(_is_identifier(p) for p in parts):
            raise ValueError(f"plugin {plugin!r} {what} namespace {namespace!r}: a namespace is \"Tensor\", "
                             f"\"oarlock\" or dotted identifiers under it, such as \"oarlock.incubate.nn\"")
        if not private_allowed(namespace):
            raise ValueError(f"plugin {plugin!r} {what} namespace {namespace!r}: namespaces are public, so no "
                             f"part may start with '_' (except Paddle's names in registry.PADDLE_PRIVATE_NAMES)")

    def _ensure_namespace(self, namespace: str, plugin: str):
        """Create `namespace` and the namespaces above it; refuse one that an exported name already spells."""
        if namespace in self.api:
            return
        parts = namespace.split(".")
        for i in range(1, len(parts)):
            parent, child = ".".join(parts[:i]), parts[i]
            entry = self.api[parent].get(child)
            if entry is not None:
                raise NamespaceConflict(
                    f"plugin {plugin!r} creates namespace {parent}.{child} (exporting into {namespace}), but "
                    f"{parent}.{child} is already a name, exported by plugin {entry[1]!r}; a name and a "
                    f"child namespace of {parent} cannot share a spelling")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            self._namespace_owner.setdefault(prefix, plugin)
            if i < len(parts):
                self._children[prefix].add(parts[i])
        self.api[namespace] = {}
        self.changed()

    def add_namespace(self, namespace: str, plugin: str, doc: str | None = None):
        """Declare `namespace` (it exists even before anything is exported into it), with a docstring."""
        self._check_namespace_name(namespace, plugin, "declared")
        if namespace == TENSOR or is_op_library(namespace):
            raise ValueError(f"plugin {plugin!r} declared namespace {namespace!r}, which the core manages")
        self._ensure_namespace(namespace, plugin)
        if doc is not None:
            self._claim("namespace doc", namespace, plugin, f"the docstring of namespace {namespace}")
            self.namespace_docs[namespace] = doc

    def add_api(self, namespace: str, name: str, obj, plugin: str):
        """Export `obj` as `namespace.name`; the namespace is created if it does not exist yet."""
        self._check_namespace_name(namespace, plugin, "exported into")
        if is_op_library(namespace):
            raise ValueError(f"plugin {plugin!r} exported {name!r} into {namespace}: the op library "
                             f"{OP_LIBRARY}.<plugin> holds every op under its op name, filled by ops.define only")
        if not isinstance(name, str) or not _is_identifier(name):
            raise ValueError(f"plugin {plugin!r} exported {name!r} into {namespace}: a public name must be an "
                             f"identifier (not a keyword)")
        if name.startswith("_") and not private_allowed(f"{namespace}.{name}"):
            raise ValueError(f"plugin {plugin!r} exported {namespace}.{name}: names starting with '_' are "
                             f"private and never public (except Paddle's names in registry.PADDLE_PRIVATE_NAMES); "
                             f"define an internal op with internal=True and call the "
                             f"callable ops.define returns (it is also {OP_LIBRARY}.<plugin>.<op name>)")
        self._add_name(namespace, name, obj, plugin)

    def _add_name(self, namespace: str, name: str, obj, plugin: str):
        child = f"{namespace}.{name}"
        if namespace != TENSOR and self.has_namespace(child):
            raise NamespaceConflict(
                f"plugin {plugin!r} exported the name {child}, but {child} is already a namespace, created by "
                f"plugin {self._namespace_owner.get(child)!r}; a name and a child namespace of {namespace} "
                f"cannot share a spelling")
        self._ensure_namespace(namespace, plugin)
        self._claim("api", (namespace, name), plugin, f"public name {namespace}.{name}")
        self.api[namespace][name] = (obj, plugin)

    def add_library_op(self, name: str, fn, plugin: str) -> str:
        """Put op `name`'s callable into the op library of `plugin` (OpRegistrar.define calls it); returns
        the library namespace, "oarlock.ops.<library_name(plugin)>"."""
        namespace = f"{OP_LIBRARY}.{library_name(plugin)}"
        self._add_name(namespace, name, fn, plugin)
        return namespace

    def public_api(self) -> dict[str, dict]:
        """The public namespaces and their names: every table but the op library's."""
        return {ns: names for ns, names in self.api.items() if not is_op_library(ns)}

    def add_command(self, name, help, configure, run, plugin):
        self._claim("command", name, plugin, f"command 'oarlock {name}'")
        self.commands[name] = (help, configure, run, plugin)

    def add_format(self, fmt, plugin: str):
        self._claim("format", fmt.name, plugin, f"checkpoint format {fmt.name!r}")
        fmt.plugin = plugin
        self.formats[fmt.name] = fmt


    def add_comm(self, backend, plugin: str):
        name = getattr(backend, "name", None)
        if not name or not getattr(backend, "device_types", None):
            raise ValueError(f"plugin {plugin!r} registered a communication backend without a name or "
                             f"device_types: {backend!r}")
        self._claim("comm", name, plugin, f"communication backend {name!r}")
        backend.plugin = plugin
        self.comms[name] = backend

    def add_strategy(self, strategy, plugin: str):
        name = getattr(strategy, "name", None)
        if not name or not isinstance(getattr(strategy, "description", None), str):
            raise ValueError(f"plugin {plugin!r} registered a parallel strategy without a name or a "
                             f"description: {strategy!r}")
        self._claim("strategy", name, plugin, f"parallel strategy {name!r}")
        strategy.plugin = plugin
        self.strategies[name] = strategy

    def comms_for_device(self, device_type: str) -> list:
        """The communication backends that move arrays of `device_type` (or of the device it derives from)."""
        for current in self.parent_chain(device_type):
            found = [c for c in self.comms.values() if current in c.device_types]
            if found:
                return found
        return []


class BackendRegistrar:
    """Passed to `oarlock_register_backends`. `registry` is the table being filled: a derived device
    (oarlock_cuda.register_cuda_like_device) finds its parent backend there."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    @property
    def registry(self) -> Registry:
        return self._registry

    def register(self, backend: Backend):
        self._registry.add_backend(backend, self.plugin)

    __call__ = register


class ApiRegistrar:
    """Passed to `oarlock_register_api`."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def export(self, namespace: str, name: str, obj):
        """Make `obj` reachable as `namespace.name`. `namespace` is "Tensor" (a method; a property object
        makes a Tensor property) or any dotted namespace under "oarlock": it is created on first export,
        with every namespace above it, and becomes importable (`import oarlock.incubate.nn.functional`)."""
        self._registry.add_api(namespace, name, obj, self.plugin)
        return obj

    def namespace(self, namespace: str, doc: str | None = None):
        """Declare `namespace` (it exists, importable, even while empty) and give it a docstring."""
        self._registry.add_namespace(namespace, self.plugin, doc)

    __call__ = export


class FormatRegistrar:
    """Passed to `oarlock_register_checkpoint_formats`."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def register(self, fmt):
        self._registry.add_format(fmt, self.plugin)

    __call__ = register


class CommRegistrar:
    """Passed to `oarlock_register_comm_backends`."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def register(self, backend):
        self._registry.add_comm(backend, self.plugin)

    __call__ = register


class StrategyRegistrar:
    """Passed to `oarlock_register_parallel_strategies`."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def register(self, strategy):
        self._registry.add_strategy(strategy, self.plugin)

    __call__ = register


class CommandRegistrar:
    """Passed to `oarlock_register_commands`."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def add(self, name: str, help: str, configure, run):
        self._registry.add_command(name, help, configure, run, self.plugin)


_default = None
_pending = False   # the process-wide manager deferred plugins (a plugin module was half imported)


def default_registry() -> Registry:
    """The process-wide registry, filled from installed plugins on first use."""
    if _default is None or _pending:
        from oarlock.plugins import default_manager
        default_manager()  # sets _default, then loads entry points (or the deferred ones)
    return _default


def peek_default_registry() -> Registry | None:
    """The process-wide registry as it is now (None before anything used it); loads nothing."""
    return _default


def set_registry_pending(pending: bool) -> None:
    global _pending
    _pending = pending


def set_default_registry(registry: Registry) -> None:
    global _default
    _default = registry
    registry.bind_places()
