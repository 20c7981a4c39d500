"""A compiled custom-operator library as oarlock ops: each PD_BUILD_OP becomes an op with a signature
(Paddle's rule: inputs and attributes in declaration order, input names lower-cased up to any "@"), a
kernel on "cpu" (and "gpu" when the library was built with CUDA) that calls the C++ kernel through the ABI,
and, when the library has a PD_BUILD_GRAD_OP for it, an autograd rule that runs that C++ backward kernel
as an op of its own (whose PD_BUILD_DOUBLE_GRAD_OP, if any, is in turn its rule). A Python rule given in
`grad_rules` replaces the C++ one, or gives an op without PD_BUILD_GRAD_OP a gradient."""

from __future__ import annotations

import ctypes
import warnings
from pathlib import Path

import numpy as np

from oarlock_cpp_extension import abi

# Paddle's attribute types -> (oarlock signature annotation, how the value crosses the ABI)
ATTR_TYPES = {"bool": ("bool", "int"), "int": ("int", "int"), "int64_t": ("int", "int"),
              "float": ("float", "float"), "double": ("float", "float"), "std::string": ("str", "str"),
              "std::vector<int>": ("Any", "ints"), "std::vector<int64_t>": ("Any", "ints"),
              "std::vector<float>": ("Any", "floats"), "std::vector<double>": ("Any", "floats"),
              "std::vector<std::string>": ("Any", "strings")}
GRAD, NEW = "@GRAD", "@NEW"


def param_name(declared: str) -> str:
    """The Python parameter of a declared input: "X" -> "x", "X@VECTOR" -> "x", "Out@GRAD" -> "out_grad"."""
    base, grads = declared, 0
    while base.endswith(GRAD):
        base, grads = base[:-len(GRAD)], grads + 1
    return base.split("@")[0].lower() + "_grad" * grads


def parse_attr(op: str, declared: str) -> tuple[str, str, str]:
    """"scale: float" -> ("scale", "float", "float"); an unknown type is refused, naming the accepted ones."""
    name, _, ctype = declared.partition(":")
    name, ctype = name.strip(), " ".join(ctype.split()).replace(" <", "<").replace("< ", "<").replace(" >", ">")
    if ctype not in ATTR_TYPES:
        raise TypeError(f"custom op {op!r}: attribute {declared!r} has type {ctype!r}; oarlock supports "
                        f"{', '.join(ATTR_TYPES)}")
    return name, ATTR_TYPES[ctype][0], ATTR_TYPES[ctype][1]


class Library:
    """One loaded shared library and the ops it declares."""

    def __init__(self, path, name: str):
        self.path, self.name = Path(path), name
        self.lib = abi.bind(ctypes.CDLL(str(path)))
        self.with_cuda = bool(self.lib.oarlock_built_with_cuda())
        self.metas = abi.describe(self.lib)
        self.functions: dict[str, object] = {}     # op name -> its oarlock callable (forward ops)
        self._levels = {(m["name"], m["level"]): m for m in self.metas}
        self.unsupported: dict[str, str] | None = None     # op -> why oarlock cannot run it (set by validate)

    @property
    def op_names(self) -> list[str]:
        return [m["name"] for m in self.metas if m["level"] == 0]

    def define(self, ops, grad_rules=None, public=True, taken=()) -> dict:
        """Define every forward op (and its C++ gradient ops) through the OpRegistrar `ops`; returns
        {op name: callable}. `grad_rules`: {op name: rule or (rule, saves)} in Python. `public`: export each op
        as oarlock.<op name> too, except the names in `taken` (it is always oarlock.ops.<library>.<op name>)."""
        grad_rules = dict(grad_rules or {})
        unknown = sorted(set(grad_rules) - set(self.op_names))
        if unknown:
            raise ValueError(f"grad_rules names {unknown}, which library {self.name!r} does not declare; it "
                             f"declares {self.op_names}")
        if self.unsupported is None:
            self.validate(grad_rules)
        for op, reason in self.unsupported.items():
            self.functions[op] = _unsupported(op, reason)
        for meta in self.metas:
            if meta["level"] == 0 and meta["name"] not in self.unsupported:
                rule = grad_rules.get(meta["name"])
                self.functions[meta["name"]] = self._define(ops, meta, 0, rule,
                                                            public and meta["name"] not in taken)
        return dict(self.functions)

    # -- one op --------------------------------------------------------------------------------------
    def validate(self, grad_rules=None) -> None:
        """Raise, naming the op, for a library `define` would refuse; registers nothing. An op using a feature
        oarlock lacks (NotImplementedError) is left out with a warning: the module's function of that name
        raises the same error, and the library's other ops work."""
        self.unsupported = {}
        for op in self.op_names:
            try:
                for level in (0, 1, 2):
                    meta = self._levels.get((op, level))
                    if meta is None:
                        break
                    self._check(meta)
                    grad_meta = self._levels.get((op, level + 1))
                    if grad_meta is not None and not (level == 0 and op in (grad_rules or {})):
                        self._plan(meta, grad_meta)
            except NotImplementedError as exc:
                self.unsupported[op] = str(exc)
                warnings.warn(f"library {self.name!r}: op {op!r} left out: {exc}", UserWarning, stacklevel=3)
        orphans = [m["name"] for m in self.metas if m["level"] > 0 and (m["name"], m["level"] - 1) not in self._levels]
        if orphans:
            raise ValueError(f"library {self.name!r}: gradient ops with no forward op: {orphans}")

    @staticmethod
    def _check(meta) -> list:
        op = meta["name"]
        inplace = meta["inplace"]
        if any("@VECTOR" in name for name in inplace):
            raise NotImplementedError(f"custom op {op!r}: in-place vector inputs (SetInplaceMap of paddle::Vec) are "
                                      f"not supported by oarlock yet")
        if meta["level"] == 0 and inplace and (len(inplace) > 1 or len(meta["outputs"]) > 1):
            raise NotImplementedError(f"custom op {op!r}: oarlock runs an in-place custom op with one in-place input "
                                      f"and one output; this one maps {inplace} with outputs {meta['outputs']}")
        unknown = [f"{k}->{v}" for k, v in inplace.items() if k not in meta["inputs"] or v not in meta["outputs"]]
        if unknown:
            raise ValueError(f"custom op {op!r}: SetInplaceMap pairs {unknown} name no input/output of the op")
        if any("@VECTOR" in o for o in meta["outputs"]):
            raise NotImplementedError(f"custom op {op!r}: vector outputs (paddle::Vec) are not supported by oarlock "
                                      f"yet")
        if not meta["kernel"]:
            raise ValueError(f"custom op {op!r} declares no kernel (SetKernelFn)")
        return [parse_attr(op, a) for a in meta["attrs"]]

    def _define(self, ops, meta, level, python_rule=None, public=False):
        op = meta["name"]
        op_name = op if level == 0 else f"{op}{'_grad' * level}"
        attrs = self._check(meta)
        params = []
        for declared in meta["inputs"]:
            kind = "TensorList" if "@VECTOR" in declared else "OptTensor" if "@OPTIONAL" in declared else "Tensor"
            params.append(f"{param_name(declared)}: {kind}")
        params += [f"{name}: {annotation}" for name, annotation, _ in attrs]
        n_out = len(meta["outputs"])
        returns = "Tensor" if n_out == 1 else f"tuple[{', '.join(['Tensor'] * n_out)}]"
        options = {}
        grad_meta = self._levels.get((op, level + 1))
        if python_rule is not None:
            rule, saves = python_rule if isinstance(python_rule, tuple) else (python_rule, ())
            options.update(grad=rule, saves=tuple(saves))
        elif grad_meta is not None:
            options.update(self._cpp_rule(ops, meta, grad_meta, level))
        if level == 0 and meta["inplace"]:     # the kernel writes into that input; the call returns it
            options["inplace"] = param_name(next(iter(meta["inplace"])))
        if level > 0 or not public:
            options["internal"] = True
        doc = (f"Custom C++ operator {op!r}{' (gradient)' * level} from {self.path.name}: inputs "
               f"{meta['inputs']}, outputs {meta['outputs']}, attributes {meta['attrs']}.")
        fn = ops.define(f"{op_name}({', '.join(params)}) -> {returns}", doc=doc, **options)
        devices = ["cpu", "gpu"] if self.with_cuda else ["cpu"]
        ops.kernel(op_name, device=devices)(self._kernel(meta, op_name, attrs))
        return fn

    def _kernel(self, meta, op_name, attrs):
        lib, index = self.lib, meta["index"]
        kinds = ["list" if "@VECTOR" in d else "optional" if "@OPTIONAL" in d else "one" for d in meta["inputs"]]
        n_in = len(kinds)
        written = [k for k, d in enumerate(meta["inputs"]) if d in meta["inplace"]]
        # an in-place forward op writes into its input (copied back when it had to be made contiguous); a
        # gradient op's in-place input is the incoming gradient, which others may hold: it gets a copy
        forward = meta["level"] == 0

        def kernel(xp, *args, **values):
            groups = [list(a) if kind == "list" else [] if a is None else [a] for kind, a in zip(kinds, args[:n_in])]
            targets = {}
            for k in written:
                given = groups[k][0]
                groups[k] = [xp.ascontiguousarray(given) if forward else xp.array(given, copy=True, order="C")]
                targets[k] = given
            keep, structs = [], []
            for name, _, how in attrs:
                structs.append(_attr(op_name, name, how, values[name], keep))
            outs = abi.run(lib, index, op_name, groups, structs, xp)
            for k, given in targets.items():
                if forward and groups[k][0] is not given:
                    given[...] = groups[k][0]
            return outs[0] if len(outs) == 1 else tuple(outs)
        kernel.__name__ = kernel.__qualname__ = f"{op_name}_cpp_kernel"
        return kernel

    @staticmethod
    def _plan(meta, grad_meta):
        """How the gradient op's arguments come from the forward call: (names to save, one ("saved", i) or
        ("grad", output index) per gradient-op input, the forward input each gradient-op output is for)."""
        op = meta["name"]
        fwd_in = {d: param_name(d) for d in meta["inputs"]}
        fwd_out = {d: ("out" if k == 0 else f"out{k}") for k, d in enumerate(meta["outputs"])}
        saves, plan = [], []
        for declared in grad_meta["inputs"]:
            if declared.endswith(GRAD) and declared[:-len(GRAD)] in fwd_out:
                plan.append(("grad", list(fwd_out).index(declared[:-len(GRAD)])))
            elif declared in fwd_in or declared in fwd_out:
                name = fwd_in.get(declared) or fwd_out[declared]
                if name not in saves:
                    saves.append(name)
                plan.append(("saved", saves.index(name)))
            else:
                raise ValueError(f"custom op {op!r}: its gradient op reads {declared!r}, which is neither an input, "
                                 f"an output nor an output's gradient of the forward op ({meta['inputs']}, "
                                 f"{meta['outputs']})")
        targets = []
        for declared in grad_meta["outputs"]:
            plain = declared[:-len(NEW)] if declared.endswith(NEW) else declared    # New(Grad("Out")): Out's
            base = plain[:-len(GRAD)] if plain.endswith(GRAD) else None
            if base not in fwd_in:
                raise ValueError(f"custom op {op!r}: its gradient op writes {declared!r}, which is not the gradient "
                                 f"of a forward input ({meta['inputs']})")
            targets.append(list(fwd_in).index(base))
        return saves, plan, targets

    def _cpp_rule(self, ops, meta, grad_meta, level) -> dict:
        """The autograd rule of op `meta` that runs its PD_BUILD_GRAD_OP (`grad_meta`), defined as an op."""
        op = meta["name"]
        saves, plan, targets = self._plan(meta, grad_meta)
        attr_names = [parse_attr(op, a)[0] for a in grad_meta["attrs"]]
        grad_fn = self._define(ops, grad_meta, level + 1)
        n_inputs = len(meta["inputs"])

        def rule(ctx, *grads):
            import oarlock
            saved = ctx.saved if saves else ()   # a node that saved nothing has no save plan
            args = []
            for kind, k in plan:
                if kind == "saved":
                    args.append(saved[k])
                else:   # an output that took no gradient: zeros of its shape, as Paddle passes
                    g = grads[k]
                    if g is None:
                        shape, dtype = ctx.out_meta[k]
                        g = oarlock.zeros(list(shape), dtype=dtype)
                    args.append(g)
            outs = grad_fn(*args, **{name: ctx.attrs[name] for name in attr_names})
            outs = outs if isinstance(outs, tuple) else (outs,)
            result = [None] * n_inputs
            for target, value in zip(targets, outs):
                result[target] = value
            return tuple(result)
        rule.__name__ = f"{op}{'_grad' * level}_rule"
        return {"grad": rule, "saves": tuple(saves)}


def _unsupported(op: str, reason: str):
    """The module function of an op oarlock cannot run: raises why, naming the op."""
    def call(*args, **kwargs):
        raise NotImplementedError(reason)
    call.__name__ = call.__qualname__ = op
    call.__doc__ = f"Not available in oarlock: {reason}"
    return call


def _attr(op: str, name: str, how: str, value, keep: list) -> abi.Attr:
    """One attribute as an ABI struct; `keep` holds the buffers it points into until the call returns."""
    struct = abi.Attr()
    if how == "int":
        struct.i = int(value)
    elif how == "float":
        struct.f = float(value)
    elif how == "str":
        if not isinstance(value, str):
            raise TypeError(f"{op}(): argument '{name}' must be str, got {type(value).__name__} {value!r}")
        keep.append(value.encode())
        struct.s = keep[-1]
    else:
        items = value.tolist() if isinstance(value, np.ndarray) else value
        if not isinstance(items, (list, tuple)):
            raise TypeError(f"{op}(): argument '{name}' must be a list or tuple, got {type(value).__name__} {value!r}")
        struct.length = len(items)
        if how == "ints":
            buffer = (ctypes.c_int64 * max(len(items), 1))(*[_int(op, name, v) for v in items])
            struct.ints = buffer
        elif how == "floats":
            buffer = (ctypes.c_double * max(len(items), 1))(*[float(v) for v in items])
            struct.floats = buffer
        else:
            encoded = [str(v).encode() for v in items]
            buffer = (ctypes.c_char_p * max(len(items), 1))(*encoded)
            keep.append(encoded)
            struct.strings = buffer
        keep.append(buffer)
    return struct


def _int(op, name, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{op}(): argument '{name}' must be a list of int, got an item {type(v).__name__} {v!r}")
    return int(v)
