"""Gradient clipping: Paddle's ClipGradBy* strategies (an optimizer's grad_clip) and the torch-style
oarlock.nn.utils.clip_grad_norm_ / clip_grad_value_ that Paddle 3.2 also has.

All of them scale the gradients in place with one or two list ops for all parameters, and never read
a value back to the host (the clip factor stays a 0-d tensor), so a step costs no device sync.
"""

from __future__ import annotations

import math
import numbers

import oarlock
from oarlock import Tensor


def _positive(owner, arg, value):
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{owner}: argument '{arg}' must be a float, got {type(value).__name__} {value!r}")
    if not value > 0:
        raise ValueError(f"{owner}: argument '{arg}' must be positive, got {value!r}")
    return float(value)


class ClipGradBase:
    """A clipping strategy: called with [(param, grad), ...], it clips the gradients of the parameters
    whose ParamAttr allows it (need_clip) in place and returns the list."""

    def __call__(self, params_grads):
        grads = [g for p, g in params_grads
                 if g is not None and (p.param_attrs is None or p.param_attrs.need_clip)]
        if grads:
            with oarlock.no_grad():
                self._clip(grads)
        return params_grads

    def _clip(self, grads):
        raise NotImplementedError


class ClipGradByGlobalNorm(ClipGradBase):
    """Scale all gradients by clip_norm / max(global_norm, clip_norm), global_norm being the L2 norm of all
    of them together. auto_skip_clip=True skips the multiply when nothing needs clipping, at the cost of
    reading the norm on the host."""

    def __init__(self, clip_norm, group_name="default_group", auto_skip_clip=False):
        self.clip_norm = _positive("ClipGradByGlobalNorm", "clip_norm", clip_norm)
        self.group_name, self.auto_skip_clip = group_name, bool(auto_skip_clip)

    def _clip(self, grads):
        norm = oarlock.global_norm(grads)
        if self.auto_skip_clip and float(norm) <= self.clip_norm:
            return
        oarlock.scale_tensors_(grads, self.clip_norm / oarlock.clip(norm, min=self.clip_norm))

    def __str__(self):
        return f"Gradient Clip By GlobalNorm, global_norm={self.clip_norm:f}"


class ClipGradByNorm(ClipGradBase):
    """Scale each gradient whose own L2 norm exceeds clip_norm down to clip_norm."""

    def __init__(self, clip_norm):
        self.clip_norm = _positive("ClipGradByNorm", "clip_norm", clip_norm)

    def _clip(self, grads):
        oarlock.clip_tensors_by_norm_(grads, self.clip_norm)

    def __str__(self):
        return f"Gradient Clip By Norm, clip_norm={self.clip_norm:f}"


class ClipGradByValue(ClipGradBase):
    """Clamp every gradient element to [min, max]; min defaults to -max."""

    def __init__(self, max, min=None):
        if min is None:
            max = _positive("ClipGradByValue", "max", max)
            min = -max
        for arg, value in (("max", max), ("min", min)):
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"ClipGradByValue: argument '{arg}' must be a float, got {type(value).__name__}")
        if not min < max:
            raise ValueError(f"ClipGradByValue: argument 'min' ({min}) must be below 'max' ({max})")
        self.max, self.min = float(max), float(min)

    def _clip(self, grads):
        oarlock.clip_tensors_by_value_(grads, self.min, self.max)

    def __str__(self):
        return f"Gradient Clip By Value, min = {self.min:f}, max={self.max:f}"


def _grads_of(parameters):
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
    """Scale the gradients of `parameters` (a Tensor or an iterable of them) in place so that their total
    norm is at most max_norm: grads *= min(1, max_norm / (total_norm + 1e-6)). norm_type: any p > 0,
    0 (count of non-zeros) or inf. Returns the total norm before clipping (a 0-d tensor)."""
    max_norm = float(max_norm)
    norm_type = float(norm_type)
    if norm_type < 0 or math.isnan(norm_type):
        raise ValueError(f"clip_grad_norm_(): argument 'norm_type' must be 0, a positive float or inf, "
                         f"got {norm_type!r}")
    grads = _grads_of(parameters)
    if not grads:
        return oarlock.to_tensor(0.0)
    with oarlock.no_grad():
        total = oarlock.global_norm(grads, norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"clip_grad_norm_(): the total norm of order {norm_type} of the gradients is "
                               f"non-finite ({float(total)}), so it cannot be clipped; pass "
                               f"error_if_nonfinite=False to scale by it anyway")
        # always multiply, by a factor clamped to 1: no host sync to decide whether to clip
        oarlock.scale_tensors_(grads, oarlock.clip(max_norm / (total + 1e-6), max=1.0))
    return total


def clip_grad_value_(parameters, clip_value):
    """Clamp the gradients of `parameters` in place to [-clip_value, clip_value]."""
    clip_value = float(clip_value)
    grads = _grads_of(parameters)
    if grads:
        with oarlock.no_grad():
            oarlock.clip_tensors_by_value_(grads, -clip_value, clip_value)
