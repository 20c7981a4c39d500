"""Reductions (sum, mean, max, min, prod, all, any): a reduced dim that is sharded makes the output Partial over
its mesh dims -- sum -> Partial(sum), max/min -> Partial(max/min) -- and kept dims keep their sharding. mean
over a sharded dim is Paddle's Partial(avg) in value, computed as Partial(sum) of the local means divided by
the degree (the split must be even), because Partial(sum)'s gradient is simply the output's on every rank
while Partial(avg)'s would need the 1/degree. When a gradient is wanted, max/min/prod gather the reduced dims
instead (a Partial(max)'s gradient would reach every rank's local maximum). Partial(sum) inputs pass through
sum and mean (they are linear)."""

from oarlock_autoparallel.spmd_rules.base import GRAD, RuleResult, norm_axes

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
        scale = 1.0
        for a in axes:
            ms = in_dims[a]
            if not ms:
                continue
            if op_name == "mean" and x.shape[a] % x.degree(ms) or \
                    op_name not in _LINEAR and attrs.get(GRAD):
                in_dims[a] = ()      # uneven mean / a max with a gradient: gather the dim
                continue
            if op_name == "mean":
                scale /= x.degree(ms)
                partial.update({m: "sum" for m in ms})
            else:
                partial.update({m: _PARTIAL[op_name] for m in ms})
        keep_in = {m: r for m, r in x.partial if r == "sum" and op_name in _LINEAR}
        xi = x.with_(dims=in_dims, partial=keep_in)
        shape = [1 if d in axes else s for d, s in enumerate(x.shape) if keepdim or d not in axes]
        dims = [() if d in axes else in_dims[d] for d in range(x.ndim) if keepdim or d not in axes]
        if keep_in and partial and set(partial.values()) != {"sum"}:
            xi = xi.with_(partial={})     # a Partial(sum) input under max: resolve it first
            keep_in = {}
        out = x.with_(shape=shape, dims=dims, partial={**partial, **keep_in})
        return RuleResult([xi] + list(specs[1:]), [out], scale={0: scale} if scale != 1.0 else None)
    return rule


RULES = {(name,): reduction_rule(name) for name in _PARTIAL}
