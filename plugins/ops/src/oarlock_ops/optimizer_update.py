"""The fused in-place update ops the optimizers and gradient clipping run on.

One optimizer step of one parameter is one op call: the kernel updates the
parameter and its moment arrays in place with a dozen array operations, with
one scratch array, instead of a dozen op dispatches each allocating a result.
Python-float hyperparameters keep numpy's arithmetic in the arrays' dtype
(NEP 50 weak scalars), so float32 state is never silently computed in
float64.

On the CPU the elementwise steps also run chunk by chunk over large
parameters (see _in_chunks): a chunk of the parameter, gradient, moments and
scratch stays in the L2 cache across the dozen passes, instead of each pass
streaming the whole arrays through memory.

The clipping ops take a list of tensors (all gradients of an optimizer) so
clipping costs one or two dispatches per step, however many parameters. So do
the multi-tensor steps (sgd_steps_, momentum_steps_, adam_steps_: torch's
foreach/fused optimizers): one op call updates every parameter of one dtype
and device, and a device may give them one fused kernel over the whole list.

Each kernel is written once against `xp` on raw arrays; in-place kernels write
into the arrays they receive and return nothing useful (the dispatcher hands
back the `inplace=` tensor). The formulas follow Paddle's kernels; each
optimizer's docstring spells out its own.

They are an op family of oarlock-ops (plugin "optimizer_update") rather than part of oarlock-nn's
optimizers because they are ops like any other: device plugins override their kernels by op name
(oarlock-cuda's fused adam_step_), the op table tests them against float64 references, and
GradScaler (check_finite_and_unscale_) and gradient clipping use them besides the optimizers. So every
kernel lives in oarlock-ops and oarlock-nn is Python over public ops.
"""

from __future__ import annotations

import math

FLOAT = ("float",)


# -- shared pieces ---------------------------------------------------------------------------------

def _with_l2(xp, grad, param, weight_decay):
    """grad + weight_decay * param (Paddle's L2Decay, coupled into the gradient) as a new array, so the
    caller's .grad keeps the gradient the backward pass produced."""
    if not weight_decay:
        return grad
    out = xp.multiply(param, weight_decay)
    out += grad
    return out


def _update_moments(xp, grad, moment1, moment2, beta1, beta2, scratch):
    """moment1 <- beta1 m1 + (1 - beta1) g and moment2 <- beta2 m2 + (1 - beta2) g^2, in place.
    moment1 moves as a lerp (m1 += (1 - beta1)(g - m1)), the form torch uses, one pass shorter."""
    xp.subtract(grad, moment1, out=scratch)
    scratch *= 1.0 - beta1
    moment1 += scratch
    moment2 *= beta2
    xp.multiply(grad, grad, out=scratch)
    scratch *= 1.0 - beta2
    moment2 += scratch


def _sum_squares(xp, t):
    """The sum of squares of `t` as a 0-d array, accumulated in at least float32."""
    if t.dtype.itemsize < 4:
        t = t.astype(xp.float32)
    flat = xp.reshape(t, (-1,))
    return xp.vdot(flat, flat)


# -- optimizer steps ---------------------------------------------------------------------------------

def _sgd_kernel(xp, param, grad, *, lr, weight_decay):
    step = xp.multiply(_with_l2(xp, grad, param, weight_decay), lr)
    param -= step


def _momentum_kernel(xp, param, grad, velocity, *, lr, momentum, use_nesterov, weight_decay, rescale_grad):
    if rescale_grad != 1.0:
        grad = xp.multiply(grad, rescale_grad)
    grad = _with_l2(xp, grad, param, weight_decay)
    velocity *= momentum
    velocity += grad
    if use_nesterov:  # param -= lr * (grad + momentum * velocity)
        step = xp.multiply(velocity, momentum)
        step += grad
        step *= lr
    else:
        step = xp.multiply(velocity, lr)
    param -= step


def _adam_kernel(xp, param, grad, moment1, moment2, moment2_max, *, lr, beta1, beta2, epsilon, step,
                 weight_decay, decoupled):
    if decoupled:
        if weight_decay:
            param *= 1.0 - lr * weight_decay
    else:
        grad = _with_l2(xp, grad, param, weight_decay)
    scratch = xp.empty_like(moment1)
    _update_moments(xp, grad, moment1, moment2, beta1, beta2, scratch)
    second = moment2
    if moment2_max is not None:
        xp.maximum(moment2_max, moment2, out=moment2_max)
        second = moment2_max
    # Paddle's kernel: lr_t = lr sqrt(1 - b2^t) / (1 - b1^t); param -= lr_t m1 / (sqrt(m2) + eps sqrt(1 - b2^t)),
    # which is torch's m1_hat / (sqrt(m2_hat) + eps) with the bias corrections folded into two scalars
    root_bc2 = math.sqrt(1.0 - beta2 ** step)
    xp.sqrt(second, out=scratch)
    scratch += epsilon * root_bc2
    xp.divide(moment1, scratch, out=scratch)
    scratch *= lr * root_bc2 / (1.0 - beta1 ** step)
    param -= scratch


def _adagrad_kernel(xp, param, grad, moment, *, lr, epsilon, weight_decay):
    grad = _with_l2(xp, grad, param, weight_decay)
    scratch = xp.multiply(grad, grad)
    moment += scratch
    xp.sqrt(moment, out=scratch)
    scratch += epsilon
    xp.divide(grad, scratch, out=scratch)
    scratch *= lr
    param -= scratch


def _rmsprop_kernel(xp, param, grad, mean_square, mean_grad, velocity, *, lr, rho, epsilon, momentum,
                    weight_decay):
    grad = _with_l2(xp, grad, param, weight_decay)
    mean_square *= rho
    scratch = xp.multiply(grad, grad)
    scratch *= 1.0 - rho
    mean_square += scratch
    if mean_grad is None:
        xp.add(mean_square, epsilon, out=scratch)
    else:  # centered: the variance estimate E[g^2] - E[g]^2
        mean_grad *= rho
        xp.multiply(grad, 1.0 - rho, out=scratch)
        mean_grad += scratch
        xp.multiply(mean_grad, mean_grad, out=scratch)
        xp.subtract(mean_square, scratch, out=scratch)
        scratch += epsilon
    # Paddle puts epsilon inside the square root and lr inside the momentum buffer
    xp.sqrt(scratch, out=scratch)
    xp.divide(grad, scratch, out=scratch)
    scratch *= lr
    if velocity is None:
        param -= scratch
    else:
        velocity *= momentum
        velocity += scratch
        param -= velocity


def _lamb_kernel(xp, param, grad, moment1, moment2, *, lr, beta1, beta2, epsilon, step, weight_decay,
                 always_adapt):
    scratch = xp.empty_like(moment1)
    _update_moments(xp, grad, moment1, moment2, beta1, beta2, scratch)
    # r = m1_hat / (sqrt(m2_hat) + eps) + weight_decay * param
    xp.multiply(moment2, 1.0 / (1.0 - beta2 ** step), out=scratch)
    xp.sqrt(scratch, out=scratch)
    scratch += epsilon
    xp.divide(moment1, scratch, out=scratch)
    scratch *= 1.0 / (1.0 - beta1 ** step)
    if weight_decay:
        scratch += xp.multiply(param, weight_decay)
    if weight_decay or always_adapt:
        # trust ratio ||param|| / ||r||, 1 where either norm is 0; kept as a 0-d array (no host sync)
        p_norm = xp.sqrt(_sum_squares(xp, param))
        r_norm = xp.sqrt(_sum_squares(xp, scratch))
        usable = (p_norm > 0) & (r_norm > 0)
        ratio = xp.where(usable, p_norm / xp.where(usable, r_norm, 1.0), 1.0)
        scratch *= xp.astype(ratio * lr, scratch.dtype)
    else:
        scratch *= lr
    param -= scratch


# -- clipping and clearing over a list of tensors ---------------------------------------------------------

def _global_norm_kernel(xp, tensors, *, norm_type):
    """The norm of all tensors taken as one vector; accumulated in float32 (float64 if any is float64)."""
    dtype = xp.float64 if any(t.dtype == xp.float64 for t in tensors) else xp.float32
    tensors = [t for t in tensors if t.size]
    if not tensors:
        return xp.zeros((), dtype=dtype)
    if norm_type == 2.0:
        total = sum(_sum_squares(xp, t).astype(dtype) for t in tensors)
        return xp.asarray(xp.sqrt(total), dtype=dtype)
    parts = [xp.abs(t.astype(dtype) if t.dtype != dtype else t) for t in tensors]
    if norm_type == math.inf:
        return xp.asarray(max(xp.max(p) for p in parts), dtype=dtype)
    if norm_type == 0.0:
        return xp.asarray(sum(xp.sum(p != 0) for p in parts), dtype=dtype)
    total = sum(xp.sum(p ** norm_type) for p in parts)
    return xp.asarray(total ** (1.0 / norm_type), dtype=dtype)


def _scale_tensors_kernel(xp, tensors, scale):
    by_dtype = {}
    for t in tensors:
        s = by_dtype.get(t.dtype)
        if s is None:  # a 0-d array is not a weak scalar: match each tensor's dtype first
            s = by_dtype[t.dtype] = scale.astype(t.dtype)
        t *= s


def _clip_tensors_by_norm_kernel(xp, tensors, *, max_norm):
    for t in tensors:
        if t.size:
            norm = xp.sqrt(_sum_squares(xp, t))
            # max_norm / max(norm, max_norm): 1 below the limit, never a division by zero
            t *= xp.astype(max_norm / xp.maximum(norm, max_norm), t.dtype)


def _clip_tensors_by_value_kernel(xp, tensors, *, min, max):
    for t in tensors:
        xp.clip(t, min, max, out=t)


def _zero_tensors_kernel(xp, tensors):
    for t in tensors:
        t[...] = 0


def _check_finite_and_unscale_kernel(xp, tensors, scale, found_inf):
    """Paddle's check_finite_and_unscale: found_inf (a bool tensor) is set to whether any tensor holds an
    inf or nan, and every tensor is multiplied by 1 / scale in place (in float32 for float16/bfloat16,
    then rounded back). The flag stays an array: reading it is the caller's one host sync."""
    inverse = 1.0 / xp.reshape(scale, ()).astype(xp.float32)
    found = xp.zeros((), dtype=xp.bool_)
    for t in tensors:
        found = found | ~xp.all(xp.isfinite(t))
        if t.dtype.itemsize < 4:
            t[...] = (t.astype(xp.float32) * inverse).astype(t.dtype)
        else:
            t *= inverse.astype(t.dtype)
    found_inf[...] = found


# -- the CPU variant: the same kernels over cache-sized chunks ------------------------------------------

CHUNK = 1 << 16  # elements: 64K float32 of param, grad, two moments and scratch is ~1.3 MB, about an L2


def _in_chunks(kernel):
    """A CPU kernel running `kernel` on aligned chunks of the flattened arrays (all of one size). Arrays
    that are not contiguous would be copied by the flattening, losing the in-place writes: then, and for
    small parameters, the kernel runs on the whole arrays."""

    def run(xp, *arrays, **attrs):
        n = arrays[0].size
        if n <= 2 * CHUNK or not all(a is None or (a.flags.c_contiguous and a.size == n) for a in arrays):
            return kernel(xp, *arrays, **attrs)
        flat = [None if a is None else a.reshape(-1) for a in arrays]
        for start in range(0, n, CHUNK):
            kernel(xp, *[None if a is None else a[start:start + CHUNK] for a in flat], **attrs)

    return run


# -- multi-tensor steps: one op call for a list of parameters ---------------------------------------------

def _over_lists(kernel, name, absent=0):
    """A kernel over parallel lists of arrays: kernel(xp, *arrays_i, *[None] * absent, **attrs) for each
    index i (absent: trailing optional tensors of the per-tensor kernel that the list op does not take)."""
    def run(xp, *lists, **attrs):
        n = len(lists[0])
        for position, arrays in enumerate(lists):
            if len(arrays) != n:
                raise ValueError(f"{name}(): every tensor list must have one tensor per parameter ({n}), but "
                                 f"list {position + 1} has {len(arrays)}")
        tail = (None,) * absent
        for group in zip(*lists):
            kernel(xp, *group, *tail, **attrs)
    return run


MULTI_OPS = {
    "sgd_steps_": ("sgd_steps_(params: TensorList, grads: TensorList, lr: float, weight_decay: float = 0.0) "
                   "-> TensorList", "sgd_step_", 0, "sgd_step_ over lists of parameters and their gradients."),
    "momentum_steps_": (
        "momentum_steps_(params: TensorList, grads: TensorList, velocities: TensorList, lr: float, momentum: float, "
        "use_nesterov: bool = False, weight_decay: float = 0.0, rescale_grad: float = 1.0) -> TensorList",
        "momentum_step_", 0, "momentum_step_ over lists of parameters, gradients and velocities."),
    "adam_steps_": (
        "adam_steps_(params: TensorList, grads: TensorList, moment1: TensorList, moment2: TensorList, "
        "lr: float, beta1: float, beta2: float, epsilon: float, step: int, weight_decay: float = 0.0, "
        "decoupled: bool = False) -> TensorList",
        "adam_step_", 1, "adam_step_ over lists of parameters, gradients and moments, all at step number `step` "
                         "(without amsgrad, which adam_step_ takes per parameter)."),
}


# -- registration ---------------------------------------------------------------------------------------

STEP_OPS = {
    "sgd_step_": ("sgd_step_(param: Tensor, grad: Tensor, lr: float, weight_decay: float = 0.0) -> Tensor",
                  _sgd_kernel, "param -= lr * (grad + weight_decay * param), in place (SGD)."),
    "momentum_step_": (
        "momentum_step_(param: Tensor, grad: Tensor, velocity: Tensor, lr: float, momentum: float, "
        "use_nesterov: bool = False, weight_decay: float = 0.0, rescale_grad: float = 1.0) -> Tensor",
        _momentum_kernel, "One Momentum step (Paddle's formula), updating param and velocity in place."),
    "adam_step_": (
        "adam_step_(param: Tensor, grad: Tensor, moment1: Tensor, moment2: Tensor, moment2_max: OptTensor, "
        "lr: float, beta1: float, beta2: float, epsilon: float, step: int, weight_decay: float = 0.0, "
        "decoupled: bool = False) -> Tensor",
        _adam_kernel, "One Adam (decoupled=False: L2 weight decay) or AdamW (decoupled=True) step at step "
                      "number `step` (from 1), updating param and the moments in place; moment2_max for amsgrad."),
    "adagrad_step_": (
        "adagrad_step_(param: Tensor, grad: Tensor, moment: Tensor, lr: float, epsilon: float, "
        "weight_decay: float = 0.0) -> Tensor",
        _adagrad_kernel, "One Adagrad step, updating param and the squared-gradient sum in place."),
    "rmsprop_step_": (
        "rmsprop_step_(param: Tensor, grad: Tensor, mean_square: Tensor, mean_grad: OptTensor, velocity: OptTensor, "
        "lr: float, rho: float, epsilon: float, momentum: float = 0.0, weight_decay: float = 0.0) -> Tensor",
        _rmsprop_kernel, "One RMSProp step (Paddle's formula); mean_grad given: centered; velocity given: "
                         "momentum. Updates all given tensors in place."),
    "lamb_step_": (
        "lamb_step_(param: Tensor, grad: Tensor, moment1: Tensor, moment2: Tensor, lr: float, beta1: float, "
        "beta2: float, epsilon: float, step: int, weight_decay: float = 0.0, always_adapt: bool = False) -> Tensor",
        _lamb_kernel, "One Lamb step (Paddle's formula, trust ratio ||param|| / ||update||), in place."),
}

LIST_OPS = {
    "scale_tensors_": ("scale_tensors_(tensors: TensorList, scale: Tensor) -> TensorList", _scale_tensors_kernel,
                       "Multiply every tensor in place by the 0-d tensor `scale` (cast to each tensor's dtype)."),
    "clip_tensors_by_norm_": ("clip_tensors_by_norm_(tensors: TensorList, max_norm: float) -> TensorList",
                              _clip_tensors_by_norm_kernel,
                              "Scale each tensor whose L2 norm exceeds max_norm down to that norm, in place."),
    "clip_tensors_by_value_": ("clip_tensors_by_value_(tensors: TensorList, min: float, max: float) -> TensorList",
                               _clip_tensors_by_value_kernel, "Clamp every tensor to [min, max], in place."),
    "zero_tensors_": ("zero_tensors_(tensors: TensorList) -> TensorList", _zero_tensors_kernel,
                      "Set every tensor to zero, in place."),
    "check_finite_and_unscale_": (
        "check_finite_and_unscale_(tensors: TensorList, scale: Tensor, found_inf: Tensor) -> TensorList",
        _check_finite_and_unscale_kernel,
        "Set the bool tensor found_inf to whether any tensor holds an inf or nan, and divide every tensor by "
        "the loss scale `scale` in place (GradScaler's unscale of the gradients)."),
}


# the state tensors each op writes besides its target (declared, so write guards and version counters see them)
STATE = {"sgd_step_": (), "momentum_step_": ("velocity",), "adam_step_": ("moment1", "moment2", "moment2_max"),
         "adagrad_step_": ("moment",), "rmsprop_step_": ("mean_square", "mean_grad", "velocity"),
         "lamb_step_": ("moment1", "moment2"), "sgd_steps_": (), "momentum_steps_": ("velocities",),
         "adam_steps_": ("moment1", "moment2"), "check_finite_and_unscale_": ("found_inf",)}
ELEMENTWISE = ("sgd_step_", "momentum_step_", "adam_step_", "adagrad_step_", "rmsprop_step_")  # not lamb: norms


def register(ops):
    for name, (signature, kernel, doc) in STEP_OPS.items():
        ops.define(signature, inplace="param", writes=STATE[name], dtypes=FLOAT, doc=doc)
        ops.kernel(name)(kernel)
        if name in ELEMENTWISE:
            ops.kernel(name, device="cpu")(_in_chunks(kernel))
    for name, (signature, single, absent, doc) in MULTI_OPS.items():
        ops.define(signature, inplace="params", writes=STATE[name], dtypes=FLOAT, doc=doc)
        kernel = STEP_OPS[single][1]
        ops.kernel(name)(_over_lists(kernel, name, absent))
        ops.kernel(name, device="cpu")(_over_lists(_in_chunks(kernel), name, absent))
    for name, (signature, kernel, doc) in LIST_OPS.items():
        ops.define(signature, inplace="tensors", writes=STATE.get(name, ()), dtypes=FLOAT, doc=doc)
        ops.kernel(name)(kernel)
    ops.define("global_norm(tensors: TensorList, norm_type: float = 2.0) -> Tensor", dtypes=FLOAT,
               doc="The norm of all tensors taken together as one vector (norm_type 2, 1, inf, 0 or any p > 0), "
                   "a 0-d float32 tensor (float64 if any input is float64). Not differentiable.")
    ops.kernel("global_norm")(_global_norm_kernel)
