"""Shape ops: reshape, transpose/permute, squeeze, unsqueeze, concat, stack, split, chunk, expand,
expand_as, broadcast_to, flatten, tile. Their gradients are shape ops too.

torch's spellings are public names of the same ops where the meaning is the same: cat and
concatenate (concat); swapaxes and swapdims (transpose, which, as in Paddle 3.2, also swaps two axes
given as transpose(x, dim0, dim1)).

Kernels return views where the array module gives them (reshape, transpose, squeeze, split), as
Paddle 3 does with its stride kernels: writing into such a result writes into the input.
"""

from __future__ import annotations

import oarlock
from oarlock_ops._grad import sum_to_shape
from oarlock_ops._inplace import define_variants


# -- axis helpers (kernels) -------------------------------------------------------------------------

def _axis(axis, ndim, what="axis"):
    """One axis, in [0, ndim); a 0-d tensor counts as one axis (Axis converts it to a 1-tuple)."""
    if isinstance(axis, tuple):
        if len(axis) != 1:
            raise ValueError(f"{what} must be a single int, got {list(axis)}")
        axis = axis[0]
    if not -ndim <= axis < ndim:
        raise ValueError(f"{what} {axis} is out of range for a tensor with {ndim} dimension(s); "
                         f"it accepts [{-ndim}, {ndim - 1}]")
    return axis % ndim


def _normalize_axes(axes, ndim):
    axes = [axes] if isinstance(axes, int) else list(axes)
    return sorted(_axis(a, ndim) for a in axes)


def _slice_along(x, axis, start, stop):
    """x[start:stop] along `axis` (a view)."""
    return x[(slice(None),) * axis + (slice(start, stop),)]


# -- kernels ------------------------------------------------------------------------------------------

def _reshape_kernel(xp, x, shape):
    # Paddle: a 0 in `shape` keeps x's size at that index (reshape(x, [0, 0, heads, -1]) splits the last axis),
    # except for a tensor with no elements, where a 0 is a size (Paddle reshapes [2, 0] to [0, 5])
    if 0 in shape and x.size != 0:
        shape = [x.shape[i] if n == 0 and i < x.ndim else n for i, n in enumerate(shape)]
    return xp.reshape(x, shape)


def _unsqueeze_kernel(xp, x, axis):
    out_ndim = x.ndim + (1 if isinstance(axis, int) else len(axis))
    shape = list(x.shape)
    for a in _normalize_axes(axis, out_ndim):
        shape.insert(a, 1)
    return xp.reshape(x, shape)


def _expand_kernel(xp, x, shape):
    shape = list(shape)
    lead = len(shape) - x.ndim
    if lead < 0:
        raise ValueError(f"cannot expand a {x.ndim}-d tensor of shape {list(x.shape)} to {len(shape)} dimensions")
    target = [x.shape[i - lead] if (n == -1 and i >= lead) else n for i, n in enumerate(shape)]
    return xp.broadcast_to(x, target).copy()


def _check_perm(perm, ndim):
    if len(perm) != ndim or sorted(p % ndim if -ndim <= p < ndim else p for p in perm) != list(range(ndim)):
        raise ValueError(f"perm {list(perm)} is not a permutation of the {ndim} axes of the input "
                         f"(each of 0..{ndim - 1} once; negative values count from the end)")
    return [p % ndim for p in perm]


def _transpose_perm(perm, dim1, ndim):
    """transpose's axes: a full permutation, or (Paddle 3.2, torch) the two axes perm[0] and dim1 to swap."""
    if dim1 is None:
        return _check_perm(perm, ndim)
    if len(perm) != 1:
        raise ValueError(f"with dim1={dim1}, give one axis to swap it with (dim0), not the permutation {list(perm)}")
    order = list(range(ndim))
    a, b = _axis(perm[0], max(ndim, 1), "dim0"), _axis(dim1, max(ndim, 1), "dim1")
    if ndim:
        order[a], order[b] = order[b], order[a]
    return order


def _transpose_kernel(xp, x, perm, dim1=None):
    return xp.transpose(x, _transpose_perm(perm, dim1, x.ndim))


def _squeeze_kernel(xp, x, axis=None):
    if axis is None:
        return xp.reshape(x, [n for n in x.shape if n != 1])
    # Paddle: a 0-d tensor accepts axis 0 and -1; axes whose size is not 1 are ignored
    axes = set(_normalize_axes(axis, max(x.ndim, 1)))
    return xp.reshape(x, [n for i, n in enumerate(x.shape) if not (i in axes and n == 1)])


def _same_shapes(arrays, skip=None):
    first = arrays[0].shape
    for i, a in enumerate(arrays[1:], 1):
        if a.ndim != len(first) or any(m != n for k, (m, n) in enumerate(zip(a.shape, first)) if k != skip):
            ignoring = "" if skip is None else f" except along axis {skip}"
            raise ValueError(f"the tensors in x must have the same shape{ignoring}; tensor 0 has shape "
                             f"{list(first)} but tensor {i} has shape {list(a.shape)}")


def _concat_kernel(xp, x, axis=0):
    if x[0].ndim == 0:
        raise ValueError("0-d tensors cannot be concatenated (they have no axis); use stack")
    axis = _axis(axis, x[0].ndim)
    _same_shapes(x, skip=axis)
    return xp.concatenate(x, axis=axis)


def _stack_kernel(xp, x, axis=0):
    _same_shapes(x)
    return xp.stack(x, axis=_axis(axis, x[0].ndim + 1))


def _split_sizes(size, sections):
    """The part sizes for split(num_or_sections=sections) of an axis of length `size`."""
    if isinstance(sections, int):
        if sections <= 0:
            raise ValueError(f"num_or_sections must be a positive number of parts, got {sections}")
        if size % sections:
            raise ValueError(f"the axis has size {size}, which {sections} equal parts cannot divide; "
                             f"pass a list of sizes instead")
        return [size // sections] * sections
    sections = list(sections)
    unknown = [i for i, n in enumerate(sections) if n == -1]
    if len(unknown) > 1 or any(n < -1 for n in sections):
        raise ValueError(f"num_or_sections {sections}: sizes must be >= 0, with at most one -1 (inferred)")
    known = sum(n for n in sections if n != -1)
    if unknown and known <= size:
        sections[unknown[0]] = size - known
    elif unknown or known != size:
        raise ValueError(f"num_or_sections {sections} must add up to the axis size {size} (one entry may be -1)")
    return sections


def _split_kernel(xp, x, num_or_sections, axis=0):
    if x.ndim == 0:
        raise ValueError("a 0-d tensor cannot be split")
    axis = _axis(axis, x.ndim)
    out, start = [], 0
    for n in _split_sizes(x.shape[axis], num_or_sections):
        out.append(_slice_along(x, axis, start, start + n))
        start += n
    return out


def _flatten_kernel(xp, x, start_axis=0, stop_axis=-1):
    ndim = max(x.ndim, 1)  # a 0-d tensor flattens to shape [1]
    start, stop = _axis(start_axis, ndim, "start_axis"), _axis(stop_axis, ndim, "stop_axis")
    if start > stop:
        raise ValueError(f"start_axis ({start_axis}) must not come after stop_axis ({stop_axis})")
    shape = list(x.shape) or [1]
    merged = 1
    for n in shape[start:stop + 1]:
        merged *= n
    return xp.reshape(x, shape[:start] + [merged] + shape[stop + 1:])


def _tile_kernel(xp, x, repeat_times):
    if any(r < 0 for r in repeat_times):
        raise ValueError(f"repeat_times {list(repeat_times)} must be non-negative")
    return xp.tile(x, tuple(repeat_times)) if repeat_times else x


# -- gradients -------------------------------------------------------------------------------------------

def _reshape_grad(ctx, g):
    return oarlock.reshape(g, list(ctx.meta[0][0]))


def _expand_grad(ctx, g):
    return sum_to_shape(g, ctx.meta[0][0])


def _transpose_grad(ctx, g):
    perm = _transpose_perm(ctx.attrs["perm"], ctx.attrs.get("dim1"), len(ctx.meta[0][0]))
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return oarlock.transpose(g, inverse)


def _expand_as_grad(ctx, g):
    return sum_to_shape(g, ctx.meta[0][0]), None


def _concat_grad(ctx, g):
    axis = _axis(ctx.attrs["axis"], g.ndim)
    return oarlock.split(g, [meta[0][axis] for meta in ctx.meta], axis)


def _stack_grad(ctx, g):
    axis = _axis(ctx.attrs["axis"], g.ndim)
    return [oarlock.squeeze(part, axis) for part in oarlock.split(g, len(ctx.meta), axis)]


def _split_grad(ctx, *grads):
    """The pieces' gradients side by side again; a piece that got none contributes zeros."""
    shape = ctx.meta[0][0]
    axis = _axis(ctx.attrs["axis"], len(shape))
    grads = [oarlock.zeros(list(s), dtype=dt, place=ctx.place) if g is None else g
             for g, (s, dt) in zip(grads, ctx.out_meta)]
    return oarlock.concat(grads, axis)


def _tile_grad(ctx, g):
    """Each output axis of length r*s is r copies of an input axis of length s: view it as (r, s)
    and sum over r."""
    shape, reps = list(ctx.meta[0][0]), list(ctx.attrs["repeat_times"])
    n = max(len(shape), len(reps))
    shape_n, reps_n = [1] * (n - len(shape)) + shape, [1] * (n - len(reps)) + reps
    if not n or shape_n == list(g.shape):
        return oarlock.reshape(g, shape)
    g = oarlock.reshape(g, [d for pair in zip(reps_n, shape_n) for d in pair])
    return oarlock.reshape(oarlock.sum(g, axis=list(range(0, 2 * n, 2))), shape)


# -- Python-level functions ---------------------------------------------------------------------------------
# Both are transposes, so views of x like transpose's result.

def t(input, name=None):
    """oarlock.t(input) / Tensor.t(): a 2-D tensor with its two axes swapped; a 0-D or 1-D tensor as it is
    (a view); more axes are an error (use transpose), as in Paddle."""
    if not isinstance(input, oarlock.Tensor):
        raise TypeError(f"oarlock.t(): argument 'input' must be a Tensor, got {type(input).__name__}")
    if input.ndim > 2:
        raise ValueError(f"oarlock.t(): Input(input) only support N-D (N<=2) tensor, but received length of "
                         f"Input(input) is {input.ndim}. Perhaps you can use oarlock.transpose() instead.")
    return oarlock.transpose(input, list(range(input.ndim))[::-1])


def _reversed_axes(x):
    """Tensor.T: x with all its axes in reverse order (a transpose; 0-D and 1-D unchanged), as Paddle's."""
    return oarlock.transpose(x, list(range(x.ndim))[::-1])


def register_api(api):
    api.export("oarlock", "t", t)
    api.export("Tensor", "t", t)
    api.export("Tensor", "T", property(_reversed_axes, doc=_reversed_axes.__doc__))


# -- registration ------------------------------------------------------------------------------------------

def register(ops):
    x_alias = {"input": "x"}
    ops.define("reshape(x: Tensor, shape: Shape) -> Tensor", public=["reshape", "Tensor.reshape", "Tensor.view"],
               aliases=x_alias, grad=_reshape_grad, varargs="shape", view=True)
    ops.kernel("reshape")(_reshape_kernel)

    ops.define("unsqueeze(x: Tensor, axis: Axis) -> Tensor", public=["unsqueeze", "Tensor.unsqueeze"],
               aliases={"input": "x", "dim": "axis"}, grad=_reshape_grad, view=True)
    ops.kernel("unsqueeze")(_unsqueeze_kernel)

    ops.define("squeeze(x: Tensor, axis: Axis|None = None) -> Tensor", public=["squeeze", "Tensor.squeeze"],
               aliases={"input": "x", "dim": "axis"}, grad=_reshape_grad, view=True,
               doc="Remove axes of size 1 (all of them, or those in `axis`; listed axes of another size are "
                   "left alone, as in Paddle).")
    ops.kernel("squeeze")(_squeeze_kernel)

    ops.define("flatten(x: Tensor, start_axis: int = 0, stop_axis: int = -1) -> Tensor",
               public=["flatten", "Tensor.flatten"], grad=_reshape_grad, view=True,
               aliases={"input": "x", "start_dim": "start_axis", "end_dim": "stop_axis"})
    ops.kernel("flatten")(_flatten_kernel)

    # transpose takes a perm list (Paddle) or two axes to swap (Paddle 3.2's torch form, which swapaxes
    # and swapdims are in Paddle 3.2 too); permute also takes the axes as separate arguments
    ops.define("transpose(x: Tensor, perm: Shape, dim1: int|None = None) -> Tensor",
               public=[f"{owner}{name}" for name in ("transpose", "swapaxes", "swapdims") for owner in ("", "Tensor.")],
               aliases={"input": "x", "dim0": "perm", "axis0": "perm", "axis1": "dim1"}, grad=_transpose_grad,
               view=True,
               doc="Permute the axes of x (perm: a permutation of them), or swap two: transpose(x, dim0, dim1).")
    ops.define("permute(x: Tensor, perm: Shape) -> Tensor", public=["permute", "Tensor.permute"],
               aliases={"input": "x", "dims": "perm"}, grad=_transpose_grad, varargs="perm", view=True)
    ops.kernel("transpose")(_transpose_kernel)
    ops.kernel("permute")(_transpose_kernel)

    for name in ("expand", "broadcast_to"):
        ops.define(f"{name}(x: Tensor, shape: Shape) -> Tensor", public=[name, f"Tensor.{name}"],
                   aliases={"input": "x", "size": "shape"}, grad=_expand_grad,
                   varargs="shape" if name == "expand" else None)
        ops.kernel(name)(_expand_kernel)

    ops.define("expand_as(x: Tensor, y: Tensor) -> Tensor", public=["expand_as", "Tensor.expand_as"],
               aliases={"input": "x", "other": "y"}, nondiff=("y",), grad=_expand_as_grad,
               doc="x broadcast to the shape of y (only y's shape is used).")
    ops.kernel("expand_as")(lambda xp, x, y: _expand_kernel(xp, x, y.shape))

    ops.define("tile(x: Tensor, repeat_times: Shape) -> Tensor", public=["tile", "Tensor.tile"],
               aliases={"input": "x", "dims": "repeat_times"}, grad=_tile_grad)
    ops.kernel("tile")(_tile_kernel)

    # list ops: the inputs share one promoted dtype, as torch.cat / torch.stack do
    ops.define("concat(x: TensorList, axis: Axis = 0) -> Tensor", public=["concat", "cat", "concatenate"], promote=True,
               aliases={"tensors": "x", "dim": "axis"}, grad=_concat_grad)
    ops.kernel("concat")(_concat_kernel)
    ops.define("stack(x: TensorList, axis: int = 0) -> Tensor", public=["stack"], promote=True,
               aliases={"tensors": "x", "dim": "axis"}, grad=_stack_grad)
    ops.kernel("stack")(_stack_kernel)

    # no torch-style aliases: torch.split(x, 2) means parts of size 2, Paddle's means 2 parts
    ops.define("split(x: Tensor, num_or_sections: Axis, axis: Axis = 0) -> TensorList",
               public=["split", "Tensor.split"], grad=_split_grad,
               doc="Split x along `axis` into num_or_sections equal parts (an int that must divide the axis) "
                   "or into parts of the listed sizes (one may be -1).")
    ops.kernel("split")(_split_kernel)
    ops.define("chunk(x: Tensor, chunks: int, axis: Axis = 0) -> TensorList", public=["chunk", "Tensor.chunk"],
               aliases={"input": "x", "dim": "axis"}, grad=_split_grad,
               doc="Split x into `chunks` equal parts along `axis` (chunks must divide the axis, as in Paddle).")
    ops.kernel("chunk")(lambda xp, x, chunks, axis=0: _split_kernel(xp, x, chunks, axis))

    # Paddle's view-kind in-place variants: the tensor takes the new shape and keeps its storage (the
    # dispatcher sees the base op is a view op and rebinds instead of writing values)
    define_variants(ops, ("reshape", "unsqueeze", "squeeze", "flatten", "transpose"))
