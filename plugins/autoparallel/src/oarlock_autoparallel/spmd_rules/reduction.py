"""Reductions (sum, mean, max, min, prod, all, any, logsumexp is not one): a reduced dim that is sharded makes
the output Partial over its mesh dims -- sum -> Partial(sum), max/min -> Partial(max/min), mean -> Partial(avg)
when the split is even (the local means then average to the mean) -- and kept dims keep their sharding.
Partial(sum) inputs pass through sum and mean (they are linear)."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, norm_axes

_PARTIAL = {"sum": "sum", "mean": "avg", "max": "max", "min": "min", "amax": "max", "amin": "min", "prod": "prod",
            "all": "all", "any": "any"}
_LINEAR = ("sum", "mean")


def reduction_rule(op_name):
    def rule(specs, attrs):
        x = specs[0]
        axes = norm_axes(attrs.get("axis"), x.ndim)
        keepdim = bool(attrs.get("keepdim", False))
        in_dims = list(x.dims)
        partial = {}
        for a in axes:
            ms = in_dims[a]
            if not ms:
                continue
            if op_name == "mean" and x.shape[a] % x.degree(ms):
                in_dims[a] = ()      # uneven: local means do not average to the mean; gather the dim
                continue
            partial.update({m: _PARTIAL[op_name] for m in ms})
        keep_in = {m: r for m, r in x.partial if r == "sum" and op_name in _LINEAR}
        xi = x.with_(dims=in_dims, partial=keep_in)
        shape = [1 if d in axes else s for d, s in enumerate(x.shape) if keepdim or d not in axes]
        dims = [() if d in axes else in_dims[d] for d in range(x.ndim) if keepdim or d not in axes]
        if keep_in and partial and set(partial.values()) != {"sum"}:
            # Partial(sum) input under a mean over a sharded dim: Partial(avg) and Partial(sum) would mix
            xi = xi.with_(partial={})
            keep_in = {}
        return RuleResult([xi] + list(specs[1:]), [x.with_(shape=shape, dims=dims, partial={**partial, **keep_in})])
    return rule


RULES = {(name,): reduction_rule(name) for name in _PARTIAL}
