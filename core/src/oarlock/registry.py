"""The registry: every backend, operator, kernel, public name and command plugins add.

Plugins never touch the tables directly: each registration hook gets a
registrar bound to the plugin's name, so the registry knows who registered
what. That is how a duplicate registration names both plugins and how
`oarlock plugins` counts kernels per plugin.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from oarlock.device import Backend, Place, split_device_string

GENERIC = None  # device key of the generic array-API kernels
ANY_DTYPE = None

NAMESPACES = ("oarlock", "oarlock.nn", "oarlock.nn.functional", "oarlock.nn.utils", "oarlock.nn.initializer",
              "oarlock.nn.init", "oarlock.nn.attention", "oarlock.amp", "oarlock.special",
              "oarlock.linalg", "oarlock.distributed",
              "oarlock.compat", "oarlock.optimizer", "oarlock.optimizer.lr", "oarlock.io", "Tensor")


class DuplicateRegistration(ValueError):
    """Two plugins registered the same key."""


class Registry:
    """All tables; one per plugin manager (tests build isolated ones)."""

    def __init__(self):
        self.backends: dict[str, Backend] = {}
        self.ops: dict = {}
        self.kernels: dict[tuple, tuple] = {}      # (op, device, dtype) -> (fn, plugin)
        self.api: dict[str, dict[str, tuple]] = {ns: {} for ns in NAMESPACES}
        self.commands: dict[str, tuple] = {}       # name -> (help, configure, run, plugin)
        self.formats: dict[str, object] = {}       # checkpoint format name -> CheckpointFormat
        self.comms: dict[str, object] = {}         # communication backend name -> backend
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
        for place in list(Place._interned.values()):
            if place.type == backend.type:
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
    def add_api(self, namespace: str, name: str, obj, plugin: str):
        if namespace not in self.api:
            raise ValueError(f"plugin {plugin!r} exported {name!r} into unknown namespace {namespace!r}; "
                             f"namespaces: {', '.join(NAMESPACES)}")
        self._claim("api", (namespace, name), plugin, f"public name {namespace}.{name}")
        self.api[namespace][name] = (obj, plugin)

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
        self._registry.add_api(namespace, name, obj, self.plugin)
        return obj

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


class CommandRegistrar:
    """Passed to `oarlock_register_commands`."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def add(self, name: str, help: str, configure, run):
        self._registry.add_command(name, help, configure, run, self.plugin)


_default = None


def default_registry() -> Registry:
    """The process-wide registry, filled from installed plugins on first use."""
    if _default is None:
        from oarlock.plugins import default_manager
        default_manager()  # sets _default, then loads entry points
    return _default


def set_default_registry(registry: Registry) -> None:
    global _default
    _default = registry
