"""layer_norm / rms_norm: the normalized (trailing) dims must be whole on every rank; the leading dims keep their
sharding; weight and bias are replicated; Partial is resolved."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, drop_dims


def norm_rule(specs, attrs):
    x = specs[0]
    shape = attrs.get("normalized_shape")
    n = 1 if isinstance(shape, int) else len(shape)
    xi = drop_dims(x, set(range(x.ndim - n, x.ndim)))
    rest = [None if s is None else s.with_(dims=[()] * s.ndim, partial={}) for s in specs[1:]]
    return RuleResult([xi] + rest, [xi])


RULES = {("layer_norm", "rms_norm"): norm_rule}
