"""nn.Layer (alias Module) and nn.Parameter with Paddle's semantics.

A Parameter is an ordinary Tensor marked with parameter attributes (and
persistable=True), not a subclass: the dispatcher's fast path checks the
exact Tensor class, so parameters cost nothing extra per op.
`isinstance(t, nn.Parameter)` still works through the metaclass.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

import oarlock
from oarlock import Tensor
from oarlock.plugin_api import array_of, rebind
from oarlock_nn.layers.initializer import Constant, ParamAttr, XavierUniform
from oarlock_nn.layers.initializer_more import global_initializer


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.param_attrs is not None


class Parameter(metaclass=_ParameterMeta):
    """`nn.Parameter(data, requires_grad=True)`: a leaf Tensor that layers register and optimizers update."""

    def __new__(cls, data, requires_grad=True, attr: ParamAttr | None = None):
        tensor = data.detach().clone() if isinstance(data, Tensor) else oarlock.to_tensor(data)
        return make_parameter(tensor, attr or ParamAttr(trainable=requires_grad))


def make_parameter(tensor: Tensor, attr: ParamAttr) -> Tensor:
    tensor.param_attrs = attr
    tensor.persistable = True
    tensor.stop_gradient = not attr.trainable
    if attr.name:
        tensor.name = attr.name
    return tensor


class Layer:
    """The base class of every layer. Subclasses define `forward`; attributes that are Parameters,
    Layers or registered buffers are tracked and appear in `state_dict()` under their attribute path."""

    def __init__(self, name_scope=None, dtype="float32"):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_sub_layers", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistable", set())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_post_hooks", OrderedDict())
        object.__setattr__(self, "_hook_id", 0)
        self.training = True
        self._dtype = oarlock.dtypes.convert_dtype(dtype)
        self._name_scope = name_scope or type(self).__name__.lower()

    # -- attribute tracking -------------------------------------------------------------------
    def _check_init(self, what):
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}: call super().__init__() before assigning {what}")

    def __setattr__(self, name, value):
        # a Parameter or Layer also drops a plain instance attribute of that name (`self.x = None` then
        # `self.x = Linear(...)`), which would otherwise shadow it: Paddle and torch do the same
        if isinstance(value, Tensor) and value.param_attrs is not None:
            self._check_init(f"parameter {name!r}")
            self._remove_from(name, self.__dict__, self._sub_layers, self._buffers)
            self._parameters[name] = value
        elif isinstance(value, Layer):
            self._check_init(f"sublayer {name!r}")
            self._remove_from(name, self.__dict__, self._parameters, self._buffers)
            self._sub_layers[name] = value
        elif name in self.__dict__.get("_sub_layers", {}) and value is None:
            self._sub_layers[name] = None   # Paddle keeps the slot, emptied
        elif name in self.__dict__.get("_buffers", {}):
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"{type(self).__name__}.{name} is a buffer: assign a Tensor or None, "
                                f"got {type(value).__name__}")
            self._buffers[name] = value
        elif name in self.__dict__.get("_parameters", {}) and value is None:
            self._parameters[name] = None
        else:
            self._remove_from(name, self.__dict__.get("_parameters", {}), self.__dict__.get("_sub_layers", {}))
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name, *tables):
        for table in tables:
            table.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_sub_layers", "_buffers"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def __delattr__(self, name):
        for table in (self._parameters, self._sub_layers, self._buffers):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._sub_layers) | set(self._buffers))

    # -- creation -------------------------------------------------------------------------------
    def create_parameter(self, shape, attr=None, dtype=None, is_bias=False, default_initializer=None):
        """A new parameter of `shape`, initialised by attr.initializer, else default_initializer, else
        zeros for biases and Xavier-uniform for weights (Paddle's defaults)."""
        attr = ParamAttr.resolve(attr)
        if attr is None:
            return None
        dtype = oarlock.dtypes.convert_dtype(dtype or self._dtype)
        shape = [int(s) for s in shape]
        if any(s < 0 for s in shape):
            raise ValueError(f"{type(self).__name__}.create_parameter(): shape must be non-negative, got {shape}")
        tensor = oarlock.zeros(shape, dtype=dtype)
        # a global initializer (nn.initializer.set_global_initializer) replaces the layer's default
        init = (attr.initializer or global_initializer(is_bias) or default_initializer
                or (Constant(0.0) if is_bias else XavierUniform()))
        init(tensor)
        return make_parameter(tensor, attr)

    def add_parameter(self, name, parameter):
        if parameter is not None and not isinstance(parameter, Parameter):
            raise TypeError(f"{type(self).__name__}.add_parameter(): {name!r} must be a Parameter, "
                            f"got {type(parameter).__name__}")
        self._check_init(f"parameter {name!r}")
        self._parameters[name] = parameter
        return parameter

    def add_sublayer(self, name, sublayer):
        if sublayer is not None and not isinstance(sublayer, Layer):   # None: an empty slot, as Paddle allows
            raise TypeError(f"{type(self).__name__}.add_sublayer(): {name!r} must be a Layer or None, "
                            f"got {type(sublayer).__name__}")
        self._sub_layers[str(name)] = sublayer
        return sublayer

    def register_buffer(self, name, tensor, persistable=True):
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"{type(self).__name__}.register_buffer(): {name!r} must be a Tensor or None, "
                            f"got {type(tensor).__name__}")
        self._check_init(f"buffer {name!r}")
        self._buffers[name] = tensor
        if persistable:
            self._non_persistable.discard(name)
        else:
            self._non_persistable.add(name)
        if tensor is not None:
            tensor.persistable = persistable

    # -- traversal --------------------------------------------------------------------------------
    def named_sublayers(self, prefix="", include_self=False, layers_set=None):
        layers_set = set() if layers_set is None else layers_set
        if include_self and id(self) not in layers_set:
            layers_set.add(id(self))
            yield prefix, self
        for name, layer in self._sub_layers.items():
            if layer is None or id(layer) in layers_set:
                continue
            path = f"{prefix}.{name}" if prefix else name
            layers_set.add(id(layer))
            yield path, layer
            yield from layer.named_sublayers(path, False, layers_set)

    def sublayers(self, include_self=False):
        return [layer for _, layer in self.named_sublayers(include_self=include_self)]

    def named_children(self):
        seen = set()
        for name, layer in self._sub_layers.items():
            if layer is not None and id(layer) not in seen:
                seen.add(id(layer))
                yield name, layer

    def children(self):
        return [layer for _, layer in self.named_children()]

    def _named_members(self, table, prefix, include_sublayers):
        seen = set()
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers else [(prefix, self)]
        for path, layer in layers:
            for name, value in getattr(layer, table).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{path}.{name}" if path else name), value

    def named_parameters(self, prefix="", include_sublayers=True):
        yield from self._named_members("_parameters", prefix, include_sublayers)

    def parameters(self, include_sublayers=True):
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def named_buffers(self, prefix="", include_sublayers=True):
        yield from self._named_members("_buffers", prefix, include_sublayers)

    def buffers(self, include_sublayers=True):
        return [b for _, b in self.named_buffers(include_sublayers=include_sublayers)]

    # -- state --------------------------------------------------------------------------------------
    def state_dict(self, destination=None, include_sublayers=True, structured_name_prefix="", use_hook=True,
                   keep_vars=True):
        """Parameters and persistable buffers by attribute path ("fc1.weight"), in registration order."""
        out = OrderedDict() if destination is None else destination
        layers = (self.named_sublayers(include_self=True) if include_sublayers else [("", self)])
        for path, layer in layers:
            base = structured_name_prefix + (f"{path}." if path else "")
            for name, p in layer._parameters.items():
                if p is not None:
                    out[base + name] = p
            for name, b in layer._buffers.items():
                if b is not None and name not in layer._non_persistable:
                    out[base + name] = b
        return out

    def set_state_dict(self, state_dict, use_structured_name=True, strict=True):
        """Copy values into this layer's parameters and buffers in place. Returns (missing_keys,
        unexpected_keys); with strict=True (default) either kind, or a shape mismatch, raises."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mismatched = []
        for key, target in own.items():
            if key in state_dict:
                value = state_dict[key]
                shape = list(value.shape) if hasattr(value, "shape") else list(np.shape(value))
                if shape != target.shape:
                    mismatched.append(f"{key}: checkpoint {shape} vs layer {target.shape}")
        if strict and (missing or unexpected or mismatched):
            parts = []
            if missing:
                parts.append(f"missing keys {missing}")
            if unexpected:
                parts.append(f"unexpected keys {unexpected}")
            if mismatched:
                parts.append(f"shape mismatches [{'; '.join(mismatched)}]")
            raise ValueError(f"{type(self).__name__}.set_state_dict(): " + ", ".join(parts))
        if mismatched:
            raise ValueError(f"{type(self).__name__}.set_state_dict(): shape mismatches [{'; '.join(mismatched)}]")
        with oarlock.no_grad():
            for key, target in own.items():
                if key in state_dict:
                    value = state_dict[key]
                    target.set_value(value if isinstance(value, Tensor) else np.asarray(value))
        return missing, unexpected

    load_dict = set_dict = set_state_dict   # Paddle's older names (its vision models call both)

    def sharded_state_dict(self, structured_name_prefix: str = ""):
        """Paddle's Layer.sharded_state_dict: {name: ShardedWeight} for FlexCheckpoint. This layer's own
        parameters and persistable buffers are replicated; each sublayer gives its own (so tensor-parallel
        layers inside a plain model give their slices as shards). Needs oarlock-checkpoint."""
        build = getattr(oarlock.distributed, "build_sharded_state_dict", None)
        if build is None:
            raise RuntimeError(f"{type(self).__name__}.sharded_state_dict(): needs FlexCheckpoint "
                               f"(oarlock.distributed.build_sharded_state_dict); install oarlock-checkpoint")
        out: dict = {}
        self._sharded_into(out, build, structured_name_prefix, {id(self)})
        return out

    def _sharded_into(self, out: dict, build, prefix: str, seen: set) -> None:
        """Add this layer's replicated tensors and its sublayers' entries to `out`; a sublayer reached twice
        (shared) is given once, under its first name, as state_dict() does. A sublayer with its own
        sharded_state_dict (tensor-parallel layers, wrappers) gives its whole subtree."""
        out.update(build(self.state_dict(include_sublayers=False), None, prefix))
        for name, layer in self._sub_layers.items():
            if layer is None or id(layer) in seen:
                continue
            seen.add(id(layer))
            if type(layer).sharded_state_dict is not Layer.sharded_state_dict:
                out.update(layer.sharded_state_dict(f"{prefix}{name}."))
            else:
                layer._sharded_into(out, build, f"{prefix}{name}.", seen)

    def load_state_dict(self, state_dict, strict=True):
        return self.set_state_dict(state_dict, strict=strict)

    # -- modes, hooks, conversion ----------------------------------------------------------------------
    def train(self, mode=True):
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def _add_hook(self, table, hook):
        hook_id = self._hook_id
        object.__setattr__(self, "_hook_id", hook_id + 1)
        table[hook_id] = hook
        return _RemovableHandle(table, hook_id)

    def register_forward_pre_hook(self, hook):
        """hook(layer, inputs) runs before forward; a non-None return replaces the inputs."""
        return self._add_hook(self._forward_pre_hooks, hook)

    def register_forward_post_hook(self, hook):
        """hook(layer, inputs, output) runs after forward; a non-None return replaces the output."""
        return self._add_hook(self._forward_post_hooks, hook)

    register_forward_hook = register_forward_post_hook

    def __call__(self, *inputs, **kwargs):
        if not (self._forward_pre_hooks or self._forward_post_hooks):   # the common case: no hooks
            return self.forward(*inputs, **kwargs)
        for hook in list(self._forward_pre_hooks.values()):
            result = hook(self, inputs)
            if result is not None:
                inputs = result if isinstance(result, tuple) else (result,)
        output = self.forward(*inputs, **kwargs)
        for hook in list(self._forward_post_hooks.values()):
            result = hook(self, inputs, output)
            if result is not None:
                output = result
        return output

    def forward(self, *inputs, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def apply(self, fn):
        for layer in self.sublayers(include_self=True)[::-1]:
            fn(layer)
        return self

    def to(self, device=None, dtype=None, blocking=None):
        """Move parameters and buffers to `device` and/or cast floating ones to `dtype`, in place."""
        with oarlock.no_grad():
            for t in self.parameters() + self.buffers():
                moved = t
                if device is not None:
                    moved = moved.to(device)
                if dtype is not None and moved.dtype.is_floating_point:
                    moved = moved.astype(dtype)
                if moved is not t:
                    rebind(t, array_of(moved), moved.place)
        if dtype is not None:
            self._dtype = oarlock.dtypes.convert_dtype(dtype)
        return self

    def astype(self, dtype):
        return self.to(dtype=dtype)

    def float(self):
        return self.to(dtype="float32")

    def clear_gradients(self, set_to_zero=True):
        for p in self.parameters():
            p.clear_grad()

    clear_grad = clear_gradients

    def full_name(self):
        return self._name_scope

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"({name}): " + repr(layer).replace("\n", "\n  ") for name, layer in self._sub_layers.items()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}({extra}\n  " + "\n  ".join(lines) + "\n)"


Module = Layer


class _RemovableHandle:
    def __init__(self, table, key):
        self._table, self._key = table, key

    def remove(self):
        self._table.pop(self._key, None)
