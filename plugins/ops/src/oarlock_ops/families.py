"""Entry points of oarlock-ops: each op family is its own plugin.

Every family is one module of this package with `register(ops)` (its ops, kernels and autograd
rules) and, where it has Python-level functions, `register_api(api)` (e.g. creation's *_like,
sorting's sort/topk frontends). pyproject.toml names one entry point per family,
`<family> = "oarlock_ops.families:<family>"`; loading it imports that family's module only (and the
modules it imports for shared helpers) and returns a `Family` plugin whose hooks call the module.
So `OARLOCK_DISABLE_PLUGINS=conv` leaves exactly the conv family out, a family that fails to import
or register is reported under its own name while the others load, and `oarlock plugins` counts
kernels per family.

No family's registration depends on another's: the ops a family calls (in its autograd rules and
Python functions) are looked up when they run, not when they are registered, so the families load
in any order (the plugin manager loads entry points sorted by name).
"""

from __future__ import annotations

import importlib

from oarlock import hookimpl

# entry-point name (= module oarlock_ops.<name>) -> what the family holds; pyproject.toml lists the same names
FAMILIES = {
    "activation_extras": "relu6, hardswish, hardsigmoid, swish (Paddle's piecewise activations)",
    "activations_more": "log_sigmoid, softplus, softsign, celu, selu, mish, shrinks, hardtanh, glu, prelu, rrelu, ...",
    "attention": "scaled_dot_product_attention and its fused backward",
    "compat": "oarlock.compat: Paddle 3.2's torch-style sort, split, max/min, median, softmax (no ops of its own)",
    "complex": "complex, polar, real, imag, view_as_complex/view_as_real, is_complex",
    "conv": "conv1d/2d/3d, conv2d/3d_transpose, unfold, fold, max/avg/adaptive pooling",
    "ctc": "nn.functional.ctc_loss (the CTC forward algorithm over log-softmax scores, Paddle's warpctc semantics)",
    "creation": "to_tensor, zeros/ones/full/eye/arange/linspace, random creation, *_like",
    "elementwise": "arithmetic and its in-place forms, maximum/minimum, clip, where, comparisons, logic, cast",
    "indexing": "getitem, setitem_, index_put, gather, index_select, masked_fill",
    "linalg": "matmul, bmm, nn.functional.linear, norm and oarlock.linalg's norms",
    "loss": "nll_loss, mse_loss, l1_loss, smooth_l1_loss, binary_cross_entropy(_with_logits), kl_div",
    "losses_extra": "margin/hinge/soft-margin/triplet/poisson/gaussian/focal/dice/npair/cosine-embedding losses, ...",
    "matrix": "tril, triu, diff, outer, diag, diagonal, trace",
    "nn_extras": "normalize, cosine_similarity, pairwise_distance, one_hot, label_smooth, pixel/channel shuffles, ...",
    "norm": "layer_norm, rms_norm, batch_norm, group_norm, embedding, dropout*",
    "optimizer_update": "the fused in-place optimizer steps (*_step_), gradient clipping list ops, global_norm",
    "paddle_linalg": "linalg.inv/det/slogdet/solve/cholesky and multi_dot, matrix_power, cov, corrcoef, vecdot, ...",
    "paddle_math": "tan, asin/acos/atan, sinh/cosh, asinh/acosh/atanh, expm1, log2, log10, atan2, flip, roll, einsum",
    "reduction": "sum, mean, prod, var/std, max/min, argmax/argmin, logsumexp, cumsum, all/any",
    "resample": "nn.functional.pad (constant, reflect, replicate, circular), zeropad2d, interpolate, upsample",
    "rotary": "fused_rotary_embedding",
    "sampling": "multinomial, bernoulli, randperm",
    "scatter": "scatter(_add/_reduce), put/take_along_axis, take_along_dim, argwhere, repeat_interleave",
    "shape": "reshape, squeeze/unsqueeze, transpose, expand, tile, concat/stack/split/chunk, flatten",
    "softmax": "softmax, log_softmax, softmax cross_entropy",
    "sorting": "sort, argsort, topk, kthvalue, median, the (values, indices) reductions",
    "tensor_api": "ravel, copy_, broadcast_shapes, Tensor.repeat/type_as/new_*",
    "unary": "float math (exp, log, sqrt, sin, tanh, erf, ...) and activations (relu, gelu, silu, ...)",
}


class Family:
    """One op family as a plugin: the hooks its module implements, bound to that module.

    Only the hooks the module has are defined on the instance, so `oarlock plugins` lists exactly
    what the family registers."""

    def __init__(self, name: str, module):
        self.name, self.module = name, module
        if hasattr(module, "register"):
            @hookimpl
            def oarlock_register_ops(ops):
                module.register(ops)
            self.oarlock_register_ops = oarlock_register_ops
        if hasattr(module, "register_api"):
            @hookimpl
            def oarlock_register_api(api):
                module.register_api(api)
            self.oarlock_register_api = oarlock_register_api

    def __repr__(self):
        return f"<op family {self.name!r} ({self.module.__name__})>"


_loaded: dict[str, Family] = {}


def __getattr__(name: str) -> Family:
    """`oarlock_ops.families:<name>`: the Family plugin of oarlock_ops.<name>, made on first access."""
    if name not in FAMILIES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}; the op families are: "
                             f"{', '.join(FAMILIES)}")
    if name not in _loaded:
        _loaded[name] = Family(name, importlib.import_module(f"oarlock_ops.{name}"))
    return _loaded[name]


def __dir__():
    return sorted([*globals(), *FAMILIES])
