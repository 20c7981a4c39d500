"""reshape (and flatten, squeeze, unsqueeze, which are reshapes): Paddle's slicing rule.

The dims of input and output are cut into groups of equal size products (a group is one dim kept, several dims
merged, one dim split, or many to many). In a group only the outermost input dim may stay sharded (an inner dim's
shard is not contiguous in the output): its mesh dims m1, m2, ... (outer first) cut the group's flat range into
contiguous chunks, and walking the output dims of the group outer first, each mesh dim of size s goes to the
current output dim while s divides what is left of it; an output dim is left only when it is used up (every
chunk boundary then falls on its boundary). A mesh dim that cannot be placed is dropped from the input's
sharding with every mesh dim after it (they would cut inside it). So a dim of 8 split by [Shard(0), Shard(0)]
on a 2x2 mesh, reshaped to (2, 4), gives out dims (mesh 0) and (mesh 1). Partial passes through."""

from oarlock_autoparallel.spmd_rules.base import RuleResult, local_shape, norm_axes, norm_axis


def resolve_shape(in_shape, shape, who="reshape"):
    """Paddle's target shape: 0 copies the input dim, one -1 is inferred."""
    total = 1
    for s in in_shape:
        total *= s
    out = [in_shape[i] if s == 0 and i < len(in_shape) else int(s) for i, s in enumerate(shape)]
    if out.count(-1) > 1:
        raise ValueError(f"{who}(): shape {list(shape)} has more than one -1")
    known = 1
    for s in out:
        if s != -1:
            known *= s
    if -1 in out:
        if known == 0 or total % known:
            raise ValueError(f"{who}(): cannot reshape {list(in_shape)} to {list(shape)}")
        out[out.index(-1)] = total // known
    elif known != total:
        raise ValueError(f"{who}(): cannot reshape {list(in_shape)} ({total} elements) to {list(shape)}")
    return out


def groups(in_shape, out_shape):
    """[(input dims, output dims)] with equal products, in order; size-1 dims form groups of their own."""
    out, i, j = [], 0, 0
    while i < len(in_shape) or j < len(out_shape):
        if i < len(in_shape) and in_shape[i] == 1 and not (j < len(out_shape) and out_shape[j] == 1):
            out.append(([i], []))
            i += 1
            continue
        if j < len(out_shape) and out_shape[j] == 1 and not (i < len(in_shape) and in_shape[i] == 1):
            out.append(([], [j]))
            j += 1
            continue
        gi, gj = [i], [j]
        a, b = in_shape[i], out_shape[j]
        i, j = i + 1, j + 1
        while a != b:
            if a < b:
                a *= in_shape[i]
                gi.append(i)
                i += 1
            else:
                b *= out_shape[j]
                gj.append(j)
                j += 1
        out.append((gi, gj))
    return out


def reshape_rule(specs, attrs, target=None):
    x = specs[0]
    out_shape = target if target is not None else resolve_shape(x.shape, attrs.get("shape"))
    in_dims = [()] * x.ndim
    out_dims = [()] * len(out_shape)
    for gi, gj in groups(list(x.shape), list(out_shape)):
        if not gi or not gj:
            continue
        first = gi[0]
        ms = list(x.dims[first])
        if not ms:
            continue
        if len(gi) > 1 and x.shape[first] % x.degree(ms):
            continue                      # uneven outer dim: its chunks are not contiguous after the merge
        if len(gi) == 1 and len(gj) == 1:
            in_dims[first], out_dims[gj[0]] = tuple(ms), tuple(ms)
            continue
        placed, k, left = [], 0, out_shape[gj[0]]
        for m in ms:
            size = x.mesh_shape[m]
            while left == 1 and k + 1 < len(gj):
                k += 1
                left = out_shape[gj[k]]
            if left % size:
                break
            placed.append((m, gj[k]))
            left //= size
        in_dims[first] = tuple(m for m, _ in placed)
        for m, j in placed:
            out_dims[j] = out_dims[j] + (m,)
    xi = x.with_(dims=in_dims)
    out = x.with_(shape=out_shape, dims=out_dims)
    # reshape's `shape` attribute is global: each rank reshapes its piece to its piece of the output
    local = None if target is not None else (lambda coord: {"shape": local_shape(out, coord)})
    return RuleResult([xi] + list(specs[1:]), [out], local)


def flatten_rule(specs, attrs):
    x = specs[0]
    if x.ndim == 0:
        return reshape_rule(specs, attrs, target=[1])
    a = norm_axis(attrs.get("start_axis", 0), x.ndim)
    b = norm_axis(attrs.get("stop_axis", -1), x.ndim)
    merged = 1
    for s in x.shape[a:b + 1]:
        merged *= s
    return reshape_rule(specs, attrs, target=list(x.shape[:a]) + [merged] + list(x.shape[b + 1:]))


def squeeze_rule(specs, attrs):
    x = specs[0]
    axes = norm_axes(attrs.get("axis"), x.ndim)
    return reshape_rule(specs, attrs, target=[s for d, s in enumerate(x.shape) if not (d in axes and s == 1)])


def unsqueeze_rule(specs, attrs):
    x = specs[0]
    axis = attrs.get("axis")
    axes = [axis] if isinstance(axis, int) else list(axis)
    shape = list(x.shape)
    for a in axes:
        a = int(a)
        shape.insert(a if a >= 0 else len(shape) + 1 + a, 1)
    return reshape_rule(specs, attrs, target=shape)


RULES = {("reshape", "view"): reshape_rule, ("flatten",): flatten_rule, ("squeeze",): squeeze_rule,
         ("unsqueeze",): unsqueeze_rule}
