"""Adagrad (Paddle's formula; torch's Adagrad computes the same with lr_decay=0)."""

from __future__ import annotations

import oarlock
from oarlock_nn.optim.optimizer import Optimizer, torch_aliases


@torch_aliases(lr="learning_rate", params="parameters", eps="epsilon")
class Adagrad(Optimizer):
    """moment += g^2; param -= lr * g / (sqrt(moment) + epsilon), with g = grad + weight_decay * param and
    moment starting at initial_accumulator_value."""

    def __init__(self, learning_rate, epsilon=1e-6, parameters=None, weight_decay=None, grad_clip=None, name=None,
                 initial_accumulator_value=0.0):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, epsilon=epsilon,
                         initial_accumulator_value=initial_accumulator_value)

    def _new_state(self, param, group):
        return {"moment": oarlock.full_like(param, group["initial_accumulator_value"])}

    def _update(self, param, grad, state, lr, group):
        state["step"] += 1
        oarlock.adagrad_step_(param, grad, state["moment"], lr, group["epsilon"], group["weight_decay"])
