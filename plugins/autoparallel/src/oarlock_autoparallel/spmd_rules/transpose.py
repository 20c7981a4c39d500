"""transpose: the sharding moves with its dim; Partial passes through (transpose is linear)."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, norm_axis


def transpose_rule(specs, attrs):
    x = specs[0]
    perm = attrs.get("perm")
    perm = [perm] if isinstance(perm, int) else list(perm)
    if attrs.get("dim1") is not None:      # torch's transpose(x, dim0, dim1): swap two dims
        a, b = norm_axis(perm[0], x.ndim), norm_axis(attrs["dim1"], x.ndim)
        perm = list(range(x.ndim))
        perm[a], perm[b] = perm[b], perm[a]
    perm = [norm_axis(p, x.ndim, "transpose(): perm entry") for p in perm]
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError(f"transpose(): perm {attrs.get('perm')} is not a permutation of {x.ndim} dims")
    out = x.with_(shape=[x.shape[p] for p in perm], dims=[x.dims[p] for p in perm])
    return RuleResult(list(specs), [out])


RULES = {("transpose",): transpose_rule}
