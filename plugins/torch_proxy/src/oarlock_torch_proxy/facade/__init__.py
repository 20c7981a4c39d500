"""The `torch` façade: what `import torch` gives inside the proxy's scope.

Tensors are oarlock Tensors (torch's methods added on them, tensor_methods). Names come from three places:
torch's dtypes/devices (dtypes), creation and random functions with torch's signatures (creation), functions
whose torch meaning differs from oarlock's same-named one (ops), and the oarlock functions listed in
`_SAME_AS_OARLOCK`, whose torch meaning oarlock already has (it takes torch's `dim`/`keepdim`/`input`/`other`
spellings). Any other name raises NotImplementedError naming it and its caller (missing.py)."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy import tensor_methods
from oarlock_torch_proxy.facade import creation, dtypes, ops
from oarlock_torch_proxy.missing import missing_getattr
from oarlock_torch_proxy.tensor_methods import Size

tensor_methods.install()   # the façade's functions and its users rely on torch's Tensor methods

__version__ = "2.5.0"   # the torch API level the façade follows; libraries gate features on it

Tensor = oarlock.Tensor
no_grad, enable_grad, set_grad_enabled = oarlock.no_grad, oarlock.enable_grad, oarlock.set_grad_enabled
inference_mode = oarlock.no_grad   # no version counters to skip here: inference mode is no-grad mode
is_grad_enabled = oarlock.is_grad_enabled


def is_inference_mode_enabled() -> bool:
    return False


for _name, _obj in {**dtypes.NAMES, **dtypes.LEGACY_TYPES}.items():
    globals()[_name] = _obj
dtype, device = dtypes.dtype, dtypes.device
get_default_dtype, set_default_dtype = dtypes.get_default_dtype, dtypes.set_default_dtype
is_floating_point, is_complex, promote_types = dtypes.is_floating_point, dtypes.is_complex, dtypes.promote_types

_CREATION = ("Generator", "default_generator", "manual_seed", "seed", "initial_seed", "get_rng_state",
             "set_rng_state", "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like",
             "full_like", "randn_like", "rand_like", "randint_like", "randn", "rand", "randint", "randperm",
             "normal", "multinomial", "bernoulli", "arange", "linspace", "logspace", "eye", "tensor", "as_tensor",
             "from_numpy", "scalar_tensor")
_OPS = ("max", "min", "sort", "argsort", "median", "split", "chunk", "tensor_split", "unbind", "gather",
        "scatter", "scatter_add", "scatter_reduce", "index_select", "where", "tensordot", "take_along_dim", "var",
        "std", "var_mean", "std_mean", "numel", "clamp", "cumprod", "broadcast_tensors", "meshgrid", "is_tensor",
        "is_nonzero", "einsum", "svd", "fmod", "norm", "clamp_min", "clamp_max", "masked_fill", "cat", "stack",
        "flatten", "finfo", "iinfo", "compile", "unique", "broadcast_shapes")
for _name in _CREATION:
    globals()[_name] = getattr(creation, _name)
for _name in _OPS:
    globals()[_name] = getattr(ops, _name)
concat = concatenate = ops.cat
movedim = oarlock.moveaxis
preserve_format, contiguous_format, channels_last = "preserve_format", "contiguous_format", "channels_last"
strided = "strided"
pi, e, inf, nan, newaxis = math.pi, math.e, math.inf, math.nan, None
clip = ops.clamp

# oarlock functions whose torch meaning oarlock has (torch's argument names are accepted as aliases). Each
# entry is a claim checked against real torch by tests/test_facade_ops.py.
_SAME_AS_OARLOCK = (
    "abs", "acos", "acosh", "add", "addmm", "all", "allclose", "amax", "amin", "any", "argmax", "argmin", "asin",
    "asinh", "atan", "atan2", "atanh", "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "bmm",
    "bucketize", "cdist", "ceil", "clone", "conj", "cos", "cosh", "count_nonzero", "cumsum", "deg2rad", "diag",
    "diag_embed", "diagonal", "diff", "digamma", "dist", "div", "divide", "dot", "einsum", "eq", "equal", "erf",
    "erfc", "erfinv", "exp", "exp2", "expm1", "flip", "fliplr", "flipud", "floor", "floor_divide", "frac", "ge",
    "greater_equal", "gt", "hypot", "imag", "inner", "isclose", "isfinite", "isin", "isinf", "isnan", "kron",
    "le", "lerp", "less_equal", "lgamma", "log", "log10", "log1p", "log2", "logaddexp", "logcumsumexp",
    "logical_and", "logical_not", "logical_or", "logical_xor", "logit", "logsumexp", "lt", "masked_select",
    "matmul", "maximum", "mean", "minimum", "mm", "moveaxis", "movedim", "mul", "multiply", "mv", "nan_to_num",
    "nanmean", "nansum", "ne", "neg", "negative", "nonzero", "not_equal", "outer", "permute", "polar", "pow",
    "prod", "rad2deg", "real", "reciprocal", "remainder", "repeat_interleave", "reshape", "roll", "rot90",
    "rsqrt", "searchsorted", "sigmoid", "sign", "sgn", "sin", "sinh", "softmax", "log_softmax", "sqrt", "square",
    "squeeze", "sub", "subtract", "sum", "swapaxes", "swapdims", "t", "take", "tan", "tanh", "tile", "topk",
    "trace", "transpose", "tril", "triu", "true_divide", "trunc", "unsqueeze", "view_as_complex", "view_as_real",
    "vstack", "hstack", "dstack", "column_stack", "xlogy", "greater", "less", "kthvalue", "cummax", "cummin",
    "histc", "trapezoid", "signbit", "sinc", "narrow", "cross", "cosine_similarity", "relu", "heaviside",
    "gcd", "lcm", "logdet", "slogdet", "inverse", "det", "pinverse", "cholesky", "matrix_power", "chain_matmul",
    "block_diag", "cartesian_prod", "combinations", "tril_indices", "triu_indices", "vander", "renorm", "addcmul",
    "addcdiv", "baddbmm", "addbmm", "addmv", "addr", "frexp", "ldexp", "nextafter", "i0", "polygamma", "mvlgamma",
    "floor_divide", "bincount", "atleast_1d", "atleast_2d", "atleast_3d", "flatten", "ravel", "unflatten",
    "round", "unique_consecutive", "rad2deg", "corrcoef", "cov", "argwhere", "diagflat", "expand_copy",
    "select_scatter", "slice_scatter", "diagonal_scatter", "index_fill", "index_put", "masked_scatter",
    "nanmedian", "quantile", "nanquantile", "logspace", "negative", "positive", "float_power", "fmax", "fmin",
)
for _name in _SAME_AS_OARLOCK:
    if _name not in globals() and hasattr(oarlock, _name):
        globals()[_name] = getattr(oarlock, _name)

# the submodules torch imports with itself
from oarlock_torch_proxy.facade import (amp, autograd, backends, compiler, cuda, distributed,  # noqa: E402
                                        distributions, func, jit, linalg, nn, optim, special, testing, utils,
                                        xpu)

autocast = amp.autocast


globals().update(ops.FOREACH)
for _alias, _name in (("arctan", "atan"), ("arctanh", "atanh"), ("arcsin", "asin"), ("arccos", "acos"),
                      ("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctan2", "atan2")):
    if hasattr(oarlock, _name):
        globals()[_alias] = getattr(oarlock, _name)


from oarlock_torch_proxy.facade.serialization import load, save  # noqa: E402


def detach(input):
    return input.detach()


def lerp(input, end, weight):
    return oarlock.lerp(input, end, weight)

vmap = func.vmap
__getattr__ = missing_getattr("torch")
__all__ = sorted(n for n in globals() if not n.startswith("_"))
del _name, _obj
_ = (Size, amp, autograd, backends, compiler, cuda, distributed, distributions, func, jit, linalg, nn, optim, special,
     testing, utils, xpu)
