"""torch.nn.Module and its containers, as oarlock nn.Layer subclasses (so oarlock code, its optimizers and
checkpoints take them): torch's names and return values on top of Layer's parameter/buffer/sublayer tracking
(named_modules, register_parameter/module, `_modules`, load_state_dict's (missing, unexpected) result,
state_dict(prefix=, keep_vars=), to(dtype) / to(device) / to(tensor), zero_grad(set_to_none=True))."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import oarlock
from oarlock.plugin_api import array_of, rebind

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])
Parameter = oarlock.nn.Parameter


def _parse_to(args, kwargs):
    """Module.to / Tensor.to arguments: (device), (dtype), (device, dtype), (tensor), keywords."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    for a in args:
        if isinstance(a, oarlock.Tensor):
            dtype = a.dtype
        elif isinstance(a, oarlock.dtype):
            dtype = a
        elif isinstance(a, str) and a in ("float32", "float64", "float16", "bfloat16"):
            dtype = a
        elif a is not None and not isinstance(a, bool):
            device = a
    return device, dtype


class Module(oarlock.nn.Layer):
    """torch.nn.Module over oarlock's Layer."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    @property
    def _modules(self):
        return self._sub_layers

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    # -- registration ------------------------------------------------------------------------------
    def register_parameter(self, name, param):
        if param is None:
            self._parameters[name] = None
        else:
            setattr(self, name, param)

    def register_buffer(self, name, tensor, persistent=True):
        super().register_buffer(name, tensor, persistable=persistent)

    def add_module(self, name, module):
        if module is None:
            self._sub_layers[name] = None
        else:
            setattr(self, name, module)

    register_module = add_module

    # -- traversal ---------------------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._sub_layers.items():
            if child is None:
                continue
            yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate) \
                if isinstance(child, Module) else _layer_modules(child, memo, f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _name, module in self.named_modules():
            yield module

    def _named_tensors(self, table, prefix, recurse, remove_duplicate):
        """(dotted name, tensor) of the `table` ("_parameters" or "_buffers") of this module and, with recurse,
        of every module below it, a shared tensor once unless remove_duplicate is False (torch's order)."""
        seen = set()
        for mod_prefix, module in (self.named_modules(prefix=prefix) if recurse else [(prefix, self)]):
            for name, t in getattr(module, table).items():
                if t is None or (remove_duplicate and id(t) in seen):
                    continue
                seen.add(id(t))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), t

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_tensors("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _name, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_tensors("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _name, b in self.named_buffers(recurse=recurse):
            yield b

    def named_children(self):
        for name, child in self._sub_layers.items():
            if child is not None:
                yield name, child

    def children(self):
        for _name, child in self.named_children():
            yield child

    def get_submodule(self, target):
        module = self
        for part in target.split(".") if target else []:
            if part not in module._sub_layers:
                raise AttributeError(f"{type(module).__name__} has no submodule {part!r} (in {target!r})")
            module = module._sub_layers[part]
        return module

    def get_parameter(self, target):
        path, _, name = target.rpartition(".")
        return getattr(self.get_submodule(path), name)

    get_buffer = get_parameter

    # -- state -------------------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        out = OrderedDict() if destination is None else destination
        # every path to a shared (tied) module is listed, as torch's state_dict does
        for mod_prefix, module in self.named_modules(prefix=prefix.rstrip("."), remove_duplicate=False):
            head = f"{mod_prefix}." if mod_prefix else ""
            for name, p in module._parameters.items():
                if p is not None:
                    out[head + name] = p if keep_vars else p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistable:
                    out[head + name] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict, strict=True, assign=False):
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: missing keys "
                               f"{missing}, unexpected keys {unexpected}")
        with oarlock.no_grad():
            for key, target in own.items():
                if key in state_dict:
                    value = state_dict[key]
                    value = value if isinstance(value, oarlock.Tensor) else oarlock.to_tensor(value)
                    if list(value.shape) != list(target.shape):
                        raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}: size "
                                           f"mismatch for {key}: copying a param with shape {list(value.shape)}, "
                                           f"the shape in current model is {list(target.shape)}")
                    target.copy_(value.astype(target.dtype))
        return _IncompatibleKeys(missing, unexpected)

    # -- modes, grads, casts -----------------------------------------------------------------------
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError(f"Module.train(): mode must be a bool, got {type(mode).__name__}")
        for module in self.modules():
            object.__setattr__(module, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.stop_gradient = not requires_grad
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def to(self, *args, **kwargs):
        """Cast floating parameters and buffers in place (each keeps its identity, as optimizers hold them);
        there is one device here, so moving to it changes nothing."""
        _device, dtype = _parse_to(args, kwargs)
        if dtype is not None:
            with oarlock.no_grad():
                for t in [*self.parameters(), *self.buffers()]:
                    if t.dtype.is_floating_point and t.dtype != dtype:
                        rebind(t, array_of(t.astype(dtype)))
        return self

    def float(self):
        return self.to(oarlock.float32)

    def double(self):
        return self.to(oarlock.float64)

    def half(self):
        return self.to(oarlock.float16)

    def bfloat16(self):
        return self.to(oarlock.bfloat16)

    def cpu(self):
        return self

    def cuda(self, device=None):
        return self

    def type(self, dst_type):
        from oarlock_torch_proxy.facade.dtypes import resolve_type
        return self.to(resolve_type(dst_type))

    def share_memory(self):
        return self

    def extra_repr(self):
        return ""


def _layer_modules(layer, memo, prefix):
    """named_modules through a plain oarlock Layer held by a torch Module."""
    if id(layer) in memo:
        return
    memo.add(id(layer))
    yield prefix, layer
    for name, child in layer._sub_layers.items():
        if child is not None:
            yield from _layer_modules(child, memo, f"{prefix}.{name}")


# The containers are oarlock's (their storage, indexing and updates) with Module's torch methods on top; the
# oarlock class comes first so that its forward/__getitem__ win over Module's. Only what torch does differently
# is written here.

class Sequential(oarlock.nn.Sequential, Module):
    def __getitem__(self, idx):
        if isinstance(idx, slice):   # torch keeps the names of a slice (Paddle renumbers them)
            return type(self)(OrderedDict(list(self._sub_layers.items())[idx]))
        return super().__getitem__(idx)


class ModuleList(oarlock.nn.LayerList, Module):
    def __iadd__(self, modules):
        return self.extend(modules)

    def __setitem__(self, idx, module):   # through __setattr__: None and type checks as for an attribute
        setattr(self, self._key(idx), module)


class ModuleDict(oarlock.nn.LayerDict, Module):
    pass


def _as_parameter(value):
    """torch's containers wrap a plain tensor as a Parameter (oarlock's, like Paddle's, reject it)."""
    return value if isinstance(value, Parameter) else Parameter(value)


class ParameterList(oarlock.nn.ParameterList, Module):
    def __init__(self, values=None):
        super().__init__(values)

    def append(self, value):
        return super().append(_as_parameter(value))

    def extend(self, values):
        for value in values:
            self.append(value)
        return self


class ParameterDict(oarlock.nn.ParameterDict, Module):
    def __setitem__(self, key, value):
        super().__setitem__(key, _as_parameter(value))
