"""concat / stack / split: the concatenated (split) axis is whole on every rank; the other dims take the first
input's sharding; Partial(sum) passes when every input is Partial(sum) on the same mesh dims (concat is linear)."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, norm_axis


def _common(specs, skip_axis):
    first = specs[0]
    dims = [() if d == skip_axis else first.dims[d] for d in range(first.ndim)]
    shared = set.intersection(*[{m for m, r in s.partial if r == "sum"} for s in specs])
    keep = {m: "sum" for m in shared}
    return [s.with_(dims=dims, partial=keep) for s in specs], dims, keep


def concat_rule(specs, attrs):
    xs = specs[0]
    if not xs:
        raise ValueError("concat(): argument 'x' is an empty list")
    axis = norm_axis(attrs.get("axis", 0), xs[0].ndim, "concat(): axis")
    inputs, dims, keep = _common(xs, axis)
    shape = list(xs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in xs)
    return RuleResult([inputs] + list(specs[1:]), [xs[0].with_(shape=shape, dims=dims, partial=keep)])


def stack_rule(specs, attrs):
    xs = specs[0]
    if not xs:
        raise ValueError("stack(): argument 'x' is an empty list")
    axis = norm_axis(attrs.get("axis", 0), xs[0].ndim + 1, "stack(): axis")
    inputs, dims, keep = _common(xs, None)
    shape = list(xs[0].shape)
    shape.insert(axis, len(xs))
    dims.insert(axis, ())
    return RuleResult([inputs] + list(specs[1:]), [xs[0].with_(shape=shape, dims=dims, partial=keep)])


def split_sizes(size, num_or_sections, who="split"):
    if isinstance(num_or_sections, int):
        if num_or_sections <= 0 or size % num_or_sections:
            raise ValueError(f"{who}(): {size} is not divisible into {num_or_sections} parts")
        return [size // num_or_sections] * num_or_sections
    sections = [int(s) for s in num_or_sections]
    if sections.count(-1) == 1:
        sections[sections.index(-1)] = size - (sum(sections) + 1)
    if sum(sections) != size:
        raise ValueError(f"{who}(): sections {list(num_or_sections)} do not add up to {size}")
    return sections


def split_rule(specs, attrs):
    x = specs[0]
    axis = norm_axis(attrs.get("axis", 0), x.ndim, "split(): axis")
    (xi,), dims, keep = _common([x], axis)
    outs = []
    for size in split_sizes(x.shape[axis], attrs.get("num_or_sections")):
        shape = list(x.shape)
        shape[axis] = size
        outs.append(x.with_(shape=shape, dims=dims, partial=keep))
    return RuleResult([xi] + list(specs[1:]), outs)


RULES = {("concat",): concat_rule, ("stack",): stack_rule, ("split",): split_rule}
