"""torch.optim's SGD, Adam and AdamW: torch's update rules (the same formulas, step by step), written with
in-place tensor ops on oarlock Tensors under no_grad, so each parameter keeps its identity."""

from __future__ import annotations

import math

import oarlock

from oarlock_torch_proxy.facade.optim.optimizer import Optimizer, required


class _PerParameter(Optimizer):
    """step(closure) for update rules that treat each parameter alone: the closure's loss under enable_grad, then
    `_update(p, grad, group)` for every parameter with a gradient (negated when maximizing). An update touches
    self.state[p] only when it keeps state (SGD without momentum keeps none, as in torch's state_dict)."""

    @oarlock.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with oarlock.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, -p.grad if group["maximize"] else p.grad, group)
        return loss


class SGD(_PerParameter):
    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
                 maximize=False, foreach=None, differentiable=False, fused=None):
        if lr is not required and lr < 0.0:
            raise ValueError(f"SGD(): invalid learning rate {lr}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD(): nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize))

    def _update(self, p, d_p, group):
        if group["weight_decay"]:
            d_p = d_p + group["weight_decay"] * p
        if group["momentum"]:
            state = self.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d_p.clone()
            else:
                buf.mul_(group["momentum"]).add_(d_p, alpha=1 - group["dampening"])
            d_p = d_p + group["momentum"] * buf if group["nesterov"] else buf
        p.add_(d_p, alpha=-group["lr"])


class Adam(_PerParameter):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
                 foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
                 decoupled_weight_decay=False):
        if lr < 0.0 or eps < 0.0 or not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"{type(self).__name__}(): invalid lr={lr}, eps={eps} or betas={betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, decoupled_weight_decay=decoupled_weight_decay
                                      or self._decoupled))

    def _update(self, p, grad, group):
        beta1, beta2 = group["betas"]
        state = self.state[p]
        if not state:
            state["step"] = oarlock.zeros([], dtype="float32")
            state["exp_avg"] = oarlock.zeros_like(p)
            state["exp_avg_sq"] = oarlock.zeros_like(p)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = oarlock.zeros_like(p)
        state["step"] += 1
        step = int(state["step"].item())
        if group["weight_decay"]:
            if group["decoupled_weight_decay"]:
                p.mul_(1 - group["lr"] * group["weight_decay"])
            else:
                grad = grad + group["weight_decay"] * p
        exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).add_(grad * grad.conj() if grad.is_complex() else grad * grad,
                                    alpha=1 - beta2)
        bias1 = 1 - beta1 ** step
        bias2_sqrt = math.sqrt(1 - beta2 ** step)
        if group["amsgrad"]:
            state["max_exp_avg_sq"].copy_(oarlock.maximum(state["max_exp_avg_sq"], exp_avg_sq))
            second = state["max_exp_avg_sq"]
        else:
            second = exp_avg_sq
        denom = (second.sqrt() / bias2_sqrt) + group["eps"]
        p.add_(exp_avg / denom, alpha=-group["lr"] / bias1)


class AdamW(Adam):
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
