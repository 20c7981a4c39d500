"""Adam and AdamW.

Paddle's kernel computes lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t) and
param -= lr_t * m1 / (sqrt(m2) + epsilon * sqrt(1 - beta2^t)), which is exactly torch's
m1_hat / (sqrt(m2_hat) + epsilon) (its documentation writes epsilon unscaled; the kernel scales it).
"""

from __future__ import annotations

import oarlock
from oarlock_nn.optim.optimizer import Optimizer, torch_aliases

_ALIASES = {"lr": "learning_rate", "params": "parameters", "betas": ("beta1", "beta2"), "eps": "epsilon"}


class _AdamBase(Optimizer):
    """The moments, the step count and the fused update shared by Adam and AdamW."""

    def _new_state(self, param, group):
        state = {"moment1": oarlock.zeros_like(param), "moment2": oarlock.zeros_like(param)}
        if group["amsgrad"]:
            state["moment2_max"] = oarlock.zeros_like(param)
        return state

    def _adam_step(self, param, grad, state, lr, group, weight_decay, decoupled):
        state["step"] += 1
        oarlock.adam_step_(param, grad, state["moment1"], state["moment2"], state.get("moment2_max"), lr,
                           group["beta1"], group["beta2"], group["epsilon"], state["step"], weight_decay, decoupled)

    def _adam_steps(self, entries, group, settings, decoupled):
        """One adam_steps_ call per bucket of parameters sharing dtype, device, rate, step number and weight
        decay; settings(entry) -> (rate, weight_decay). amsgrad keeps the per-parameter op."""
        if group["amsgrad"]:
            for entry in entries:
                rate, decay = settings(entry)
                self._adam_step(*entry[:3], rate, group, decay, decoupled)
            return
        for entry in entries:
            entry[2]["step"] += 1
        buckets = self._buckets(entries, lambda e: (*settings(e), e[2]["step"]))
        for (*_, rate, decay, step), bucket in buckets.items():
            oarlock.adam_steps_([e[0] for e in bucket], [e[1] for e in bucket], [e[2]["moment1"] for e in bucket],
                                [e[2]["moment2"] for e in bucket], rate, group["beta1"], group["beta2"],
                                group["epsilon"], step, decay, decoupled)


@torch_aliases(**_ALIASES)
class Adam(_AdamBase):
    """m1 = beta1 m1 + (1 - beta1) g; m2 = beta2 m2 + (1 - beta2) g^2 (amsgrad: the running max of m2 is used);
    param -= lr * m1_hat / (sqrt(m2_hat) + epsilon), with g = grad + weight_decay * param (L2, coupled)."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=None,
                 grad_clip=None, lazy_mode=False, multi_precision=False, use_multi_tensor=False, amsgrad=False,
                 name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, multi_precision, beta1=beta1,
                         beta2=beta2, epsilon=epsilon, amsgrad=amsgrad)

    def _update(self, param, grad, state, lr, group):
        self._adam_step(param, grad, state, lr, group, group["weight_decay"], False)

    def _update_all(self, entries, group):
        self._adam_steps(entries, group, lambda e: (e[3], group["weight_decay"]), False)


@torch_aliases(**_ALIASES)
class AdamW(_AdamBase):
    """Adam with decoupled weight decay: param *= 1 - lr * weight_decay before the Adam update (default 0.01).

    apply_decay_param_fun(name) -> bool picks the parameters that decay (by parameter name; a parameter
    without a name is called by its state_dict key, "param_<i>"); lr_ratio(param) -> float scales a
    parameter's whole rate (Paddle's layer-wise decay).
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=0.01,
                 use_lowprecision_moment=False, lr_ratio=None, apply_decay_param_fun=None, grad_clip=None,
                 lazy_mode=False, multi_precision=False, amsgrad=False, name=None):
        for arg, fn in (("lr_ratio", lr_ratio), ("apply_decay_param_fun", apply_decay_param_fun)):
            if fn is not None and not callable(fn):
                raise TypeError(f"AdamW: argument '{arg}' must be a function or None, got {type(fn).__name__}")
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, multi_precision, beta1=beta1,
                         beta2=beta2, epsilon=epsilon, amsgrad=amsgrad)
        self._lr_ratio = lr_ratio
        self._apply_decay_param_fun = apply_decay_param_fun
        self._decays: dict[int, bool] = {}  # id(param) -> whether apply_decay_param_fun lets it decay

    def _update(self, param, grad, state, lr, group):
        rate, decay = self._settings(param, lr, group)
        self._adam_step(param, grad, state, rate, group, decay, True)

    def _update_all(self, entries, group):
        self._adam_steps(entries, group, lambda e: self._settings(e[0], e[3], group), True)

    def _settings(self, param, lr, group):
        """(rate, weight decay) of one parameter: lr_ratio scales the rate, apply_decay_param_fun picks decay."""
        decays = self._decays.get(id(param))
        if decays is None:
            fn = self._apply_decay_param_fun
            decays = self._decays[id(param)] = fn is None or bool(fn(self._keys[id(param)]))
        if self._lr_ratio is not None:
            lr = lr * self._lr_ratio(param)
        return lr, group["weight_decay"] if decays else 0.0
