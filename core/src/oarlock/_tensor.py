"""Tensor: a thin object over one backend array, its place, dtype and autograd state.

Python operators call ops by name through `oarlock._ops`; every other method
(`x.sum()`, `x.reshape(...)`) comes from the "Tensor" namespace that plugins
fill, resolved on first use by `__getattr__` and then cached on the class.
"""

from __future__ import annotations

import numpy as np

from oarlock import _ops
from oarlock import autograd as _autograd
from oarlock.autograd import PyLayer, run_backward, _seed_grads
from oarlock.dtypes import _BY_NP, convert_dtype, fit_scalar, from_numpy_dtype, get_default_dtype
from oarlock.registry import PADDLE_PRIVATE_TENSOR

_new = object.__new__
_LOW_PRECISION = {"bfloat16", "float8_e4m3fn", "float8_e5m2"}
_NO_DATA = object()
_SIZE_TYPES = (int, np.integer)
_BOOLS = (bool, np.bool_)


def _optional_slot(slot: str, default, convert=None, doc=""):
    """A property over a slot that is set only when used (most tensors never get a grad or a name),
    reading `default` while it is unset."""
    def get(self):
        return getattr(self, slot, default)

    def set(self, value):
        setattr(self, slot, value if convert is None else convert(value))
    return property(get, set, doc=doc)


class Tensor:
    """An n-dimensional array on a device, with Paddle's autograd flags.

    `stop_gradient` is True for plain tensors (Paddle's default); set it to False, or
    `requires_grad=True`, to have gradients computed for this tensor.
    """

    # _oidx, _grad, _name, _persistable and _param are set only when used (read via properties); _view and _hooks
    # are None from the start (read on every recorded op and every leaf reached by backward)
    # _vc: the version counter (None while the tensor is at version 0 and nothing shares or saved it;
    # shared by views and their base); _view: (root base, function making this view from the base, the
    # version at which this view's graph identity was set), for outputs of view ops
    # __dict__: Paddle model code sets attributes of its own on tensors and parameters (`param.split_axis = 1`,
    # `p.main_grad`); the dict is only created when one is set, so other tensors pay one pointer
    __slots__ = ("_data", "_place", "_dtype", "stop_gradient", "_node", "_oidx", "_vc", "_view", "_grad", "_hooks",
                 "_name", "_persistable", "_param", "__weakref__", "__dict__")
    __array_ufunc__ = None      # make numpy defer to our reflected operators
    __array_priority__ = 1000
    __hash__ = object.__hash__  # __eq__ is elementwise, identity still hashes

    def __init__(self, *args, data=_NO_DATA, dtype=None, place=None, stop_gradient=True):
        """Tensor(data, dtype=None, place=None, stop_gradient=True): a copy of data (to_tensor's rules,
        except that Python numbers and lists default to the default float dtype, as torch.Tensor and
        Paddle 3.2's Tensor do; numpy arrays and Tensors keep their dtype).
        Tensor(d0, d1, ...) with int sizes: an uninitialised tensor of that shape, default float dtype
        unless dtype is given (torch's legacy constructor, which Paddle 3.2 follows; Tensor([2, 3]) is
        data). Tensor(): an empty 1-d tensor of size 0."""
        if data is _NO_DATA and all(isinstance(a, _SIZE_TYPES) and not isinstance(a, _BOOLS) for a in args):
            if any(a < 0 for a in args):
                raise ValueError(f"oarlock.Tensor(): sizes must be non-negative, got {[int(a) for a in args]}")
            src = _ops.empty([int(a) for a in args] if args else [0], dtype=dtype, place=place)
        else:
            args = args if data is _NO_DATA else (data, *args)
            if len(args) > 4:
                raise TypeError(f"oarlock.Tensor() takes data, dtype, place and stop_gradient (or int sizes), "
                                f"got {len(args)} positional arguments")
            data, *rest = args
            given = {"dtype": dtype, "place": place, "stop_gradient": stop_gradient}
            for key, value in zip(given, rest):
                if given[key] is not (True if key == "stop_gradient" else None):
                    raise TypeError(f"oarlock.Tensor() got multiple values for argument '{key}'")
                given[key] = value
            dtype, place, stop_gradient = given.values()
            if dtype is None:
                dtype = _python_data_dtype(data)
            src = _ops.to_tensor(data, dtype=dtype, place=place)
        if not isinstance(stop_gradient, _BOOLS):
            raise TypeError(f"oarlock.Tensor(): argument 'stop_gradient' must be a bool, got "
                            f"{type(stop_gradient).__name__} {stop_gradient!r}")
        self._data, self._place, self._dtype = src._data, src._place, src._dtype
        self.stop_gradient, self._node, self._vc = bool(stop_gradient), None, None
        self._view = self._hooks = None

    @staticmethod
    def _wrap(data, place, stop_gradient=True):
        """The fast constructor used by the dispatcher: no copies, no checks."""
        t = _new(Tensor)
        t._data = data
        t._place = place
        t._dtype = _BY_NP.get(data.dtype) or from_numpy_dtype(data.dtype)
        t.stop_gradient = stop_gradient
        t._node = None
        t._vc = None
        t._view = t._hooks = None   # read on every recorded op and leaf: an unset slot would raise and catch
        return t

    # -- metadata ----------------------------------------------------------------------------------
    @property
    def shape(self) -> list:
        return list(self._data.shape)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def dim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return int(self._data.size)

    @property
    def dtype(self):
        return self._dtype

    @property
    def place(self):
        return self._place

    device = place

    @property
    def requires_grad(self) -> bool:
        return not self.stop_gradient

    @requires_grad.setter
    def requires_grad(self, value):
        if not isinstance(value, bool):
            raise TypeError(f"Tensor.requires_grad must be a bool, got {type(value).__name__} {value!r}")
        self.stop_gradient = not value

    def requires_grad_(self, requires_grad: bool = True):
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        """The accumulated gradient, or None."""
        g = getattr(self, "_grad", None)
        if g.__class__ is DeferredZero:   # zeros not made yet (Optimizer.clear_grad): made now, on first read
            g = self._grad = _ops.zeros(list(g.shape), dtype=g.dtype, place=g.place)
        return g

    @grad.setter
    def grad(self, value):
        self._grad = value
    name = _optional_slot("_name", None, doc="The tensor's name, or None.")
    persistable = _optional_slot("_persistable", False, convert=bool,
                                 doc="Whether the tensor belongs in a saved state (parameters and persistable "
                                     "buffers).")
    param_attrs = _optional_slot("_param", None,
                                 doc="The parameter attributes (trainable, learning-rate multiplier, ...) if this "
                                     "is a parameter (see oarlock.nn.Parameter), else None.")

    @property
    def trainable(self) -> bool:
        return not self.stop_gradient

    @trainable.setter
    def trainable(self, value: bool):
        self.stop_gradient = not value

    @property
    def inplace_version(self) -> int:
        """How many in-place writes this tensor's storage has seen (shared with its views), as Paddle's
        `Tensor.inplace_version`; backward compares it with the version a saved tensor had."""
        vc = self._vc
        return 0 if vc is None else vc.value

    _version = inplace_version  # torch's spelling

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        return self._node

    # -- host access ----------------------------------------------------------------------------
    def _host(self):
        backend = self._place.backend
        return self._data if backend.xp is np else backend.to_host(self._data)

    def numpy(self):
        """A numpy copy of the values (bfloat16 and float8 keep their ml_dtypes dtype)."""
        return np.array(self._host(), copy=True)

    def __array__(self, dtype=None, copy=None):
        host = self._host()
        if dtype is not None:
            host = host.astype(dtype, copy=False)
        return np.array(host, copy=True) if copy else host

    def item(self, *index):
        host = self._host()
        if not index and host.size != 1:
            raise ValueError(f"Tensor.item(): only a tensor with one element can be turned into a Python "
                             f"scalar; this one has shape {self.shape}")
        value = host.item(*index)
        return float(value) if self._dtype.name in _LOW_PRECISION else value

    def tolist(self):
        host = self._host()
        if self._dtype.name in _LOW_PRECISION:
            host = host.astype(np.float32)
        return host.tolist()

    def __len__(self):
        if self._data.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if self._data.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self):
        if self._data.size != 1:
            raise ValueError(f"the truth value of a tensor with {self._data.size} elements is ambiguous; "
                             f"use .any() or .all()")
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __complex__(self):
        return complex(self.item())

    def __index__(self):
        if self._dtype.kind not in ("int", "bool") or self._data.size != 1:
            raise TypeError(f"only a one-element integer tensor can be used as an index, got dtype "
                            f"{self._dtype.name} and shape {self.shape}")
        return int(self.item())

    def __dlpack__(self, *args, **kwargs):
        try:
            return self._data.__dlpack__(*args, **kwargs)
        except BufferError:   # numpy exports no bfloat16/float8: oarlock.utils.dlpack does, where installed
            exchange = _dlpack_exchange()
            if exchange is None:
                raise
            return exchange["to_dlpack"][0](self)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __repr__(self):
        host = self._host()
        if self._dtype.name in _LOW_PRECISION:
            host = host.astype(np.float32)
        body = np.array2string(host, separator=", ", prefix="       ", threshold=1000)
        grad_fn = f", grad_fn={self._node.name}" if self._node is not None else ""
        return (f"Tensor(shape={self.shape}, dtype={self._dtype.name}, place={self._place!r}, "
                f"stop_gradient={self.stop_gradient}{grad_fn},\n       {body})")

    # -- conversion ------------------------------------------------------------------------------
    def astype(self, dtype):
        return _ops.cast(self, dtype)   # the op converts dtype, naming itself and the argument if it can't

    cast = astype

    def detach(self):
        """A tensor sharing this one's data (and its version counter), cut from the graph (stop_gradient=True)."""
        t = Tensor._wrap(self._data, self._place)
        t._vc = version_counter(self)
        return t

    def detach_(self):
        self._node = None
        self.stop_gradient = True
        return self

    def set_value(self, value):
        """Replace this tensor's values in place (Paddle's Tensor.set_value): `value` is a Tensor, a
        numpy array or nested lists of this tensor's shape; it is converted to this tensor's dtype."""
        if isinstance(value, Tensor):
            if value._place is not self._place:
                value = value.to(self._place)
            data = value._data
        else:
            data = self._place.backend.asarray(np.asarray(value), None, self._place.index)
        if tuple(data.shape) != tuple(self._data.shape):
            raise ValueError(f"Tensor.set_value(): value has shape {list(data.shape)}, but the tensor has shape "
                             f"{self.shape}")
        self._data = data.astype(self._dtype.np, copy=True)
        return self

    def clone(self):
        return _ops.clone(self)

    def to(self, *args, **kwargs):
        """to(device), to(dtype), to(device, dtype) or to(other_tensor); keywords device=, dtype=."""
        from oarlock.registry import default_registry
        device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
        kwargs.pop("blocking", None), kwargs.pop("non_blocking", None), kwargs.pop("copy", None)
        if kwargs:
            raise TypeError(f"Tensor.to() got unexpected keyword argument(s) {', '.join(kwargs)}; "
                            f"it accepts device, dtype, blocking")
        for arg in args:
            if isinstance(arg, Tensor):
                device, dtype = arg._place, arg._dtype
            elif _looks_like_dtype(arg):
                dtype = arg
            else:
                device = arg
        result = self
        if device is not None:
            place = default_registry().parse_place(device, what="Tensor.to(): device")
            if place is not self._place:
                result = _ToPlace.apply(result, place)
        if dtype is not None:
            result = result.astype(dtype)
        return result

    def pin_memory(self):
        """A copy of this cpu tensor in page-locked host memory, which copies to the GPU faster; it
        needs a usable "gpu" backend, whose reason is given when there is none."""
        from oarlock.registry import default_registry
        if self._place.type != "cpu":
            raise ValueError(f"Tensor.pin_memory(): the tensor is on {self._place}; only cpu tensors can be "
                             f"pinned")
        gpu = default_registry().backends.get("gpu")
        usable, reason = gpu.available() if gpu is not None else (False, "no plugin provides the 'gpu' device")
        if not usable:
            raise RuntimeError(f"Tensor.pin_memory(): pinned memory needs a usable GPU: {reason}")
        return Tensor._wrap(gpu.pin_memory(self._data), self._place, self.stop_gradient)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device_id=None, blocking=True):
        return self.to("gpu" if device_id is None else f"gpu:{device_id}")

    # -- autograd --------------------------------------------------------------------------------
    def backward(self, grad_tensor=None, retain_graph=False):
        """Accumulate d(self)/d(leaf) into the .grad of every leaf with stop_gradient=False."""
        seeds = _seed_grads([self], None if grad_tensor is None else [grad_tensor], "Tensor.backward")
        run_backward([self], seeds, retain_graph=retain_graph)

    def register_hook(self, hook):
        """Call hook(grad) when this tensor's gradient is computed; a non-None return replaces it."""
        if self.stop_gradient:
            raise RuntimeError("register_hook(): cannot register a hook on a tensor with stop_gradient=True")
        if self._node is not None:
            node, index = self._node, self._oidx
            node.add_hook(index, hook)
            return _HookHandle(lambda: node.hooks[index].remove(hook))
        hooks = getattr(self, "_hooks", None)   # a tensor not made by _wrap or __init__ may lack the slot
        if hooks is None:
            hooks = self._hooks = []
        hooks.append(hook)
        return _HookHandle(lambda: hooks.remove(hook))

    def clear_grad(self, set_to_zero: bool = False):
        if set_to_zero and self.grad is not None:
            self._grad = _ops.zeros_like(self._grad)
        else:
            self._grad = None

    clear_gradient = clear_grad

    def gradient(self):
        """The gradient as a numpy array (Paddle's spelling), or None."""
        g = self.grad
        return None if g is None else g.numpy()

    # -- Python operators ------------------------------------------------------------------------
    def __add__(self, other):
        return _ops.add(self, other)

    def __radd__(self, other):
        return _ops.add(other, self)

    def __sub__(self, other):
        return _ops.subtract(self, other)

    def __rsub__(self, other):
        return _ops.subtract(other, self)

    def __mul__(self, other):
        return _ops.multiply(self, other)

    def __rmul__(self, other):
        return _ops.multiply(other, self)

    def __truediv__(self, other):
        return _ops.divide(self, other)

    def __rtruediv__(self, other):
        return _ops.divide(other, self)

    def __floordiv__(self, other):
        return _ops.floor_divide(self, other)

    def __rfloordiv__(self, other):
        return _ops.floor_divide(other, self)

    def __mod__(self, other):
        return _ops.remainder(self, other)

    def __rmod__(self, other):
        return _ops.remainder(other, self)

    def __pow__(self, other):
        return _ops.pow(self, other)

    def __rpow__(self, other):
        return _ops.pow(other, self)

    def __matmul__(self, other):
        return _ops.matmul(self, other)

    def __rmatmul__(self, other):
        return _ops.matmul(other, self)

    def __neg__(self):
        return _ops.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return _ops.abs(self)

    def __invert__(self):
        return _ops.bitwise_not(self)

    def __and__(self, other):
        return _ops.bitwise_and(self, other)

    def __rand__(self, other):
        return _ops.bitwise_and(other, self)

    def __or__(self, other):
        return _ops.bitwise_or(self, other)

    def __ror__(self, other):
        return _ops.bitwise_or(other, self)

    def __xor__(self, other):
        return _ops.bitwise_xor(self, other)

    def __rxor__(self, other):
        return _ops.bitwise_xor(other, self)

    def __eq__(self, other):
        return _ops.equal(self, other)

    def __ne__(self, other):
        return _ops.not_equal(self, other)

    def __lt__(self, other):
        return _ops.less_than(self, other)

    def __le__(self, other):
        return _ops.less_equal(self, other)

    def __gt__(self, other):
        return _ops.greater_than(self, other)

    def __ge__(self, other):
        return _ops.greater_equal(self, other)

    def __getitem__(self, index):
        return _ops.getitem(self, index)

    def __setitem__(self, index, value):
        if isinstance(value, (bool, int, float, complex, np.number, np.bool_)):
            # a Python number is checked as PyTorch checks it: x[0] = nan on an int tensor, or 5+2j on a
            # float one, raises instead of storing a wrong value (tensor values keep numpy's casts)
            value = fit_scalar(value, self._dtype, "Tensor.__setitem__(): the value")
        _ops.setitem_(self, index, value)

    # -- methods that plugins add ------------------------------------------------------------------
    def __getattr__(self, name):
        method = _tensor_method(name)
        if method is None:
            if name.startswith("_"):
                raise AttributeError(f"'Tensor' object has no attribute {name!r}")
            from oarlock._namespace import tensor_missing_message   # names a disabled plugin that has it
            raise AttributeError(tensor_missing_message(name))
        return method.__get__(self, Tensor)

    def __dir__(self):
        from oarlock.registry import default_registry
        return sorted(set(super().__dir__()) | set(default_registry().api["Tensor"]))


def _tensor_method(name):
    if name.startswith("_") and name not in PADDLE_PRIVATE_TENSOR:   # Paddle's few private methods only
        return None
    from oarlock.registry import default_registry
    entry = default_registry().api["Tensor"].get(name)
    if entry is None:
        return None
    setattr(Tensor, name, entry[0])  # cache: the next lookup is an ordinary class attribute
    return entry[0]


def _python_data_dtype(data):
    """Tensor(data)'s dtype when none is given: None (to_tensor decides) for arrays, Tensors and
    complex data; the default float dtype for other Python numbers and lists."""
    if isinstance(data, (np.ndarray, np.generic, Tensor)):
        return None
    try:
        kind = np.asarray(data).dtype.kind
    except (TypeError, ValueError):  # ragged or odd data: to_tensor reports it
        return None
    return None if kind == "c" else get_default_dtype()


def _looks_like_dtype(value) -> bool:
    if isinstance(value, str):
        try:
            convert_dtype(value)
            return True
        except (TypeError, ValueError):
            return False
    return not isinstance(value, Tensor) and value.__class__.__name__ in ("DType", "dtype", "type")


class DeferredZero:
    """A gradient known to be all zeros whose array is not made until `.grad` is read: what an optimizer's
    clear_grad leaves for a gradient nothing else references (autograd.zero_grads), so that zeroing it costs no
    pass over its memory when the next backward stores a new gradient anyway."""

    __slots__ = ("shape", "dtype", "place")

    def __init__(self, shape, dtype, place):
        self.shape, self.dtype, self.place = shape, dtype, place


class VersionCounter:
    """The in-place version of one storage, shared by a tensor and its views. `guard`, normally None, is
    called as guard(tensor) before an op writes into that storage (plugin_api.guard_writes: an async
    checkpoint save snapshots a tensor on its first write instead of copying everything up front)."""

    __slots__ = ("value", "guard")

    def __init__(self, value: int = 0):
        self.value = value
        self.guard = None


def version_counter(t) -> VersionCounter:
    """t's counter, created on first need (a tensor without one is at version 0)."""
    vc = t._vc
    if vc is None:
        vc = t._vc = VersionCounter()
    return vc


def bump_version(t) -> None:
    """Record an in-place write to t's storage (seen by every view sharing it)."""
    version_counter(t).value += 1


class _HookHandle:
    __slots__ = ("_remove",)

    def __init__(self, remove):
        self._remove = remove

    def remove(self):
        if self._remove is not None:
            self._remove()
            self._remove = None


def copy_array(data, source, target):
    """Copy an array between places (devices of one backend, or through the host)."""
    if source.backend is target.backend:
        return target.backend.asarray(data, None, target.index)
    return target.backend.asarray(source.backend.to_host(data), None, target.index)


class _ToPlace(PyLayer):
    """Device copy as a differentiable op: the gradient is copied back."""

    @staticmethod
    def forward(ctx, x, place):
        ctx.source = x._place
        return Tensor._wrap(copy_array(x._data, x._place, place), place)

    @staticmethod
    def backward(ctx, grad):
        return _ToPlace.apply(grad, ctx.source)


def _dlpack_exchange():
    """The names of oarlock.utils.dlpack (a plugin's: every dtype, capsules), or None where none is installed."""
    from oarlock.registry import default_registry
    return default_registry().api["oarlock.utils.dlpack"] or None


def from_dlpack(obj):
    """A Tensor sharing memory with a DLPack-capable object (a numpy/CuPy/torch array or capsule).
    oarlock.utils.dlpack.from_dlpack does it where installed; this is the fallback of a bare core."""
    from oarlock.registry import default_registry
    from oarlock.device import Place
    if isinstance(obj, Tensor):
        return obj
    exchange = _dlpack_exchange()
    if exchange is not None:
        return exchange["from_dlpack"][0](obj)
    device_type, device_id = obj.__dlpack_device__() if hasattr(obj, "__dlpack_device__") else (1, 0)
    for backend in default_registry().backends.values():
        if backend.dlpack_device_type == device_type:
            data = backend.from_dlpack(obj)
            return Tensor._wrap(data, default_registry().parse_place(Place(backend.type, device_id)))
    raise ValueError(f"from_dlpack(): no installed backend handles DLPack device type {device_type}")


_autograd._bind_tensor_type()
