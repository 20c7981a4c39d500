"""cross_entropy(input [..., C], label): the class axis is whole on every rank; the other dims of input and
label share one sharding. reduction='none' keeps it; 'sum' gives Partial(sum) over the mesh dims that split the
batch dims; 'mean' gathers the batch dims (the mean divides by the count of labels that are not ignore_index,
which a rank does not know), so its result is replicated."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, norm_axis


def cross_entropy_rule(specs, attrs):
    x, label = specs[0], specs[1]
    axis = norm_axis(attrs.get("axis", -1), x.ndim, "cross_entropy(): axis")
    reduction = attrs.get("reduction", "mean")
    # label: same rank as input (class dim of size 1 or soft labels of size C) or one less
    same_rank = label.ndim == x.ndim
    batch = [d for d in range(x.ndim) if d != axis]
    dims = [()] * x.ndim
    taken = set()
    for d in batch:
        src = x.dims[d] or (label.dims[d if same_rank else batch.index(d)] if label.ndim else ())
        if src and not set(src) & taken and reduction != "mean":
            dims[d] = src
            taken |= set(src)
    xi = x.with_(dims=dims, partial={})
    ldims = list(dims) if same_rank else [dims[d] for d in batch]
    li = label.with_(dims=ldims, partial={})
    rest = [None if s is None else s.with_(dims=[()] * s.ndim, partial={}) for s in specs[2:]]
    if reduction == "none":
        shape = [s if d != axis else 1 for d, s in enumerate(x.shape)] if same_rank else \
            [x.shape[d] for d in batch]
        out_dims = [dims[d] if d != axis else () for d in range(x.ndim)] if same_rank else ldims
        out = x.with_(shape=shape, dims=out_dims, partial={})
    else:
        out = x.with_(shape=[], dims=[], partial={m: "sum" for m in taken})
    return RuleResult([xi, li] + rest, [out])


RULES = {("cross_entropy",): cross_entropy_rule}
