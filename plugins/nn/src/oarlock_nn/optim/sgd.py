"""SGD and Momentum (Paddle's formulas; torch's SGD computes the same with dampening=0)."""

from __future__ import annotations

import oarlock
from oarlock_nn.optim.optimizer import Optimizer, torch_aliases


@torch_aliases(lr="learning_rate", params="parameters")
class SGD(Optimizer):
    """param -= lr * (grad + weight_decay * param)."""

    def __init__(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None, multi_precision=False,
                 name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, multi_precision)

    def _update(self, param, grad, state, lr, group):
        state["step"] += 1
        oarlock.sgd_step_(param, grad, lr, group["weight_decay"])

    def _update_all(self, entries, group):
        for (*_, lr), bucket in self._buckets(entries, lambda e: (e[3],)).items():
            for _, _, state, _ in bucket:
                state["step"] += 1
            oarlock.sgd_steps_([e[0] for e in bucket], [e[1] for e in bucket], lr, group["weight_decay"])


@torch_aliases(lr="learning_rate", params="parameters", nesterov="use_nesterov")
class Momentum(Optimizer):
    """With g = rescale_grad * grad + weight_decay * param:
    velocity = momentum * velocity + g; param -= lr * velocity, or with use_nesterov
    param -= lr * (g + momentum * velocity)."""

    _accumulators = ("velocity",)

    def __init__(self, learning_rate=0.001, momentum=0.9, parameters=None, use_nesterov=False, weight_decay=None,
                 grad_clip=None, multi_precision=False, rescale_grad=1.0, use_multi_tensor=False, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, multi_precision, momentum=momentum,
                         use_nesterov=use_nesterov, rescale_grad=rescale_grad)

    def _update(self, param, grad, state, lr, group):
        state["step"] += 1
        oarlock.momentum_step_(param, grad, state["velocity"], lr, group["momentum"], group["use_nesterov"],
                               group["weight_decay"], group["rescale_grad"])

    def _update_all(self, entries, group):
        for (*_, lr), bucket in self._buckets(entries, lambda e: (e[3],)).items():
            for _, _, state, _ in bucket:
                state["step"] += 1
            oarlock.momentum_steps_([e[0] for e in bucket], [e[1] for e in bucket],
                                    [e[2]["velocity"] for e in bucket], lr, group["momentum"], group["use_nesterov"],
                                    group["weight_decay"], group["rescale_grad"])
