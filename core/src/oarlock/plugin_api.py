"""The core's public plugin API: what a plugin may use beyond the user-facing `oarlock` names.

Plugins import from here (or from the public modules it re-exports: `oarlock.registry`,
`oarlock.device`, `oarlock.dispatch`, `oarlock.autograd`, `oarlock.dtypes`, `oarlock.hookspecs`),
never from a private `oarlock._*` module; import-linter holds that as a contract.

- Registry queries: `default_registry()` and the `Registry` it returns (backends, ops, kernels,
  `find_kernel`, `parent_chain`, `comms`, `comms_for_device`, `formats`, `commands`, `api`).
- Raw arrays and Tensors: `array_of(t)` is the backend array under a Tensor (kernels' currency),
  `wrap(array, place)` a Tensor over an array without a copy.
- Storage rebinding: `rebind(t, array, place=None)` gives an existing Tensor new storage (and the
  dtype of that array) while every reference to it stays valid: optimizer master weights, `Layer.to`,
  `amp.decorate`. It counts as an in-place modification (the version counter moves).
- Observation: `set_observer(observer)` reports every op call (through its frontend, the generated fast
  path included) and every node the autograd engine runs as observer.begin(event, inputs) -> token and
  observer.end(token); a profiler installs one. None (the default) costs op calls nothing (their observed
  code is swapped in only while an observer is installed) and the autograd engine one test per node.
- Faster array functions: `xp_function(xp, name)` is `xp.<name>`, or the drop-in a backend whose array
  module is `xp` supplies in `Backend.array_functions` (oarlock-cpu: vectorised float32 exp and exp2).
- The Backend interface (`Backend`, `DeviceProperties`, `HostStream`, `HostEvent`), the op registrar
  types, autocast state, and the hook markers.
"""

from __future__ import annotations

from oarlock._tensor import Tensor, bump_version, version_counter
from oarlock.autograd import Node, is_grad_enabled
from oarlock.device import Backend, DeviceProperties, HostEvent, HostStream, Place
from oarlock.dispatch import AUTOCAST, OpDef, OpError, OpRegistrar, set_autocast, set_observer, write_out
from oarlock.hookspecs import hookimpl, hookspec
from oarlock.registry import ANY_DTYPE, GENERIC, DuplicateRegistration, Registry, default_registry

__all__ = ["ANY_DTYPE", "array_of", "AUTOCAST", "Backend", "default_registry", "DeviceProperties",
           "DuplicateRegistration", "GENERIC", "guard_writes", "hookimpl", "hookspec", "HostEvent", "HostStream",
           "is_grad_enabled", "Node", "OpDef", "OpError", "OpRegistrar", "Place", "rebind", "Registry",
           "set_autocast", "set_observer", "wrap", "write_out", "xp_function"]


def array_of(tensor: Tensor):
    """The backend array holding `tensor`'s values (numpy on "cpu", CuPy on "gpu"); shared, not copied."""
    if tensor.__class__ is not Tensor:
        raise TypeError(f"array_of(): tensor must be an oarlock.Tensor, got {type(tensor).__name__}")
    return tensor._data


def wrap(array, place: Place, stop_gradient: bool = True) -> Tensor:
    """A Tensor over `array` (an array of `place`'s backend), sharing its memory."""
    if not isinstance(place, Place):
        raise TypeError(f"wrap(): place must be an oarlock Place, got {type(place).__name__} {place!r}")
    if place.backend is None or not isinstance(array, place.backend.array_types):
        kinds = ", ".join(t.__name__ for t in (place.backend.array_types if place.backend else ()))
        raise TypeError(f"wrap(): array must be an array of {place}'s backend ({kinds or 'not loaded'}), "
                        f"got {type(array).__name__}")
    return Tensor._wrap(array, place, stop_gradient)


def rebind(tensor: Tensor, array, place: Place | None = None) -> Tensor:
    """Give `tensor` the storage `array` (its dtype becomes the array's), on `place` if given; returns
    `tensor`. The shape may not change. Every reference to `tensor` sees the new values."""
    if tensor.__class__ is not Tensor:
        raise TypeError(f"rebind(): tensor must be an oarlock.Tensor, got {type(tensor).__name__}")
    place = tensor._place if place is None else place
    if not isinstance(array, place.backend.array_types):
        raise TypeError(f"rebind(): array must be an array of {place}'s backend, got {type(array).__name__}")
    if tuple(array.shape) != tuple(tensor._data.shape):
        raise ValueError(f"rebind(): array has shape {list(array.shape)}, but the tensor has shape {tensor.shape}")
    fresh = Tensor._wrap(array, place)
    tensor._data, tensor._place, tensor._dtype = fresh._data, fresh._place, fresh._dtype
    bump_version(tensor)
    return tensor


def guard_writes(tensor: Tensor, guard) -> None:
    """Call guard(tensor) before any op writes into `tensor`'s storage (shared with its views), until
    guard_writes(tensor, None). Writes that replace the storage (rebind, out=, set_value) leave the old
    array untouched and call nothing. One guard per storage: a second replaces the first."""
    if tensor.__class__ is not Tensor:
        raise TypeError(f"guard_writes(): tensor must be an oarlock.Tensor, got {type(tensor).__name__}")
    if guard is not None and not callable(guard):
        raise TypeError(f"guard_writes(): guard must be callable or None, got {type(guard).__name__}")
    version_counter(tensor).guard = guard


_xp_functions: dict = {}  # (id(xp), name) -> (registry, its generation, function)


def xp_function(xp, name: str):
    """`xp.<name>`, or the faster drop-in for it that a registered backend whose array module is `xp` supplies
    (`Backend.array_functions`). Cached per registry generation; a kernel may call it on every call."""
    registry = default_registry()
    key = (id(xp), name)
    hit = _xp_functions.get(key)
    if hit is not None and hit[0] is registry and hit[1] == registry.generation:
        return hit[2]
    fn = None
    for backend in registry.backends.values():
        # array_functions first: a lazy `xp` property (CuPy) is not imported by asking
        if name in backend.array_functions and backend.xp is xp:
            fn = backend.array_functions[name]
            break
    if fn is None:
        fn = getattr(xp, name)
    _xp_functions[key] = (registry, registry.generation, fn)
    return fn
