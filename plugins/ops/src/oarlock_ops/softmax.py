"""Softmax, log_softmax and cross_entropy (oarlock.nn.functional).

All three subtract the maximum along the class axis before exponentiating, so large logits do not
overflow, and compute low-precision floats in float32.

Paddle 3.2 has two softmaxes: nn.functional.softmax(x, axis=-1, dtype=None), and the torch-style one
that paddle.softmax, Tensor.softmax and paddle.special.softmax are: softmax(input, dim=None,
dtype=None), where dim=None picks torch's legacy implicit dim (0 for 0-D, 1-D and 3-D input, else 1).
Here they are the ops softmax and softmax_compat; both take either spelling of the arguments.

cross_entropy follows Paddle's semantics, which differ from torch's in places:
- a hard label holds class indices, shaped like the input without the class axis or with that
  axis of size 1; the unreduced loss has the label's shape. Soft labels (and label smoothing, which
  turns hard labels into soft ones) keep the class axis as size 1;
- with a weight, every position's loss is scaled by sum_c target_c * weight_c (for a hard label:
  weight[label]);
- 'mean' divides by the summed weights of the non-ignored positions when there is a weight or a
  non-negative ignore_index, and otherwise by the number of positions (ignored ones included).
Both the kernel and the backward rule describe the target the same way: a distribution `t` of the
input's shape and a per-position scale `s` (weight and ignore mask), loss = -s * sum_c t_c log p_c.
"""

from __future__ import annotations

import oarlock
from oarlock.plugin_api import xp_function
from oarlock_ops._inplace import define_variants
from oarlock.nn import functional as F
from oarlock_ops.linalg import compute_dtype

_REDUCTIONS = ("none", "mean", "sum")


def _check_axis(axis, ndim):
    n = max(ndim, 1)  # a 0-d input takes axis 0 or -1, like a 1-element vector
    if not -n <= axis < n:
        raise ValueError(f"axis {axis} is out of range for a {ndim}-D input (valid: {-n} to {n - 1})")


def row_sums(xp, x):
    """x.sum(axis=-1, keepdims=True) through einsum's sum-of-products loop: for rows of a few hundred floats it
    is several times faster than numpy's reduction (which runs one short inner loop per row), and unlike a
    matrix-vector product it never enters BLAS, whose threads (set by whatever matmul ran last) cost
    milliseconds to wake when another process is busy. Attention's kernels use it too."""
    return xp.einsum("...k->...", x)[..., None]


def _sum_along(xp, x, axis):
    """x.sum(axis, keepdims=True), by row_sums over the last axis (the short rows of scores and logits)."""
    if axis % x.ndim == x.ndim - 1:
        return row_sums(xp, x)
    return xp.sum(x, axis=axis, keepdims=True)


def _log_softmax_xp(xp, x, axis):
    z = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
    e = xp_function(xp, "exp")(z)
    z -= xp.log(_sum_along(xp, e, axis))
    return z


def _softmax_xp(xp, x, axis):
    e = xp.subtract(x, xp.max(x, axis=axis, keepdims=True))
    xp_function(xp, "exp")(e, out=e)
    e /= _sum_along(xp, e, axis)
    return e


def _softmax_backward_xp(xp, y, g, axis):
    """y * (g - sum(g * y)) along axis: softmax's vector-Jacobian product, in two buffers."""
    out = xp.multiply(g, y)
    total = _sum_along(xp, out, axis)
    xp.subtract(g, total, out=out)
    out *= y
    return out


def _implicit_axis(axis, ndim):
    """softmax_compat's dim=None: torch's legacy rule, which Paddle 3.2's paddle.softmax follows."""
    if axis is None:
        return 0 if ndim in (0, 1, 3) else 1
    return axis


def _along_axis(fn):
    """A kernel (xp, x, axis, dtype) from fn(xp, x, axis): casts to `dtype` first (Paddle's softmax
    dtype argument), computes low precision in float32, and handles 0-d and empty inputs."""
    def kernel(xp, x, axis=-1, dtype=None):
        axis = _implicit_axis(axis, x.ndim)
        _check_axis(axis, x.ndim)
        out_dtype = x.dtype if dtype is None else dtype
        if x.size == 0:
            return xp.empty(x.shape, dtype=out_dtype)
        work = x.astype(compute_dtype(xp, out_dtype), copy=False)
        out = fn(xp, work.reshape(1) if x.ndim == 0 else work, axis)
        return out.reshape(x.shape).astype(out_dtype, copy=False)
    return kernel


def _softmax_grad_kernel(xp, y, g, axis):
    _check_axis(axis, y.ndim)
    if y.size == 0:
        return xp.empty(y.shape, dtype=y.dtype)
    ct = compute_dtype(xp, y.dtype)
    out = _softmax_backward_xp(xp, y.astype(ct, copy=False), g.astype(ct, copy=False), axis)
    return out.astype(y.dtype, copy=False)


def _cast_back(ctx, dx):
    """The gradient in the input's dtype (softmax(x, dtype=...) computes in another one)."""
    dtype = ctx.meta[0][1]
    return dx if dx.dtype == dtype else oarlock.cast(dx, dtype)


def _grad_axis(ctx):
    ndim = len(ctx.meta[0][0])
    return _implicit_axis(ctx.attrs["axis"], ndim) if ndim else None  # a 0-d input reduces over everything


def _softmax_grad(ctx, g):
    (y,) = ctx.saved
    axis = _grad_axis(ctx)
    if not oarlock.is_grad_enabled() and axis is not None and y.dtype == g.dtype:
        return _cast_back(ctx, _softmax_grad_op(y, g, axis))   # first order: one fused op
    return _cast_back(ctx, y * (g - oarlock.sum(g * y, axis=axis, keepdim=True)))


_softmax_grad_op = None  # the internal op softmax_grad (set by register)


def _log_softmax_grad(ctx, g):
    (y,) = ctx.saved
    axis = _grad_axis(ctx)
    return _cast_back(ctx, g - oarlock.exp(y) * oarlock.sum(g, axis=axis, keepdim=True))


# -- cross_entropy ------------------------------------------------------------------------------------

def _validate_cross_entropy(xp, x, label, weight, ignore_index, reduction, soft_label, axis, label_smoothing,
                            check_labels=True):
    """Check the arguments the way Paddle does; returns the class axis as a non-negative int. check_labels=False
    leaves the hard labels' range to the caller (the fused row kernel checks it as it reads them)."""
    if x.ndim == 0:
        raise ValueError("input must have at least one dimension (the class axis), got a 0-D tensor")
    _check_axis(axis, x.ndim)
    axis %= x.ndim
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    shape, classes = list(x.shape), x.shape[axis]
    if soft_label:
        if ignore_index > 0:
            raise ValueError(f"ignore_index applies only to hard labels; with soft_label=True leave it at -100, "
                             f"got {ignore_index}")
        if list(label.shape) != shape:
            raise ValueError(f"a soft label must have the input's shape {shape}, got label shape "
                             f"{list(label.shape)}")
    else:
        if label.dtype.kind not in "iu":
            raise TypeError(f"a hard label must hold integer class indices (int64 or int32), got dtype "
                            f"{label.dtype.name}; cast it, or pass soft_label=True for class probabilities")
        without = shape[:axis] + shape[axis + 1:]
        with_one = shape[:axis] + [1] + shape[axis + 1:]
        if list(label.shape) not in (without, with_one):
            raise ValueError(f"label shape {list(label.shape)} does not fit input shape {shape} with class axis "
                             f"{axis}: a hard label must have shape {without} or {with_one}")
        if check_labels:
            _check_label_range(xp, label, classes, ignore_index)
    if weight is not None and list(weight.shape) != [classes]:
        raise ValueError(f"weight must have shape [{classes}] (one entry per class), got {list(weight.shape)}")
    return axis


def _check_label_range(xp, label, classes, ignore_index):
    """Every hard label a class in [0, classes) or ignore_index: two reductions for the common case (every label a
    class); the element test only when one is not."""
    if label.size and (int(label.min()) < 0 or int(label.max()) >= classes) and bool(xp.any(
            bad := (label != ignore_index) & ((label < 0) | (label >= classes)))):
        raise _label_error(int(label[bad].reshape(-1)[0]), classes, ignore_index)


def _label_error(value, classes, ignore_index):
    return IndexError(f"label value {value} is out of range for {classes} classes (valid: 0 to {classes - 1}, or "
                      f"ignore_index={ignore_index})")


def _class_shape(ndim, axis, size):
    """A shape that broadcasts a per-class vector along `axis`."""
    return [size if i == axis else 1 for i in range(ndim)]


def _keep_shape(shape, axis):
    """The loss shape before reduction: the input's, with the class axis kept as 1."""
    return [1 if i == axis else n for i, n in enumerate(shape)]


def _targets_xp(xp, label, weight, shape, axis, dtype, soft_label, ignore_index, label_smoothing):
    """(t, s) for the kernel; _targets below is the same computation with oarlock ops."""
    classes = shape[axis]
    valid = None
    if soft_label:
        t = label.astype(dtype)
    else:
        label = label if label.ndim == len(shape) else xp.expand_dims(label, axis)
        valid = (label != ignore_index).astype(dtype)
        t = (label == xp.arange(classes).reshape(_class_shape(len(shape), axis, classes))).astype(dtype) * valid
    if label_smoothing:
        t = (1 - label_smoothing) * t + label_smoothing / classes * (1 if valid is None else valid)
    if weight is not None:
        s = xp.sum(t * weight.astype(dtype).reshape(_class_shape(len(shape), axis, classes)), axis=axis,
                   keepdims=True)
    else:
        s = valid if valid is not None else xp.ones(_keep_shape(shape, axis), dtype=dtype)
    return t, s


def _targets(label, weight, shape, axis, dtype, soft_label, ignore_index, label_smoothing):
    """(t, s) for the backward rule, from the saved label and weight."""
    classes = shape[axis]
    valid = None
    if soft_label:
        t = oarlock.cast(label, dtype)
    else:
        label = label if label.ndim == len(shape) else oarlock.unsqueeze(label, axis)
        valid = oarlock.cast(label != ignore_index, dtype)
        positions = oarlock.reshape(oarlock.arange(classes, dtype=label.dtype), _class_shape(len(shape), axis, classes))
        t = oarlock.cast(label == positions, dtype) * valid
    if label_smoothing:
        t = (1 - label_smoothing) * t + label_smoothing / classes * (1 if valid is None else valid)
    if weight is not None:
        w = oarlock.reshape(oarlock.cast(weight, dtype), _class_shape(len(shape), axis, classes))
        s = oarlock.sum(t * w, axis=axis, keepdim=True)
    else:
        s = valid if valid is not None else oarlock.ones(_keep_shape(shape, axis), dtype=dtype)
    return t, s


def _mean_divides_by_weights(weight, soft_label, ignore_index):
    """Paddle's 'mean' divides by sum(s) with a weight or a non-negative ignore_index, else by the count."""
    return weight is not None or (not soft_label and ignore_index >= 0)


def _is_plain_hard_label(shape, label, weight, soft_label, axis, use_softmax, label_smoothing):
    """The common case, computed by the row kernels below: class indices along the last axis, softmax,
    no class weights, no smoothing, at least one element."""
    return (not soft_label and weight is None and not label_smoothing and use_softmax and 0 not in shape
            and axis % len(shape) == len(shape) - 1 and label.dtype.kind in ("i", "u", "int")  # array or Tensor
            and (label.ndim == len(shape) - 1 or (label.ndim == len(shape) and label.shape[-1] == 1)))


def _row_softmax_parts(xp, x):
    """For x as rows [N, C]: (rows, exp(rows - max), max [N, 1])."""
    rows = x.reshape(-1, x.shape[-1])
    m = rows.max(axis=1, keepdims=True)
    e = xp.subtract(rows, m)
    xp_function(xp, "exp")(e, out=e)
    return rows, e, m


def _fused_rows(xp, name, rows, *more):
    """The backend's one-pass row function `name` applied to rows [N, C] (and `more`) (oarlock-cpu's C loops:
    softmax_rows, logsumexp_rows, the hard-label cross-entropy's), or None where the backend has none or declines
    this input."""
    try:
        fn = xp_function(xp, name)
    except AttributeError:   # not a numpy name: only a backend's array_functions have it
        return None
    return fn(rows, *more)


def _logsumexp_rows(xp, rows):
    """log(sum(exp(row))) of each row of [N, C], shape [N]: lse = log(sum(exp(x - max))) + max."""
    lse = _fused_rows(xp, "logsumexp_rows", rows)
    if lse is None:
        _, e, m = _row_softmax_parts(xp, rows)
        lse = xp.log(row_sums(xp, e)[:, 0]) + m[:, 0]
    return lse


def _softmax_rows(xp, rows):
    """softmax of each row of [N, C], a new array."""
    p = _fused_rows(xp, "softmax_rows", rows)
    return _softmax_xp(xp, rows, -1) if p is None else p


def _hard_label_rows(xp, label, ignore_index):
    """(flat class indices with ignored ones replaced by 0, the valid mask)."""
    index = label.reshape(-1)
    valid = index != ignore_index
    return xp.where(valid, index, 0), valid


def _hard_label_denominator(xp, valid, ignore_index, count):
    """Paddle's 'mean' divisor: the valid rows with a non-negative ignore_index (at least 1), else all rows. valid:
    the rows' valid mask, or their count."""
    if ignore_index < 0:
        return count
    n = valid if valid.__class__ is int else int(valid.sum())
    return n if n else 1


def _hard_label_cross_entropy(xp, input, label, ignore_index, reduction):
    """cross_entropy of the common case in a few row passes: loss = logsumexp(x) - x[label]; one call of the backend's
    fused row kernel where it has one (oarlock-cpu's C loop), which also checks the labels' range."""
    x = input.astype(compute_dtype(xp, input.dtype), copy=False)
    rows = x.reshape(-1, x.shape[-1])
    fused = _fused_rows(xp, "hard_label_cross_entropy_rows", rows, label.reshape(-1), ignore_index)
    if fused is not None:
        loss, total, valid, bad = fused
        if bad is not None:
            raise _label_error(bad, rows.shape[1], ignore_index)
        if reduction == "none":
            return loss.reshape(label.shape).astype(input.dtype, copy=False)
        if reduction == "mean":
            total /= _hard_label_denominator(xp, valid, ignore_index, loss.size)
        return xp.asarray(total, dtype=input.dtype)
    _check_label_range(xp, label, rows.shape[1], ignore_index)
    index, valid = _hard_label_rows(xp, label, ignore_index)
    lse = _logsumexp_rows(xp, rows)
    picked = rows[xp.arange(rows.shape[0]), index]
    loss = xp.where(valid, lse - picked, xp.zeros((), x.dtype))
    if reduction == "none":
        return loss.reshape(label.shape).astype(input.dtype)
    total = loss.sum()
    if reduction == "mean":
        total = total / _hard_label_denominator(xp, valid, ignore_index, loss.size)
    return xp.asarray(total).astype(input.dtype)


def _hard_label_cross_entropy_grad(xp, input, label, g, ignore_index=-100, reduction="mean"):
    """d loss / d input of the common case: (softmax(x) - onehot(label)) * upstream / divisor, 0 on ignored rows."""
    x = input.astype(compute_dtype(xp, input.dtype), copy=False)
    rows = x.reshape(-1, x.shape[-1])
    coef = g.reshape(-1).astype(rows.dtype) if reduction == "none" else float(g)
    fused = _fused_rows(xp, "hard_label_cross_entropy_grad_rows", rows, label.reshape(-1), ignore_index, coef,
                        reduction == "mean")
    if fused is not None:
        return fused.reshape(input.shape).astype(input.dtype, copy=False)
    p = _softmax_rows(xp, rows)
    index, valid = _hard_label_rows(xp, label, ignore_index)
    n = p.shape[0]
    p[xp.arange(n), index] -= 1.0
    if reduction == "none":
        coef = g.reshape(-1).astype(p.dtype) * valid
    else:
        scale = g.reshape(()).astype(p.dtype)
        if reduction == "mean":
            scale = scale / _hard_label_denominator(xp, valid, ignore_index, n)
        coef = valid * scale
    p *= coef.astype(p.dtype, copy=False)[:, None]
    return p.reshape(input.shape).astype(input.dtype, copy=False)


def _cross_entropy(xp, input, label, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                   use_softmax=True, label_smoothing=0.0):
    shape = list(input.shape)
    plain = bool(shape) and _is_plain_hard_label(shape, label, weight, soft_label, axis, use_softmax, label_smoothing)
    # the plain case checks its labels' range as it reads them
    axis = _validate_cross_entropy(xp, input, label, weight, ignore_index, reduction, soft_label, axis,
                                   label_smoothing, check_labels=not plain)
    if plain:
        return _hard_label_cross_entropy(xp, input, label, ignore_index, reduction)
    x = input.astype(compute_dtype(xp, input.dtype), copy=False)
    t, s = _targets_xp(xp, label, weight, shape, axis, x.dtype, soft_label, ignore_index, label_smoothing)
    # classes with a zero target contribute nothing, even where log p is -inf (masked logits, p = 0)
    if x.size == 0:
        log_p = x
    elif use_softmax:
        log_p = xp.where(t == 0, xp.zeros((), x.dtype), _log_softmax_xp(xp, x, axis))
    else:
        log_p = xp.log(xp.where(t == 0, xp.ones((), x.dtype), x))
    loss = 0.0 - xp.sum(t * log_p, axis=axis, keepdims=True) * s  # 0.0 - ...: ignored positions give 0, not -0
    if reduction == "none":
        if not soft_label and not label_smoothing and label.ndim < input.ndim:
            loss = xp.squeeze(loss, axis)
        return loss.astype(input.dtype)
    total = xp.sum(loss)
    if reduction == "mean":
        if input.size == 0:
            total = xp.asarray(xp.nan, dtype=x.dtype)  # Paddle: the mean of no samples is nan
        elif _mean_divides_by_weights(weight, soft_label, ignore_index):
            denominator = xp.sum(s)
            total = total / (denominator + (denominator == 0))  # all weights zero: divide by 1
        else:
            total = total / loss.size
    return xp.asarray(total).astype(input.dtype)


def _cross_entropy_grad(ctx, g):
    """d loss / d input = coef * (sum_c t_c * softmax(x) - t), coef = upstream grad * s (/ denominator
    for 'mean'); without softmax, d(-t log x)/dx = -coef * t / x."""
    x, label, weight = ctx.saved
    a = ctx.attrs
    shape = list(ctx.meta[0][0])
    if 0 in shape:
        return oarlock.zeros_like(x), None, None
    if not oarlock.is_grad_enabled() and _is_plain_hard_label(shape, label, weight, a["soft_label"], a["axis"],
                                                                a["use_softmax"], a["label_smoothing"]):
        # first order, the common case: one fused op (a recorded backward takes the composite path below)
        return _hard_label_grad_op(x, label, g, a["ignore_index"], a["reduction"]), None, None
    axis = a["axis"] % len(shape)
    t, s = _targets(label, weight, shape, axis, x.dtype, a["soft_label"], a["ignore_index"], a["label_smoothing"])
    coef = s * (oarlock.reshape(g, _keep_shape(shape, axis)) if a["reduction"] == "none" else g)
    if a["reduction"] == "mean":
        if _mean_divides_by_weights(weight, a["soft_label"], a["ignore_index"]):
            denominator = oarlock.sum(s)
            coef = coef / (denominator + oarlock.cast(denominator == 0, denominator.dtype))
        else:
            coef = coef / (x.size // shape[axis])
    if a["use_softmax"]:
        p = F.softmax(x, axis=axis)
        dx = coef * (oarlock.sum(t, axis=axis, keepdim=True) * p - t)
    else:  # where t is 0 the term is 0 even if x is: divide by 1 there
        dx = -(coef * t) / oarlock.where(t == 0, oarlock.ones_like(x), x)
    return dx, None, None


_hard_label_grad_op = None  # the internal op cross_entropy_hard_label_grad (set by register)


def register(ops):
    floats = ("float",)
    softmax = _along_axis(_softmax_xp)
    ops.define("softmax(x: Tensor, axis: int = -1, dtype: DType|None = None) -> Tensor",
               public=["oarlock.nn.functional.softmax"], aliases={"input": "x", "dim": "axis"}, dtypes=floats,
               grad=_softmax_grad, saves=("out",), amp="black",
               doc="exp(x) / sum(exp(x)) along axis, computed stably; dtype casts x first.")
    ops.kernel("softmax")(softmax)
    global _softmax_grad_op
    _softmax_grad_op = ops.define("softmax_grad(y: Tensor, g: Tensor, axis: int) -> Tensor", internal=True,
                                  promote=True, dtypes=floats,
                                  doc="softmax's first-order backward, fused: y * (g - sum(g * y, axis)).")
    ops.kernel("softmax_grad")(_softmax_grad_kernel)
    ops.define("softmax_compat(x: Tensor, axis: int|None = None, dtype: DType|None = None) -> Tensor",
               public=["softmax", "Tensor.softmax", "oarlock.special.softmax"], aliases={"input": "x", "dim": "axis"},
               dtypes=floats, grad=_softmax_grad, saves=("out",), amp="black",
               doc="Paddle 3.2's paddle.softmax(input, dim=None, dtype=None): nn.functional.softmax, except that "
                   "dim=None means 0 for 0-D, 1-D and 3-D input and 1 otherwise (torch's legacy rule).")
    ops.kernel("softmax_compat")(softmax)
    ops.define("log_softmax(x: Tensor, axis: int = -1, dtype: DType|None = None) -> Tensor",
               public=["oarlock.nn.functional.log_softmax"], dtypes=floats, grad=_log_softmax_grad,
               saves=("out",), amp="black",
               doc="log(softmax(x)) along axis, computed stably as x - max - log(sum(exp(x - max))).")
    ops.kernel("log_softmax")(_along_axis(_log_softmax_xp))
    ops.define("cross_entropy(input: Tensor, label: Tensor, weight: OptTensor = None, ignore_index: int = -100, "
               "reduction: str = 'mean', soft_label: bool = False, axis: int = -1, use_softmax: bool = True, "
               "label_smoothing: float = 0.0) -> Tensor",
               public=["oarlock.nn.functional.cross_entropy"], promote=("input", "weight"), dtypes=floats,
               nondiff=("label", "weight"), grad=_cross_entropy_grad, saves=("input", "label", "weight"),
               amp="black", doc="Softmax cross entropy with hard (class index) or soft labels, Paddle's semantics.")
    ops.kernel("cross_entropy")(_cross_entropy)
    global _hard_label_grad_op
    _hard_label_grad_op = ops.define(
        "cross_entropy_hard_label_grad(input: Tensor, label: Tensor, g: Tensor, ignore_index: int = -100, "
        "reduction: str = 'mean') -> Tensor", internal=True, dtypes=floats, promote=("input", "g"),
        doc="The first-order backward of cross_entropy with class-index labels along the last axis, no weight "
            "and no smoothing, fused: (softmax(input) - onehot(label)) * g / divisor, 0 on ignored rows.")
    ops.kernel("cross_entropy_hard_label_grad")(_hard_label_cross_entropy_grad)
    define_variants(ops, ("softmax",), namespaces=("oarlock.nn.functional",))
