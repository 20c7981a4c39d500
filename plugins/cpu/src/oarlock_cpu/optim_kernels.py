"""Fused one-pass Adam / AdamW and SGD kernels of the "cpu" device, over the C ufuncs of oarlock_cpu._optim.

They replace, for float32 and float64, the generic kernels of oarlock-ops' adam_step_, adam_steps_, sgd_step_
and sgd_steps_ (a dozen numpy passes for Adam, run over cache-sized chunks; two passes and a temporary for
SGD): one pass reads each parameter, gradient and moment element once, in the generic kernel's order of
operations and with its scalars, so the results are the same bits. Other dtypes (bfloat16, float16), and a
source tree whose extension was never built, keep the generic kernels. zero_tensors_ (an optimizer's
clear_grad) zeroes each contiguous float array with one memset, large ones split over the free cores.
"""

from __future__ import annotations

import math

import numpy as np

from oarlock_cpu.kernels import register_all
from oarlock_cpu.parallel import sync_threads

try:
    from oarlock_cpu import _optim
except ImportError:  # never built: the generic kernels stay in charge
    _optim = None


def adam(xp, param, grad, moment1, moment2, moment2_max, **attrs):
    """One Adam (decoupled=False: coupled L2) or AdamW step of one parameter, in place; a large one on the free
    cores."""
    sync_threads()
    _adam_one(param, grad, moment1, moment2, moment2_max, **attrs)


def _adam_one(param, grad, moment1, moment2, moment2_max, *, lr, beta1, beta2, epsilon, step, weight_decay,
              decoupled):
    kind = param.dtype.type
    root_bc2 = math.sqrt(1.0 - beta2 ** step)
    decay = 1.0 - lr * weight_decay if decoupled and weight_decay else 1.0
    l2 = 0.0 if decoupled else weight_decay
    scalars = (kind(decay), kind(l2), kind(1.0 - beta1), kind(beta2), kind(1.0 - beta2), kind(epsilon * root_bc2),
               kind(lr * root_bc2 / (1.0 - beta1 ** step)))
    if moment2_max is None:
        _optim.adam(param, grad, moment1, moment2, *scalars, out=(param, moment1, moment2))
    else:
        _optim.adam_amsgrad(param, grad, moment1, moment2, moment2_max, *scalars,
                            out=(param, moment1, moment2, moment2_max))


def adam_many(xp, params, grads, moment1, moment2, **attrs):
    """adam over lists (adam_steps_: every parameter at one step number, no amsgrad)."""
    n = len(params)
    if not len(grads) == len(moment1) == len(moment2) == n:
        raise ValueError(f"adam_steps_(): every tensor list must have one tensor per parameter ({n}), got "
                         f"{len(grads)} gradients, {len(moment1)} and {len(moment2)} moments")
    sync_threads()   # once for the list
    for p, g, m1, m2 in zip(params, grads, moment1, moment2):
        _adam_one(p, g, m1, m2, None, **attrs)


def sgd(xp, param, grad, **attrs):
    """One SGD step of one parameter, in place (weight_decay: Paddle's coupled L2); a large one on the free cores."""
    sync_threads()
    _sgd_one(param, grad, **attrs)


def _sgd_one(param, grad, *, lr, weight_decay):
    kind = param.dtype.type
    _optim.sgd(param, grad, kind(weight_decay), kind(lr), out=param)


def sgd_many(xp, params, grads, **attrs):
    """sgd over lists (sgd_steps_)."""
    if len(grads) != len(params):
        raise ValueError(f"sgd_steps_(): every tensor list must have one tensor per parameter ({len(params)}), "
                         f"got {len(grads)} gradients")
    sync_threads()   # once for the list
    for p, g in zip(params, grads):
        _sgd_one(p, g, **attrs)


def zero_many(xp, tensors):
    """zero_tensors_ (an optimizer's clear_grad): each contiguous float array zeroed by one memset, split over the
    free cores when large; anything else as the generic kernel does it."""
    sync_threads()
    zero = getattr(_optim, "zero_", None)   # an extension built before zero_ existed lacks it
    for t in tensors:
        if zero is not None and t.__class__ is np.ndarray and t.dtype.kind == "f" and t.flags.c_contiguous \
                and t.flags.writeable:
            zero(t)
        else:
            t[...] = 0


def register(ops):
    """Register the fused Adam and SGD kernels and the gradients' zeroing for device "cpu" (float32, float64);
    nothing when the extension is missing."""
    if _optim is not None:
        register_all(ops, {"adam_step_": adam, "adam_steps_": adam_many, "sgd_step_": sgd, "sgd_steps_": sgd_many,
                           "zero_tensors_": zero_many})
