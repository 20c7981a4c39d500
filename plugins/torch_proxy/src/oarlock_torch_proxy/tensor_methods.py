"""torch's Tensor methods on oarlock.Tensor itself: the façade has one tensor type, oarlock's.

The decision: no Tensor subclass. A subclass would have to be re-wrapped on every op result (oarlock ops return
oarlock.Tensor), and oarlock code reading `x.size` would get torch's meaning. Instead the torch methods are put
on oarlock.Tensor when the proxy is first enabled:

- names oarlock's Tensor lacks (`lerp_`, `addcmul_`, `new_tensor`, `stride`, ...) are added as they are;
- names whose meaning differs are resolved by who calls: a module imported under the proxy runs with the
  proxy's builtins dict (hook.PROXY_BUILTINS), so `sys._getframe(1).f_globals["__builtins__"] is
  PROXY_BUILTINS` says "torch code". `x.max(1)` then returns (values, indices), `x.split(2)` cuts pieces of 2,
  `x.numel()` an int, `x.where(c, y)` is where(c, x, y). oarlock code keeps Paddle's meaning;
- where the arguments themselves tell the two apart (`x.gather(1, idx)` vs `x.gather(idx, 1)`,
  `x.index_select(0, idx)`), the arguments decide, whoever calls;
- `x.size` is Paddle's int for oarlock code and, for torch code, a callable int: `x.size()` and `x.size(-1)`
  answer as torch does.
"""

from __future__ import annotations

import sys
from collections import namedtuple

import oarlock
from oarlock.plugin_api import default_registry

from oarlock_torch_proxy.hook import EVERYWHERE, PROXY_BUILTINS

_installed = False
_ValuesIndices = {name: namedtuple(name, ["values", "indices"])
                  for name in ("max", "min", "sort", "median", "mode", "kthvalue", "cummax", "cummin")}


def _torch_globals(g) -> bool:
    """Whether code running with module globals `g` is torch code: a module imported through the proxy (its
    builtins are the proxy's), or, with the proxy on everywhere (scope=None), any module but oarlock's own and
    the array libraries'."""
    return g.get("__builtins__") is PROXY_BUILTINS or (
        EVERYWHERE[0] and not g.get("__name__", "").startswith(("oarlock", "numpy", "ml_dtypes")))


def torch_caller(depth: int = 2) -> bool:
    """Whether the frame `depth` levels up (the caller of the method calling this) is torch code."""
    return _torch_globals(sys._getframe(depth).f_globals)


class Size(tuple):
    """torch.Size: a tuple of ints."""

    def numel(self) -> int:
        n = 1
        for d in self:
            n *= d
        return n

    def __repr__(self):
        return f"torch.Size({list(self)})"


class CallableSize(int):
    """Paddle's `x.size` (the element count) that torch code can also call: `x.size()` -> torch.Size of the
    shape, `x.size(d)` -> the length of dimension d."""

    def __new__(cls, shape):
        n = 1
        for d in shape:
            n *= d
        self = super().__new__(cls, n)
        self._shape = shape
        return self

    def __call__(self, dim=None):
        if dim is None:
            return Size(self._shape)
        return self._shape[dim]


def _reduce_with_indices(name, values_fn, indices_fn):
    """torch's x.max(dim) / x.min(dim): (values, indices); x.max(other) is the elementwise maximum."""
    pair = _ValuesIndices[name]

    def method(self, dim=None, keepdim=False, *, axis=None, out=None):
        if isinstance(dim, oarlock.Tensor):
            return (oarlock.maximum if name == "max" else oarlock.minimum)(self, dim)
        dim = axis if dim is None else dim
        if dim is None:
            return values_fn(self)
        return pair(values_fn(self, dim, keepdim=keepdim), indices_fn(self, dim, keepdim=keepdim))

    return method


def _paddle_attr(name):
    """oarlock's own Tensor.<name> (a function or a property), before the proxy replaces it."""
    entry = default_registry().api["Tensor"].get(name)   # loads the plugins first (no tensor, no device needed)
    if name in oarlock.Tensor.__dict__:
        return oarlock.Tensor.__dict__[name]
    return None if entry is None else entry[0]   # None: no plugin gives oarlock's Tensor that name


def _clash_property(name, torch_method):
    """Tensor.<name> that is a property in Paddle and a method in torch (`x.type`): torch callers get the
    bound method, everyone else the property's value."""
    paddle_prop = _paddle_attr(name)
    if paddle_prop is None:
        return property(lambda self: torch_method.__get__(self, oarlock.Tensor))

    def getter(self):
        if _torch_globals(sys._getframe(1).f_globals):
            return torch_method.__get__(self, oarlock.Tensor)
        return paddle_prop.fget(self)

    return property(getter, paddle_prop.fset, doc=paddle_prop.__doc__)


def _clash_value(name, torch_value):
    """Tensor.<name> that is a method in Paddle and a property in torch (`x.is_sparse`): torch callers read
    torch_value(self), everyone else gets Paddle's bound method."""
    paddle_fn = _paddle_attr(name)
    if paddle_fn is None:
        return property(torch_value)

    def getter(self):
        if _torch_globals(sys._getframe(1).f_globals):
            return torch_value(self)
        return paddle_fn.__get__(self, oarlock.Tensor)

    return property(getter)


def _shape_property():
    """x.shape: torch.Size (a tuple, so `x.shape == (2, 3)` holds) for torch code, Paddle's list otherwise."""
    paddle_shape = _paddle_attr("shape").fget

    def shape(self):
        if _torch_globals(sys._getframe(1).f_globals):
            return Size(paddle_shape(self))
        return paddle_shape(self)

    return property(shape, doc=_paddle_attr("shape").__doc__)


def _size_property():
    """x.size: for torch code the element count as a CallableSize (x.size() / x.size(d) answer as torch's); for
    everyone else Paddle's plain int (an int subclass would not be a Python scalar to oarlock's dispatcher)."""
    paddle_size = _paddle_attr("size").fget

    def size(self):
        if _torch_globals(sys._getframe(1).f_globals):
            return CallableSize(paddle_shape_of(self))
        return paddle_size(self)

    paddle_shape_of = _paddle_attr("shape").fget
    return property(size, doc=_paddle_attr("size").__doc__)


def _clash(name, torch_fn):
    """Tensor.<name>: torch_fn for torch callers, oarlock's own method for everyone else."""
    paddle_fn = _paddle_attr(name)
    if paddle_fn is None:
        return torch_fn

    def method(self, *args, **kwargs):
        if _torch_globals(sys._getframe(1).f_globals):
            return torch_fn(self, *args, **kwargs)
        return paddle_fn(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = f"Tensor.{name}: torch's meaning when called from code run through the torch proxy, " \
                     f"Paddle's otherwise.\n\n{paddle_fn.__doc__ or ''}"
    return method


def _by_args(name, is_torch_call, torch_fn):
    """Tensor.<name> whose torch and Paddle calls differ in their arguments' types."""
    paddle_fn = _paddle_attr(name)
    if paddle_fn is None:
        return torch_fn

    def method(self, *args, **kwargs):
        if is_torch_call(args, kwargs):
            return torch_fn(self, *args, **kwargs)
        return paddle_fn(self, *args, **kwargs)

    method.__name__ = name
    method.__doc__ = paddle_fn.__doc__
    return method


def _int_first(args, kwargs):
    """torch's x.gather(dim, index) / index_select(dim, index) / scatter(dim, ...) put the dimension first; Paddle's
    put the index first, and Paddle 3.2 also takes `dim=` as an alias of its axis, so an all-keyword call with
    `dim=` is torch's only when torch code makes it (the frame above the method)."""
    if args:
        return isinstance(args[0], int)
    return "dim" in kwargs and _torch_globals(sys._getframe(2).f_globals)


def _split(self, split_size_or_sections, dim=0):
    if isinstance(split_size_or_sections, int):
        length = self.shape[dim]
        sizes = [split_size_or_sections] * (length // split_size_or_sections)
        if length % split_size_or_sections:
            sizes.append(length % split_size_or_sections)
        return tuple(oarlock.split(self, sizes, axis=dim))
    return tuple(oarlock.split(self, list(split_size_or_sections), axis=dim))


def _sort(self, dim=-1, descending=False, stable=False):
    indices = oarlock.argsort(self, axis=dim, descending=descending, stable=True)
    return _ValuesIndices["sort"](oarlock.take_along_axis(self, indices, dim), indices)


def _median(self, dim=None, keepdim=False):
    """torch's median: the lower of the two middle values (Paddle averages them), with its index."""
    if dim is None:
        flat = self.flatten()
        return flat.sort()[(flat.shape[0] - 1) // 2]
    values, indices = _sort(self, dim)
    k = (self.shape[dim] - 1) // 2
    pick = oarlock.full([*self.shape[:dim % self.ndim], 1, *self.shape[dim % self.ndim + 1:]], k, dtype="int64")
    vals, idx = oarlock.take_along_axis(values, pick, dim), oarlock.take_along_axis(indices, pick, dim)
    if not keepdim:
        vals, idx = vals.squeeze(dim), idx.squeeze(dim)
    return _ValuesIndices["median"](vals, idx)


def _where(self, condition, other):
    return oarlock.where(condition, self, other)


def _numel(self):
    return CallableSize(self.shape).real


def _gather(self, dim, index, *, sparse_grad=False):
    return oarlock.take_along_axis(self, index, dim, broadcast=False)


def _index_select(self, dim, index):
    return oarlock.index_select(self, index, axis=dim)


def _scatter(self, dim, index, src=None, *, value=None, reduce=None):
    from oarlock_torch_proxy.facade import scatter
    return scatter(self, dim, index, src if src is not None else value, reduce=reduce)


def _scatter_add(self, dim, index, src):
    from oarlock_torch_proxy.facade import scatter_add
    return scatter_add(self, dim, index, src)


def _unbind(self, dim=0):
    return tuple(oarlock.unbind(self, axis=dim))


def _var_std(name):
    paddle_fn = _paddle_attr(name)

    def method(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None):
        dim = axis if dim is None else dim
        if correction is not None and unbiased is not None:
            raise TypeError(f"Tensor.{name}(): pass unbiased or correction, not both")
        if correction is not None and correction not in (0, 1):
            from oarlock_torch_proxy.missing import not_implemented
            not_implemented(f"torch.Tensor.{name}", f"with correction={correction!r}")
        unbiased = (correction != 0) if correction is not None else (True if unbiased is None else unbiased)
        return paddle_fn(self, dim, unbiased=unbiased, keepdim=keepdim)

    method.__name__ = name
    return method


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False):
    from oarlock_torch_proxy.facade import tensor
    return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)


def _pointwise_args(tensor1, tensor2, rest, value):
    """addcmul/addcdiv arguments, including torch 1.x's (value, tensor1, tensor2) overload."""
    if not isinstance(tensor1, oarlock.Tensor) and rest:
        return tensor2, rest[0], tensor1
    return tensor1, tensor2, value


def _addcmul_(self, tensor1, tensor2, *rest, value=1):
    t1, t2, value = _pointwise_args(tensor1, tensor2, rest, value)
    return self.add_(t1 * t2 * value)


def _addcdiv_(self, tensor1, tensor2, *rest, value=1):
    t1, t2, value = _pointwise_args(tensor1, tensor2, rest, value)
    return self.add_(t1 / t2 * value)


def _addcmul(self, tensor1, tensor2, *rest, value=1):
    t1, t2, value = _pointwise_args(tensor1, tensor2, rest, value)
    return self + t1 * t2 * value


def _addcdiv(self, tensor1, tensor2, *rest, value=1):
    t1, t2, value = _pointwise_args(tensor1, tensor2, rest, value)
    return self + t1 / t2 * value


def _with_alpha(name):
    """Tensor.add/sub(_) taking torch's alpha as a 0-d Tensor too, and the old add_(alpha, other) overload
    that optimizers written for torch 1.x still call."""
    paddle_fn = _paddle_attr(name)

    def method(self, other, *args, alpha=None, **kwargs):
        if args and isinstance(other, (int, float)) and isinstance(args[0], oarlock.Tensor):
            other, alpha, args = args[0], other, args[1:]   # add_(Number alpha, Tensor other)
        if isinstance(alpha, oarlock.Tensor):
            other, alpha = other * alpha, None
        if alpha is None:
            return paddle_fn(self, other, *args, **kwargs)
        return paddle_fn(self, other, *args, alpha=alpha, **kwargs)

    method.__name__ = name
    method.__doc__ = paddle_fn.__doc__
    return method


def _new(self, *args, **kwargs):
    """The legacy x.new(...): an empty tensor of x's dtype (x.new()), of a size (x.new(2, 3)), or from data."""
    if not args:
        return oarlock.zeros([0], dtype=self.dtype)
    if len(args) == 1 and not isinstance(args[0], int):
        if isinstance(args[0], (list, tuple)) and all(isinstance(a, int) for a in args[0]) and \
                kwargs.get("size", True):
            return oarlock.tensor(list(args[0]), dtype=self.dtype)
        return oarlock.tensor(args[0], dtype=self.dtype)
    return oarlock.zeros(list(args), dtype=self.dtype)


def _resize_as_(self, other):
    """x.resize_as_(y): x takes y's shape in place (new storage; torch leaves the values undefined: zeros)."""
    from oarlock.plugin_api import array_of, rebind
    rebind(self, array_of(oarlock.zeros(other.shape, dtype=self.dtype)))
    return self


def _lerp_(self, end, weight):
    return self.copy_(oarlock.lerp(self, end, weight))


def _stride(self, dim=None):
    strides, acc = [], 1
    for d in reversed(self.shape):
        strides.insert(0, acc)
        acc *= d
    return tuple(strides) if dim is None else strides[dim]


def _in_place(fn_name):
    def method(self, *args, **kwargs):
        return self.copy_(getattr(oarlock, fn_name)(self, *args, **kwargs))

    method.__name__ = fn_name + "_"
    return method


def _clamp_(self, min=None, max=None):
    return self.copy_(oarlock.clip(self, min, max))


def _type(self, dtype=None, non_blocking=False):
    from oarlock_torch_proxy.facade.dtypes import resolve_type, type_string
    if dtype is None:
        return type_string(self)
    return self.astype(resolve_type(dtype))


def _retain_grad(self):
    return None   # oarlock keeps the gradient of every tensor that backward reaches and asks for it


def _masked_scatter(self, mask, source):
    mask = oarlock.broadcast_to(mask, self.shape)
    flat = self.flatten().clone()
    positions = oarlock.nonzero(mask.flatten()).flatten()
    flat[positions] = source.flatten()[:positions.shape[0]]
    return flat.reshape(self.shape)


def _index_add(self, dim, index, source, *, alpha=1):
    return oarlock.index_add(self, index, dim, source * alpha)


def _unfold(self, dimension, size, step):
    """torch's Tensor.unfold: windows of `size` every `step` along `dimension`, as a new last dimension."""
    dim = dimension % self.ndim
    starts = oarlock.arange(0, self.shape[dim] - size + 1, step, dtype="int64")
    index = (starts.unsqueeze(1) + oarlock.arange(0, size, dtype="int64").unsqueeze(0)).flatten()
    picked = oarlock.index_select(self, index, axis=dim)
    shape = [*self.shape[:dim], starts.shape[0], size, *self.shape[dim + 1:]]
    return oarlock.moveaxis(picked.reshape(shape), dim + 1, -1)


def _backward(paddle_backward):
    """Tensor.backward with torch's arguments (gradient, retain_graph, create_graph); Paddle's positional
    (grad_tensor, retain_graph) call is the same call."""

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None, *, grad_tensor=None):
        gradient = grad_tensor if gradient is None else gradient
        if inputs is not None:
            from oarlock_torch_proxy.missing import not_implemented
            not_implemented("torch.Tensor.backward", "with inputs=")
        if create_graph:   # gradients that are themselves differentiable (Hessian-vector products)
            seed = oarlock.ones_like(self) if gradient is None else gradient
            oarlock.autograd.run_backward([self], [seed], retain_graph=True, create_graph=True)
            return
        paddle_backward(self, gradient, retain_graph=bool(retain_graph))

    backward.__doc__ = paddle_backward.__doc__
    return backward


def _missing_getattr(core_getattr):
    """Tensor.__getattr__ that reports a torch method the façade lacks to torch callers as
    NotImplementedError naming torch.Tensor.<name> (still an AttributeError, for hasattr)."""

    def __getattr__(self, name):
        try:
            return core_getattr(self, name)
        except AttributeError:
            if not _torch_globals(sys._getframe(1).f_globals) or name.startswith("_"):
                raise
        from oarlock_torch_proxy.hook import MissingAttribute
        from oarlock_torch_proxy.missing import caller_site
        raise MissingAttribute(f"torch.Tensor.{name} is not implemented by oarlock's torch proxy (used at "
                               f"{caller_site(2)}); please report it").named(f"torch.Tensor.{name}")

    return __getattr__


def install() -> None:
    """Put torch's methods on oarlock.Tensor (once; see the module docstring)."""
    global _installed
    if _installed:
        return
    T = oarlock.Tensor
    clashes = {
        "max": _reduce_with_indices("max", oarlock.max, oarlock.argmax),
        "min": _reduce_with_indices("min", oarlock.min, oarlock.argmin),
        "sort": _sort, "median": _median, "split": _split, "where": _where, "numel": _numel,
    }
    for name, torch_fn in clashes.items():
        setattr(T, name, _clash(name, torch_fn))
    for name, torch_fn in {"gather": _gather, "index_select": _index_select, "scatter": _scatter,
                           "scatter_add": _scatter_add}.items():
        setattr(T, name, _by_args(name, _int_first, torch_fn))
    for name in ("var", "std"):
        if _paddle_attr(name) is not None:
            setattr(T, name, _var_std(name))
    T.unbind = _unbind
    for name in ("add_", "sub_"):   # the in-place forms: optimizers written for torch 1.x use the old overloads
        if _paddle_attr(name) is not None:
            setattr(T, name, _with_alpha(name))
    added = {"new_tensor": _new_tensor, "addcmul_": _addcmul_, "addcdiv_": _addcdiv_, "lerp_": _lerp_,
             "stride": _stride, "clamp_": _clamp_, "clip_": _clamp_, "retain_grad": _retain_grad,
             "masked_scatter": _masked_scatter, "index_add": _index_add,
             "nelement": lambda self: CallableSize(self.shape).real,
             "addcmul": _addcmul, "addcdiv": _addcdiv, "new": _new, "resize_as_": _resize_as_,
             "log_softmax": lambda self, dim=None, dtype=None: oarlock.nn.functional.log_softmax(
                 self if dtype is None else self.astype(dtype), axis=-1 if dim is None else dim),
             "cumprod": lambda self, dim, dtype=None: __import__(
                 "oarlock_torch_proxy.facade.ops", fromlist=["cumprod"]).cumprod(self, dim),
             "select": lambda self, dim, index: oarlock.index_select(
                 self, oarlock.to_tensor([index % self.shape[dim]]), axis=dim).squeeze(dim),
             "bernoulli_": lambda self, p=0.5, generator=None: self.copy_(
                 oarlock.bernoulli(oarlock.full(self.shape, p, dtype="float32")).astype(self.dtype)),
             "arctan": lambda self: oarlock.atan(self), "arctanh": lambda self: oarlock.atanh(self),
             "clamp_min": lambda self, min: oarlock.clip(self, min=min),
             "clamp_max": lambda self, max: oarlock.clip(self, max=max),
             "clamp_min_": lambda self, min: _clamp_(self, min=min),
             "clamp_max_": lambda self, max: _clamp_(self, max=max),
             "get_device": lambda self: -1 if not self.place.is_gpu_place() else self.place.index,
             "unfold": _unfold, "movedim": lambda self, source, destination: oarlock.moveaxis(self, source,
                                                                                             destination),
             "reshape_as": lambda self, other: self.reshape(other.shape),
             "sgn_": _in_place("sign"), "sign_": _in_place("sign"), "atan2_": _in_place("atan2"),
             "normal_": lambda self, mean=0.0, std=1.0, generator=None: self.copy_(
                 oarlock.normal(mean, std, self.shape).astype(self.dtype)),
             # C's fmod: the remainder takes the dividend's sign (Paddle's mod takes the divisor's)
             "fmod": lambda self, other: self - (self / other).trunc() * other}
    own = default_registry().api["Tensor"]
    for name, fn in added.items():
        if name not in T.__dict__ and name not in own:   # oarlock's own (clip_, ...) stays
            setattr(T, name, fn)
    T.type = _clash_property("type", _type)
    T.shape = _shape_property()
    T.is_sparse = _clash_value("is_sparse", lambda self: False)
    for name in ("is_meta", "is_quantized", "is_nested", "is_mkldnn"):
        if name not in T.__dict__:
            setattr(T, name, property(lambda self: False))
    if "itemsize" not in T.__dict__:
        T.itemsize = property(lambda self: self.element_size())
        T.nbytes = property(lambda self: self.element_size() * CallableSize(self.shape).real)
    T.is_cuda = property(lambda self: self.place.is_gpu_place())
    T.size = _size_property()
    T.backward = _backward(T.__dict__["backward"])
    T.__getattr__ = _missing_getattr(T.__dict__["__getattr__"])
    _installed = True
