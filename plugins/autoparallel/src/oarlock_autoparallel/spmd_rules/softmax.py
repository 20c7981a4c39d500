"""softmax / log_softmax: the softmax axis must be whole on every rank (replicated); other dims keep their
sharding; Partial is resolved (softmax is not linear)."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, drop_dims, norm_axis


def softmax_rule(specs, attrs):
    x = specs[0]
    xi = drop_dims(x, {norm_axis(attrs.get("axis", -1), x.ndim, "softmax(): axis")} if x.ndim else set())
    return RuleResult([xi] + list(specs[1:]), [xi])


RULES = {("softmax", "log_softmax", "softmax_compat"): softmax_rule}
