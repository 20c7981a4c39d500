"""spmd: running ops on DistTensors. DistTensor.__oarlock_dispatch__ calls dispatch(op, args, attrs) for every op
with a DistTensor among its tensor arguments.

dispatch finds the op's rule by op.name (spmd_rules.RULES, extended with register_rule), describes every input as
a Spec (global shape, mesh dims per tensor dim, Partial mesh dims), asks the rule which Spec every input must have
and what the outputs are, reshards the inputs that differ (reshard.reshard: the cheapest collective), runs the op
on the local pieces with oarlock.dispatch.apply (autograd records on the local pieces, so gradients flow through
the collectives of reshard), and wraps each output with DistTensor.make(local, mesh, placements, global shape):
the rule knows the global shapes, so no shape inference runs.

An op without a rule takes the FALLBACK: every input replicated, the op computed on the full tensors, the output
sharded like the first distributed input when it has that input's global shape (a local slice: no
communication), else replicated. Correct for every op, only slower.

Plain tensors among the arguments are taken as replicated on the mesh (Paddle's dygraph auto parallel does the
same). All distributed inputs must live on one mesh (same process ids and shape): a clear error otherwise.

Gradients (reshard.py's convention): the gradient of a tensor has its placements with Partial read as Replicate,
each rank holding the true gradient of its piece. Where an op runs split over a mesh dim (some input or output is
sharded or Partial on it) a replicated input's local gradient is only this rank's share, so that input passes
through an identity whose backward sums over the mesh dim (_c_identity: Megatron's "f"). This is what makes
data parallel (inputs sharded on dp, parameters replicated) and column/row parallel gradients right.

In-place ops (optimizer steps, copy_, add_, ...) run on the written tensors' pieces: every argument is brought to
the most sharded layout among the written ones (a plain tensor the shape of the first one's piece is that piece,
e.g. an optimizer's gradient), the op writes there, and a written tensor of another layout gets the result
resharded back into its piece. Moments sharded on a mesh dim with replicated parameters therefore update one
slice per rank and all-gather the parameter: ZeRO stage 1 falls out of the placements."""

from __future__ import annotations

import oarlock
from oarlock import PyLayer, Tensor
from oarlock.dispatch import apply

from oarlock_autoparallel.spmd_rules import RULES
from oarlock_autoparallel.spmd_rules.base import GRAD, REDUCE_NAMES, RuleResult, Spec

__all__ = ["dispatch", "register_rule", "get_rule", "spec_of", "placements_of", "fallback_rule"]


def register_rule(op_names, rule) -> None:
    """Use `rule(specs, attrs) -> RuleResult` (see spmd_rules/base.py) for the ops named `op_names` (a name or a
    list of names); replaces an earlier rule of those ops."""
    if not callable(rule):
        raise TypeError(f"register_rule(): argument 'rule' must be callable rule(specs, attrs), got {rule!r}")
    for name in [op_names] if isinstance(op_names, str) else list(op_names):
        if not isinstance(name, str):
            raise TypeError(f"register_rule(): argument 'op_names' must be op names (str), got {name!r}")
        RULES[name] = rule


def get_rule(op_name: str):
    """The rule of op `op_name` (the fallback when it has none)."""
    return RULES.get(op_name, fallback_rule)


# -- placements <-> Spec -------------------------------------------------------------------------------------

def spec_of(shape, mesh, placements) -> Spec:
    """The Spec of a tensor of global `shape` placed with `placements` on `mesh`."""
    dims = [[] for _ in shape]
    partial = {}
    for m, p in enumerate(placements):
        if p.is_shard():
            dims[p.get_dim()].append(m)       # mesh-dim order = outer first (DT's co-sharding order)
        elif p.is_partial():
            partial[m] = REDUCE_NAMES[int(p.reduce_type())]
    return Spec.make(shape, dims, mesh.shape, partial)


def placements_of(spec: Spec) -> list:
    """The placements (one per mesh dim) of `spec`."""
    from oarlock_autoparallel.placements import Partial, ReduceType, Replicate, Shard
    out = [Replicate() for _ in spec.mesh_shape]
    for d, ms in enumerate(spec.dims):
        for m in ms:
            out[m] = Shard(d)
    for m, r in spec.partial:
        out[m] = Partial(ReduceType(REDUCE_NAMES.index(r)))
    return out


# -- the fallback ----------------------------------------------------------------------------------------------

def fallback_rule(specs, attrs):
    """Every input replicated; the outputs are marked None (their shapes come from the computed result)."""
    def rep(s):
        if isinstance(s, Spec):
            return Spec.replicated(s.shape, s.mesh_shape)
        if isinstance(s, list):
            return [rep(x) for x in s]
        return s
    return RuleResult([rep(s) for s in specs], None)


# -- dispatch ----------------------------------------------------------------------------------------------------

def _flat_dist(args):
    from oarlock_autoparallel.dtensor import DistTensor
    for a in args:
        for item in a if isinstance(a, (list, tuple)) else (a,):
            if isinstance(item, DistTensor):
                yield item


def _same_mesh(mesh, other) -> bool:
    return list(mesh.shape) == list(other.shape) and list(mesh.process_ids) == list(other.process_ids)


def _attrs(op, attrs):
    """The op's attributes with their defaults filled in (rules read every attribute by name)."""
    # a parameter without a default holds a bare object() sentinel: it is always given, so skip it
    full = {p.name: p.default for p in op.attr_params if type(p.default) is not object}
    full.update(attrs)
    return full


def dispatch(op, args, attrs):
    """Run `op` on arguments among which some are DistTensors (one tensor argument per tensor parameter, as
    oarlock.dispatch.apply takes them) and return its DistTensor output(s)."""
    from oarlock_autoparallel.dtensor import DistTensor
    if op.inplace is not None or op.writes:
        return _inplace(op, args, attrs)
    dists = list(_flat_dist(args))
    mesh = dists[0]._mesh
    for t in dists[1:]:
        if not _same_mesh(mesh, t._mesh):
            raise ValueError(f"{op.display}(): its distributed inputs live on different meshes ({mesh} and "
                             f"{t._mesh}); reshard them onto one mesh first (oarlock.distributed.reshard)")

    def spec(a):
        if isinstance(a, DistTensor):
            return spec_of(a.shape, mesh, a._placements)
        if isinstance(a, Tensor):
            return Spec.replicated(a.shape, mesh.shape)
        if isinstance(a, (list, tuple)):
            return [spec(x) for x in a]
        return a
    specs = [spec(a) for a in args]
    full_attrs = _attrs(op, attrs)
    full_attrs[GRAD] = oarlock.is_grad_enabled() and any(
        isinstance(t, Tensor) and not t.stop_gradient for a in args for t in (a if isinstance(a, list) else [a]))
    rule = RULES.get(op.name, fallback_rule)
    try:
        result = rule(specs, full_attrs)
    except ValueError as e:         # the op's own bad input (shapes that do not match): the caller's error
        raise ValueError(f"{op.display}(): {e}") from None
    except (TypeError, KeyError, IndexError, AttributeError):
        # a call form the rule does not know (an attribute spelled another way): the fallback is correct for
        # every op, only slower
        result = fallback_rule(specs, full_attrs)
    local_args = [_localise(a, s, mesh) for a, s in zip(args, result.inputs)]
    if not mesh.contains(_rank()):
        return _empty_outputs(op, dists[0], mesh, result, local_args)
    if oarlock.is_grad_enabled() and result.outputs is not None:
        local_args = _sync_gradients(local_args, result, mesh, args)
    if result.local_attrs is not None:
        attrs = {**attrs, **result.local_attrs(_coord(mesh))}
    out = apply(op, tuple(local_args), attrs)
    if result.scale:
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        for i, factor in result.scale.items():
            outs[i] = oarlock.scale(outs[i], factor)
        out = type(out)(outs) if isinstance(out, (list, tuple)) else outs[0]
    return _wrap(out, result.outputs, mesh, dists[0])


def _localise(a, want, mesh):
    """This rank's piece of argument `a` once resharded to Spec `want`."""
    from oarlock_autoparallel.dtensor import DistTensor
    from oarlock_autoparallel.reshard import reshard
    if isinstance(a, (list, tuple)):
        return [_localise(x, w, mesh) for x, w in zip(a, want)]
    if not isinstance(a, Tensor):
        return a
    if not isinstance(a, DistTensor):
        if all(not d for d in want.dims) and not want.partial:
            return a                                   # a plain tensor is replicated: already what is wanted
        a = DistTensor.make(a, mesh, placements_of(Spec.replicated(a.shape, mesh.shape)), a.shape)
    target = placements_of(want)
    if list(a._placements) != target:
        from oarlock_autoparallel.sharded_grads import deferred_sum_dims
        unsummed = deferred_sum_dims(a._local)
        if unsummed and oarlock.is_grad_enabled():
            from oarlock_autoparallel.reshard import gather_unsummed
            return gather_unsummed(a, target, unsummed)
        a = reshard(a, mesh, target)
    return a._local


def _split_dims(result) -> set:
    """Mesh dims the op runs split over: some required input or output sharded or Partial on them."""
    dims = set()
    for s in list(_specs_flat(result.inputs)) + list(result.outputs):
        dims |= s.used() | set(s.partial_map)
    return dims


def _specs_flat(items):
    for s in items:
        if isinstance(s, list):
            yield from _specs_flat(s)
        elif isinstance(s, Spec):
            yield s


def _sync_gradients(local_args, result, mesh, args):
    """Each local input replicated on a mesh dim the op runs split over, and wanting a gradient, through
    _c_identity over that mesh dim (its gradient is summed there), except over the dims where the argument (a
    ShardingStage2/3 parameter) has its gradient summed later (sharded_grads.py)."""
    split = _split_dims(result)
    if not split:
        return local_args
    from oarlock.distributed.fleet.layers.mpu.mp_ops import _c_identity

    from oarlock_autoparallel.dtensor import DistTensor
    from oarlock_autoparallel.sharded_grads import deferred_sum_dims

    def sync(local, spec, arg):
        if isinstance(local, list):
            return [sync(x, s, a) for x, s, a in zip(local, spec, arg)]
        if not isinstance(local, Tensor) or local.stop_gradient or not isinstance(spec, Spec):
            return local
        later = deferred_sum_dims(arg._local) if isinstance(arg, DistTensor) else set()
        for m in sorted(split - spec.used() - set(spec.partial_map) - later):
            if mesh.shape[m] > 1:
                local = _c_identity(local, group=mesh.get_group(mesh.dim_names[m]))
        return local
    return [sync(a, s, o) for a, s, o in zip(local_args, result.inputs, args)]


def _inplace(op, args, attrs):
    """An in-place op on distributed tensors (see the module docstring); TensorList ops run position by
    position."""
    lists = [i for i, p in enumerate(op.tensor_params) if p.base == "TensorList"]
    if lists:
        n = len(args[lists[0]])
        for j in range(n):
            _inplace_one(op, [a[j:j + 1] if i in lists and a is not None else a for i, a in enumerate(args)], attrs,
                         lists)
        return args[op.inplace] if op.inplace is not None else None
    _inplace_one(op, list(args), attrs, ())
    return args[op.inplace] if op.inplace is not None else None


def _inplace_one(op, args, attrs, lists):
    from oarlock_autoparallel.dtensor import DistTensor
    from oarlock_autoparallel.reshard import reshard
    item = [a[0] if i in lists and a else a for i, a in enumerate(args)]     # one tensor per parameter
    written = sorted({op.inplace, *op.writes} - {None})
    first = item[op.inplace if op.inplace is not None else written[0]]
    if not isinstance(first, DistTensor):
        first = next(a for a in item if isinstance(a, DistTensor))
    mesh = first._mesh
    for a in item:
        if isinstance(a, DistTensor) and not _same_mesh(mesh, a._mesh):
            raise ValueError(f"{op.display}(): its distributed inputs live on different meshes ({mesh} and "
                             f"{a._mesh}); reshard them onto one mesh first (oarlock.distributed.reshard)")
    # a plain tensor shaped like the first written tensor's piece is that piece (an optimizer's gradient); one
    # shaped like the whole tensor is the whole, replicated (a state zeros_like made from the global shape)
    dist = []
    for a in item:
        if isinstance(a, Tensor) and not isinstance(a, DistTensor):
            if list(a.shape) == list(first._local.shape):
                a = DistTensor.make(a, mesh, first._placements, first.shape)
            elif list(a.shape) == list(first.shape):
                a = DistTensor.make(a, mesh, [_replicate() for _ in first._placements], first.shape)
        dist.append(a)
    candidates = [dist[i] for i in written if isinstance(dist[i], DistTensor)] or [first]
    target = max(candidates, key=lambda t: sum(p.is_shard() for p in t._placements))._placements
    locals_ = []
    for a in dist:
        if isinstance(a, DistTensor) and list(a.shape) == list(first.shape) and list(a._placements) != list(target):
            a = reshard(a, mesh, target)
        locals_.append(a._local if isinstance(a, DistTensor) else a)
    if mesh.contains(_rank()):
        apply(op, tuple([x] if i in lists else x for i, x in enumerate(locals_)), attrs)
    for i in written:
        orig, now = dist[i], locals_[i]
        if isinstance(orig, DistTensor) and now is not orig._local:     # computed in another layout: write back
            back = reshard(DistTensor.make(now, mesh, target, orig.shape), mesh, orig._placements)
            orig._local.copy_(back._local)


def _wrap(out, specs, mesh, first):
    from oarlock_autoparallel.dtensor import DistTensor
    from oarlock_autoparallel.reshard import reshard
    many = isinstance(out, (list, tuple))
    outs = list(out) if many else [out]
    wrapped = []
    for i, local in enumerate(outs):
        if not isinstance(local, Tensor):
            wrapped.append(local)
            continue
        if specs is None:       # fallback: the full result on every rank, then sharded like the first input
            t = DistTensor.make(local, mesh, placements_of(Spec.replicated(local.shape, mesh.shape)), local.shape)
            if list(local.shape) == list(first.shape):
                like = [p if p.is_shard() else _replicate() for p in first._placements]
                if any(p.is_shard() for p in like):
                    t = reshard(t, mesh, like)
            wrapped.append(t)
        else:
            s = specs[i]
            wrapped.append(DistTensor.make(local, mesh, placements_of(s), list(s.shape)))
    if not many:
        return wrapped[0]
    return type(out)(wrapped) if isinstance(out, tuple) else wrapped


def _empty_outputs(op, first, mesh, result, local_args):
    """A rank outside the mesh computes nothing: empty local pieces with the rule's global shapes. While
    gradients are recorded they hang on the inputs' pieces (_Carry), so loss.backward() on this rank still
    walks back to a cross-mesh reshard whose backward receives this rank's gradient (reshard._Move)."""
    from oarlock_autoparallel.dtensor import DistTensor
    specs = result.outputs or [Spec.replicated(first.shape, mesh.shape)] * max(op.n_outputs or 1, 1)
    tensors = list(_flat_tensors(local_args))
    # the outputs' dtype without computing: the first floating input's (embedding: the weight's, not the ids'),
    # else the first input's; a cross-mesh move of a result of another dtype (argmax) fails with a clear
    # mismatch error from the receive
    dtype = next((t.dtype for t in tensors if t.dtype.is_floating_point), first.dtype)
    carried = [t for t in tensors if not t.stop_gradient] if oarlock.is_grad_enabled() else []
    outs = [DistTensor.make(_Carry.apply(dtype, *carried) if carried else oarlock.zeros([0], dtype=dtype),
                            mesh, placements_of(s), list(s.shape)) for s in specs]
    return outs[0] if op.n_outputs == 1 else (tuple(outs) if op.n_outputs else outs)


def _flat_tensors(items):
    for a in items:
        if isinstance(a, (list, tuple)):
            yield from _flat_tensors(a)
        elif isinstance(a, Tensor):
            yield a


class _Carry(PyLayer):
    """An empty piece depending on `inputs` (the pieces of a rank outside the mesh): backward gives them zero
    gradients of their own (empty) shapes."""

    @staticmethod
    def forward(ctx, dtype, *inputs):
        ctx.shapes = [(list(t.shape), t.dtype) for t in inputs]
        return oarlock.zeros([0], dtype=dtype)

    @staticmethod
    def backward(ctx, grad):
        return tuple(oarlock.zeros(shape, dtype=dtype) for shape, dtype in ctx.shapes)


def _replicate():
    from oarlock_autoparallel.placements import Replicate
    return Replicate()


def _coord(mesh) -> tuple:
    """This rank's coordinate in `mesh`."""
    ids = list(mesh.process_ids)
    index, coord = ids.index(_rank()), []
    for n in reversed(list(mesh.shape)):
        coord.append(index % n)
        index //= n
    return tuple(reversed(coord))


def _rank() -> int:
    import oarlock.distributed as dist
    return dist.get_rank()      # the launcher's rank even before init_parallel_env (as reshard.py reads it)
