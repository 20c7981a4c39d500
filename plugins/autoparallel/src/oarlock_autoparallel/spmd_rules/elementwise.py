"""Elementwise ops with broadcasting: dims are aligned from the right; a size-1 dim broadcast against a larger one
is never sharded; every other dim takes the sharding of the first operand that shards it. Unary ops keep their
input's sharding. Partial(sum) passes through ops linear in their inputs (add/subtract of two Partial(sum)
operands, multiply/divide of one Partial(sum) by a replicated operand, scale without bias, cast, negative)."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, Spec, einsum


def broadcast_shape(shapes, who="elementwise"):
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        sizes = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"{who}(): shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return out


def _binary(specs, linear_in):
    tensors = [(i, s) for i, s in enumerate(specs) if isinstance(s, Spec)]
    shape = broadcast_shape([s.shape for _, s in tensors])
    ndim = len(shape)
    letters = []
    for _, s in tensors:
        off = ndim - s.ndim
        letters.append([f"d{off + d}" if s.shape[d] == shape[off + d] and (s.shape[d] != 1 or shape[off + d] == 1)
                        else None for d in range(s.ndim)])
    inputs, out = einsum([s for _, s in tensors], letters, [f"d{d}" for d in range(ndim)], shape,
                         linear=linear_in(len(tensors)))
    full = list(specs)
    for (i, _), spec in zip(tensors, inputs):
        full[i] = spec
    return RuleResult(full, [out])


def additive_rule(specs, attrs):
    """add / subtract: linear in both operands together: Partial(sum) stays when both are Partial(sum) on the
    same mesh dims (each rank's pieces add up to the sum)."""
    res = _binary(specs, lambda n: ())
    tensors = [s for s in specs if isinstance(s, Spec)]
    shared = set.intersection(*[{m for m, r in s.partial if r == "sum"} for s in tensors]) if len(tensors) == 2 \
        else set()
    shared -= {m for s in res.inputs if isinstance(s, Spec) for m in s.used()}
    if not shared or len(tensors) < 2 or any(s.shape != tensors[0].shape for s in tensors):
        return res
    keep = {m: "sum" for m in shared}
    inputs = [s.with_(partial=keep) if isinstance(s, Spec) else s for s in res.inputs]
    return RuleResult(inputs, [res.outputs[0].with_(partial={**res.outputs[0].partial_map, **keep})])


def multiplicative_rule(specs, attrs, divide=False):
    """multiply: linear in each operand alone; divide: linear in x only."""
    return _binary(specs, lambda n: (0,) if divide else tuple(range(n)))


def divide_rule(specs, attrs):
    return multiplicative_rule(specs, attrs, divide=True)


def binary_rule(specs, attrs):
    """Any other elementwise op of two operands (maximum, pow, where's pair, ...): Partial is resolved."""
    return _binary(specs, lambda n: ())


def unary_rule(specs, attrs):
    x = specs[0]
    return RuleResult([x.unpartial()] + list(specs[1:]), [x.unpartial()])


def linear_unary_rule(specs, attrs):
    """cast, neg, scale without bias: Partial(sum) passes through."""
    x = specs[0]
    if attrs.get("bias", 0.0) not in (0, 0.0) or any(r != "sum" for _, r in x.partial):
        return unary_rule(specs, attrs)
    return RuleResult(list(specs), [x])


UNARY = ("relu", "gelu", "silu", "tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "square", "abs", "sin", "cos",
         "erf", "swish", "relu6", "leaky_relu", "elu", "softplus", "softsign", "hardswish", "hardsigmoid",
         "mish", "floor", "ceil", "round", "sign", "reciprocal", "logical_not", "isnan", "isinf",
         "isfinite", "full_like", "zeros_like", "ones_like", "increment")

RULES = {
    ("add", "subtract"): additive_rule,
    ("multiply",): multiplicative_rule,
    ("divide",): divide_rule,
    ("maximum", "minimum", "fmax", "fmin", "elementwise_pow", "equal", "not_equal", "less_than", "less_equal",
     "greater_than", "greater_equal", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
     "remainder", "floor_divide", "atan2"): binary_rule,
    UNARY: unary_rule,
    ("cast", "neg", "scale"): linear_unary_rule,
}
