"""RMSProp with Paddle's formula, which differs from torch's in two places (see RMSProp)."""

from __future__ import annotations

import oarlock
from oarlock_nn.optim.optimizer import Optimizer, torch_aliases


@torch_aliases(lr="learning_rate", params="parameters", eps="epsilon", alpha="rho")
class RMSProp(Optimizer):
    """With g = grad + weight_decay * param:

        mean_square = rho * mean_square + (1 - rho) * g^2
        centered:     mean_grad = rho * mean_grad + (1 - rho) * g, and mean_square - mean_grad^2 replaces
                      mean_square below
        velocity    = momentum * velocity + lr * g / sqrt(mean_square + epsilon)
        param      -= velocity

    Paddle puts epsilon inside the square root (torch adds it after) and lr inside the velocity (torch
    multiplies after, which differs only when lr changes); torch's alpha is Paddle's rho. With
    momentum=0 no velocity is kept (param -= lr * g / sqrt(...)).
    """

    def __init__(self, learning_rate, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False, parameters=None,
                 weight_decay=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, rho=rho, epsilon=epsilon,
                         momentum=momentum, centered=centered)

    def _new_state(self, param, group):
        state = {"mean_square": oarlock.zeros_like(param)}
        if group["centered"]:
            state["mean_grad"] = oarlock.zeros_like(param)
        if group["momentum"]:
            state["momentum"] = oarlock.zeros_like(param)
        return state

    def _update(self, param, grad, state, lr, group):
        state["step"] += 1
        oarlock.rmsprop_step_(param, grad, state["mean_square"], state.get("mean_grad"), state.get("momentum"), lr,
                              group["rho"], group["epsilon"], group["momentum"], group["weight_decay"])
