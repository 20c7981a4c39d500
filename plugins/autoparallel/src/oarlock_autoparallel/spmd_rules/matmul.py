"""matmul / linear: batch dims broadcast, m from x, n from y; a contracted dim k sharded the same way on both
operands gives Partial(sum) over those mesh dims (Paddle's matmul SPMD rule). A Partial(sum) operand stays
Partial when the other is replicated on that mesh dim (matmul is linear in each operand)."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, Spec, einsum


def _letters(ndim, prefix, last_two, transpose):
    """Letters of an operand of rank ndim: batch letters right-aligned, then its two matrix letters."""
    if ndim == 1:
        return [last_two[1] if prefix == "x" else last_two[0]]
    pair = list(last_two[::-1] if transpose else last_two)
    return [f"b{ndim - 3 - i}" for i in range(ndim - 2)] + pair


def _batch(x: Spec, y: Spec, xl, yl):
    """Broadcast batch dims: a size-1 batch dim that the other operand has larger gets no letter."""
    xb, yb = x.shape[:len(xl) - 2] if x.ndim > 1 else (), y.shape[:len(yl) - 2] if y.ndim > 1 else ()
    shape = []
    for i in range(max(len(xb), len(yb))):
        a = xb[len(xb) - 1 - i] if i < len(xb) else 1
        b = yb[len(yb) - 1 - i] if i < len(yb) else 1
        if a != b and 1 not in (a, b):
            raise ValueError(f"matmul(): batch dims {xb} and {yb} do not broadcast")
        if a == 1 and b != 1 and i < len(xb):
            xl[len(xb) - 1 - i] = None
        if b == 1 and a != 1 and i < len(yb):
            yl[len(yb) - 1 - i] = None
        shape.append(max(a, b))
    return shape[::-1]


def matmul_rule(specs, attrs):
    x, y = specs[0], specs[1]
    tx, ty = bool(attrs.get("transpose_x", False)), bool(attrs.get("transpose_y", False))
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError("matmul(): both operands need rank >= 1")
    xl, yl = _letters(x.ndim, "x", ("m", "k"), tx), _letters(y.ndim, "y", ("k", "n"), ty)
    xk = x.shape[xl.index("k")]
    yk = y.shape[yl.index("k")]
    if xk != yk:
        raise ValueError(f"matmul(): contracted sizes differ: x {x.shape} (transpose_x={tx}), y {y.shape} "
                         f"(transpose_y={ty})")
    batch = _batch(x, y, xl, yl)
    out_l = [f"b{len(batch) - 1 - i}" for i in range(len(batch))]
    shape = list(batch)
    if x.ndim > 1:
        out_l.append("m")
        shape.append(x.shape[xl.index("m")])
    if y.ndim > 1:
        out_l.append("n")
        shape.append(y.shape[yl.index("n")])
    inputs, out = einsum([x, y], [xl, yl], out_l, shape, linear=(0, 1))
    return RuleResult(inputs, [out])


def linear_rule(specs, attrs):
    """linear(x, weight [in, out], bias [out]) = matmul + bias: the bias follows the output's last dim; with a
    Partial(sum) output (row parallel) the bias is required Partial(sum) too -- one rank holds it, the others
    zeros (reshard R -> P) -- so each rank adds its share and the sum has the bias once."""
    x, w, b = specs
    res = matmul_rule([x, w], {})
    (xi, wi), out = res.inputs, res.outputs[0]
    if b is None:
        return RuleResult([xi, wi, None], [out])
    bi = b.with_(dims=[out.dims[-1]], partial=out.partial_map)
    return RuleResult([xi, wi, bi], [out])


RULES = {("matmul",): matmul_rule, ("linear",): linear_rule}
