"""`paddle._C_ops`: Paddle's raw op entry points, which model code (and Paddle's own Python wrappers) call
with every attribute positional, mapped onto oarlock's ops.

Each entry is the _C_ops parameter list in Paddle 3.2's order and the oarlock function it becomes: most are
the public op of the same name with the same parameters; the few whose raw form differs (reductions over
`[]` meaning every axis, `embedding`'s padding_idx -1 meaning none, `argsort` returning the sorted values too,
`cumsum`'s exclusive/reverse flags, `rms_norm` with its residual) have a small adapter here. Results are the
oarlock ops' own (autograd included)."""

from __future__ import annotations

import functools
import math

import oarlock

UNARY = ("exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu", "silu", "abs", "floor",
         "ceil", "sign", "erf", "reciprocal", "square", "isnan", "isinf", "isfinite", "logical_not")
BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "equal", "not_equal", "less_than",
          "less_equal", "greater_than", "greater_equal", "logical_and", "logical_or", "bmm", "floor_divide",
          "remainder")

# _C_ops name -> (its parameters in Paddle's order, the oarlock function path, the keyword each becomes)
SAME = {
    "matmul": ("x y transpose_x transpose_y", "matmul"),
    "scale": ("x scale bias bias_after_scale", "scale"),
    "transpose": ("x perm", "transpose"), "reshape": ("x shape", "reshape"), "expand": ("x shape", "expand"),
    "tile": ("x repeat_times", "tile"), "cast": ("x dtype", "cast"), "where": ("condition x y", "where"),
    "unsqueeze": ("x axis", "unsqueeze"), "squeeze": ("x axis", "squeeze"),
    "flatten": ("x start_axis stop_axis", "flatten"), "gather": ("x index axis", "gather"),
    "index_select": ("x index axis", "index_select"), "clip": ("x min max", "clip"),
    "masked_fill": ("x mask value", "masked_fill"),
    "tril": ("x diagonal", "tril"), "triu": ("x diagonal", "triu"), "concat": ("x axis", "concat"),
    "stack": ("x axis", "stack"), "split": ("x num_or_sections axis", "split"),
    "split_with_num": ("x num_or_sections axis", "split"), "topk": ("x k axis largest sorted", "topk"),
    "take_along_axis": ("arr indices axis", "take_along_axis"),
    "put_along_axis": ("arr indices values axis reduce include_self", "put_along_axis"),
    "scatter": ("x index updates overwrite", "scatter"),
    "assign": ("x", "clone"),
    "elementwise_pow": ("x y", "pow"), "pow": ("x y", "pow"),
    "softmax": ("x axis", "nn.functional.softmax"), "log_softmax": ("x axis", "nn.functional.log_softmax"),
    "gelu": ("x approximate", "nn.functional.gelu"), "linear": ("x weight bias", "nn.functional.linear"),
    **{name: ("x", name) for name in UNARY}, **{name: ("x y", name) for name in BINARY},
}


def _resolve(path):
    obj = oarlock
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def _bind(name, params, args, kwargs):
    """The keyword arguments of a positional _C_ops call, checked against its parameter list."""
    if len(args) > len(params):
        raise TypeError(f"oarlock._C_ops.{name}() takes {len(params)} arguments ({', '.join(params)}), got "
                        f"{len(args)}")
    bound = dict(zip(params, args))
    for key, value in kwargs.items():
        if key == "out":
            bound["out"] = value
        elif key not in params or key in bound:
            raise TypeError(f"oarlock._C_ops.{name}(): unexpected or repeated argument {key!r}; it takes "
                            f"{', '.join(params)}")
        else:
            bound[key] = value
    return bound


def _same(name, param_text, path):
    params = param_text.split()

    def op(*args, **kwargs):
        return _resolve(path)(**_bind(name, params, args, kwargs))
    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"_C_ops.{name}({', '.join(params)}): oarlock.{path} with these arguments."
    return op


def _all_axes(axis):
    return None if axis is None or (isinstance(axis, (list, tuple)) and len(axis) == 0) else axis


def c_sum(x, axis=None, dtype=None, keepdim=False):
    """_C_ops.sum(x, axis, dtype, keepdim): axis [] sums every axis."""
    return oarlock.sum(x, axis=_all_axes(axis), dtype=dtype, keepdim=keepdim)


def _reduction(fn_name):
    def op(x, axis=None, keepdim=False):
        return getattr(oarlock, fn_name)(x, axis=_all_axes(axis), keepdim=keepdim)
    op.__name__ = fn_name
    op.__doc__ = f"_C_ops.{fn_name}(x, axis, keepdim): axis [] reduces every axis."
    return op


def logsumexp(x, axis=None, keepdim=False, reduce_all=False):
    """_C_ops.logsumexp(x, axis, keepdim, reduce_all)."""
    return oarlock.logsumexp(x, axis=None if reduce_all else _all_axes(axis), keepdim=keepdim)


def _arg_reduction(fn_name):
    def op(x, axis=None, keepdim=False, flatten=False, dtype="int64"):
        if flatten:
            x, axis = x.reshape([-1]), 0
        return getattr(oarlock, fn_name)(x, axis=axis, keepdim=keepdim and not flatten, dtype=dtype)
    op.__name__ = fn_name
    op.__doc__ = f"_C_ops.{fn_name}(x, axis, keepdim, flatten, dtype)."
    return op


def cumsum(x, axis=-1, flatten=False, exclusive=False, reverse=False):
    """_C_ops.cumsum(x, axis, flatten, exclusive, reverse)."""
    if flatten:
        x, axis = x.reshape([-1]), 0
    if reverse:
        x = oarlock.flip(x, [axis])
    out = oarlock.cumsum(x, axis=axis)
    if exclusive:
        out = out - x
    return oarlock.flip(out, [axis]) if reverse else out


def full(shape, value, dtype=None, place=None):
    """_C_ops.full(shape, value, dtype, place)."""
    return oarlock.full(shape, value, dtype=dtype, place=place)


def full_like(x, fill_value, dtype=None, place=None):
    """_C_ops.full_like(x, fill_value, dtype, place)."""
    return oarlock.full_like(x, fill_value, dtype=dtype, device=place)


def arange(start, end, step, dtype=None, place=None):
    """_C_ops.arange(start, end, step, dtype, place); the bounds may be 1-element tensors."""
    start, end, step = (v.item() if isinstance(v, oarlock.Tensor) else v for v in (start, end, step))
    return oarlock.arange(start, end, step, dtype=dtype, place=place)


def embedding(x, weight, padding_idx=-1, sparse=False):
    """_C_ops.embedding(x, weight, padding_idx, sparse): padding_idx -1 means none (Paddle's raw form)."""
    return oarlock.nn.functional.embedding(x, weight, padding_idx=None if padding_idx == -1 else padding_idx,
                                           sparse=sparse)


def layer_norm(x, scale, bias, epsilon=1e-5, begin_norm_axis=1):
    """_C_ops.layer_norm(x, scale, bias, epsilon, begin_norm_axis): normalise over the axes from
    begin_norm_axis (Paddle 3.2's dygraph entry point returns the output only)."""
    return oarlock.nn.functional.layer_norm(x, x.shape[begin_norm_axis:], weight=scale, bias=bias, epsilon=epsilon)


def argsort(x, axis=-1, descending=False, stable=False):
    """_C_ops.argsort(x, axis, descending, stable): (sorted values, indices), as Paddle's raw op returns."""
    indices = oarlock.argsort(x, axis=axis, descending=descending, stable=stable)
    return oarlock.take_along_axis(x, indices, axis), indices


def rms_norm(x, bias, residual, norm_weight, norm_bias, epsilon, begin_norm_axis, quant_scale=-1.0,
             quant_round_type=0, quant_max_bound=0.0, quant_min_bound=0.0):
    """_C_ops.rms_norm(x, bias, residual, norm_weight, norm_bias, epsilon, begin_norm_axis, quant_scale, ...):
    (out, residual_out, inv_var): x (+ bias) (+ residual) normalised by its root mean square over the axes from
    begin_norm_axis, times norm_weight (+ norm_bias). Quantised output (quant_scale > 0) is not supported."""
    if quant_scale is not None and quant_scale > 0:
        raise NotImplementedError(f"oarlock._C_ops.rms_norm(): quant_scale={quant_scale} asks for int8 output, "
                                  f"which oarlock does not implement; pass quant_scale=-1")
    if bias is not None:
        x = x + bias
    if residual is not None:
        x = x + residual
    axes = list(range(begin_norm_axis, x.ndim))
    x32 = x.astype("float32")
    inv_var = oarlock.rsqrt((x32 * x32).mean(axis=axes, keepdim=True) + epsilon)
    out = (x32 * inv_var).astype(x.dtype)
    if norm_weight is not None:
        out = out * norm_weight
    if norm_bias is not None:
        out = out + norm_bias
    return out, (x if residual is not None else None), inv_var.reshape([math.prod(x.shape[:begin_norm_axis])])


def swiglu(x, y=None):
    """_C_ops.swiglu(x, y): silu(x) * y; with y None, x's last axis is split in two halves (x, y)."""
    if y is None:
        x, y = oarlock.chunk(x, 2, axis=-1)
    return oarlock.nn.functional.silu(x) * y


ADAPTED = {"sum": c_sum, "mean": _reduction("mean"), "max": _reduction("max"), "min": _reduction("min"),
           "logsumexp": logsumexp, "argmax": _arg_reduction("argmax"), "argmin": _arg_reduction("argmin"),
           "cumsum": cumsum, "full": full, "full_like": full_like, "arange": arange, "embedding": embedding,
           "layer_norm": layer_norm, "argsort": argsort,
           "rms_norm": rms_norm, "swiglu": swiglu}


@functools.cache
def entry_points() -> dict:
    """name -> callable: every _C_ops name oarlock provides."""
    table = {name: _same(name, params, path) for name, (params, path) in SAME.items()}
    table.update(ADAPTED)
    return table
