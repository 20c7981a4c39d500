"""The dynamic autograd engine: graph nodes, grad modes, backward, grad() and PyLayer.

The graph is recorded only while grad mode is on and some input of an op has
`stop_gradient=False`. A Node points at the nodes (or leaf tensors) of its
inputs, never at its own outputs; an output it saves for backward is kept as
a raw array and re-wrapped on access, so no reference cycle keeps
activations alive. Rules see Tensors and call ordinary ops, so with
`create_graph=True` the backward pass is itself recorded and can be
differentiated again.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled", "grad", "backward",
           "PyLayer", "PyLayerContext", "Function", "Node", "record", "RecordSpec", "saved_tensors_hooks"]


class _GradMode(threading.local):
    """Grad mode, per thread (as in PyTorch and Paddle): a thread starts with it on, and `no_grad` in one
    thread never changes another's. `enabled` is a class-level default, so a new thread reads True
    without any per-thread set-up."""

    enabled = True


GRAD_MODE = _GradMode()  # read on the hot path as one attribute of a thread-local object


class _ObserverSlot:
    """The observer (oarlock.dispatch.set_observer) that op calls and backward nodes are reported to;
    None, the usual case, costs the engine one test per node (op frontends swap code instead)."""

    __slots__ = ("current",)

    def __init__(self):
        self.current = None


OBSERVER = _ObserverSlot()


class _SavedTensorsHooks:
    """The pack/unpack pair of the active `saved_tensors_hooks`, or None: one pair at a time for the whole
    process, as in Paddle. Saving reads `pack` once per recorded node that saves something."""

    __slots__ = ("pack", "unpack")

    def __init__(self):
        self.pack = self.unpack = None


SAVED_HOOKS = _SavedTensorsHooks()


class saved_tensors_hooks:
    """Paddle's paddle.autograd.saved_tensors_hooks(pack_hook, unpack_hook): while the context is active,
    every tensor an op (or `PyLayerContext.save_for_backward`) saves for backward is passed to
    `pack_hook(tensor)` and only its result is kept; backward calls `unpack_hook(packed)` for each saved
    tensor it reads and needs a Tensor with the original's shape and dtype back (an activation can be
    moved to host memory and back this way). As in Paddle, one pair is active at a time: entering a
    second context inside the first raises ValueError, and leaving a context removes the hooks."""

    def __init__(self, pack_hook, unpack_hook):
        for name, hook in (("pack_hook", pack_hook), ("unpack_hook", unpack_hook)):
            if not callable(hook):
                raise TypeError(f"saved_tensors_hooks(): argument {name!r} must be callable; got "
                                f"{type(hook).__name__}")
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        if SAVED_HOOKS.pack is not None:
            raise ValueError("saved_tensors_hooks(): only one pair of hooks is allowed at a time; another "
                             "saved_tensors_hooks context is already active")
        SAVED_HOOKS.pack, SAVED_HOOKS.unpack = self.pack_hook, self.unpack_hook
        return None

    def __exit__(self, *exc):
        SAVED_HOOKS.pack = SAVED_HOOKS.unpack = None
        return False


class _Packed:
    """One saved tensor as a pack hook returned it, with what restoring it needs: its shape and dtype (to
    check the unpacked tensor) and its graph identity (used only when backward itself is recorded,
    create_graph=True)."""

    __slots__ = ("value", "shape", "dtype", "node", "oidx", "leaf", "stop_gradient")

    def __init__(self, t, value, identity=True):
        self.value = value
        self.shape, self.dtype, self.stop_gradient = t._data.shape, t._dtype, t.stop_gradient
        # an output is re-wrapped with its own node as identity: keep no reference to the output Tensor
        self.node = self.oidx = self.leaf = None
        if identity:
            self.node = t._node
            self.oidx = None if t._node is None else t._oidx
            self.leaf = t if t._node is None and not t.stop_gradient else None

    def unpack(self, unpack_hook, what):
        t = unpack_hook(self.value)
        if t.__class__ is not _Tensor or t._data.shape != self.shape or t._dtype is not self.dtype:
            got = (f"a Tensor of shape {list(t._data.shape)} and dtype {t._dtype}" if isinstance(t, _Tensor)
                   else type(t).__name__)
            raise RuntimeError(f"saved_tensors_hooks: unpack_hook returned {got} for {what}; it must return a "
                               f"Tensor of shape {list(self.shape)} and dtype {self.dtype}, with the values "
                               f"pack_hook was given")
        return t


def is_grad_enabled() -> bool:
    return GRAD_MODE.enabled


class _GradSwitch:
    """Context manager and decorator that sets grad mode, restoring the old mode on exit."""

    _mode = True

    def __enter__(self):
        self._previous = GRAD_MODE.enabled
        GRAD_MODE.enabled = self._mode
        return self

    def __exit__(self, *exc):
        GRAD_MODE.enabled = self._previous
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradSwitch):
    """Disable graph recording: `with oarlock.no_grad():` or `@oarlock.no_grad()`."""

    _mode = False


class enable_grad(_GradSwitch):
    """Enable graph recording inside a no_grad region."""

    _mode = True


class set_grad_enabled(_GradSwitch):
    """`set_grad_enabled(False)` switches grad mode now; as a context manager it restores it on exit."""

    def __init__(self, mode: bool):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled(): mode must be a bool, got {type(mode).__name__} {mode!r}")
        self._mode = mode
        self._previous = GRAD_MODE.enabled
        GRAD_MODE.enabled = mode

    def __enter__(self):
        return self

    def __call__(self, fn):
        GRAD_MODE.enabled = self._previous  # used as a decorator: don't change the mode now
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper


class Node:
    """One recorded op. It is also the `ctx` its backward rule receives.

    edges[i] is (node, output index) for a non-leaf input, (tensor, 0) for a
    leaf that wants a gradient, or None. meta[i] is that input's (shape, dtype).
    """

    # Hot attributes live in slots; rarely set ones (saved tensors, hooks, the released flag) in
    # __dict__ with class-level defaults, so recording a node sets only what every node has.
    __slots__ = ("name", "rule", "edges", "meta", "attrs", "place", "out_meta", "__dict__")
    _saved_in = _saved_out = _save_plan = _save_needs = None
    # versions of what was saved, checked when backward reads it: one per "in" entry of the save plan
    # (of that input tensor, or a tuple for a list input; None: every saved input was at version 0),
    # and the outputs' counters with their values
    _in_versions = _out_counters = _out_versions = None
    hooks = None
    released = False
    _unpack = None   # the unpack hook, when saved_tensors_hooks packed what this node saved

    def __init__(self, name, rule, edges, meta, attrs=None, place=None):
        self.name = name
        self.rule = rule
        self.edges = edges
        self.meta = meta
        self.attrs = attrs
        self.place = place
        self.out_meta = None

    @property
    def saved(self) -> tuple:
        """The tensors the op asked to save, in the order its OpDef named them."""
        if self.released:
            raise RuntimeError(f"backward through op {self.name!r} a second time: its saved tensors were "
                               f"freed after the first backward; pass retain_graph=True to the first call")
        from oarlock._tensor import Tensor
        if self._unpack is not None:
            return self._saved_packed()
        result = []
        k = 0
        versions, edges = self._in_versions, self.edges
        for (kind, index), need in zip(self._save_plan, self._save_needs):
            # a save needed only for another input's gradient ("x:y") is checked only when y takes one
            wanted = need is None or edges[need] is not None
            if kind == "in":
                saved = self._saved_in[index]
                if wanted and saved is not None:
                    version = 0 if versions is None else versions[k]
                    vc = getattr(saved, "_vc", None)   # a plain tensor's check inline (a list: _check_version)
                    if saved.__class__ is list or (0 if vc is None else vc.value) != version:
                        self._check_version(saved, version, f"input {index}")
                k += 1
                result.append(saved)
            else:  # an output: re-wrap the array and point it at this node so higher orders work
                counter, expected = self._out_counters[index], self._out_versions[index]
                if wanted and counter.value != expected:
                    self._modified(f"output {index}", self._saved_out[index].shape, counter.value, expected)
                t = Tensor._wrap(self._saved_out[index], self.place, False)
                t._node, t._oidx, t._vc = self, index, counter
                result.append(t)
        return tuple(result)

    def _saved_packed(self) -> tuple:
        """`saved` when a pack hook kept the tensors: unpack each and give it the original's graph identity
        while backward is recorded (higher-order gradients). As in Paddle and PyTorch, versions are not
        checked: the pack hook owns the value (a host copy is a snapshot taken before any later write)."""
        result, unpack = [], self._unpack
        for kind, index in self._save_plan:
            packed = (self._saved_in if kind == "in" else self._saved_out)[index]
            what = f"{'input' if kind == 'in' else 'output'} {index} of op {self.name!r}"
            if kind == "out":
                t = _Tensor._wrap(packed.unpack(unpack, what)._data, self.place, False)
                t._node, t._oidx, t._vc = self, index, self._out_counters[index]
                result.append(t)
            elif packed.__class__ is list:
                result.append([_unpack_input(p, unpack, f"{what}[{i}]") for i, p in enumerate(packed)])
            else:
                result.append(_unpack_input(packed, unpack, what))
        return tuple(result)

    def _check_version(self, saved, version, what):
        if saved is None:
            return
        if saved.__class__ is list:
            for i, t in enumerate(saved):
                self._check_version(t, version if version.__class__ is int else version[i], f"{what}[{i}]")
        elif saved.inplace_version != version:
            self._modified(what, saved._data.shape, saved.inplace_version, version)

    def _modified(self, what, shape, now, expected):
        raise RuntimeError(f"one of the variables needed for gradient computation has been modified by an "
                           f"inplace operation: {what} of op {self.name!r} (shape {list(shape)}), saved for its "
                           f"backward, is at version {now}; expected version {expected} instead. Hint: work on a "
                           f"copy (x.clone()) or use the out-of-place op before {self.name!r} reads it")

    @property
    def needs_input_grad(self) -> tuple:
        return tuple(edge is not None for edge in self.edges)

    def add_hook(self, index, hook):
        if self.hooks is None:
            self.hooks = {}
        self.hooks.setdefault(index, []).append(hook)

    def __repr__(self):
        return f"<Node {self.name}>"


def _run_hooks(hooks, grad):
    for hook in hooks:
        result = hook(grad)
        if result is not None:
            grad = result
    return grad


def _collect(roots):
    """All nodes reachable from the roots, in discovery order."""
    seen, order, stack = set(), [], [n for n in roots if n is not None]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        order.append(node)
        if node.released:
            raise RuntimeError(f"backward through op {node.name!r} a second time: the graph was freed by the "
                               f"first backward; pass retain_graph=True to the first call")
        for edge in node.edges:
            if edge is not None and edge[0].__class__ is Node:
                stack.append(edge[0])
    return order


def _needed(nodes, wanted_nodes, wanted_leaves):
    """The nodes that lie on some path to a wanted node or leaf (for grad(..., inputs))."""
    memo = {}

    def visit(node):
        if node in memo:
            return memo[node]
        memo[node] = False  # cycle guard; graphs are acyclic
        hit = node in wanted_nodes
        for edge in node.edges:
            if edge is None:
                continue
            target = edge[0]
            if target.__class__ is Node:
                hit = visit(target) or hit
            elif id(target) in wanted_leaves:
                hit = True
        memo[node] = hit
        return hit

    for node in nodes:
        visit(node)
    return {node for node, hit in memo.items() if hit}


def _has_some(items) -> bool:
    """Whether any entry is not None: a plain loop (any() over a generator costs a frame per node; list.count(None)
    would compare tensors with ==, which is elementwise)."""
    for item in items:
        if item is not None:
            return True
    return False


def _check_grad(node, i, g):
    shape, dtype = node.meta[i]
    if g._data.shape != shape:
        raise RuntimeError(f"backward rule of op {node.name!r} returned a gradient of shape {list(g._data.shape)} "
                           f"for input {i}, whose shape is {list(shape)}")
    if g._dtype is not dtype:
        g = g.astype(dtype)
    return g


class _Callbacks(threading.local):
    """Per thread (threads run their own backwards), one list of queued callbacks per running
    backward, innermost last (backward may nest: a hook or PyLayer can run its own)."""

    stack = None


_CALLBACKS = _Callbacks()


def queue_callback(callback) -> None:
    """Run `callback()` when this thread's innermost running backward has put every gradient in
    place (after the leaves' hooks and .grad accumulation), before backward returns; torch's
    Variable._execution_engine.queue_callback. Only valid while a backward runs (e.g. in a hook)."""
    stack = _CALLBACKS.stack
    if not stack:
        raise RuntimeError("queue_callback(): no backward is running; call it from a gradient hook")
    stack[-1].append(callback)


# id(grad tensor) -> (weak reference, its version when it was zeroed): see mark_zero_grads
_ZEROED: dict = {}


def mark_zero_grads(tensors) -> None:
    """Tell the engine these `.grad` tensors hold zeros now (an optimizer's clear_grad has just zeroed them in
    place). While no write has moved a tensor's version since, the next backward stores a leaf's gradient
    instead of adding it to the zeros: the same values, without a pass over every gradient and a new array (the
    zeroed tensor is replaced either way: accumulation makes a new tensor)."""
    for t in tensors:
        key = id(t)
        _ZEROED[key] = (weakref.ref(t, lambda _, key=key: _ZEROED.pop(key, None)), t._vc.value)


class _Probe:
    __slots__ = ("held",)


def _count_of_one_holder() -> int:
    """What sys.getrefcount reports here for an object that one slot holds (interpreters count the argument
    and temporaries differently: measured, not assumed)."""
    probe = _Probe()
    probe.held = object()
    return sys.getrefcount(probe.held)


_ONE_HOLDER = _count_of_one_holder()


def zero_grads(tensors) -> list:
    """Zero the `.grad` of each tensor (Paddle's clear_grad(set_to_zero=True)) as far as the engine can without
    touching memory: a gradient that nothing but its tensor references (the Tensor object, and its array, neither
    a view nor viewed nor saved nor guarded) is replaced by a DeferredZero, made as zeros only if `.grad` is read
    before the next backward stores a new gradient. No one can tell it from zeroing in place. Returns the other
    gradients: the caller zeroes those in place, then calls mark_zero_grads on them."""
    shared = []
    for t in tensors:
        if getattr(t, "_grad", None) is None:
            continue
        # counted before any local name holds the gradient: one holder (the tensor's slot), one for the array
        alone = t.__class__ is _Tensor and sys.getrefcount(t._grad) == _ONE_HOLDER
        g = t._grad
        if g.__class__ is DeferredZero:
            continue
        if (alone and g.__class__ is _Tensor and g._view is None and g._node is None
                and (g._vc is None or g._vc.guard is None) and getattr(g._data, "base", False) is None
                and sys.getrefcount(g._data) == _ONE_HOLDER):
            t._grad = DeferredZero(g._data.shape, g._dtype, g._place)
        else:
            shared.append(g)
    return shared


def has_deferred_zero_grad(t) -> bool:
    """Whether t's `.grad` is zeros not made yet (zero_grads): reading `.grad` would make them. For code that must
    leave a training step's memory as it is (a profiling step that saves and restores the gradients)."""
    return getattr(t, "_grad", None).__class__ is DeferredZero


def _still_zero(t) -> bool:
    entry = _ZEROED.pop(id(t), None)
    return entry is not None and entry[0]() is t and t._vc.value == entry[1]


def run_backward(roots, root_grads, retain_graph=False, create_graph=False, inputs=None, allow_unused=False,
                 blocked=()):
    """The engine. With `inputs` it returns their gradients and leaves `.grad` alone (grad());
    without, it accumulates into the `.grad` of every leaf reached (backward()). Gradients never flow
    into the tensors in `blocked` (grad()'s no_grad_vars)."""
    buffers: dict = {}
    leaf_grads: dict = {}
    stops = {(t, 0) if t._node is None else (t._node, t._oidx) for t in blocked}

    def deliver(target, index, g):
        if stops and (target, index) in stops:
            return
        if target.__class__ is Node:
            slot = buffers.setdefault(target, [None] * len(target.out_meta))
            slot[index] = g if slot[index] is None else slot[index] + g
        else:
            entry = leaf_grads.get(id(target))
            if entry is None:
                leaf_grads[id(target)] = [target, g]
            else:
                entry[1] = entry[1] + g

    for t, g in zip(roots, root_grads):
        if t._node is None:
            if t.stop_gradient:
                raise RuntimeError("backward(): the tensor does not require grad (stop_gradient=True) and has "
                                   "no graph; set stop_gradient=False on the inputs before computing it")
            deliver(t, 0, g)
        else:
            deliver(t._node, t._oidx, g)

    nodes = _collect([t._node for t in roots])
    wanted_nodes, wanted_leaves, captured = {}, {}, {}
    if inputs is not None:
        for i, t in enumerate(inputs):
            if t._node is not None:
                wanted_nodes.setdefault(t._node, []).append((t._oidx, i))
            else:
                wanted_leaves.setdefault(id(t), []).append(i)
        active = _needed(nodes, wanted_nodes, wanted_leaves)
    else:
        active = set(nodes)

    deps = dict.fromkeys(active, 0)
    # a leaf's gradient is final once every active node with an edge to it has run: its hooks fire
    # then, during backward (as torch's AccumulateGrad does), so that e.g. DataParallel can start
    # reducing early gradients while later layers still run their backward rules
    leaf_deps: dict = {}
    for node in active:
        for edge in node.edges:
            if edge is not None:
                if edge[0] in deps:
                    deps[edge[0]] += 1
                elif edge[0].__class__ is not Node:
                    leaf_deps[id(edge[0])] = leaf_deps.get(id(edge[0]), 0) + 1
    ready = [n for n in active if deps[n] == 0]

    def finish_leaf(leaf, g):
        hooks = getattr(leaf, "_hooks", None)
        if hooks:
            g = _run_hooks(hooks, g)
        if inputs is not None:
            for position in wanted_leaves.get(id(leaf), ()):
                captured[position] = g
        else:
            g = g if create_graph else g.detach()
            current = getattr(leaf, "_grad", None)
            if current.__class__ is DeferredZero:   # zeros not made yet: g itself where it fits them
                if current.dtype is g._dtype and current.place is g._place and current.shape == g._data.shape:
                    leaf.grad = g
                    return
                current = leaf.grad   # made now, and added to below
            if current is None or (_ZEROED and _still_zero(current) and current._dtype == g._dtype
                                   and current._place == g._place and current.shape == g.shape):
                leaf.grad = g
            else:
                leaf.grad = current + g if create_graph else (current + g).detach()

    previous_mode = GRAD_MODE.enabled
    GRAD_MODE.enabled = create_graph
    observer = OBSERVER.current
    callbacks: list = []
    stack = _CALLBACKS.stack
    if stack is None:
        stack = _CALLBACKS.stack = []
    stack.append(callbacks)
    try:
        while ready:
            node = ready.pop()
            grads = buffers.pop(node, None)
            if grads is None:
                grads = [None] * len(node.out_meta)
            if observer is not None:   # the node's whole turn: hooks, its rule, delivering the gradients
                token = observer.begin(node, grads)
            if node.hooks:
                for index, hooks in node.hooks.items():
                    if grads[index] is not None:
                        grads[index] = _run_hooks(hooks, grads[index])
            for oidx, position in wanted_nodes.get(node, ()):
                captured[position] = grads[oidx]
            edges = node.edges
            if _has_some(grads) and _has_some(edges):
                results = node.rule(node, *grads)
                if results.__class__ is not tuple and results.__class__ is not list:
                    results = (results,)
                if len(results) != len(edges):
                    raise RuntimeError(f"backward rule of op {node.name!r} returned {len(results)} gradients "
                                       f"for {len(edges)} tensor inputs")
                meta = node.meta
                for i, edge in enumerate(edges):
                    if edge is not None:
                        g = results[i]
                        if g is not None:
                            shape, dtype = meta[i]
                            if g._data.shape != shape or g._dtype is not dtype:
                                g = _check_grad(node, i, g)
                            deliver(edge[0], edge[1], g)
            if not retain_graph:
                node.released = True
                node._saved_in = node._saved_out = None
            finished = []
            for edge in edges:
                if edge is not None:
                    if edge[0] in deps:
                        deps[edge[0]] -= 1
                        if deps[edge[0]] == 0:
                            ready.append(edge[0])
                    elif id(edge[0]) in leaf_deps:
                        leaf_deps[id(edge[0])] -= 1
                        if leaf_deps[id(edge[0])] == 0:
                            finished.append(id(edge[0]))
            if observer is not None:
                observer.end(token)
            for key in finished:
                entry = leaf_grads.pop(key, None)
                if entry is not None:
                    finish_leaf(*entry)

        for leaf, g in leaf_grads.values():    # leaves that were roots themselves
            finish_leaf(leaf, g)
        while callbacks:                       # queue_callback(): after every gradient is in place
            callbacks.pop(0)()
    finally:
        GRAD_MODE.enabled = previous_mode
        stack.pop()

    if inputs is None:
        return None
    result = []
    for i, t in enumerate(inputs):
        g = captured.get(i)
        if g is None and not allow_unused:
            raise RuntimeError(f"grad(): input {i} (shape {t.shape}, dtype {t.dtype}) is not used to compute the "
                               f"outputs; pass allow_unused=True to get None for it")
        result.append(g if (g is None or create_graph) else g.detach())
    return result


def _as_list(value, what):
    from oarlock._tensor import Tensor
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, Tensor) for v in value):
        return list(value)
    raise TypeError(f"{what} must be a Tensor or a list of Tensors, got {type(value).__name__}")


def _one_like(t):
    """ones_like(t) for a one-element t, straight from its backend: the implied seed of every loss.backward(),
    without an op call's cost (an op call's conversions and dispatch took a quarter of a small backward)."""
    place = t._place
    data = place.backend.asarray(1, t._dtype.np, place.index)
    if data.shape != t._data.shape:
        data = data.reshape(t._data.shape)
    return _Tensor._wrap(data, place)


def _seed_grads(outputs, grad_outputs, fn):
    grads = []
    for i, t in enumerate(outputs):
        g = None if grad_outputs is None else grad_outputs[i]
        if g is None:
            if t._data.size != 1:
                raise RuntimeError(f"{fn}(): output {i} has shape {t.shape}; a gradient for it can only be "
                                   f"implied for a single element. Pass grad_outputs/grad_tensor of that shape")
            g = _one_like(t)
        elif list(g.shape) != list(t.shape):
            raise ValueError(f"{fn}(): the gradient given for output {i} has shape {g.shape}, "
                             f"but the output has shape {t.shape}")
        grads.append(g)
    return grads


def backward(tensors, grad_tensors=None, retain_graph=False):
    """Accumulate gradients of `tensors` into the `.grad` of the leaves they depend on."""
    outputs = _as_list(tensors, "backward(): tensors")
    grads = _seed_grads(outputs, grad_tensors if grad_tensors is None else _as_grad_list(grad_tensors, outputs),
                        "backward")
    run_backward(outputs, grads, retain_graph=retain_graph)


def _as_grad_list(grads, outputs):
    from oarlock._tensor import Tensor
    if isinstance(grads, Tensor) or grads is None:
        grads = [grads]
    grads = list(grads)
    if len(grads) != len(outputs):
        raise ValueError(f"got {len(grads)} gradients for {len(outputs)} outputs")
    return grads


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False, only_inputs=True,
         allow_unused=False, no_grad_vars=None):
    """Gradients of `outputs` with respect to `inputs`, returned as a list (`.grad` is left alone).

    `create_graph=True` records the backward pass so the result can be differentiated again;
    no gradient flows through the tensors in `no_grad_vars`. `only_inputs` is accepted for Paddle
    compatibility (Paddle ignores it too).
    """
    outs = _as_list(outputs, "grad(): outputs")
    blocked = () if no_grad_vars is None else _as_list(no_grad_vars, "grad(): no_grad_vars")
    ins = _as_list(inputs, "grad(): inputs")
    for i, t in enumerate(ins):
        if t.stop_gradient:
            raise RuntimeError(f"grad(): input {i} has stop_gradient=True, so no gradient flows to it")
    if retain_graph is None:
        retain_graph = create_graph
    seeds = _seed_grads(outs, None if grad_outputs is None else _as_grad_list(grad_outputs, outs), "grad")
    return run_backward(outs, seeds, retain_graph=retain_graph, create_graph=create_graph,
                        inputs=ins, allow_unused=allow_unused, blocked=blocked)


class PyLayerContext:
    """The `ctx` of a PyLayer: save tensors in forward, read them in backward."""

    _unpack = None   # the unpack hook, when saved_tensors_hooks packed the saved tensors

    def __init__(self):
        self._saved = ()
        self.needs_input_grad = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        pack = SAVED_HOOKS.pack
        if pack is None:
            self._saved, self._unpack = tensors, None
        else:   # Paddle passes every saved Tensor to the active pack hook; other values are kept as they are
            self._unpack = SAVED_HOOKS.unpack
            self._saved = tuple(_Packed(t, pack(t)) if isinstance(t, _Tensor) else t for t in tensors)

    def saved_tensor(self):
        if self._unpack is None:
            return self._saved
        return tuple(p.unpack(self._unpack, f"saved tensor {i} of a PyLayer") if p.__class__ is _Packed
                     else p for i, p in enumerate(self._saved))

    @property
    def saved_tensors(self):
        return self.saved_tensor()

    def set_materialize_grads(self, value: bool):
        self.materialize_grads = value

    def mark_non_differentiable(self, *tensors):
        pass


class PyLayer:
    """A custom op written in Python: subclass with static `forward(ctx, ...)` and `backward(ctx, *grads)`
    and call `MyLayer.apply(...)`. `backward` returns one gradient (or None) per Tensor argument."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("PyLayer subclasses must define forward(ctx, ...)")

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("PyLayer subclasses must define backward(ctx, *grads)")

    @classmethod
    def apply(cls, *args, **kwargs):
        from oarlock._tensor import Tensor
        ctx = PyLayerContext()
        tensor_args = [a for a in args if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(not t.stop_gradient for t in tensor_args)
        with no_grad():
            outputs = cls.forward(ctx, *args, **kwargs)
        recording = GRAD_MODE.enabled and any(ctx.needs_input_grad)
        single = isinstance(outputs, Tensor)
        outs = [outputs] if single else list(outputs)
        if not recording:
            return outputs
        # fresh output tensors (forward may return its inputs or views of them) take the node
        wrapped = [Tensor._wrap(o._data, o._place) if isinstance(o, Tensor) else o for o in outs]
        out_tensors = [o for o in wrapped if isinstance(o, Tensor)]

        # the rule reads the outputs' shapes from its node, not the outputs: a closure over them would make a
        # cycle (output -> node -> rule -> output) that keeps the whole graph, activations included, alive after
        # backward until Python's cyclic collector runs (tensor-parallel training held 3-5x its activations)
        def rule(node, *grads):
            if ctx.materialize_grads:
                from oarlock import _ops
                grads = tuple(_ops.zeros(list(shape), dtype=dtype, place=node.place) if g is None else g
                              for g, (shape, dtype) in zip(grads, node.out_meta))
            result = cls.backward(ctx, *grads)
            return result if isinstance(result, (tuple, list)) else (result,)

        record(RecordSpec(cls.__name__, rule), tensor_args, tuple(out_tensors), None, tensor_args[0]._place)
        return wrapped[0] if single else type(outputs)(wrapped) if isinstance(outputs, tuple) else wrapped


Function = PyLayer


class RecordSpec:
    """What `record` needs of an op, for recorders that have no OpDef (PyLayer, unpacked saved leaves)."""

    __slots__ = ("name", "rule", "nondiff", "_save_plan", "save_needs", "saves_inputs", "saves_outputs")

    def __init__(self, name, rule, nondiff=(), save_plan=()):
        self.name, self.rule, self.nondiff, self._save_plan = name, rule, nondiff, save_plan
        self.save_needs = (None,) * len(save_plan)
        self.saves_inputs = any(kind == "in" for kind, _ in save_plan)
        self.saves_outputs = any(kind == "out" for kind, _ in save_plan)


# a saved leaf unpacked while backward is recorded: an identity node that routes gradients to the leaf
_SAVED_LEAF = RecordSpec("saved_tensor", lambda node, g: (g,))


def record(spec, inputs, outputs, attrs, place, written=None):
    """Record one graph node: the only place nodes are made (the dispatcher's fast and slow paths and
    PyLayer all call it). `spec` is an OpDef or a RecordSpec; `inputs` holds one entry per tensor
    parameter (a Tensor, a list of Tensors, None, or a Python scalar on the fast path); `outputs` is the
    op's output Tensor, or a tuple of them. The one rule for gradients: an input takes one when it is a
    Tensor with stop_gradient=False, of a differentiable dtype (float or complex), at a parameter not in
    spec.nondiff; an output carries the node when its dtype is differentiable. Nothing is recorded
    when no input takes a gradient or no output can carry one. `written` is the tensor an in-place op
    has just written: where it is also a saved input, it was saved before the write. A view whose base
    was written in place since its graph identity was set gets a fresh one first. Returns the node or None."""
    nondiff = spec.nondiff
    n = len(inputs)
    if n <= 2 and not nondiff and written is None and outputs.__class__ is _Tensor:
        # the dispatcher's fast path: one or two tensors (no list, scalar or None), one output. The same
        # rule as the loop below, unrolled: it is most of the cost of a recorded op
        if n == 2:
            x, y = inputs
        else:
            x, y = inputs[0], None
        if x.__class__ is _Tensor and (y is None or y.__class__ is _Tensor):
            if x._vc is not None:
                _refresh_if_stale(x)
            if y is not None and y._vc is not None:
                _refresh_if_stale(y)
            ex = None if x.stop_gradient or not x._dtype.differentiable else (
                (x, 0) if x._node is None else (x._node, x._oidx))
            if y is None:
                edges, meta = (ex,), ((x._data.shape, x._dtype),)
            else:
                ey = None if y.stop_gradient or not y._dtype.differentiable else (
                    (y, 0) if y._node is None else (y._node, y._oidx))
                edges, meta = (ex, ey), ((x._data.shape, x._dtype), (y._data.shape, y._dtype))
                ex = ex or ey
            if ex is None or not outputs._dtype.differentiable:
                return None
            node = _new(Node)
            node.name = spec.name
            node.rule = spec.rule
            node.edges = edges
            node.meta = meta
            node.attrs = attrs
            node.place = place
            node.out_meta = ((outputs._data.shape, outputs._dtype),)
            if spec._save_plan:
                if (x._vc is None and (y is None or y._vc is None) and outputs._vc is None
                        and SAVED_HOOKS.pack is None):
                    # tensors never written in place (version 0): what _save keeps, without its checks
                    node._save_plan, node._save_needs = spec._save_plan, spec.save_needs
                    if spec.saves_inputs:
                        node._saved_in = inputs
                    if spec.saves_outputs:
                        node._saved_out = (outputs._data,)
                        vc = outputs._vc = _VersionCounter()
                        node._out_counters, node._out_versions = (vc,), _AT_ZERO
                else:
                    _save(spec, node, inputs, (outputs,), None)
            outputs.stop_gradient = False
            outputs._node = node
            outputs._oidx = 0
            return node
    edges, meta, wanted = [], [], False
    i = 0
    for a in inputs:
        skip = nondiff and i in nondiff
        for t in (a if a.__class__ is list else (a,)):     # a TensorList gives one edge per tensor
            if t.__class__ is not _Tensor:                 # None, or a Python scalar on the fast path
                edges.append(None)
                meta.append(None)
                continue
            meta.append((t._data.shape, t._dtype))
            if t._vc is not None:
                _refresh_if_stale(t)
            if skip or t.stop_gradient or not t._dtype.differentiable:
                edges.append(None)
            else:
                edges.append((t, 0) if t._node is None else (t._node, t._oidx))
                wanted = True
        i += 1
    if not wanted:
        return None
    if outputs.__class__ is _Tensor:     # one output, passed as itself
        if not outputs._dtype.differentiable:
            return None
        outputs = (outputs,)
    elif not any(o._dtype.differentiable for o in outputs):
        return None
    edges, meta = tuple(edges), tuple(meta)
    out_meta = tuple([(o._data.shape, o._dtype) for o in outputs])
    node = _new(Node)      # Node's fields set here rather than through __init__: one call less per op
    node.name = spec.name
    node.rule = spec.rule
    node.edges = edges
    node.meta = meta
    node.attrs = attrs
    node.place = place
    node.out_meta = out_meta
    if spec._save_plan:
        _save(spec, node, inputs, outputs, written)
    i = 0
    for o in outputs:
        if o._dtype.differentiable:
            o.stop_gradient = False
            o._node = node
            o._oidx = i
        i += 1
    return node


def _save(spec, node, inputs, outputs, written):
    """Keep what the op's rule reads (its OpDef's `saves`) and the versions backward checks."""
    plan = node._save_plan = spec._save_plan
    node._save_needs = spec.save_needs
    if spec.saves_inputs:
        saved = inputs
        for a in inputs:
            if a.__class__ is not _Tensor:   # a Python scalar (fast path), None or a list
                saved = [_as_saved(x, outputs[0]) for x in inputs]
                break
        node._saved_in = saved
        # versions are stored only when some saved tensor has been written in place already
        # (the common case stores nothing: every saved input is at version 0)
        for a in saved:
            if a.__class__ is list or (a is not None and a._vc is not None) or written is not None:
                node._in_versions = tuple(_version_of(saved[index], written) for kind, index in plan if kind == "in")
                break
    if spec.saves_outputs:
        node._saved_out = [o._data for o in outputs]
        if len(outputs) == 1 and outputs[0]._vc is None:
            vc = outputs[0]._vc = _VersionCounter()
            node._out_counters, node._out_versions = (vc,), _AT_ZERO
        else:
            node._out_counters = counters = tuple(_version_counter(o) for o in outputs)
            node._out_versions = tuple(c.value for c in counters)
    if SAVED_HOOKS.pack is not None:
        _pack_saved(node, outputs)


def _pack_saved(node, outputs):
    """saved_tensors_hooks is active: keep what pack_hook returns for each saved tensor instead of the
    tensor (saved outputs are passed to it as the output Tensors)."""
    pack = SAVED_HOOKS.pack
    node._unpack = SAVED_HOOKS.unpack
    saved_in, packed_in, packed_out = node._saved_in, None, None
    for kind, index in node._save_plan:
        if kind == "in":
            if packed_in is None:
                packed_in = [None] * len(saved_in)
            t = saved_in[index]
            if t.__class__ is list:
                packed_in[index] = [_Packed(x, pack(x)) for x in t]
            elif t is not None:
                packed_in[index] = _Packed(t, pack(t))
        else:
            if packed_out is None:
                packed_out = [None] * len(outputs)
            packed_out[index] = _Packed(outputs[index], pack(outputs[index]), identity=False)
    node._saved_in, node._saved_out = packed_in, packed_out


def _unpack_input(packed, unpack, what):
    if packed is None:
        return None
    t = packed.unpack(unpack, what)
    if GRAD_MODE.enabled:    # create_graph: the rule's own graph must reach the original's producers
        t = _Tensor._wrap(t._data, t._place, packed.stop_gradient)
        if packed.leaf is not None:
            record(_SAVED_LEAF, (packed.leaf,), t, None, t._place)
        elif packed.node is not None:
            t._node, t._oidx = packed.node, packed.oidx
    return t


def _refresh_if_stale(t):
    view = getattr(t, "_view", None)
    if view is not None and view[2] != t._vc.value:
        _refresh_view(t, view)


def _refresh_view(t, view):
    """t is a view whose base was written in place after t's graph identity was set (PyTorch
    regenerates a view's grad_fn then): remake the view from the base to take its current identity."""
    base, make_view, _ = view
    with enable_grad():
        fresh = make_view(base)
    t._node, t.stop_gradient = fresh._node, fresh.stop_gradient
    if fresh._node is not None:
        t._oidx = fresh._oidx
    t._view = (base, make_view, t._vc.value)


def _as_saved(a, like):
    """A Python scalar operand (fast path) is saved as a 0-d tensor of the op's result dtype."""
    if a is None or a.__class__ is _Tensor or a.__class__ is list:
        return a
    place = like._place
    return _Tensor._wrap(place.backend.asarray(a, like._dtype.np, place.index), place)


def _version_of(saved, written):
    """The version of a saved input (a tuple for a list); one less for the tensor the op wrote itself."""
    if saved.__class__ is list:
        return tuple(t.inplace_version - (t is written) for t in saved)
    return None if saved is None else saved.inplace_version - (saved is written)


def _bind_tensor_type():
    """autograd is imported by _tensor; the Tensor class is bound here once both exist."""
    global _Tensor, _version_counter, _VersionCounter, DeferredZero
    from oarlock._tensor import DeferredZero, Tensor, VersionCounter, version_counter
    _Tensor, _version_counter, _VersionCounter = Tensor, version_counter, VersionCounter


_Tensor = _version_counter = _VersionCounter = DeferredZero = None
_AT_ZERO = (0,)
_new = object.__new__


def _py_layer_module():
    """`oarlock.autograd.py_layer`, the module path Paddle code imports PyLayer from (`from
    paddle.autograd.py_layer import PyLayer`): this module is a plain file, so the submodule is registered in
    sys.modules, where the import system looks first (and `__path__` below lets finders, such as the paddle
    alias's, be asked for it)."""
    import sys
    import types
    module = types.ModuleType(__name__ + ".py_layer", "PyLayer and PyLayerContext (Paddle's module path).")
    module.PyLayer, module.PyLayerContext = PyLayer, PyLayerContext
    sys.modules.setdefault(module.__name__, module)
    return module


py_layer = _py_layer_module()
__path__: list = []   # a package with no files of its own: its one submodule is py_layer, above
