"""The operator dispatcher: OpDef, the op registrar plugins use, and the call path.

An op is declared once with a Python-style signature string:

    ops.define("add(x: TensorOrScalar, y: TensorOrScalar) -> Tensor",
               public=["oarlock.add", "Tensor.add"], promote=True, grad=add_grad)

From the signature the dispatcher generates the public function (argument
aliases, converters for attributes, `name=None`), and every call goes:
normalise the tensor arguments -> common place -> dtype promotion (through the
differentiable `cast` op) -> kernel lookup by (op, device type, dtype) ->
kernel(xp, *arrays, **attrs) -> wrap outputs -> record a graph node when grad
mode is on and some input wants a gradient.

Parameter annotations: Tensor, TensorOrScalar (a Python number becomes a
tensor of the promoted dtype), OptTensor (may be None), TensorList (a list of
tensors, passed to the kernel as a list of arrays); attributes: int, float,
bool, Scalar, Axis, Shape, DType, Place, str, Any; "|None" allows None.
Attributes after a bare `*` are keyword-only and rarely given (torch's
`alpha=`, `rounding_mode=`): a call that gives none of them takes the fast
path and the kernel's defaults, so they cost the common call nothing.
"""

from __future__ import annotations

import ast
import numbers
import threading
import types

import numpy as np

from oarlock import dtypes as _dtypes
from oarlock.registry import GENERIC, OP_LIBRARY, Registry, library_name
from oarlock._tensor import Tensor, bump_version, version_counter
from oarlock.autograd import GRAD_MODE, OBSERVER, RecordSpec, record
from oarlock._op_errors import kernel_error, scalar_error

__all__ = ["OpDef", "OpRegistrar", "OpError", "InplaceError", "define_frontend", "AUTOCAST", "set_autocast",
           "set_observer", "write_out"]

TENSOR_KINDS = ("Tensor", "TensorOrScalar", "OptTensor", "TensorList")
_MISSING = object()
_UNSET = object()
_SCALAR_TYPES = (bool, int, float, complex, np.generic)
_KIND_ORDER = {"bool": 0, "int": 1, "float": 2, "complex": 3}


class OpError(ValueError):
    """Bad input to an op, or a kernel that rejected its input; the message names op and arguments."""


class InplaceError(RuntimeError, ValueError):
    """An in-place write autograd cannot allow (a leaf that requires grad, or a view of one). A RuntimeError as
    in PyTorch and a ValueError as Paddle's InvalidArgument, so code written for either catches it."""


class Param:
    __slots__ = ("name", "annotation", "default", "is_tensor", "optional", "base", "varargs", "kwonly")

    def __init__(self, name, annotation, default, varargs=False, kwonly=False):
        self.name = name
        self.kwonly = kwonly
        self.annotation = annotation or "Any"
        self.default = default
        parts = [p.strip() for p in self.annotation.split("|")]
        self.optional = "None" in parts
        self.base = next((p for p in parts if p != "None"), "Any")
        self.is_tensor = self.base in TENSOR_KINDS
        self.varargs = varargs


def _parse_signature(signature: str):
    tree = ast.parse(f"def {signature.strip()}: pass").body[0]
    args = tree.args
    params = []
    positional = args.args
    defaults = [_MISSING] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for a, d in zip(positional, defaults):
        params.append(Param(a.arg, ast.unparse(a.annotation) if a.annotation else None,
                            _MISSING if d is _MISSING else ast.literal_eval(d)))
    if args.vararg is not None:
        raise ValueError(f"signature {signature!r}: write varargs as a Shape parameter with varargs=True")
    for a, d in zip(args.kwonlyargs, args.kw_defaults):
        if d is None or a.annotation is not None and ast.unparse(a.annotation).split("|")[0].strip() in TENSOR_KINDS:
            raise ValueError(f"signature {signature!r}: keyword-only parameter {a.arg!r} must be an attribute "
                             f"with a default (keyword-only attributes are the rarely given ones)")
        params.append(Param(a.arg, ast.unparse(a.annotation) if a.annotation else None, ast.literal_eval(d),
                            kwonly=True))
    returns = ast.unparse(tree.returns) if tree.returns else "Tensor"
    return tree.name, params, returns


def _n_outputs(returns: str):
    if returns == "Tensor":
        return 1
    if returns == "TensorList":
        return None  # variable
    if returns.startswith("tuple[") or returns.startswith("("):
        return len([p for p in returns.strip("()").replace("tuple[", "").rstrip("]").split(",") if p.strip()])
    raise ValueError(f"unknown return annotation {returns!r}; use Tensor, TensorList or tuple[Tensor, ...]")


class OpDef:
    """One operator: its signature, public names, aliases, dtype policy and autograd rule.

    - public: qualified names it is exported under ("oarlock.concat", "oarlock.cat",
      "Tensor.sum", "oarlock.nn.functional.relu"); a bare name means "oarlock.<name>".
    - aliases: {"input": "x", "dim": "axis"}; giving both a name and its alias is an error.
    - saves: what backward needs ("x", "out", "out1"); "x:y" saves x for y's gradient alone, so that an
      in-place write to x after the call is an error only when y takes a gradient (PyTorch's rule).
    - grad: rule(ctx, *grad_outputs) -> one gradient (or None) per tensor input, flattened
      over TensorList inputs; ctx.saved holds what `saves` names ("x", "out", "out1").
    - promote: True (all tensor inputs) or the names of the inputs that share a dtype.
    - to_float: integer and bool inputs compute in the default float dtype (exp, sqrt, mean).
    - dtypes: the dtype kinds accepted ("bool", "int", "float", "complex"), None for all.
    - nondiff: tensor inputs that never get a gradient (indices, masks).
    - random: the kernel receives `generator=` (the device's random generator).
    - amp: the AMP cast policy ("white", "black", "promote" or None).
    - intermediate: how many extra outputs the kernel returns after the declared ones (Paddle's
      intermediate outputs: softmax probabilities, a dropout mask). They are not returned to the
      caller; `saves` may name them (outN, numbered after the declared outputs) so backward can use them.
    - inplace: the tensor input whose array the kernel writes into (setitem_); the call returns
      that tensor itself, its version counter moved on. Under autograd the write is recorded like the
      out-of-place op (the rule sees the input's old value and identity) and the tensor takes the
      node; a write into a view also rebases the view's base (see _run_inplace).
    - writes: other tensor inputs (or tensor-list inputs) the kernel of an `inplace` op also writes
      into (an optimizer step's moments): their write guards run before the kernel and their version
      counters move on after it, as the target's do.
    - inplace_of: an in-place variant of that (already defined) op: no kernel of its own, the base
      op's kernel computes the result, which is written into the `inplace` input (kind-losing writes
      refused); rule, saves and nondiff come from the base op (exp_, relu_, scale_, clip_ ...).
    - grad_of: take rule, saves and nondiff from that op (an in-place op with its own kernel: add_).
    - view: the output may share the first input's memory (reshape, getitem, transpose...); when it
      does, it shares the input's version counter and remembers how to remake itself from the base,
      so that an in-place write through it reaches the base's gradient.
    """

    def __init__(self, signature, *, public=(), aliases=None, grad=None, saves=(), promote=False,
                 to_float=False, dtypes=None, nondiff=(), random=False, amp=None, doc=None,
                 varargs=None, inplace=None, intermediate=0, inplace_of=None, grad_of=None, view=False, writes=()):
        self.name, self.params, self.returns = _parse_signature(signature)
        self.signature = signature
        self.n_outputs = _n_outputs(self.returns)
        self.public = tuple(p if "." in p else f"oarlock.{p}" for p in (public or (self.name,)))
        self.display = self.public[0] if self.public else f"oarlock.{self.name}"
        self.aliases = dict(aliases or {})
        self.rule = grad
        self.tensor_params = [p for p in self.params if p.is_tensor]
        self.attr_params = [p for p in self.params if not p.is_tensor]
        names = [p.name for p in self.params]
        for alias, target in self.aliases.items():
            if target not in names:
                raise ValueError(f"op {self.name!r}: alias {alias!r} points at unknown parameter {target!r}")
        tensor_names = [p.name for p in self.tensor_params]
        if promote is True:
            promote = tensor_names
        self.promote = tuple(i for i, n in enumerate(tensor_names) if n in (promote or ()))
        self.to_float = to_float
        self.dtypes = tuple(dtypes) if dtypes else None
        self.nondiff = tuple(i for i, n in enumerate(tensor_names) if n in nondiff)
        self.inplace = None if inplace is None else tensor_names.index(inplace)
        unknown = [n for n in writes if n not in tensor_names]
        if unknown or (writes and inplace is None):
            raise ValueError(f"op {self.name!r}: writes={list(writes)} must name tensor inputs of an inplace op"
                             + (f"; unknown: {unknown}" if unknown else ""))
        self.writes = tuple(tensor_names.index(n) for n in writes)
        self.intermediate = intermediate
        self.inplace_of, self.grad_of, self.view = inplace_of, grad_of, view
        self.saves, self.nondiff_names, self.promote_names = tuple(saves), tuple(nondiff), promote
        self.random = random
        self.amp = amp
        self.varargs = varargs
        self.plugin = None
        self.creation = not self.tensor_params
        # attributes the frontend handles itself and never passes to kernels
        self.frontend_attrs = {"place", "device", "stop_gradient", "requires_grad", "pin_memory"}
        self._save_plan = tuple(self._plan_save(s, tensor_names) for s in saves)
        # "x:y" saves x for y's gradient only: x's version is checked only when y takes a gradient
        self.save_needs = tuple(tensor_names.index(s.split(":")[1]) if ":" in s else None for s in saves)
        self.saves_inputs = any(kind == "in" for kind, _ in self._save_plan)
        self.saves_outputs = any(kind == "out" for kind, _ in self._save_plan)
        self.__doc__ = doc
        self.registry: Registry | None = None
        self.fast: dict = {}  # (place, dtype) -> (kernel, xp, array type), filled by the slow path
        # a fixed number of outputs (a tuple of them: a fused backward's gradients) takes the fast path too
        self.fast_eligible = (bool(self.tensor_params) and self.n_outputs is not None and not random
                              and (self.n_outputs == 1 or not view)
                              and all(p.base in ("Tensor", "TensorOrScalar", "OptTensor")
                                      for p in self.tensor_params)
                              and not any(p.name in self.frontend_attrs for p in self.attr_params)
                              and inplace is None and not intermediate)

    @staticmethod
    def _plan_save(name, tensor_names):
        name = name.split(":")[0]
        if name in tensor_names:
            return ("in", tensor_names.index(name))
        if name == "out":
            return ("out", 0)
        if name.startswith("out") and name[3:].isdigit():
            return ("out", int(name[3:]))
        raise ValueError(f"saves: {name!r} is neither a tensor input ({', '.join(tensor_names)}) nor 'outN'")

    def accepted(self) -> str:
        """A description of the parameters for error messages."""
        parts = []
        reverse = {}
        for alias, target in self.aliases.items():
            reverse.setdefault(target, []).append(alias)
        for p in self.params:
            alias = f" (alias {', '.join(reverse[p.name])})" if p.name in reverse else ""
            parts.append(f"{p.name}: {p.annotation}{alias}")
        return ", ".join(parts)

    def __repr__(self):
        return f"OpDef({self.signature!r}, plugin={self.plugin!r})"


# -- attribute converters: each returns the canonical value or raises naming what it got -----------

def _bad(op, param, accepts, value):
    return TypeError(f"{op.display}(): argument '{param.name}' must be {accepts}, "
                     f"got {type(value).__name__} {value!r}")


def _to_int(op, p, v):
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    raise _bad(op, p, "an int", v)


def _to_float(op, p, v):
    if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)):
        return float(v)
    raise _bad(op, p, "a float", v)


def _to_bool(op, p, v):
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise _bad(op, p, "a bool", v)


def _to_scalar(op, p, v):
    if isinstance(v, _SCALAR_TYPES):
        return v.item() if isinstance(v, np.generic) else v
    if isinstance(v, Tensor) and v.size == 1:
        return v.item()
    raise _bad(op, p, "a Python number", v)


def _int_list(op, p, v, accepts):
    if isinstance(v, Tensor):
        if v.dtype.kind != "int":
            raise _bad(op, p, accepts, v)
        v = v.tolist()
        v = [v] if isinstance(v, int) else v
    if isinstance(v, (list, tuple)):
        out = []
        for item in v:
            if isinstance(item, Tensor) and item.size == 1 and item.dtype.kind == "int":
                item = item.item()
            if not isinstance(item, (int, np.integer)) or isinstance(item, (bool, np.bool_)):
                raise _bad(op, p, accepts, v)
            out.append(int(item))
        return tuple(out)
    raise _bad(op, p, accepts, v)


def _to_axis(op, p, v):
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return int(v)
    return _int_list(op, p, v, "an int or a list of ints")


def _to_shape(op, p, v):
    if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
        return (int(v),)
    return _int_list(op, p, v, "a list or tuple of ints (a shape)")


def _to_dtype(op, p, v):
    try:
        return _dtypes.convert_dtype(v)
    except (TypeError, ValueError):
        raise TypeError(f"{op.display}(): argument '{p.name}' must be a dtype (e.g. 'float32' or "
                        f"oarlock.float32), got {type(v).__name__} {v!r}") from None


def _to_place(op, p, v):
    return op.registry.parse_place(v, what=f"{op.display}(): argument '{p.name}'")


def _to_str(op, p, v):
    if isinstance(v, str):
        return v
    raise _bad(op, p, "a str", v)


CONVERTERS = {"int": _to_int, "float": _to_float, "bool": _to_bool, "Scalar": _to_scalar, "Axis": _to_axis,
              "Shape": _to_shape, "DType": _to_dtype, "Place": _to_place, "str": _to_str}


def _convert_attr(op, p, value):
    if value is None and (p.optional or p.default is None):
        return None
    conv = CONVERTERS.get(p.base)
    return value if conv is None else conv(op, p, value)


# -- frontend generation ---------------------------------------------------------------------------

def _immutable_default(op, p) -> bool:
    """Whether p's default converts, without the registry, to a value calls may share (not a list)."""
    if p.default is _MISSING or p.base == "Place":
        return False
    try:
        converted = _convert_attr(op, p, p.default)
    except Exception:
        return False
    return converted is None or isinstance(converted, (bool, int, float, complex, str, tuple, _dtypes.DType))


def _take_alias(op, kw, alias, current, target):
    value = kw.pop(alias)
    if current is not _UNSET:
        raise TypeError(f"{op.display}(): got both '{target}' and its alias '{alias}'; pass only one")
    return value


def _unexpected(op, kw):
    return TypeError(f"{op.display}() got unexpected keyword argument(s) {', '.join(map(repr, kw))}; "
                     f"it accepts {op.accepted()}")


def _missing(op, name):
    return TypeError(f"{op.display}() missing required argument '{name}'; it accepts {op.accepted()}")


def _split_varargs(op, first, more, n_after):
    """zeros(2, 3) and zeros([2, 3], 'float32'): leading ints join the shape, the rest bind in order."""
    if isinstance(first, (int, np.integer)) and not isinstance(first, bool):
        k = 0
        while k < len(more) and isinstance(more[k], (int, np.integer)) and not isinstance(more[k], bool):
            k += 1
        first, more = (first, *more[:k]), more[k:]
    if len(more) > n_after:
        raise TypeError(f"{op.display}() takes at most {n_after + 1} positional arguments after the shape; "
                        f"got {len(more) + 1}")
    return first, list(more) + [_UNSET] * (n_after - len(more))


def define_frontend(op: OpDef, apply_fn):
    """Generate the public Python function of an op from its signature (fast: no inspect.bind)."""
    aliased = set(op.aliases.values())
    sig = []
    varargs_at = None
    rare = [p for p in op.params if p.kwonly]   # keyword-only attributes: given rarely, kept off the fast path
    for i, p in enumerate(op.params):
        if p.kwonly:
            continue
        if op.varargs == p.name:
            varargs_at = i
        after_varargs = varargs_at is not None and i > varargs_at
        if p.name in aliased or p.default is _MISSING or after_varargs:
            sig.append(f"{p.name}=_UNSET")
        else:
            sig.append(f"{p.name}=_D_{p.name}")
        if varargs_at == i:
            sig.append("*_more")
    if "name" not in [p.name for p in op.params]:
        # keyword-only, so a stray extra positional argument is an error instead of landing in `name`
        sig.append("name=None" if varargs_at is not None else "*, name=None")
    sig.append("**_kw")
    body = ["    _rare = None"] if rare else []
    if varargs_at is not None:
        rest = [p.name for p in op.params[varargs_at + 1:] if not p.kwonly]
        body.append("    if _more:")
        body.append(f"        {op.varargs}, _rest = _split_varargs(_op, {op.varargs}, _more, {len(rest)})")
        for k, n in enumerate(rest):
            body.append(f"        if _rest[{k}] is not _UNSET:")
            message = f"{op.display}() got multiple values for argument '{n}'"
            body.append(f"            if {n} is not _UNSET: raise TypeError({message!r})")
            body.append(f"            {n} = _rest[{k}]")
    body.append("    if _kw:")
    body.append(f"        if 'out' in _kw: return write_out(_op, _kw.pop('out'), {_recall(op)})")
    for alias, target in op.aliases.items():
        body.append(f"        if {alias!r} in _kw: {target} = _take_alias(_op, _kw, {alias!r}, {target}, {target!r})")
    for p in rare:
        body.append(f"        if {p.name!r} in _kw: _rare = _rare or {{}}; "
                    f"_rare[{p.name!r}] = _convert_attr(_op, _P_{p.name}, _kw.pop({p.name!r}))")
    body.append("        if _kw: raise _unexpected(_op, _kw)")
    for p in op.params:
        if p.kwonly:
            continue
        if p.default is _MISSING:
            body.append(f"    if {p.name} is _UNSET: raise _missing(_op, {p.name!r})")
        elif p.name in aliased or (varargs_at is not None and op.params.index(p) > varargs_at):
            body.append(f"    if {p.name} is _UNSET: {p.name} = _D_{p.name}")
    for p in op.attr_params:
        if p.base in CONVERTERS and not p.kwonly:
            if _immutable_default(op, p):   # the default, converted once: most calls pass it
                body.append(f"    {p.name} = _C_{p.name} if {p.name} is _D_{p.name} else "
                            f"_convert_attr(_op, _P_{p.name}, {p.name})")
            else:
                body.append(f"    {p.name} = _convert_attr(_op, _P_{p.name}, {p.name})")
    tensors = ", ".join(p.name for p in op.tensor_params)
    attrs = ", ".join(f"{p.name!r}: " + (f"(_rare.get({p.name!r}, _D_{p.name}) if _rare else _D_{p.name})"
                                         if p.kwonly else p.name) for p in op.attr_params)
    if op.fast_eligible:
        fast = _fast_path_lines(op)
        body.extend(["    if _rare is None:", *("    " + line for line in fast)] if rare else fast)
    body.append(f"    return _apply(_op, ({tensors}{',' if op.tensor_params else ''}), {{{attrs}}})")
    header = f"def {op.name}({', '.join(sig)}):\n"
    source = header + "\n".join(body) + "\n"
    # while an observer is installed (set_observer) the frontend runs this code instead, which reports the
    # whole call around the plain body: swapping __code__ leaves the unobserved call without any test
    observed = f"    return _observe(_op, _plain, {_forward(op, varargs_at)})\n"
    namespace = {"_UNSET": _UNSET, "_op": op, "_apply": apply_fn, "_T": Tensor, "_wrap": Tensor._wrap,
                 "_observe": _observe, "_plain": None, "_observed_code": None, "_observed_source": header + observed,
                 "_GM": GRAD_MODE, "_AC": AUTOCAST, "_ACT": AUTOCAST_THREADS, "_fast": op.fast, "_record": record,
                 "_link_view": _link_view, "_take_alias": _take_alias,
                 "_unexpected": _unexpected, "_missing": _missing, "_convert_attr": _convert_attr,
                 "_split_varargs": _split_varargs}
    for p in op.params:
        namespace[f"_D_{p.name}"] = None if p.default is _MISSING else p.default
        namespace[f"_P_{p.name}"] = p
        if p.base in CONVERTERS and _immutable_default(op, p):
            namespace[f"_C_{p.name}"] = _convert_attr(op, p, p.default)
    namespace["write_out"] = write_out
    namespace["_FA"] = {p.name: namespace[f"_D_{p.name}"] for p in op.attr_params}
    exec(compile(source, f"<oarlock op {op.name}>", "exec"), namespace)
    fn = namespace[op.name]
    namespace["_self"] = fn
    fn.__doc__ = op.__doc__ or f"{op.display}{op.signature[len(op.name):]}"
    fn.__qualname__ = op.name
    fn.__module__ = "oarlock"
    fn.opdef = op
    fn.__source__ = source
    with _OBSERVER_LOCK:   # not between set_observer's look at the observer and its swaps
        _FRONTENDS.append(namespace)
        if OBSERVER.current is not None:
            _swap_code(namespace, observed=True)
    return fn


def _forward(op, varargs_at) -> str:
    """Source of the (args, kwargs) a frontend passes on to its unobserved body: its parameters
    positionally up to varargs, then the varargs, then the rest by keyword."""
    names = [p.name for p in op.params if not p.kwonly]
    cut = len(names) if varargs_at is None else varargs_at + 1
    positional = names[:cut] + (["*_more"] if varargs_at is not None else [])
    keywords = [f"{n!r}: {n}" for n in names[cut:] + ([] if "name" in names else ["name"])]
    return f"({', '.join(positional)}{',' if positional else ''}), {{{', '.join(keywords + ['**_kw'])}}}"


_FRONTENDS: list = []   # the globals of every generated frontend (its function is "_self"): see set_observer


def _swap_code(namespace, observed: bool):
    """Give the frontend its observed code (compiled on first need, with `_plain`, a copy of the frontend
    running the plain body, for it to call) or its plain code back."""
    fn = namespace["_self"]
    if namespace["_plain"] is None:
        plain = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        plain.__kwdefaults__ = fn.__kwdefaults__
        namespace["_plain"] = plain
        scratch = dict(namespace)
        exec(compile(namespace["_observed_source"], f"<oarlock op {namespace['_op'].name}>", "exec"), scratch)
        namespace["_observed_code"] = scratch[fn.__name__].__code__
    fn.__code__ = namespace["_observed_code"] if observed else namespace["_plain"].__code__


def _observe(op, plain, args, kwargs):
    observer = OBSERVER.current
    if observer is None:  # removed by another thread while this call was starting
        return plain(*args, **kwargs)
    token = observer.begin(op, args)
    try:
        return plain(*args, **kwargs)
    finally:
        observer.end(token)


def set_observer(observer):
    """Install `observer` (or None to remove it); returns the previous one. Every op called through its
    frontend is then reported as observer.begin(opdef, args) -> token ... observer.end(token), around the
    whole call (argument parsing, kernel, graph recording); ops it calls itself (casts) nest inside. Every
    node the autograd engine runs is reported the same way: observer.begin(node, grads), with the
    gradients flowing into it. With no observer an op call runs exactly the code it runs without this
    feature: installing one swaps every frontend's code for an observed version, removing it swaps back."""
    if observer is not None and not (callable(getattr(observer, "begin", None))
                                     and callable(getattr(observer, "end", None))):
        raise TypeError(f"set_observer(): observer must have begin(event, inputs) and end(token) methods, "
                        f"got {type(observer).__name__}")
    with _OBSERVER_LOCK:   # two threads installing/removing at once must agree on which code runs
        previous = OBSERVER.current
        if (observer is None) != (previous is None):
            for namespace in _FRONTENDS:
                _swap_code(namespace, observed=observer is not None)
        OBSERVER.current = observer
    return previous


_OBSERVER_LOCK = threading.Lock()


def _recall(op) -> str:
    """Source of a call of the frontend itself with this call's arguments (minus `out`), by keyword:
    varargs have already been folded into their parameter when this runs."""
    names = [p.name for p in op.params if not p.kwonly]   # keyword-only ones are still in **_kw
    args = [f"{n}={n}" for n in names]
    if "name" not in names:
        args.append("name=name")
    return f"lambda: _self({', '.join(args + ['**_kw'])})"


def write_out(op, out, compute):
    """`out=` (public: plugins whose Python frontends take `out=` reuse it; `op` needs only `.display`):
    run the op, then write its result(s) into `out` (a Tensor, or a tuple of Tensors for
    several outputs), which is returned. Shapes must match exactly; the result is cast to out's
    dtype when that loses no kind (float into int, complex into real are refused), as in torch."""
    result = compute()
    single = not isinstance(result, (tuple, list))
    results, outs = ((result,), (out,)) if single else (tuple(result), out)
    if not isinstance(outs, (tuple, list)) or len(outs) != len(results) or not all(
            o.__class__ is Tensor for o in outs):
        expected = "a Tensor" if single else f"a tuple of {len(results)} Tensors"
        raise TypeError(f"{op.display}(): out must be {expected}, got {_describe(out)}")
    order = _KIND_ORDER
    for i, (r, o) in enumerate(zip(results, outs)):
        where = "out" if single else f"out[{i}]"
        if r._data.shape != o._data.shape:
            raise ValueError(f"{op.display}(): {where} has shape {o.shape} but the result has shape {r.shape}")
        if o._place is not r._place:
            raise ValueError(f"{op.display}(): {where} is on {o._place} but the result is on {r._place}")
        if order[r._dtype.kind] > order[o._dtype.kind]:
            raise TypeError(f"{op.display}(): the result has dtype {r._dtype.name}, which cannot be written into "
                            f"{where} of dtype {o._dtype.name}")
        if GRAD_MODE.enabled and not r.stop_gradient:
            raise RuntimeError(f"{op.display}(): out= does not support autograd (an input requires a gradient); "
                               f"call it without out=, or under oarlock.no_grad()")
        o._data = r._data if r._dtype is o._dtype else r._data.astype(o._dtype.np)
        bump_version(o)
    return out


def _fast_path_lines(op):
    """Code for the common case, skipping everything `apply` re-derives: the tensor arguments are
    Tensors on one place, the promoted ones share one dtype (a Python int/float may stand in for a
    promoted one when the dtype keeps it weak), and the slow path already validated a kernel for that
    (place, dtype). Records the graph node with autograd.record, as every other path does."""
    names = [p.name for p in op.tensor_params]
    promoted = [names[i] for i in op.promote] or names[:1]  # names whose dtype keys the kernel
    scalars = [p.name for p in op.tensor_params if p.base == "TensorOrScalar" and p.name in promoted]
    # keyword-only attributes are at their defaults here: the kernel's own defaults apply. When every
    # attribute is keyword-only (add's alpha) the node's attrs are the same for every call: one dict (_FA)
    attrs = ", ".join(f"{p.name!r}: " + (f"_D_{p.name}" if p.kwonly else p.name) for p in op.attr_params)
    node_attrs = "_FA" if all(p.kwonly for p in op.attr_params) else f"{{{attrs}}}"
    kwargs = ", ".join(f"{p.name}={p.name}" if p.base != "DType" else f"{p.name}=(None if {p.name} is None "
                       f"else {p.name}.np)" for p in op.attr_params
                       if p.name not in op.frontend_attrs and not p.kwonly)

    def run(arrays, quiet, record):
        call = f"_e[0](_e[1], {arrays}{', ' if kwargs else ''}{kwargs})"
        return [
            "            _e = _fast.get((_pl, _dt))",
            # an autocast thread leaves the call to apply (see _AutocastThreads)
            "            if _e is not None and (not _ACT.count or not _AC.enabled):",
            "                try:",
            f"                    _o = {call}",
            "                except Exception:",
            "                    pass  # the slow path below re-raises with a full message",
            "                else:",
            *(["                    if _o.__class__ is not _e[2]: _o = _e[1].asarray(_o)",
               "                    _o = _wrap(_o, _pl)"] if op.n_outputs == 1 else
              ["                    _o = (" + "".join(f"_wrap(_o[{i}] if _o[{i}].__class__ is _e[2] else "
                                                        f"_e[1].asarray(_o[{i}]), _pl), "
                                                        for i in range(op.n_outputs)) + ")"]),
            *([f"                    if _o._data.base is not None: _link_view(_op, {names[0]}, _o, {{{attrs}}})"]
              if op.view else []),
            f"                    if not ({quiet}) and _GM.enabled and _op.rule is not None:",
            *record,
            "                    return _o",
        ]

    record = [f"                        _record(_op, ({', '.join(names)},), _o, {node_attrs}, _pl)"]

    def same_place(candidates):
        return [f"{t}._place is _pl" for t in candidates]

    # 1. all Tensors: the cheapest test
    anchor = promoted[0]
    checks = same_place([t for t in names if t != anchor]) + [f"{t}._dtype is _dt" for t in promoted[1:]]
    lines = [f"    if {' and '.join(f'{t}.__class__ is _T' for t in names)}:",
             f"        _pl = {anchor}._place; _dt = {anchor}._dtype",
             f"        if {' and '.join(checks) or 'True'}:"]
    lines += run(", ".join(f"{t}._data" for t in names), " and ".join(f"{t}.stop_gradient" for t in names),
                 record)
    optional = [p.name for p in op.tensor_params if p.base == "OptTensor"]
    given = [t for t in names if t not in optional]
    if optional and anchor in given:
        # 1b. every optional tensor absent (linear without bias, layer_norm without weight): they pass None
        checks = same_place([t for t in given if t != anchor]) + [f"{t}._dtype is _dt" for t in promoted[1:]
                                                                    if t in given]
        present = [f"{t}.__class__ is _T" for t in given] + [f"{t} is None" for t in optional]
        lines += [f"    if {' and '.join(present)}:",
                  f"        _pl = {anchor}._place; _dt = {anchor}._dtype",
                  f"        if {' and '.join(checks) or 'True'}:"]
        lines += run(", ".join(f"{t}._data" if t in given else "None" for t in names),
                     " and ".join(f"{t}.stop_gradient" for t in given), record)
    if not scalars:
        return lines
    # 2. Python scalars among the promoted arguments: the first promoted Tensor anchors dtype and place
    lines.append("    _a = _UNSET")
    for t in promoted:
        lines += [f"    if {t}.__class__ is _T:",
                  f"        if _a is _UNSET: _a = {t}",
                  f"        elif _a is not None and ({t}._dtype is not _a._dtype or {t}._place is not _a._place):",
                  "            _a = None"]
        lines.append(f"    elif {t}.__class__ is not int and {t}.__class__ is not float: _a = None"
                     if t in scalars else "    else: _a = None")
    others = [t for t in names if t not in promoted]
    weak = " and ".join(f"({t}.__class__ is _T or (_dt.weak_scalars and ({t}.__class__ is int "
                        f"or _dt.is_floating_point)))" for t in scalars)
    lines += ["    if _a is not None and _a is not _UNSET:",
              "        _pl = _a._place; _dt = _a._dtype",
              f"        if {' and '.join([f'{t}.__class__ is _T' for t in others] + same_place(others) + [weak])}:"]
    arrays = ", ".join(f"({t}._data if {t}.__class__ is _T else {t})" if t in scalars else f"{t}._data"
                       for t in names)
    quiet = " and ".join(f"({t}.__class__ is not _T or {t}.stop_gradient)" if t in scalars
                         else f"{t}.stop_gradient" for t in names)
    return lines + run(arrays, quiet, record)


def _fast_cacheable(op, flat, args, dtype) -> bool:
    """Whether this call may seed the fast path: no input was cast, every promoted input has the
    kernel's dtype, and any Python scalar was one the fast path passes to the kernel unchanged (an
    int, or a float with a float dtype)."""
    promoted = op.promote or (0,)
    for i, (used, given) in enumerate(zip(flat, args)):
        if given is None:   # an absent OptTensor: the kernel gets None on the fast path too
            continue
        if given.__class__ is Tensor:
            if used is not given or (i in promoted and given._dtype is not dtype):
                return False
        elif i not in op.promote or not dtype.weak_scalars or not (
                given.__class__ is int or (given.__class__ is float and dtype.is_floating_point)):
            return False
    return True


# -- autocast -------------------------------------------------------------------------------------------

class Autocast(threading.local):
    """The autocast state the call path consults, per thread (as grad mode, and as in PyTorch): an
    `oarlock.amp.auto_cast` block (a plugin, through `set_autocast`) casts the ops of the thread that
    entered it and no other. Each op declares its policy (OpDef `amp`): "white" ops compute in the low
    precision dtype, "black" ops in float32, the rest (None, "promote") in their inputs' dtype under
    O1 and in the low precision dtype under O2. `white` / `black` hold op names that override. The
    fields are class-level defaults, so a new thread reads autocast off without any set-up."""

    enabled = False
    dtype = None
    level = "O1"
    white = black = frozenset()
    _counted = None   # an _AutocastOn while enabled: it counts this thread in AUTOCAST_THREADS

    def state(self) -> tuple:
        return (self.enabled, self.dtype, self.level, self.white, self.black)


AUTOCAST = Autocast()


class _AutocastThreads:
    """How many threads have autocast on right now. The generated fast paths (which know nothing of
    autocast) read this first: while it is 0, the usual case, that one slot load is all autocast costs
    them; otherwise they also read their own thread's flag and leave an autocast call to `apply`. The
    fast-path caches themselves hold (place, dtype) -> kernel, which autocast does not change, so
    they are never emptied for it."""

    __slots__ = ("count",)

    def __init__(self):
        self.count = 0


AUTOCAST_THREADS = _AutocastThreads()


class _AutocastOn:
    """Counts one thread in AUTOCAST_THREADS from its creation until it is dropped: by set_autocast(False),
    or with the thread's autocast state when the thread ends inside an auto_cast block (otherwise the
    count would never return to 0, and every fast path would read its thread's flag from then on)."""

    __slots__ = ()
    _threads = AUTOCAST_THREADS
    _lock = threading.Lock()   # count += 1 is a read-modify-write that a thread switch can split

    def __init__(self):
        with self._lock:
            self._threads.count += 1

    def __del__(self):
        with self._lock:
            self._threads.count -= 1


def set_autocast(enabled: bool, dtype=None, level: str = "O1", white=(), black=()) -> tuple:
    """Set the calling thread's autocast state; returns the previous one (pass it back with
    `set_autocast(*previous)`). Other threads keep theirs."""
    state = AUTOCAST
    previous = state.state()
    enabled = bool(enabled)
    if enabled != previous[0]:
        state._counted = _AutocastOn() if enabled else None
    state.enabled, state.dtype, state.level = enabled, dtype, level
    state.white, state.black = frozenset(white), frozenset(black)
    return previous


def _autocast(op, flat: list) -> list:
    """Cast the floating-point inputs of `op` as its autocast policy says (differentiably). The cast op
    itself (which the casting calls) and in-place ops (optimizer updates) are never cast."""
    if op.name == "cast" or op.inplace is not None:
        return flat
    policy = "white" if op.name in AUTOCAST.white else "black" if op.name in AUTOCAST.black else op.amp
    if policy == "white" or (policy not in ("black",) and AUTOCAST.level == "O2"):
        source, target = (_dtypes.float32,), AUTOCAST.dtype
    elif policy == "black":
        source, target = (_dtypes.float16, _dtypes.bfloat16), _dtypes.float32
    else:
        return flat
    cast = lambda a: _cast(a, target) if a.__class__ is Tensor and a._dtype in source else a  # noqa: E731
    return [[cast(x) for x in a] if a.__class__ is list else cast(a) for a in flat]


# -- the call path ------------------------------------------------------------------------------------

def _describe(t) -> str:
    if isinstance(t, Tensor):
        return f"Tensor(shape={t.shape}, dtype={t._dtype.name}, place={t._place})"
    if isinstance(t, (list, tuple)):
        return "[" + ", ".join(_describe(x) for x in t) + "]"
    return f"{type(t).__name__} {t!r}"


def _inputs_text(op, args) -> str:
    return "; ".join(f"{p.name}={_describe(a)}" for p, a in zip(op.tensor_params, args))


def _subclass_dispatch(value):
    """The `__oarlock_dispatch__(op, args, attrs)` of a Tensor subclass among `value` (a tensor argument, or a
    list of them), or None. A subclass that defines it receives every op called with one of its instances
    among the tensor arguments (the first such argument's class decides) and returns the op's result; it
    runs ops on its plain tensors through `apply` again. Plain tensors never reach this check: the fast
    path and the loop above take them, so the hook costs nothing to code that has no such subclass."""
    for item in value if isinstance(value, (list, tuple)) else (value,):
        if isinstance(item, Tensor):
            handler = getattr(type(item), "__oarlock_dispatch__", None)
            if handler is not None:
                return handler
    return None


def apply(op: OpDef, args: tuple, attrs: dict):
    """Run op on tensor arguments `args` (one per tensor parameter) and attributes `attrs`."""
    # 1. normalise tensor arguments and find the common place
    place = None
    flat = []          # every Tensor input, in order, flattened over TensorList
    scalars = False
    for p, a in zip(op.tensor_params, args):
        cls = a.__class__
        if cls is Tensor:
            if place is None:
                place = a._place
            elif a._place is not place:
                raise OpError(f"{op.display}(): argument '{p.name}' is on {a._place} but an earlier input is on "
                              f"{place}; move it with .to('{place}') first")
            flat.append(a)
        elif p.base == "TensorOrScalar" and isinstance(a, _SCALAR_TYPES):
            scalars = True
            flat.append(a)
        elif p.base == "OptTensor" and a is None:
            flat.append(None)
        elif p.base == "TensorList" and isinstance(a, (list, tuple)) and all(x.__class__ is Tensor for x in a):
            if not a:
                raise OpError(f"{op.display}(): argument '{p.name}' is an empty list; it needs at least one Tensor")
            for x in a:
                if place is None:
                    place = x._place
                elif x._place is not place:
                    raise OpError(f"{op.display}(): the tensors in '{p.name}' are on different devices "
                                  f"({x._place} and {place})")
            flat.append(list(a))
        else:
            handler = _subclass_dispatch(a)
            if handler is not None:   # a Tensor subclass that computes its ops itself (distributed tensors)
                return handler(op, args, attrs)
            accepts = {"Tensor": "a Tensor", "TensorOrScalar": "a Tensor or a Python number",
                       "OptTensor": "a Tensor or None", "TensorList": "a list of Tensors"}[p.base]
            hint = " (wrap data with oarlock.to_tensor)" if isinstance(a, (list, np.ndarray, *_SCALAR_TYPES)) else ""
            raise TypeError(f"{op.display}(): argument '{p.name}' must be {accepts}, got {type(a).__name__}{hint}")
    if place is None:
        place = attrs.get("place") or attrs.get("device")
        if place is None:
            from oarlock.device import default_place
            place = default_place()
    backend = place.backend
    if AUTOCAST.enabled:
        flat = _autocast(op, flat)
    # 2. dtype: promotion among the promoted inputs, then the float policy and the accepted kinds
    dtype = None
    if op.promote:
        dtype = in_dtype = _promoted_dtype(op, flat)  # in_dtype: what the caller gave, before to_float
        if op.to_float and dtype.kind in ("int", "bool"):
            dtype = _dtypes.get_default_dtype()
        for i in op.promote:
            a = flat[i]
            if a.__class__ is Tensor:
                if a._dtype is not dtype:
                    flat[i] = _cast(a, dtype)
            elif isinstance(a, list):
                flat[i] = [x if x._dtype is dtype else _cast(x, dtype) for x in a]
    if scalars:
        target = flat[op.inplace] if op.inplace is not None else None
        for i, a in enumerate(flat):
            if isinstance(a, _SCALAR_TYPES):
                dt = dtype if i in op.promote else _dtypes.default_for_kind(_dtypes.scalar_kind(a))
                if target.__class__ is Tensor and _KIND_ORDER[dt.kind] <= _KIND_ORDER[target._dtype.kind]:
                    dt = target._dtype   # x.mul_(0.1) on float64 x: the scalar keeps x's precision
                try:
                    flat[i] = Tensor._wrap(backend.asarray(a, dt.np, place.index), place)
                except OverflowError:   # a Python int beyond the dtype the op computes in (int32 x * 2**40)
                    raise scalar_error(op, op.tensor_params[i].name, a, dt) from None
    if dtype is None:
        first = next((a for a in flat if a.__class__ is Tensor), None)
        if first is not None:
            dtype = in_dtype = first._dtype
            if op.to_float and dtype.kind in ("int", "bool"):
                dtype = _dtypes.get_default_dtype()
                flat[0] = _cast(flat[0], dtype)
        else:
            first_list = next((a for a in flat if isinstance(a, list)), None)
            if first_list is not None:
                dtype = first_list[0]._dtype
            else:
                dtype = attrs.get("dtype") or _dtypes.get_default_dtype()
            in_dtype = dtype
    # the accepted kinds are those of the inputs: a to_float op may take ints but refuse bool
    if op.dtypes is not None and in_dtype.kind not in op.dtypes:
        accepted = ", ".join(d.name for d in _dtypes.all_dtypes if d.kind in op.dtypes)
        raise OpError(f"{op.display}(): got dtype {in_dtype.name} ({_inputs_text(op, args)}); it accepts {accepted}")
    # 3. kernel lookup
    kernel = op.registry.find_kernel(op.inplace_of or op.name, place.type, dtype)
    if kernel is not None:
        kernel = backend.bind_kernel(kernel, place.index)
    if kernel is None:
        existing = ", ".join(op.registry.kernels_of(op.name)) or "none"
        raise NotImplementedError(f"{op.display}(): no kernel for device {place.type!r} and dtype {dtype.name}; "
                                  f"kernels that exist: {existing}")
    arrays = [a._data if a.__class__ is Tensor else ([x._data for x in a] if a.__class__ is list else a)
              for a in flat]
    kattrs = {k: (v.np if v.__class__ is _dtypes.DType else v) for k, v in attrs.items()
              if k not in op.frontend_attrs}
    if op.random:
        kattrs["generator"] = backend.generator(place.index)
    if op.inplace is not None:
        return _run_inplace(op, args, flat, attrs, place, lambda: _run_kernel(op, kernel, backend, arrays, kattrs,
                                                                              args, attrs))
    # 4. run it; a kernel's complaint is re-raised naming the op and its inputs
    out = _run_kernel(op, kernel, backend, arrays, kattrs, args, attrs)
    if op.fast_eligible and not AUTOCAST.enabled and _fast_cacheable(op, flat, args, dtype):
        op.fast[(place, dtype)] = (kernel, backend.xp, backend.array_types[0])
    # 5. wrap, and record the graph node if any input wants a gradient
    single = op.n_outputs == 1 and not op.intermediate
    outs = (out,) if single else tuple(out)
    array_types = backend.array_types
    wrap = Tensor._wrap
    tensors = tuple(wrap(o if o.__class__ in array_types else backend.xp.asarray(o), place) for o in outs)
    if op.rule is not None and GRAD_MODE.enabled:
        record(op, flat, tensors[0] if len(tensors) == 1 else tensors, attrs, place)
    if op.view and tensors[0]._data.base is not None:
        _link_view(op, flat[0], tensors[0], attrs)
    if op.intermediate:  # kept by the graph node only
        tensors = tensors[:-op.intermediate]
        single = op.n_outputs == 1
    sg = attrs.get("stop_gradient")
    rg = attrs.get("requires_grad")
    if sg is not None or rg is not None:
        for t in tensors:
            t.stop_gradient = bool(sg) if sg is not None else not rg
    return tensors[0] if single else (list(tensors) if op.n_outputs is None else tensors)


def _run_kernel(op, kernel, backend, arrays, kattrs, args, attrs):
    """kernel(xp, *arrays, **attrs); a kernel's complaint (numpy's overflow and allocation errors too) is
    re-raised naming the op, its inputs and the argument at fault where it can be told (_op_errors)."""
    try:
        return kernel(backend.xp, *arrays, **kattrs)
    except (ValueError, TypeError, IndexError, OverflowError, MemoryError) as exc:
        raise kernel_error(op, exc, _inputs_text(op, args), args, attrs) from exc


def _wants_grad(flat) -> bool:
    for a in flat:
        for t in (a if a.__class__ is list else (a,)):
            if t.__class__ is Tensor and not t.stop_gradient and t._dtype.differentiable:
                return True
    return False


def _run_inplace(op, args, flat, attrs, place, run):
    """An in-place op. Without autograd: run the kernel, move the version counter. With it (grad mode on
    and some input wants a gradient), PyTorch's rules: a leaf that requires grad (or a view of one) is
    refused; the op is recorded as its out-of-place form whose input is a shadow of the target with the
    target's old graph identity (a copy of its values when the rule saves that input, as PyTorch saves
    `original self`); the target takes the node; a write through a view rebases the view's base."""
    target = args[op.inplace]
    graph = GRAD_MODE.enabled and _wants_grad(flat)
    view = None
    if graph:
        name = op.tensor_params[op.inplace].name
        if any(t._node is None and not t.stop_gradient for t in (target if target.__class__ is list else (target,))):
            raise InplaceError(f"{op.display}(): '{name}' is a leaf Tensor that requires grad (stop_gradient=False) "
                               f"and is being used in an in-place operation; modify it under oarlock.no_grad(), or "
                               f"work on a copy (x.clone())")
        if op.rule is None or target.__class__ is list:
            raise NotImplementedError(f"{op.display}() has no gradient, and an input requires one; call it under "
                                      f"oarlock.no_grad(), or detach() the inputs")
        view = getattr(target, "_view", None)
        if view is not None and view[0]._node is None and not view[0].stop_gradient:
            raise InplaceError(f"{op.display}(): '{name}' is a view of a leaf Tensor that requires grad "
                               f"(stop_gradient=False) and is being used in an in-place operation; modify the "
                               f"leaf under oarlock.no_grad(), or work on a copy (x.clone())")
        if flat[op.inplace] is target:
            flat = list(flat)
            flat[op.inplace] = _shadow(target, copy=("in", op.inplace) in op._save_plan)
    written = list(target) if target.__class__ is list else [target]
    for i in op.writes:
        also = args[i]
        if also is not None:
            written.extend(also if also.__class__ is list else (also,))
    for t in written:
        vc = t._vc
        if vc is not None and vc.guard is not None:
            vc.guard(t)   # before the write: see plugin_api.guard_writes
    out = run()
    reshaped = op.inplace_of is not None and op.registry.ops[op.inplace_of].view
    if reshaped:   # reshape_, transpose_, squeeze_, ...: the target takes the view's shape; no value changes
        target._data = out
    elif op.inplace_of is not None:   # a variant of an out-of-place op: its result is written into the target
        _write_result(op, target, out)
    for t in written:
        bump_version(t)
    if reshaped:
        _reshape_view_identity(op, target, attrs)
    if graph:
        record(op, flat, target, attrs, place, written=target)
        if view is not None and not reshaped:   # the view's identity is current again; then the base takes it
            target._view = (view[0], view[1], target._vc.value)
            _rebase(view, target)
    return target


def _reshape_view_identity(op, target, attrs):
    """After a view-kind in-place op (reshape_) on a view of another tensor: the target is now that view op
    applied to its old view function, so a later write through it rebases its base correctly."""
    view = getattr(target, "_view", None)
    if view is None:
        return
    root, make, _ = view
    base_op = op.registry.ops[op.inplace_of]
    target._view = (root, lambda base: apply(base_op, (make(base),), attrs), target._vc.value)


def _shadow(t, copy):
    """A stand-in for t before an in-place write: t's graph identity, and t's storage (shared, with its
    version counter) or a copy of its values."""
    data = t._data.copy() if copy else t._data
    s = Tensor._wrap(data, t._place, t.stop_gradient)
    if t._node is not None:
        s._node, s._oidx = t._node, t._oidx
    if not copy:
        s._vc = version_counter(t)
    return s


def _write_result(op, target, out):
    if tuple(out.shape) != tuple(target._data.shape):
        raise ValueError(f"{op.display}(): the result has shape {list(out.shape)}, but an in-place op must keep "
                         f"the shape of its input {target.shape}; use the out-of-place op")
    kind = _dtypes.from_numpy_dtype(out.dtype).kind
    if _KIND_ORDER[kind] > _KIND_ORDER[target._dtype.kind]:
        raise TypeError(f"{op.display}(): the result has dtype {out.dtype}, which cannot be stored in the input of "
                        f"dtype {target._dtype.name}; use the out-of-place op, or cast the input first")
    target._data[...] = out


def _link_view(op, source, view, attrs):
    """If `view` (the output of a view op, whose array has a base) shares `source`'s memory: share its
    version counter, and remember the root base and how to make the view from it (the view op replayed
    on the base's view function)."""
    if not view._place.backend.xp.may_share_memory(view._data, source._data):
        return
    vc = view._vc = version_counter(source)
    parent = getattr(source, "_view", None)
    if parent is None:
        view._view = (source, lambda base: apply(op, (base,), attrs), vc.value)
    else:
        root, make_parent, _ = parent
        view._view = (root, lambda base: apply(op, (make_parent(base),), attrs), vc.value)


def _rebase(view_info, written):
    """After an in-place write into a view, the base's new value is its old value with the view's region
    replaced (PyTorch's CopySlices): record that as a node over (old base, written view)."""
    base, make_view, _ = view_info

    def copy_slices_grad(ctx, g):
        g_view = make_view(g)
        return g - _scatter_back(make_view, g_view, g), g_view

    old = _shadow(base, copy=False)
    record(RecordSpec("copy_slices", copy_slices_grad), (old, written), base, None, base._place)


def _scatter_back(make_view, g_view, like):
    """The adjoint of the view function: g_view placed at the view's region of a zero tensor like `like`."""
    from oarlock import _ops
    from oarlock.autograd import enable_grad, grad
    create = GRAD_MODE.enabled
    with enable_grad():
        z = _ops.zeros_like(like)
        z.stop_gradient = False
        (placed,) = grad([make_view(z)], [z], grad_outputs=[g_view], create_graph=create)
    return placed


def _promoted_dtype(op, flat):
    dtype = None
    kinds = []
    for i in op.promote:
        a = flat[i]
        if a.__class__ is Tensor:
            dtype = a._dtype if dtype is None else _promote(op, dtype, a._dtype)
        elif a.__class__ is list:
            for x in a:
                dtype = x._dtype if dtype is None else _promote(op, dtype, x._dtype)
        elif a is not None:
            kinds.append(_dtypes.scalar_kind(a))
    for kind in kinds:
        dtype = _dtypes.default_for_kind(kind) if dtype is None else _dtypes.result_type_with_scalar(dtype, kind)
    return dtype


def _promote(op, a, b):
    try:
        return _dtypes.promote_types(a, b)
    except TypeError as exc:
        raise TypeError(f"{op.display}(): {exc}") from None


def _cast(t, dtype):
    from oarlock import _ops
    return _ops.cast(t, dtype)


class OpRegistrar:
    """Passed to `oarlock_register_ops`: define ops, their kernels, and export them."""

    def __init__(self, registry: Registry, plugin: str):
        self._registry, self.plugin = registry, plugin

    def define(self, signature: str, **options):
        """Define an op (see OpDef for the options) and return its callable (the generated frontend; its
        `.opdef` is the OpDef). The op is exported under its public names and always as
        oarlock.ops.<plugin>.<op name>. `internal=True`: no public name (a gradient kernel, a helper
        that a public Python function wraps): call it through the callable this returns.
        `display=`: the name its errors carry (the public function that wraps it)."""
        base_name = options.get("grad_of") or options.get("inplace_of")
        if base_name is not None:
            base = self._registry.ops.get(base_name)
            if base is None:
                raise ValueError(f"op {signature.split('(')[0]!r}: grad_of/inplace_of names op {base_name!r}, which "
                                 f"is not defined (define it first)")
            inherited = {"grad": base.rule, "saves": base.saves, "nondiff": base.nondiff_names}
            if options.get("inplace_of"):   # computed by the base op's kernel: its dtype policy too
                inherited.update(promote=base.promote_names, to_float=base.to_float, dtypes=base.dtypes)
            for key, value in inherited.items():
                options.setdefault(key, value)
        internal, display = options.pop("internal", False), options.pop("display", None)
        if internal and options.get("public"):
            raise ValueError(f"op {signature.split('(')[0]!r}: an internal op has no public names, got "
                             f"public={options['public']!r}")
        op = OpDef(signature, **options)
        library = f"{OP_LIBRARY}.{library_name(self.plugin)}"
        if internal:
            op.public, op.display = (), f"{library}.{op.name}"
        if display is not None:
            op.display = display
        op.registry = self._registry
        self._registry.add_op(op, self.plugin)
        fn = define_frontend(op, apply)
        if internal:
            fn.__module__ = library
        for qualified in op.public:
            namespace, _, public_name = qualified.rpartition(".")
            self._registry.add_api(namespace, public_name, fn, self.plugin)
        self._registry.add_library_op(op.name, fn, self.plugin)
        return fn

    def define_inplace(self, base: str, public=(), **options):
        """The in-place variant `<base>_` of an out-of-place op already defined (exp_ of exp, relu_ of
        relu): same parameters (the first becomes the Tensor written into), no kernel of its own (the
        base op's computes the result, which is written into the input), the base op's gradient rule."""
        op = self._registry.ops.get(base)
        if op is None:
            raise ValueError(f"define_inplace(): op {base!r} is not defined (define it first)")
        first = op.tensor_params[0].name
        params = op.signature.strip()[len(op.name):].replace(f"{first}: TensorOrScalar", f"{first}: Tensor", 1)
        return self.define(f"{op.name}_{params}", public=public, aliases=op.aliases, inplace=first, inplace_of=base,
                           doc=options.pop("doc", f"{base}, written into {first} (in place); returns {first}."),
                           **options)

    def kernel(self, op: str, device: str | None = GENERIC, dtypes=None):
        """Decorator registering fn(xp, *arrays, **attrs) for op on `device` (None: generic array-API
        kernel) and the given dtypes (None: any dtype). `device` may be a list of device types."""
        devices = device if isinstance(device, (list, tuple)) else [device]
        keys = [None] if dtypes is None else [_dtypes.convert_dtype(d) for d in dtypes]

        def register(fn):
            for dev in devices:
                for dt in keys:
                    self._registry.add_kernel(op, dev, dt, fn, self.plugin)
            return fn
        return register
