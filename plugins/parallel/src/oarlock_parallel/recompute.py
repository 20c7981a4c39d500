"""Activation recomputation (Paddle 3.2's paddle.distributed.fleet.recompute / fleet.utils.recompute).

`recompute(function, *args, **kwargs)` runs `function` without recording a graph and keeps only its
inputs; backward runs it again with grad on, under the generator states (oarlock's per-device states, the
model-parallel RNG tracker's, numpy's and Python's) and the autocast state of the first run, then
back-propagates through that second graph from inside the outer backward: parameters receive their
gradients there, the inputs' gradients are returned to the outer graph. Values and gradients are those of
calling `function` directly (dropout draws the same masks).

Paddle has two implementations (use_reentrant=True: a PyLayer; False: saved-tensor hooks). Both give the
same values and gradients; here both run the PyLayer, and `use_reentrant=False` also tracks tensors passed as
keyword arguments (Paddle's reentrant form refuses keyword-only parameters; so does this one).

`offload_indices=[i, ...]` (positions among the positional arguments, after keyword arguments are bound to
positions as Paddle does) keeps those inputs in the device's host pool between forward and backward
(offload.to_host) instead of device memory; backward reloads them. Paddle moves the caller's tensor itself to
the CPU (its buffer is shared into the argument); here the caller's tensor is left as it is and the block
keeps a host copy, so its device memory is freed when the caller drops it. A tuple at an offloaded position
is refused, as in Paddle.

`recompute_hybrid(ctx, function, *args, **kwargs)` is Paddle's hybrid-parallel form: ctx["mp_group"] (required),
ctx["offload"] (keep every input in the host pool) and ctx["partition"] (each rank of the model-parallel group
keeps only its 1/mp of every flattened input, gathered again in backward; the element count must divide by the
group size). Keyword arguments are passed through as constants, as in Paddle."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import random

import numpy as np

import oarlock
import oarlock.nn as nn
from oarlock.autograd import PyLayer
from oarlock.plugin_api import AUTOCAST, set_autocast
from oarlock_parallel.offload import to_host
from oarlock_parallel.rng import get_rng_state_tracker

__all__ = ["recompute", "recompute_sequential", "recompute_hybrid", "check_recompute_necessary",
           "switch_rng_state_tracker", "detach_variable", "custom_state_manager", "CustomStatesManager"]

logger = logging.getLogger(__name__)


def check_recompute_necessary(inputs):
    """Warn (as Paddle does) when no tensor input of a recompute block needs a gradient."""
    flags = []
    for value in inputs:
        if isinstance(value, oarlock.Tensor):
            flags.append(value.stop_gradient)
        elif type(value) is tuple:
            flags.extend(t.stop_gradient for t in value if isinstance(t, oarlock.Tensor))
    if all(flags):
        logger.warning("[Recompute]: None of the inputs to current recompute block need grad, therefore there is "
                       "NO need to recompute this block in backward !")


class CustomStatesManager:
    """A user-supplied extra state saved with the generators (Paddle's custom_state_manager): set the getter and
    the setter once each."""

    def __init__(self):
        self.custom_get_state_func = None
        self.custom_set_state_func = None

    def set_custom_get_state_func(self, custom_get_state_func):
        if self.custom_get_state_func is not None:
            raise ValueError("CustomStatesManager.set_custom_get_state_func(): already set; it can be set once")
        self.custom_get_state_func = custom_get_state_func

    def set_custom_set_state_func(self, custom_set_state_func):
        if self.custom_set_state_func is not None:
            raise ValueError("CustomStatesManager.set_custom_set_state_func(): already set; it can be set once")
        self.custom_set_state_func = custom_set_state_func


custom_state_manager = CustomStatesManager()


@contextlib.contextmanager
def switch_rng_state_tracker(rng_state, tracker, numpy_state, random_state, custom_state=None,
                             custom_get_state_func=None, custom_set_state_func=None):
    """Run a block under the given generator states (oarlock's, the tracker's, numpy's, Python's and an optional
    custom one), restoring the current ones afterwards."""
    saved = (oarlock.get_rng_state(), get_rng_state_tracker().get_states_tracker(), np.random.get_state(),
             random.getstate())
    oarlock.set_rng_state(rng_state)
    get_rng_state_tracker().set_states_tracker(tracker)
    np.random.set_state(numpy_state)
    random.setstate(random_state)
    if custom_state is not None:
        if custom_get_state_func is None or custom_set_state_func is None:
            raise ValueError("switch_rng_state_tracker(): a custom_state needs custom_get_state_func and "
                             "custom_set_state_func")
        saved_custom = custom_get_state_func()
        custom_set_state_func(custom_state)
    try:
        yield
    finally:
        oarlock.set_rng_state(saved[0])
        get_rng_state_tracker().set_states_tracker(saved[1])
        np.random.set_state(saved[2])
        random.setstate(saved[3])
        if custom_state is not None:
            custom_set_state_func(saved_custom)


def _detach(t):
    out = t.detach()
    out.stop_gradient = t.stop_gradient
    return out


def detach_variable(inputs):
    """The inputs with every tensor (and every tensor in a tuple) detached, keeping stop_gradient."""
    out = []
    for value in inputs:
        if isinstance(value, oarlock.Tensor):
            out.append(_detach(value))
        elif type(value) is tuple and value and all(isinstance(t, oarlock.Tensor) for t in value):
            out.append(tuple(_detach(t) for t in value))
        else:
            out.append(value)
    return tuple(out)


class _Plan:
    """The call to repeat: positional values and keyword values with their tensors taken out (a tensor, or a
    tuple of tensors, at the top level), so the PyLayer sees the tensors as its inputs."""

    def __init__(self, function, args, kwargs, offload_indices=()):
        self.function = function
        self.values = list(args) + list(kwargs.values())
        self.keys = list(kwargs)
        self.slots = []        # (index into values, tuple length or None)
        self.tensors = []
        for i, value in enumerate(self.values):
            if isinstance(value, oarlock.Tensor):
                self.slots.append((i, None))
                self.tensors.append(value)
            elif type(value) is tuple and value and all(isinstance(t, oarlock.Tensor) for t in value):
                flags = {t.stop_gradient for t in value}
                if len(flags) > 1:
                    raise ValueError("recompute(): a tuple argument holds tensors with different stop_gradient; "
                                     "accepted: all of a tuple's tensors alike")
                self.slots.append((i, len(value)))
                self.tensors.extend(value)
            elif type(value) is tuple and any(isinstance(t, oarlock.Tensor) for t in value):
                raise ValueError("recompute(): a tuple argument mixes tensors and other values; accepted: a tuple "
                                 "of tensors only")
        self.offload = self._offloaded(offload_indices)   # positions in self.tensors kept on host

    def release(self):
        """Drop the plan's own references to the input tensors (backward passes them to run()), so that what
        the block keeps is only what forward saved or stashed."""
        for i, _ in self.slots:
            self.values[i] = None
        self.tensors = None

    def stash(self, t):
        """What the block keeps of an offloaded input until backward: its host copy (restore() reloads it)."""
        return to_host(t)

    def _offloaded(self, indices) -> frozenset:
        if not isinstance(indices, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                            for i in indices):
            raise TypeError(f"recompute(): offload_indices must be a list of argument positions (ints); got "
                            f"{indices!r}")
        n = len(self.values) - len(self.keys)
        bad = [i for i in indices if not 0 <= i < n]
        if bad:
            raise ValueError(f"recompute(): offload_indices {bad} name no positional argument; the function gets "
                             f"{n} (positions 0..{n - 1})")
        positions, k = set(), 0
        for i, length in self.slots:
            if i in indices:
                if length is not None:
                    raise ValueError(f"recompute(): offload_indices should not contain a tuple of tensors "
                                     f"(position {i}), as in Paddle")
                positions.add(k)
            k += 1 if length is None else length
        return frozenset(positions)

    def run(self, tensors):
        values = list(self.values)
        it = iter(tensors)
        for i, length in self.slots:
            values[i] = next(it) if length is None else tuple(next(it) for _ in range(length))
        n = len(values) - len(self.keys)
        return self.function(*values[:n], **dict(zip(self.keys, values[n:])))


class _RecomputeFunction(PyLayer):
    @staticmethod
    def forward(ctx, plan, preserve, get_custom, set_custom, *tensors):
        ctx.plan, ctx.preserve = plan, preserve
        if preserve:
            ctx.states = (oarlock.get_rng_state(), get_rng_state_tracker().get_states_tracker(),
                          np.random.get_state(), random.getstate(), get_custom(), get_custom, set_custom)
        ctx.autocast = AUTOCAST.state()
        with oarlock.no_grad():
            outputs = plan.run(tensors)
        # inputs kept elsewhere than in device memory (offloaded, or partitioned by recompute_hybrid) are
        # stashed; the others are saved as a PyLayer saves (so saved_tensors_hooks see them)
        ctx.stash = {k: plan.stash(t) for k, t in enumerate(tensors) if k in plan.offload}
        ctx.save_for_backward(*[t for k, t in enumerate(tensors) if k not in plan.offload])
        plan.release()
        return outputs

    @staticmethod
    def backward(ctx, *grads):
        kept = iter(ctx.saved_tensor())
        inputs = [_detach(ctx.stash[k].restore() if k in ctx.stash else next(kept))
                  for k in range(len(ctx.stash) + len(ctx.saved_tensor()))]
        switch = switch_rng_state_tracker(*ctx.states) if ctx.preserve else contextlib.nullcontext()
        previous = set_autocast(*ctx.autocast)
        try:
            with switch, oarlock.enable_grad():
                outputs = ctx.plan.run(inputs)
        finally:
            set_autocast(*previous)
        outputs = (outputs,) if isinstance(outputs, oarlock.Tensor) else tuple(outputs)
        pairs = [(out, g) for out, g in zip(outputs, grads)
                 if isinstance(out, oarlock.Tensor) and not out.stop_gradient and g is not None]
        if not pairs:
            raise RuntimeError("recompute(): none of the outputs needs a gradient; this recompute() is not "
                               "necessary")
        oarlock.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
        return tuple(None if t.stop_gradient else t.grad for t in inputs)


def _bind_positional(function, args, kwargs):
    """Paddle's reentrant form: keyword arguments are bound onto the function's positional parameters."""
    signature = inspect.signature(function.forward if isinstance(function, nn.Layer) else function)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    values = []
    for value, param in zip(bound.arguments.values(), signature.parameters.values()):
        if param.kind == param.VAR_POSITIONAL:
            values.extend(value)
        elif param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            values.append(value)
        elif param.kind == param.VAR_KEYWORD:
            values.extend(value.values())
        else:
            raise ValueError("recompute(): keyword-only arguments are not supported with use_reentrant=True "
                             f"(parameter {param.name!r}); pass use_reentrant=False")
    return values


def recompute(function, *args, **kwargs):
    """Run `function(*args, **kwargs)` keeping only its inputs, and run it again in backward (see the module
    docstring). Keyword options: preserve_rng_state (default True), use_reentrant (default True),
    offload_indices (default []: positional arguments kept in the host pool until backward)."""
    preserve = bool(kwargs.pop("preserve_rng_state", True))
    use_reentrant = bool(kwargs.pop("use_reentrant", True))
    offload_indices = kwargs.pop("offload_indices", [])
    if not callable(function):
        raise TypeError(f"recompute(): argument 'function' must be callable (a Layer or a function); got "
                        f"{type(function).__name__}")
    if not oarlock.is_grad_enabled():
        return function(*args, **kwargs)
    check_recompute_necessary(list(args) + list(kwargs.values()))
    if use_reentrant:
        plan = _Plan(function, _bind_positional(function, args, kwargs), {}, offload_indices)
    else:
        plan = _Plan(function, args, kwargs, offload_indices)
    get_custom = custom_state_manager.custom_get_state_func or (lambda x=None: None)
    set_custom = custom_state_manager.custom_set_state_func or (lambda x=None: None)
    return _RecomputeFunction.apply(plan, preserve, get_custom, set_custom, *plan.tensors)


class _Partitioned:
    """recompute_hybrid's stash of one input: this rank's 1/mp of the flattened values (in the host pool with
    offload); restore() gathers the parts over the group into the input's shape."""

    def __init__(self, t, group, offload):
        self.shape, self.stop_gradient, self.group = t.shape, t.stop_gradient, group
        flat = t.detach().reshape([-1])
        n, k = flat.shape[0], group.nranks
        if k > 1:
            if n == 0 or n % k:
                raise ValueError(f"recompute_hybrid(): an input of shape {t.shape} ({n} elements) cannot be "
                                 f"partitioned over the {k} ranks of mp_group; its element count must be a "
                                 f"non-zero multiple of {k}")
            flat = flat[group.rank * (n // k):(group.rank + 1) * (n // k)].clone()
        self.part = to_host(flat) if offload else flat

    def restore(self):
        part = self.part if isinstance(self.part, oarlock.Tensor) else self.part.to_device()
        if self.group.nranks > 1:
            import oarlock.distributed as dist
            pieces: list = []
            dist.all_gather(pieces, part, group=self.group)
            part = oarlock.concat(pieces)
        out = part.reshape(self.shape)
        out.stop_gradient = self.stop_gradient
        return out


class _HybridPlan(_Plan):
    """recompute_hybrid's plan: every input stashed (partitioned and/or offloaded) when the ctx asks."""

    def __init__(self, function, args, group, offload, partition):
        super().__init__(function, args, {})
        self.group, self.host, self.partition = group, offload, partition
        if offload or partition:
            self.offload = frozenset(range(len(self.tensors)))

    def stash(self, t):
        if self.partition:
            return _Partitioned(t, self.group, self.host)
        return to_host(t)


def recompute_hybrid(ctx, function, *args, **kwargs):
    """Paddle's recompute_hybrid (module docstring): recompute `function(*args, **kwargs)` with the inputs kept
    as ctx says ({"mp_group": Group, "offload": bool = False, "partition": bool = False})."""
    if not isinstance(ctx, dict) or ctx.get("mp_group") is None:
        raise ValueError(f"recompute_hybrid(): ctx must be a dict holding 'mp_group' (the model-parallel Group the "
                         f"inputs are partitioned over) and optionally 'offload' and 'partition'; got {ctx!r}")
    if not callable(function):
        raise TypeError(f"recompute_hybrid(): argument 'function' must be callable; got {type(function).__name__}")
    call = functools.partial(function, **kwargs) if kwargs else function
    if not oarlock.is_grad_enabled():
        return call(*args)
    check_recompute_necessary(args)
    plan = _HybridPlan(call, args, ctx["mp_group"], bool(ctx.get("offload", False)),
                       bool(ctx.get("partition", False)))
    get_custom = custom_state_manager.custom_get_state_func or (lambda x=None: None)
    set_custom = custom_state_manager.custom_set_state_func or (lambda x=None: None)
    return _RecomputeFunction.apply(plan, True, get_custom, set_custom, *plan.tensors)


def recompute_sequential(ctx, functions, *args, **kwargs):
    """Recompute a Sequential (or list of callables) in ctx['segments'] chunks (default 1); the last chunk runs
    normally. ctx['preserve_rng_state'] defaults to True."""
    segments = ctx.get("segments", 1)
    preserve = ctx.get("preserve_rng_state", True)
    if isinstance(functions, nn.Sequential):
        functions = list(functions.children())

    def run(begin, end):
        def chain(x):
            for i in range(begin, end + 1):
                x = functions[i](x)
            return x
        return chain

    size = len(functions) // segments
    end = -1
    for begin in range(0, size * (segments - 1), size):
        end = begin + size - 1
        args = (recompute(run(begin, end), *args, preserve_rng_state=preserve, **kwargs),)
    return run(end + 1, len(functions) - 1)(*args)
