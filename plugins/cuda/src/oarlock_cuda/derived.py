"""CUDA-like devices: one call makes a new device type that reuses every kernel of its parent.

Paddle's story for a CUDA-compatible chip is one line of registration: the chip's device type reuses
the GPU kernels, and the vendor writes kernels only where its chip differs. Here that line is

    device = register_cuda_like_device("metax_gpu", runtime=MetaxRuntime(), overrides={"matmul": my_matmul})

It returns a CudaLikeDevice: a small plugin object holding both registrations, the backend and the
kernel overrides, because oarlock's registration hooks each receive one registrar. A vendor plugin
uses it from its own hooks,

    @hookimpl
    def oarlock_register_backends(backends):
        device.register_backend(backends)

    @hookimpl
    def oarlock_register_ops(ops):
        device.register_kernels(ops)

or points its entry point straight at the object (`metax = "metax_oarlock.plugin:device"`: the object
carries both hooks itself), or, in a script or notebook, passes `plugin="metax"` to register it in the
process-wide plugin manager at once.

How the derived device works:
- kernels: its backend names `parent` ("gpu", or "cpu", so vendors and CI can derive from the CPU),
  and the registry's kernel lookup goes device -> parent chain -> generic kernels. The overrides are
  registered as kernels of the new device type, so they win; everything else is the parent's.
  `oarlock plugins` prints the reuse rate (Registry.kernel_reuse).
- backend: a DerivedBackend that delegates, member by member, to the runtime if it supplies the
  member, else to the parent's backend instance (its array module, host copies, random generators,
  streams, memory statistics). What the runtime does not supply is therefore shared with the parent
  device, random generator state included; where the parent keeps an interface default of
  oarlock.device.Backend (a cpu parent's host streams), the default runs for the derived device
  itself. One exception: it does not claim the parent's DLPack device type (from_dlpack would
  otherwise hand the parent's arrays to the derived device); a runtime may supply
  `dlpack_device_type` and `from_dlpack`.

Plugins load in the order of their entry-point names, so a vendor's hooks may run before the parent's
plugin or the plugin defining an overridden op has registered anything. So the arguments (types, names,
dtypes) are checked by the call, a device name already taken when the backend hook runs, and the
parent and the overridden ops when the device is first used (CudaLikeDevice.check); `oarlock plugins`
also lists a missing parent or undefined op as a warning. With plugin="name" everything is checked by
the call, since every installed plugin has loaded by then.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping

from oarlock import hookimpl
from oarlock.device import Backend, split_device_string
from oarlock.dtypes import convert_dtype

__all__ = ["register_cuda_like_device", "CudaLikeDevice", "DerivedBackend"]

_FN = "register_cuda_like_device()"
_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]*$")
_RESERVED = ("cpu", "gpu", "cuda")
_MISSING = object()

# The Backend interface: every public method of oarlock.device.Backend (read when this module is
# imported, so members added to the interface later are covered too), plus from_dlpack. A runtime
# supplies any of them as a function (called with the method's arguments, without self) or as a
# constant (returned as is; None makes e.g. synchronize a no-op).
_METHODS = tuple(sorted({name for name in dir(Backend) if not name.startswith("_")
                         and callable(getattr(Backend, name))} | {"from_dlpack"}))


def register_cuda_like_device(name: str, runtime=None, overrides=None, parent: str = "gpu",
                              plugin: str | None = None) -> "CudaLikeDevice":
    """Make device type `name` reuse every kernel of `parent` except those in `overrides`.

    name: the new device type, e.g. "metax_gpu" (lower case letters, digits and "_"; tensors then go to
        "metax_gpu:0"). "cpu", "gpu" and "cuda" are taken.
    runtime: what differs from the parent backend: an object or a dict whose attributes/keys name
        members of oarlock.device.Backend (device_count, set_current_device, synchronize,
        memory_allocated and the other memory statistics, available, device_properties, stream, event,
        asarray, to_host, generator, seed, get/set_rng_state, xp, array_types; dlpack_device_type and
        from_dlpack) or anything else the vendor's code reaches through the backend. Functions take the
        method's arguments without self, e.g. synchronize(index); a non-callable value is returned as is
        ({"device_count": 2}). Everything the runtime lacks comes from the parent's backend instance
        (where the parent keeps an interface default, that default runs for the derived device).
    overrides: {op_name: kernel} or {(op_name, dtype): kernel}; a kernel has the signature of the
        parent's kernels, fn(xp, *arrays, **attributes). A (name, dtype) key overrides that dtype only.
    parent: the device type whose kernels and backend are reused: "gpu" (alias "cuda") or "cpu", or
        another derived device.
    plugin: None to return the plugin object for the vendor's hooks or entry point to register; a plugin
        name to also register it now in the process-wide plugin manager (checked in full first, since
        every installed plugin has loaded by then).

    Returns the CudaLikeDevice. Raises TypeError/ValueError naming this function, the argument and the
    value for malformed arguments."""
    device = CudaLikeDevice(name, runtime, overrides, parent)
    if plugin is not None:
        if not isinstance(plugin, str) or not plugin:
            raise TypeError(f"{_FN}: plugin must be a plugin name (a non-empty str) or None, "
                            f"got {type(plugin).__name__} {plugin!r}")
        from oarlock.plugins import default_manager
        manager = default_manager()
        device.check_name(manager.registry)
        device.check(manager.registry)
        if manager.register(device, plugin) is None:
            raise ValueError(f"{_FN}: plugin={plugin!r} is disabled by OARLOCK_DISABLE_PLUGINS; "
                             f"device {name!r} was not registered")
        error = manager.failures.get(plugin)
        if error is not None:
            raise ValueError(f"{_FN}: registering plugin {plugin!r} failed: {error}")
    return device


class CudaLikeDevice:
    """The plugin object register_cuda_like_device returns: a derived backend plus kernel overrides.

    Register it as a plugin (it carries the two hooks), or call register_backend(backends) and
    register_kernels(ops) from your own hooks. `backend` is the DerivedBackend once registered."""

    def __init__(self, name, runtime=None, overrides=None, parent="gpu"):
        self.name = _check_name(name)
        self.parent = _check_parent(parent, self.name)
        self.runtime = _check_runtime(runtime)
        self.overrides = _check_overrides(overrides)  # {(op, DType or None): kernel}
        self.backend: DerivedBackend | None = None

    def __repr__(self):
        return (f"CudaLikeDevice({self.name!r}, parent={self.parent!r}, "
                f"overrides={sorted(op for op, _ in self.overrides)})")

    # -- registration -----------------------------------------------------------------------------
    def register_backend(self, backends) -> "DerivedBackend":
        """Register the derived backend through the registrar `oarlock_register_backends` receives."""
        registry = backends.registry  # the table being filled: the backend resolves its parent there
        self.check_name(registry)
        if self.parent in registry.backends:  # else its plugin loads later; checked on first use
            _check_chain(self.name, self.parent, registry)
        self.backend = DerivedBackend(self, registry)
        backends.register(self.backend)
        return self.backend

    def register_kernels(self, ops) -> None:
        """Register the overrides as kernels of the new device type, through `oarlock_register_ops`'s
        registrar (the ops they override may be defined by a plugin that loads later)."""
        for (op, dtype), kernel in self.overrides.items():
            ops.kernel(op, device=self.name, dtypes=None if dtype is None else [dtype])(kernel)

    @hookimpl
    def oarlock_register_backends(self, backends):
        self.register_backend(backends)

    @hookimpl
    def oarlock_register_ops(self, ops):
        self.register_kernels(ops)

    # -- checks --------------------------------------------------------------------------------------
    def check_name(self, registry) -> None:
        """Raise if another plugin already registered a device of this name."""
        if self.name in registry.backends:
            owner = registry.owner.get(("backend", self.name), "?")
            raise ValueError(f"{_FN}: name={self.name!r} is already a device type, registered by plugin "
                             f"{owner!r}; choose another name for the derived device")

    def check(self, registry) -> None:
        """Raise unless the parent is registered and every overridden op is defined. Runs when the
        device is first used (every installed plugin has loaded by then)."""
        if self.parent not in registry.backends:
            known = ", ".join(sorted(registry.backends)) or "none"
            hint = " (pip install oarlock-cuda, with a CuPy for your CUDA)" if self.parent == "gpu" else ""
            raise ValueError(f"{_FN}: parent={self.parent!r} of device {self.name!r} is not a registered "
                             f"device type; registered: {known}. Install the plugin that provides "
                             f"{self.parent!r}{hint}, or derive from 'cpu'")
        _check_chain(self.name, self.parent, registry)
        unknown = sorted({op for op, _dtype in self.overrides if op not in registry.ops})
        if unknown:
            described = []
            for op in unknown:
                close = difflib.get_close_matches(op, list(registry.ops), n=1)
                described.append(f"{op!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(f"{_FN}: overrides for device {self.name!r} name op(s) that no installed plugin "
                             f"defines: {', '.join(described)}")


class DerivedBackend(Backend):
    """The backend of a derived device: each member comes from the runtime if it supplies it, else
    from the parent's backend instance (looked up in the registry on use, so the parent's plugin may
    load after this one)."""

    def __init__(self, device: CudaLikeDevice, registry):
        self.type, self.parent = device.name, device.parent
        self.device, self.runtime = device, device.runtime
        self._registry = registry
        self._checked = False
        runtime = device.runtime
        if isinstance(runtime, Mapping):
            self._runtime_member = lambda name: runtime.get(name, _MISSING)
        elif runtime is not None:
            self._runtime_member = lambda name: getattr(runtime, name, _MISSING)

    def __repr__(self):
        return f"DerivedBackend({self.type!r}, parent={self.parent!r})"

    def parent_backend(self) -> Backend:
        """The parent's backend instance; the first call checks the device (CudaLikeDevice.check)."""
        backend = self._registry.backends.get(self.parent)
        if backend is None or not self._checked:
            self.device.check(self._registry)  # raises, naming the parent, when it is missing
            self._checked = True
            backend = self._registry.backends[self.parent]
        return backend

    def _runtime_member(self, name):  # no runtime; __init__ replaces it for a dict or an object
        return _MISSING

    def _member(self, name):
        value = self._runtime_member(name)
        return getattr(self.parent_backend(), name) if value is _MISSING else value

    @property
    def xp(self):
        return self._member("xp")

    @property
    def array_types(self):
        return self._member("array_types")

    @property
    def dlpack_device_type(self):  # the runtime's, never the parent's: see the module docstring
        value = self._runtime_member("dlpack_device_type")
        return None if value is _MISSING else value

    def __getattr__(self, name):  # members outside the Backend interface: the runtime's, else the parent's
        if name.startswith("_") or name in ("device", "runtime"):
            raise AttributeError(name)
        return self._member(name)


def _delegating(name):
    default = getattr(Backend, name, None)  # the interface's default implementation, if any

    def method(self, *args, **kwargs):
        value = self._runtime_member(name)
        if value is not _MISSING:
            return value(*args, **kwargs) if callable(value) else value
        parent = self.parent_backend()
        if default is not None and getattr(type(parent), name, None) is default:
            # the parent keeps the interface's default: run it for this device (its own type in
            # host streams, its runtime's memory_allocated under memory_reserved, ...)
            return default(self, *args, **kwargs)
        return getattr(parent, name)(*args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The runtime's {name} if it supplies one, else the parent backend's."
    return method


for _name in _METHODS:
    setattr(DerivedBackend, _name, _delegating(_name))
del _name


# -- argument checks: each error names the function, the argument and the value ------------------------

def _check_name(name):
    if not isinstance(name, str):
        raise TypeError(f"{_FN}: name must be a device type name (str), got {type(name).__name__} {name!r}")
    if not _NAME_RE.match(name):
        raise ValueError(f"{_FN}: name={name!r} is not a valid device type name: use lower case letters, digits "
                         f"and '_', starting with a letter or '_' (no ':index'), e.g. 'metax_gpu'")
    if name in _RESERVED:
        raise ValueError(f"{_FN}: name={name!r} is a built-in device type ({', '.join(_RESERVED)} are taken); "
                         f"choose a name for the new device, e.g. 'metax_gpu'")
    return name


def _check_parent(parent, name):
    if not isinstance(parent, str):
        raise TypeError(f"{_FN}: parent must be a device type name such as 'gpu' or 'cpu', "
                        f"got {type(parent).__name__} {parent!r}")
    try:
        kind, index = split_device_string(parent)
    except ValueError:
        kind, index = None, None
    if kind is None or index is not None:
        raise ValueError(f"{_FN}: parent={parent!r} is not a device type name; expected e.g. 'gpu' or 'cpu' "
                         f"(without ':index')")
    if kind == name:
        raise ValueError(f"{_FN}: parent={parent!r} is the new device itself (name={name!r}); a device "
                         f"derives from another device type, e.g. 'gpu' or 'cpu'")
    return kind


def _check_chain(name, parent, registry):
    """Raise if the parent chain comes back to `name` (parent derives from the new device)."""
    if name in registry.parent_chain(parent):
        raise ValueError(f"{_FN}: parent={parent!r} derives from {name!r} itself; the parent chain "
                         f"would be a cycle")


def _check_runtime(runtime):
    if runtime is None or isinstance(runtime, Mapping):
        bad = [key for key in (runtime or {}) if not isinstance(key, str)]
        if bad:
            raise TypeError(f"{_FN}: runtime keys must be member names (str), got {bad[0]!r}")
        return runtime
    if isinstance(runtime, (str, bytes, int, float, complex, bool, list, tuple, set)):
        raise TypeError(f"{_FN}: runtime must be an object or a dict supplying what differs from the parent "
                        f"backend (device_count, synchronize, memory statistics, ...), "
                        f"got {type(runtime).__name__} {runtime!r}")
    return runtime


def _check_overrides(overrides):
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise TypeError(f"{_FN}: overrides must be a dict {{op_name: kernel}} or {{(op_name, dtype): kernel}}, "
                        f"got {type(overrides).__name__} {overrides!r}")
    result = {}
    for key, kernel in overrides.items():
        if isinstance(key, str):
            op, dtype = key, None
        elif isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
            op = key[0]
            try:
                dtype = convert_dtype(key[1])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{_FN}: overrides key {key!r} has an unknown dtype: {exc}") from None
        else:
            raise TypeError(f"{_FN}: overrides keys must be op names or (op_name, dtype) pairs, got {key!r}")
        if not op:
            raise ValueError(f"{_FN}: overrides key {key!r} has an empty op name")
        if not callable(kernel):
            raise TypeError(f"{_FN}: overrides[{key!r}] must be a kernel function fn(xp, *arrays, **attributes), "
                            f"got {type(kernel).__name__} {kernel!r}")
        if (op, dtype) in result:
            raise ValueError(f"{_FN}: overrides gives op {op!r} (dtype {dtype.name if dtype else 'any'}) twice, "
                             f"the second time as {key!r}")
        result[(op, dtype)] = kernel
    return result
