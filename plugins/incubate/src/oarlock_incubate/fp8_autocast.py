"""FP8 training: fp8_autocast(recipe=...) and Fp8Linear, following TransformerEngine's conventions.

Design. As in TransformerEngine, FP8 is a property of the layer *and* of the region: an Fp8Linear (te.Linear)
computes its GEMMs in FP8 inside `with fp8_autocast(recipe=...)`, and as a plain Linear outside it.
`convert_to_fp8(model)` swaps every nn.Linear of a model for an Fp8Linear holding the *same* Parameter objects, so
the master weights stay float32 and an optimizer built before or after sees the same parameters; the state_dict
names do not change. `convert_to_fp8(model, recipe)` also binds a recipe to the layers, which then run in FP8
without a context (what `oarlock train --fp8` uses, so the trainer's loop needs no edit). Everything that is not
a Linear (embeddings, norms, attention, the loss) runs in the dtype it would run in without FP8 (float32, or
bf16 under amp.auto_cast).

One Fp8Linear step (y = x @ W + b, x [R, K], W [K, N]):
- forward: x and W are cast to the recipe's forward format (e4m3) with their scales, y = x_q @ W_q with float32
  accumulation, times the decode scales; the bias is added in float32;
- backward: the output gradient dy is cast to the backward format (e5m2 under HYBRID, e4m3 for the block
  recipe); dx = dy_q @ W_q^T and dW = x_q^T @ dy_q, both float32-accumulated FP8 GEMMs.
Per-tensor recipes cast each tensor once with one scale (DelayedScaling from the layer's amax histories, kept
in its Fp8State; Float8CurrentScaling from the tensor's own amax). Float8BlockScaling (DeepSeek-V3) casts x and
dy in 1 x 128 blocks along the GEMM's K and W in 128 x 128 tiles (fp8_quant_blockwise's quantizers); for dW,
x and dy are quantized again in 1 x 128 blocks along the token axis (the K of that GEMM), as DeepSeek-V3 does.

Kernels are the numpy emulation of fp8_numerics (exact e4m3/e5m2 rounding and saturation): on the CPU this is
slower than float32 and saves no memory while computing; what it shows is the numerics."""

from __future__ import annotations

import contextlib
import threading

import numpy as np

import oarlock
import oarlock.nn as nn
from oarlock import PyLayer
from oarlock_incubate import fp8_numerics as fp8
from oarlock_incubate.fp8_recipe import DelayedScaling, _Recipe

FUNCTIONS = ("fp8_autocast", "is_fp8_enabled", "get_fp8_recipe", "convert_to_fp8")
CLASSES = ("Fp8Linear", "Fp8State")


class _Active(threading.local):
    recipe = None     # the recipe of the innermost enabled fp8_autocast of this thread, None outside


_ACTIVE = _Active()


@contextlib.contextmanager
def fp8_autocast(enabled=True, recipe=None, fp8_recipe=None, calibrating=False, fp8_group=None):
    """Run the Fp8Linear layers called in this block in FP8 with `recipe` (TE's fp8_recipe; default
    DelayedScaling()). enabled=False runs them in their plain dtype. Per thread; nests; restores on exit.
    calibrating and fp8_group are accepted for TE's signature; fp8_group must be None (amaxes are not reduced
    over ranks)."""
    if recipe is not None and fp8_recipe is not None:
        raise ValueError("fp8_autocast(): arguments 'recipe' and 'fp8_recipe' are the same; got both")
    recipe = recipe if recipe is not None else fp8_recipe
    if recipe is None:
        recipe = DelayedScaling()
    if not isinstance(recipe, _Recipe):
        raise TypeError(f"fp8_autocast(): argument 'recipe' is a {type(recipe).__name__}; accepted: "
                        "DelayedScaling, Float8CurrentScaling or Float8BlockScaling")
    if fp8_group is not None:
        raise NotImplementedError("fp8_autocast(): argument 'fp8_group': amax reduction over ranks is not "
                                  "implemented; accepted: None")
    previous = _ACTIVE.recipe
    _ACTIVE.recipe = recipe if enabled else None
    try:
        yield
    finally:
        _ACTIVE.recipe = previous


def is_fp8_enabled() -> bool:
    return _ACTIVE.recipe is not None


def get_fp8_recipe():
    return _ACTIVE.recipe


class Fp8State:
    """A layer's per-tensor scaling state: for each role ("x", "w", "grad") the scale of the next cast and the
    amax history (DelayedScaling), newest last."""

    ROLES = ("x", "w", "grad")

    def __init__(self):
        self.scale = {role: np.float32(1) for role in self.ROLES}
        self.history = {role: np.zeros([0], np.float32) for role in self.ROLES}

    def cast(self, recipe, role: str, values: np.ndarray, fmt: str):
        """(float8 values as float32, decode scale) of a per-tensor cast with the recipe's scale."""
        amax = np.float32(np.nanmax(np.abs(values), initial=0))
        if isinstance(recipe, DelayedScaling):
            scale = self.scale[role]
            history = np.append(self.history[role], amax)[-recipe.amax_history_len:]
            self.history[role] = history
            self.scale[role] = recipe.next_scale(history, scale, fmt)
        else:
            scale = fp8.scale_of(amax, recipe.amax_epsilon, recipe.power_2_scale, fmt)
        q = fp8.to_float32(fp8.quantize_tensor(values, scale, fmt))
        return q, np.float32(1) / np.float32(scale)


def _rows(values: np.ndarray, recipe, fmt: str) -> np.ndarray:
    """The float32 values of values [R, K] quantized in 1 x 128 blocks of each row (what the GEMM reads)."""
    return fp8.dequantize_rows(*fp8.quantize_rows(np.ascontiguousarray(values), pow2=recipe.power_2_scale, fmt=fmt))


def _cols(values: np.ndarray, recipe, fmt: str) -> np.ndarray:
    """The float32 values of values [R, K] quantized in 128 x 1 blocks of each column (along the tokens)."""
    return fp8.dequantize_cols(*fp8.quantize_cols(values, pow2=recipe.power_2_scale, fmt=fmt))


def _forward(recipe, state, x, w):
    """y [R, N] float32 and what backward needs, for x [R, K], w [K, N] float32. The float8 operands are
    multiplied as their float32 values times their decode scales in one float32 GEMM (exact products: the block
    recipe's scales are powers of two); only the summation order differs from fp8_gemm_blockwise's per-block
    promotion, within the same float32 accumulation bound."""
    fmt = recipe.forward_format
    if recipe.per_tensor:
        xq, dx = state.cast(recipe, "x", x, fmt)
        wq, dw = state.cast(recipe, "w", w, fmt)
        return (xq @ wq) * (dx * dw), (xq, dx, wq, dw)
    wq_t, ws = fp8.quantize_tiles(np.ascontiguousarray(w.T), pow2=recipe.power_2_scale, fmt=fmt)   # [N, K] tiles
    wd = fp8.dequantize_tiles(wq_t, ws).T                                                          # [K, N]
    return _rows(x, recipe, fmt) @ wd, (x, wd)


def _backward(recipe, state, saved, dy):
    """(dx [R, K], dw [K, N]) float32 for the output gradient dy [R, N]."""
    fmt = recipe.backward_format
    if recipe.per_tensor:
        xq, dx, wq, dw = saved
        gq, dg = state.cast(recipe, "grad", dy, fmt)
        return (gq @ wq.T) * (dg * dw), (xq.T @ gq) * (dx * dg)
    x, wd = saved
    grad_x = _rows(dy, recipe, fmt) @ wd.T                           # dy in 1 x 128 blocks along N (this K)
    # dW = x^T dy sums over the tokens: both are quantized again in 1 x 128 blocks along the token axis
    grad_w = _cols(x, recipe, recipe.forward_format).T @ _cols(dy, recipe, fmt)
    return grad_x, grad_w


class _Fp8Matmul(PyLayer):
    """x [..., K] @ w [K, N] in FP8 (forward and backward) under a recipe and a layer's state."""

    @staticmethod
    def forward(ctx, x, w, recipe, state):
        shape = list(x.shape)
        x2 = x.numpy().astype(np.float32).reshape(-1, shape[-1])
        y, saved = _forward(recipe, state, x2, w.numpy().astype(np.float32))
        ctx.plan = (recipe, state, saved, shape, x.dtype, w.dtype)
        return oarlock.to_tensor(y.reshape(shape[:-1] + [y.shape[1]])).astype(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        recipe, state, saved, shape, x_dtype, w_dtype = ctx.plan
        dy = grad.numpy().astype(np.float32).reshape(-1, grad.shape[-1])
        grad_x, grad_w = _backward(recipe, state, saved, dy)
        return (oarlock.to_tensor(grad_x.reshape(shape)).astype(x_dtype),
                oarlock.to_tensor(grad_w).astype(w_dtype))


def fp8_matmul(x, weight, recipe, state=None):
    """x [..., K] @ weight [K, N] in FP8 with `recipe` (a fresh Fp8State when state is None), differentiable."""
    return _Fp8Matmul.apply(x, weight, recipe, state if state is not None else Fp8State())


class Fp8Linear(nn.Layer):
    """A Linear (weight [in_features, out_features], Paddle's layout) whose GEMMs run in FP8 inside
    fp8_autocast, or always when built with a recipe. `Fp8Linear.from_linear(linear)` shares linear's
    parameters."""

    def __init__(self, in_features, out_features, weight_attr=None, bias_attr=None, recipe=None, name=None):
        super().__init__()
        self._init(nn.Linear(in_features, out_features, weight_attr, bias_attr, name), recipe)

    def _init(self, linear, recipe):
        if recipe is not None and not isinstance(recipe, _Recipe):
            raise TypeError(f"Fp8Linear(): argument 'recipe' is a {type(recipe).__name__}; accepted: None, "
                            "DelayedScaling, Float8CurrentScaling or Float8BlockScaling")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.recipe, self.fp8_state = recipe, Fp8State()

    @classmethod
    def from_linear(cls, linear, recipe=None):
        layer = cls.__new__(cls)
        nn.Layer.__init__(layer)
        layer._init(linear, recipe)
        return layer

    def forward(self, x):
        recipe = self.recipe if self.recipe is not None else _ACTIVE.recipe
        if x.shape[-1] != self.in_features:
            raise ValueError(f"Fp8Linear: input of shape {list(x.shape)}; accepted: [*, {self.in_features}] "
                             f"(in_features={self.in_features})")
        if recipe is None:
            return nn.functional.linear(x, self.weight, self.bias)
        if not x.place.is_cpu_place():
            raise NotImplementedError(f"Fp8Linear: input on {x.place}: FP8 training runs in the CPU emulation only "
                                      "(the gpu device has no float8 arrays); accepted: a cpu tensor")
        y = _Fp8Matmul.apply(x, self.weight, recipe, self.fp8_state)
        return y if self.bias is None else y + self.bias.astype(y.dtype)

    def extra_repr(self):
        recipe = type(self.recipe).__name__ if self.recipe is not None else "fp8_autocast's"
        return f"in_features={self.in_features}, out_features={self.out_features}, recipe={recipe}"


def convert_to_fp8(model, recipe=None, exclude=()):
    """Replace every nn.Linear under `model` (in place) by an Fp8Linear sharing its parameters; with a recipe
    the layers run in FP8 without fp8_autocast. `exclude`: paths of Linear layers to keep in their own precision
    (as named_sublayers names them, e.g. "head": DeepSeek-V3's FP8 recipe keeps the output head, like the
    embedding, norms and attention, in higher precision). Returns the model (an nn.Linear itself: its
    Fp8Linear)."""
    if recipe is not None and not isinstance(recipe, _Recipe):
        raise TypeError(f"convert_to_fp8(): argument 'recipe' is a {type(recipe).__name__}; accepted: None, "
                        "DelayedScaling, Float8CurrentScaling or Float8BlockScaling")
    if type(model) is nn.Linear:
        return Fp8Linear.from_linear(model, recipe)
    excluded = set(exclude)
    linears = {path for path, layer in model.named_sublayers() if type(layer) is nn.Linear}
    unknown = sorted(excluded - linears)
    if unknown:
        raise ValueError(f"convert_to_fp8(): argument 'exclude' names {unknown}, which are not nn.Linear layers "
                         f"of the model; its Linear layers: {sorted(linears)}")
    for prefix, layer in [("", model)] + list(model.named_sublayers()):
        for name, child in list(layer.named_children()):
            path = f"{prefix}.{name}" if prefix else name
            if type(child) is nn.Linear and path not in excluded:
                setattr(layer, name, Fp8Linear.from_linear(child, recipe))
    return model

