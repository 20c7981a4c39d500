"""The SPMD rules' common language: a tensor's distribution as a Spec (global shape, the mesh dims that split each
tensor dim, the mesh dims it is Partial over), the rule result, and the einsum-style merge most rules share.

A rule is a pure function rule(specs, attrs) -> RuleResult: `specs` holds one entry per tensor parameter of the op
(a Spec, None for an absent optional tensor, a list of Specs for a TensorList), `attrs` the op's attributes. The
result names the distribution every input must be resharded to (`inputs`, same layout as `specs`) and the
distribution (with the global shape) of every output. Rules never see tensors, so they are tested on shapes alone.

Co-sharding: a tensor dim split by several mesh dims lists them outer first; with placements that is mesh-dim
order (placements cannot say otherwise), so rules only produce ascending tuples (`Spec.valid`)."""

from __future__ import annotations

from dataclasses import dataclass, field

REDUCE_NAMES = ("sum", "max", "min", "prod", "avg", "any", "all")   # Paddle's ReduceType values 0..6, in order


@dataclass(frozen=True)
class Spec:
    """shape: the global shape; dims: per tensor dim, the mesh dims splitting it (outer first); partial: mesh dim ->
    reduce name ('sum', 'max', ...); mesh_shape: the mesh's sizes."""
    shape: tuple
    dims: tuple
    mesh_shape: tuple
    partial: tuple = field(default=())   # sorted (mesh dim, reduce name) pairs: hashable

    @classmethod
    def make(cls, shape, dims, mesh_shape, partial=None):
        shape, mesh_shape = tuple(int(s) for s in shape), tuple(int(s) for s in mesh_shape)
        dims = tuple(tuple(d) for d in dims)
        if len(dims) != len(shape):
            raise ValueError(f"Spec: dims {dims} has {len(dims)} entries for a tensor of rank {len(shape)}")
        return cls(shape, dims, mesh_shape, tuple(sorted((partial or {}).items())))

    @classmethod
    def replicated(cls, shape, mesh_shape):
        return cls.make(shape, [()] * len(shape), mesh_shape)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def partial_map(self) -> dict:
        return dict(self.partial)

    def used(self) -> set:
        """Mesh dims that shard some tensor dim."""
        return {m for d in self.dims for m in d}

    def with_(self, dims=None, partial=None, shape=None):
        return Spec.make(self.shape if shape is None else shape, self.dims if dims is None else dims,
                         self.mesh_shape, self.partial_map if partial is None else partial)

    def unpartial(self):
        """The same sharding with every Partial resolved (Replicate on those mesh dims)."""
        return self.with_(partial={})

    def degree(self, mesh_dims) -> int:
        out = 1
        for m in mesh_dims:
            out *= self.mesh_shape[m]
        return out

    def valid(self) -> bool:
        seen = [m for d in self.dims for m in d]
        return (len(seen) == len(set(seen)) and all(list(d) == sorted(d) for d in self.dims)
                and not set(seen) & set(self.partial_map))


@dataclass
class RuleResult:
    inputs: list      # the Spec each input must have (None / list of Specs, as the rule's `specs`)
    outputs: list     # one Spec per output
    local_attrs: object = None   # callable(mesh coordinate) -> attributes to change for the local op (reshape)
    scale: dict = None           # output index -> factor the local output is multiplied by (mean -> Partial(sum))


GRAD = "__needs_grad__"   # attrs key spmd.dispatch sets when some input wants a gradient (rules may choose by it)


def local_shape(spec: Spec, coord) -> list:
    """The shape of the piece of `spec` at mesh coordinate `coord` (Paddle's split rule: ceil-sized chunks,
    the mesh dims of a co-sharded dim outer first)."""
    out = []
    for size, ms in zip(spec.shape, spec.dims):
        idx, parts = 0, 1
        for m in ms:
            idx, parts = idx * spec.mesh_shape[m] + coord[m], parts * spec.mesh_shape[m]
        c = -(-size // parts)
        out.append(max(0, min((idx + 1) * c, size) - min(idx * c, size)))
    return out


def norm_axis(axis, ndim, who="axis"):
    a = int(axis)
    if not -max(ndim, 1) <= a < max(ndim, 1):
        raise ValueError(f"{who} {axis} is out of range for a tensor of rank {ndim}")
    return a % ndim if ndim else 0


def norm_axes(axis, ndim):
    """Axis|None -> sorted tuple of non-negative axes (None: all)."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        return tuple(sorted({norm_axis(a, ndim) for a in axis})) if axis else tuple(range(ndim))
    return (norm_axis(axis, ndim),)


def drop_dims(spec: Spec, tensor_dims) -> Spec:
    """spec with `tensor_dims` replicated (and no Partial)."""
    dims = [() if i in tensor_dims else d for i, d in enumerate(spec.dims)]
    return spec.with_(dims=dims, partial={})


def einsum(specs, letters, out_letters, out_shape, contract_partial="sum", linear=()):
    """The generic rule of ops that are einsums (matmul, elementwise, ...): `letters[i]` names the dims of input
    i (one letter per dim; a letter in several inputs is the same index; a size-1 broadcast dim gets None),
    `out_letters` the output's. A letter keeps the mesh dims of the first input that shards it, minus mesh dims
    an earlier letter took; every input is resharded to its letters' choice; a letter that is summed over
    (not in the output) makes the output Partial(sum) on its mesh dims. `linear`: the inputs the op is linear
    in: a Partial(sum) of exactly one of them, on a mesh dim no letter uses, stays Partial in the output."""
    order = []
    for lets in letters:
        for a in lets:
            if a is not None and a not in order:
                order.append(a)
    # letters of the output first, so contracted letters cannot take a mesh dim from an output dim
    order.sort(key=lambda a: a not in out_letters)
    taken, choice = set(), {}
    for a in order:
        pick = ()
        for spec, lets in zip(specs, letters):
            dims = next((spec.dims[d] for d, b in enumerate(lets) if b == a and spec.dims[d]), ())
            if dims and not set(dims) & taken:
                pick = dims
                break
        choice[a] = pick
        taken |= set(pick)
    partial = {m: contract_partial for a in order if a not in out_letters for m in choice[a]}
    keep = {}
    holders = {}
    for i, spec in enumerate(specs):
        for m, r in spec.partial:
            holders.setdefault(m, []).append((i, r))
    for m, hs in holders.items():
        if m in taken or len(hs) != 1 or hs[0][1] != "sum" or hs[0][0] not in linear:
            continue
        keep[m] = "sum"
    inputs = []
    for i, (spec, lets) in enumerate(zip(specs, letters)):
        dims = [choice[b] if b is not None else () for b in lets]
        inputs.append(spec.with_(dims=dims, partial={m: r for m, r in keep.items() if holders[m][0][0] == i}))
    out_dims = [choice[a] if a is not None else () for a in out_letters]
    out = Spec.make(out_shape, out_dims, specs[0].mesh_shape, {**partial, **keep})
    return inputs, out

